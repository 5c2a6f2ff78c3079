'use strict';
// The tensor helpers on their own: 16-bit packing (round to nearest even, subnormals,
// overflow, NaN) on hand-checked bit patterns, and the Tensor round trip.
const {test} = require('node:test');
const assert = require('node:assert/strict');
const t = require('../lib/tensor');

test('float16 packing rounds to nearest even', () => {
  const cases = [
    [1, 0x3c00], [-2, 0xc000], [65504, 0x7bff],  // Largest finite half.
    [65519.996, 0x7bff], [65520, 0x7c00],        // Halfway to 2^16 rounds up to Inf.
    [1e6, 0x7c00], [-Infinity, 0xfc00],
    [1 + 2 ** -11, 0x3c00],       // Tie, even neighbour below.
    [1 + 3 * 2 ** -11, 0x3c02],   // Tie, even neighbour above.
    [1 + 2 ** -11 + 2 ** -20, 0x3c01],  // Just past the tie.
    [2 ** -24, 0x0001],           // Smallest subnormal.
    [2 ** -25, 0x0000],           // Tie with zero: even is zero.
    [1.5 * 2 ** -25, 0x0001],
    [3 * 2 ** -25, 0x0002],       // Tie between subnormals 1 and 2.
    [2 ** -14 - 2 ** -25, 0x0400],  // Rounds up out of the subnormals.
    [-0, 0x8000],
  ];
  for (const [value, bits] of cases) {
    assert.equal(t.floatToHalfBits(value), bits, `float16(${value})`);
  }
  assert.equal(t.floatToHalfBits(NaN) & 0x7e00, 0x7e00);
  assert.ok(Number.isNaN(t.halfBitsToFloat(0x7e00)));
  assert.equal(t.halfBitsToFloat(0x0001), 2 ** -24);
  assert.equal(t.halfBitsToFloat(0x7bff), 65504);
});

test('bfloat16 packing rounds to nearest even', () => {
  const cases = [
    [1, 0x3f80], [-1, 0xbf80],
    [1 + 2 ** -8, 0x3f80],           // Tie, even below.
    [1 + 3 * 2 ** -8, 0x3f82],       // Tie, even above.
    [1 + 2 ** -8 + 2 ** -20, 0x3f81],
    [3.3895313892515355e38, 0x7f7f],  // Largest finite bfloat16.
    [3.4028234663852886e38, 0x7f80],  // Largest float32 rounds to Inf.
    [Infinity, 0x7f80],
  ];
  for (const [value, bits] of cases) {
    assert.equal(t.floatToBfloat16Bits(value), bits, `bfloat16(${value})`);
  }
  assert.ok(Number.isNaN(t.bfloat16BitsToFloat(t.floatToBfloat16Bits(NaN))));
});

test('every 16-bit pattern survives unpack then pack', () => {
  for (let bits = 0; bits < 0x10000; bits++) {
    const half = t.halfBitsToFloat(bits);
    if (!Number.isNaN(half)) assert.equal(t.floatToHalfBits(half), bits);
    const bf = t.bfloat16BitsToFloat(bits);
    if (!Number.isNaN(bf)) assert.equal(t.floatToBfloat16Bits(bf), bits);
  }
});

test('Tensor round trip in each dtype', () => {
  const values = [0.5, -1.25, 3, 1024, -0.0078125, 7];  // Exact in every dtype.
  for (const dtype of ['FLOAT32', 'BFLOAT16', 'FLOAT16']) {
    const tensor = t.toTensor(values, [2, 3], dtype);
    assert.deepEqual(tensor.shape, [2, 3]);
    assert.equal(tensor.data.length, dtype === 'FLOAT32' ? 24 : 12);
    assert.deepEqual(Array.from(t.fromTensor(tensor)), values);
  }
  // Little-endian on the wire: 1.0f is 00 00 80 3f.
  assert.deepEqual([...t.toTensor([1], [1]).data], [0x00, 0x00, 0x80, 0x3f]);
  assert.throws(() => t.toTensor([1, 2], [3]), /needs 3 values, got 2/);
  assert.throws(() => t.fromTensor({shape: [2], dtype: 'FLOAT32', data: Buffer.alloc(4)}),
                /needs 8 bytes, got 4/);
});
