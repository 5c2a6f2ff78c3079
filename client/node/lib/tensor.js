'use strict';
// layerserve.v1.Tensor <-> Float32Array.
//
// A Tensor is {shape, dtype, data}: data holds product(shape) little-endian values of
// dtype, row-major. FLOAT32 is copied as is; BFLOAT16 and FLOAT16 are packed from
// float32 with round-to-nearest-even, as the server converts (the proto's DataType
// comment), so a value the client packs is the value the server would have made.
// Pure functions: safe to call from anywhere.

// One scratch word shared by the bit conversions below (JS is single-threaded).
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function float32Bits(x) {
  f32[0] = x;
  return u32[0];
}

function bitsToFloat32(bits) {
  u32[0] = bits >>> 0;
  return f32[0];
}

// float32 -> bfloat16 bits (the upper half of a binary32), round to nearest even.
// NaN stays a (quiet) NaN instead of rounding into Inf.
function floatToBfloat16Bits(x) {
  const bits = float32Bits(x);
  if ((bits & 0x7fffffff) > 0x7f800000) return ((bits >>> 16) | 0x0040) & 0xffff;
  const roundingBias = 0x7fff + ((bits >>> 16) & 1);
  return ((bits + roundingBias) >>> 16) & 0xffff;
}

function bfloat16BitsToFloat(h) {
  return bitsToFloat32((h & 0xffff) << 16);
}

// float32 -> IEEE binary16 bits, round to nearest even, subnormals kept, values from
// 65520 up become Inf (numpy's npy_floatbits_to_halfbits, without its FP flags).
function floatToHalfBits(x) {
  const f = float32Bits(x);
  const sign = (f >>> 16) & 0x8000;
  const exp = f & 0x7f800000;
  if (exp >= 0x47800000) {  // |x| >= 2^16, Inf or NaN.
    if (exp === 0x7f800000 && (f & 0x007fffff) !== 0) {
      return sign | 0x7e00 | ((f & 0x007fffff) >>> 13);  // Quiet NaN, payload kept.
    }
    return sign | 0x7c00;
  }
  if (exp <= 0x38000000) {  // |x| < 2^-14: a half subnormal or zero.
    if (exp < 0x33000000) return sign;  // Below half of the smallest subnormal.
    const e = exp >>> 23;
    // The implicit bit made explicit, then shifted into subnormal position; the
    // shift drops up to 11 bits, which the sticky test below still looks at.
    let sig = (0x00800000 + (f & 0x007fffff)) >>> (113 - e);
    if ((sig & 0x3fff) !== 0x1000 || (f & 0x7ff) !== 0) sig += 0x1000;
    return sign | (sig >>> 13);  // A carry into the exponent is the right answer.
  }
  let sig = f & 0x007fffff;
  if ((sig & 0x3fff) !== 0x1000) sig += 0x1000;  // Not an exact tie to even: round.
  // A carry out of the significand bumps the exponent, up to Inf: also right.
  return (sign | (((exp - 0x38000000) >>> 13) + (sig >>> 13))) & 0xffff;
}

function halfBitsToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

const DTYPE_SIZE = {FLOAT32: 4, BFLOAT16: 2, FLOAT16: 2};

// Number of elements of a shape (int64 fields arrive as JS numbers, see proto.js).
function numElements(shape) {
  return shape.reduce((n, d) => n * Number(d), 1);
}

// A Tensor of `values` (array-like of numbers) with `shape`, packed as `dtype`.
function toTensor(values, shape, dtype = 'FLOAT32') {
  const n = numElements(shape);
  if (values.length !== n) {
    throw new RangeError(`toTensor: shape [${shape}] needs ${n} values, got ${values.length}`);
  }
  const size = DTYPE_SIZE[dtype];
  if (!size) throw new RangeError(`toTensor: unsupported dtype ${dtype}`);
  const data = Buffer.alloc(n * size);
  for (let i = 0; i < n; i++) {
    if (dtype === 'FLOAT32') data.writeFloatLE(values[i], 4 * i);
    else if (dtype === 'BFLOAT16') data.writeUInt16LE(floatToBfloat16Bits(values[i]), 2 * i);
    else data.writeUInt16LE(floatToHalfBits(values[i]), 2 * i);
  }
  return {shape: Array.from(shape, Number), dtype, data};
}

// The values of a response Tensor as a Float32Array (16-bit dtypes widen exactly).
function fromTensor(tensor) {
  const size = DTYPE_SIZE[tensor.dtype];
  if (!size) throw new RangeError(`fromTensor: unsupported dtype ${tensor.dtype}`);
  const n = numElements(tensor.shape);
  const data = Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  if (data.length !== n * size) {
    throw new RangeError(`fromTensor: shape [${tensor.shape}] ${tensor.dtype} needs ` +
                         `${n * size} bytes, got ${data.length}`);
  }
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    if (tensor.dtype === 'FLOAT32') out[i] = data.readFloatLE(4 * i);
    else if (tensor.dtype === 'BFLOAT16') out[i] = bfloat16BitsToFloat(data.readUInt16LE(2 * i));
    else out[i] = halfBitsToFloat(data.readUInt16LE(2 * i));
  }
  return out;
}

module.exports = {
  toTensor,
  fromTensor,
  numElements,
  floatToBfloat16Bits,
  bfloat16BitsToFloat,
  floatToHalfBits,
  halfBitsToFloat,
};
