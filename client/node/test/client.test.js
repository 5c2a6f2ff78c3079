'use strict';
// LayerClient against the real layerserve binary (env LAYERSERVE_SERVER) serving the
// tiny checkpoints of tests/golden/models: every served RPC, its numbers checked
// against reference.js (or the PyTorch golden file for BlockForward), and the error
// codes and messages.
const {describe, before, after, test} = require('node:test');
const assert = require('node:assert/strict');
const {execFile} = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const {LayerClient, status, toTensor, fromTensor, floatToHalfBits,
       floatToBfloat16Bits} = require('../lib');
const ref = require('./reference');
const {rejection, startServer} = require('./server');

const SOURCE_DIR = process.env.LAYERSERVE_SOURCE_DIR || path.resolve(__dirname, '../../..');
const MODELS = path.join(SOURCE_DIR, 'tests/golden/models');
const BLOCK_GOLDEN = JSON.parse(
    fs.readFileSync(path.join(SOURCE_DIR, 'tests/golden/block_golden.json'), 'utf8'));

// Every element within tol * max(1, |want|) (the golden files' rule), else fails naming
// the worst one. A non-finite value on either side matches only the same infinity:
// NaN never matches (no test expects one), and got NaN or Inf against a finite want,
// or a finite got against an infinite want, is a mismatch wherever it stands.
function assertClose(got, want, tol, what) {
  assert.equal(got.length, want.length, `${what}: length`);
  let worst = -Infinity;  // Never NaN: every excess below is a number or +-Infinity.
  let at = -1;
  let bad = 0;
  for (let i = 0; i < got.length; i++) {
    let excess;
    if (Number.isFinite(got[i]) && Number.isFinite(want[i])) {
      excess = Math.abs(got[i] - want[i]) - tol * Math.max(1, Math.abs(want[i]));
    } else {
      excess = got[i] === want[i] ? -Infinity : Infinity;
    }
    if (excess > 0) bad++;
    if (at < 0 || excess > worst) [worst, at] = [excess, i];
  }
  assert.ok(bad === 0, `${what}: ${bad} of ${got.length} elements differ, worst element ` +
                       `${at} got ${got[at]}, want ${want[at]} (tol ${tol})`);
}

test('assertClose fails on NaN and Inf mismatches wherever they stand', () => {
  assertClose([0, 1, 2], [0, 1, 2], 1e-5, 'equal');
  assertClose([Infinity, -Infinity], [Infinity, -Infinity], 1e-5, 'same infinities');
  const cases = [
    [[NaN, 1, 2], [0, 1, 2]],  // A finite element after the NaN must not hide it.
    [[0, 1, NaN], [0, 1, 2]],
    [[NaN, 1, 2], [NaN, 1, 2]],
    [[Infinity, 1, 2], [0, 1, 2]],
    [[-Infinity, 1, 2], [0, 1, 2]],
    [[0, 1, 2], [Infinity, 1, 2]],  // |0 - Inf| <= tol * Inf would pass.
    [[Infinity, 1, 2], [-Infinity, 1, 2]],
  ];
  for (const [got, want] of cases) {
    assert.throws(() => assertClose(got, want, 1e-5, 'case'), assert.AssertionError,
                  `[${got}] vs [${want}] passed`);
  }
});

describe('LayerClient on a real server', () => {
  let server;
  let client;

  before(async () => {
    server = await startServer([`--model-repository=${MODELS}`]);
    client = new LayerClient(server.target, {deadlineMs: 30000});
  });

  after(async () => {
    client.close();
    assert.equal(await server.stop(), 0, server.output());  // Drained cleanly.
  });

  test('health: SERVING for the server and the service, NOT_FOUND otherwise', async () => {
    assert.equal(await client.health(), 'SERVING');
    assert.equal(await client.health('layerserve.v1.LayerService'), 'SERVING');
    const error = await rejection(client.health('no.such.Service'));
    assert.equal(error.code, status.NOT_FOUND);
  });

  test('Normalize LAYER_NORM with weight and bias', async () => {
    const d = 16;
    const x = ref.randn(2 * 3 * d, 1);
    const w = ref.randn(d, 2);
    const b = ref.randn(d, 3);
    const response = await client.normalize({
      kind: 'LAYER_NORM', input: toTensor(x, [2, 3, d]), weight: toTensor(w, [d]),
      bias: toTensor(b, [d])});
    assert.deepEqual(response.output.shape, [2, 3, d]);
    assert.equal(response.output.dtype, 'FLOAT32');
    assert.equal(response.residual_out, null);  // No residual given.
    assertClose(fromTensor(response.output), ref.layerNorm(x, d, w, b, 1e-5), 1e-5, 'layer norm');
  });

  test('Normalize RMS_NORM fused with a residual, Gemma (1+w) scale', async () => {
    const d = 24;
    const x = ref.randn(4 * d, 4);
    const residual = ref.randn(4 * d, 5);
    const w = ref.randn(d, 6);
    const response = await client.normalize({
      kind: 'RMS_NORM', input: toTensor(x, [4, d]), residual: toTensor(residual, [4, d]),
      weight: toTensor(w, [d]), weight_offset: true, epsilon: 1e-3});
    const sum = x.map((v, i) => v + residual[i]);
    assertClose(fromTensor(response.residual_out), sum, 1e-6, 'residual_out');
    const scale = Array.from(w, (v) => 1 + v);
    assertClose(fromTensor(response.output), ref.rmsNorm(sum, d, scale, 1e-3), 1e-5, 'rms norm');
  });

  test('Normalize on the BFLOAT16 wire answers BFLOAT16', async () => {
    const d = 32;
    const x = ref.randn(3 * d, 7);
    const sent = toTensor(x, [3, d], 'BFLOAT16');
    const response = await client.normalize({kind: 'RMS_NORM', input: sent});
    assert.equal(response.output.dtype, 'BFLOAT16');
    // The reference sees the values the server received (x rounded to bfloat16); the
    // answer is rounded once more (2^-9 relative), tolerance 2^-8.
    const want = ref.rmsNorm(fromTensor(sent), d, new Array(d).fill(1), 1e-6);
    assertClose(fromTensor(response.output), want, 2 ** -8, 'bf16 rms norm');
  });

  test('Activate element-wise and gated', async () => {
    const x = ref.randn(2 * 10, 8);
    const silu = await client.activate({activation: 'SILU', input: toTensor(x, [2, 10])});
    assertClose(fromTensor(silu.output), Array.from(x, ref.silu), 1e-5, 'silu');
    const gelu = await client.activate({activation: 'GELU_TANH', input: toTensor(x, [20])});
    assertClose(fromTensor(gelu.output), Array.from(x, ref.geluTanh), 1e-5, 'gelu_tanh');

    // Packed [2, 2F]: each row's first F values are the gate, the last F the up.
    const packed = await client.activate({activation: 'SWIGLU', input: toTensor(x, [2, 10])});
    assert.deepEqual(packed.output.shape, [2, 5]);
    const want = [];
    for (let r = 0; r < 2; r++) {
      for (let i = 0; i < 5; i++) want.push(ref.silu(x[r * 10 + i]) * x[r * 10 + 5 + i]);
    }
    assertClose(fromTensor(packed.output), want, 1e-5, 'swiglu packed');

    // The same with separate gate and up tensors.
    const gate = [];
    const up = [];
    for (let r = 0; r < 2; r++) {
      gate.push(...x.subarray(r * 10, r * 10 + 5));
      up.push(...x.subarray(r * 10 + 5, r * 10 + 10));
    }
    const split = await client.activate({activation: 'SWIGLU', gate: toTensor(gate, [2, 5]),
                                         input: toTensor(up, [2, 5])});
    assertClose(fromTensor(split.output), want, 1e-5, 'swiglu split');
  });

  test('16-bit outputs round exactly as the client packs (round to nearest even)', async () => {
    // RELU of positive values is the identity, so the server's FLOAT16/BFLOAT16
    // output is its conversion of our float32 values: ties, subnormals, overflow.
    const values = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -25, 3 * 2 ** -25, 65519, 65520,
                    1 + 2 ** -8, 1 + 3 * 2 ** -8, 0.1, 3.14159, 1e-3, 12345.678];
    const input = toTensor(values, [values.length]);
    for (const [dtype, pack] of [['FLOAT16', floatToHalfBits],
                                 ['BFLOAT16', floatToBfloat16Bits]]) {
      const {output} = await client.activate({activation: 'RELU', input, output_dtype: dtype});
      assert.equal(output.dtype, dtype);
      const got = Array.from({length: values.length}, (_, i) => output.data.readUInt16LE(2 * i));
      assert.deepEqual(got, values.map((v) => pack(Math.fround(v))), dtype);
    }
  });

  test('PositionalEncode sinusoidal: the table, and added to an input', async () => {
    const table = await client.positionalEncode({
      sinusoidal: {num_positions: 6, dim: 8, layout: 'INTERLEAVED'}});
    assert.deepEqual(table.output.shape, [6, 8]);
    assert.equal(table.output.dtype, 'FLOAT32');
    assertClose(fromTensor(table.output), ref.sinusoidal([0, 1, 2, 3, 4, 5], 8, 1e4, 'INTERLEAVED'),
                1e-5, 'sinusoidal table');

    const x = ref.randn(2 * 4 * 12, 9);
    const added = await client.positionalEncode({sinusoidal: {
      input: toTensor(x, [2, 4, 12]), layout: 'CONCATENATED', base: 500, position_offset: 3}});
    const pe = ref.sinusoidal([3, 4, 5, 6], 12, 500, 'CONCATENATED');
    assertClose(fromTensor(added.output), x.map((v, i) => v + pe[i % pe.length]), 1e-5,
                'sinusoidal added');
  });

  test('PositionalEncode learned: input + table[position]', async () => {
    const [d, maxLen] = [6, 10];
    const x = ref.randn(3 * d, 10);
    const table = ref.randn(maxLen * d, 11);
    const positions = [9, 0, 4];
    const response = await client.positionalEncode({learned: {
      input: toTensor(x, [3, d]), table: toTensor(table, [maxLen, d]), positions}});
    const want = x.map((v, i) => v + table[positions[Math.floor(i / d)] * d + (i % d)]);
    assertClose(fromTensor(response.output), want, 1e-6, 'learned');
  });

  test('PositionalEncode rope: HALF style, grouped-query key, partial rotary', async () => {
    const [B, Hq, Hkv, T, Dh] = [1, 4, 2, 5, 8];
    const q = ref.randn(B * Hq * T * Dh, 12);
    const k = ref.randn(B * Hkv * T * Dh, 13);
    const response = await client.positionalEncode({rope: {
      query: toTensor(q, [B, Hq, T, Dh]), key: toTensor(k, [B, Hkv, T, Dh]),
      theta: 100, rotary_dim: 6, style: 'HALF', position_offset: 2}});
    const positions = [2, 3, 4, 5, 6];
    assertClose(fromTensor(response.output), ref.ropeHalf(q, [B, Hq, T, Dh], positions, 100, 6),
                1e-5, 'rope query');
    assertClose(fromTensor(response.key), ref.ropeHalf(k, [B, Hkv, T, Dh], positions, 100, 6),
                1e-5, 'rope key');
  });

  test('PositionalEncode alibi: slopes for 8 and 6 heads', async () => {
    for (const heads of [8, 6]) {
      const response = await client.positionalEncode({alibi: {
        num_heads: heads, query_length: 3, key_length: 7, query_offset: 4}});
      assert.deepEqual(response.output.shape, [heads, 3, 7]);
      assertClose(fromTensor(response.output), ref.alibiBias(heads, 3, 7, 4), 1e-6,
                  `alibi ${heads} heads`);
    }
    // The reference's slopes, by hand: 6 heads take 4 heads' slopes, then every other
    // slope of 8 heads.
    assert.deepEqual(ref.alibiSlopes(6), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]);
  });

  test('PositionalEncode t5_bias: bidirectional buckets', async () => {
    const [buckets, heads, tq, tk] = [8, 3, 7, 7];
    const table = ref.randn(buckets * heads, 14);
    const response = await client.positionalEncode({t5_bias: {
      table: toTensor(table, [buckets, heads]), bidirectional: true, max_distance: 16,
      query_length: tq, key_length: tk}});
    assert.deepEqual(response.output.shape, [heads, tq, tk]);
    assertClose(fromTensor(response.output),
                ref.t5Bias(table, heads, tq, tk, true, buckets, 16), 1e-6, 't5 bias');
  });

  test('ListModels and GetModel describe the golden checkpoints', async () => {
    const models = await client.listModels();
    assert.deepEqual(models.map((m) => m.name).sort(), Object.keys(BLOCK_GOLDEN.models).sort());
    assert.deepEqual(models.filter((m) => m.is_default).map((m) => m.name), ['tiny-gemma']);
    for (const m of models) {
      assert.equal(m.state, 'READY', m.error);
      // Loaded once, at start: version 1, no failed reload beside it.
      assert.deepEqual([m.version, m.reload_error], [1, ''], m.name);
    }

    const info = await client.getModel('tiny-llama');
    const want = BLOCK_GOLDEN.models['tiny-llama'].info;
    for (const field of ['architecture', 'num_layers', 'hidden_size', 'num_attention_heads',
                         'num_key_value_heads', 'head_dim', 'intermediate_size',
                         'max_position_embeddings', 'activation', 'norm']) {
      assert.equal(info[field], want[field], field);
    }
    assert.equal(info.weight_dtype, 'FLOAT32');
    assert.equal(info.rope.theta, want.rope.theta);
    assert.equal(info.rope.scaling.type, 'LLAMA3');
    assert.equal((await client.getModel('tiny-gpt2')).rope, null);  // Positions are the client's.
    assert.equal((await client.getModel('')).name, 'tiny-gemma');
  });

  test('BlockForward matches PyTorch, and a batch of 2 matches 2 calls of 1', async () => {
    const c = BLOCK_GOLDEN.cases.find((x) => x.name === 'tiny-llama/b2t5_padded_layer0');
    const response = await client.blockForward({
      model: c.model, layer_start: c.layer_start, num_layers: c.num_layers,
      hidden_states: toTensor(c.hidden_states, c.shape), sequence_lengths: c.sequence_lengths});
    assert.deepEqual(response.hidden_states.shape, c.shape);
    const batched = fromTensor(response.hidden_states);
    assertClose(batched, c.expected, BLOCK_GOLDEN.tolerance.float32_weights, c.name);

    const [, T, D] = c.shape;
    for (const [b, length] of c.sequence_lengths.entries()) {
      const alone = c.hidden_states.slice(b * T * D, (b * T + length) * D);
      const single = await client.blockForward({
        model: c.model, hidden_states: toTensor(alone, [length, D])});
      assertClose(fromTensor(single.hidden_states), batched.subarray(b * T * D, (b * T + length) * D),
                  1e-5, `sequence ${b} alone`);
      // Padded rows of the batch are zeros.
      assert.ok(batched.subarray((b * T + length) * D, (b + 1) * T * D).every((v) => v === 0));
    }
  });

  test('step: many sessions in one call equal their own calls bit for bit', async () => {
    const D = (await client.getModel('tiny-llama')).hidden_size;
    const open = () => client.openSession({model: 'tiny-llama', num_layers: 2});
    const alone = [await open(), await open(), await open()];
    const together = [await open(), await open(), await open()];
    let seed = 1;
    const random = (n) => Float32Array.from({length: n}, () => Math.sin(seed++) * 2);
    // A ragged prefill, a one-token step, a ragged two-token step.
    for (const [T, lengths] of [[5, [5, 2, 4]], [1, null], [2, [2, 1, 2]]]) {
      const x = random(3 * T * D);
      const options = lengths === null ? {} : {sequenceLengths: lengths};
      // Ids or openSession responses: the same.
      const response = await client.step(
          [together[0], together[1].session_id, together[2]], toTensor(x, [3, T, D]), options);
      assert.deepEqual(response.hidden_states.shape, [3, T, D]);
      const got = fromTensor(response.hidden_states);
      const want = new Float32Array(3 * T * D);  // Padding stays 0.
      const wantLengths = [];
      for (const [b, session] of alone.entries()) {
        const n = lengths === null ? T : lengths[b];
        const one = await client.blockForward({
          session_id: session.session_id,
          hidden_states: toTensor(x.subarray(b * T * D, (b * T + n) * D), [n, D])});
        want.set(fromTensor(one.hidden_states), b * T * D);
        wantLengths.push(one.session_length);
      }
      assert.deepEqual(Buffer.from(got.buffer), Buffer.from(want.buffer));
      assert.deepEqual(response.session_lengths, wantLengths);
    }
    for (const session of [...alone, ...together]) await client.closeSession(session.session_id);
  });

  test('step: a failed call names the row and advances no session', async () => {
    const D = (await client.getModel('tiny-llama')).hidden_size;
    const a = await client.openSession({model: 'tiny-llama'});
    const closed = await client.openSession({model: 'tiny-llama'});
    await client.closeSession(closed.session_id);
    const one = toTensor(new Float32Array(D), [1, 1, D]);
    assert.deepEqual((await client.step([a], one)).session_lengths, [1]);
    const error = await rejection(client.step([a, closed], toTensor(new Float32Array(2 * D), [2, 1, D])));
    assert.equal(error.code, status.NOT_FOUND);
    assert.ok(error.details.startsWith(`session_ids[1]: session "${closed.session_id}" was closed`),
              error.details);
    assert.deepEqual((await client.step([a], one)).session_lengths, [2]);
    await assert.rejects(client.step([], one), /sessions must be a non-empty array/);
    await assert.rejects(client.step([{}], one), /sessions\[0\] is neither/);
    await client.closeSession(a.session_id);
  });

  test('the example script runs against the server', async () => {
    const script = path.join(__dirname, '..', 'examples', 'example.js');
    const stdout = await new Promise((resolve, reject) => {
      execFile(process.execPath, [script, '--target', server.target], (error, out, err) =>
        error ? reject(new Error(`${error.message}\n${out}${err}`)) : resolve(out));
    });
    for (const line of ['health: SERVING', 'model tiny-gemma: gemma, 2 layers, hidden 48, READY [default]',
                        'BlockForward on tiny-gemma: shape [3,48] BFLOAT16']) {
      assert.ok(stdout.includes(line), `example output lacks ${line}:\n${stdout}`);
    }
    assert.match(stdout, /RMSNorm of \[2, 8\]: max \|server - formula\| = /);
  });

  test('errors carry their code and message', async () => {
    const short = {shape: [3, 5], dtype: 'FLOAT32', data: Buffer.alloc(56)};
    let error = await rejection(client.normalize({kind: 'LAYER_NORM', input: short}));
    assert.equal(error.code, status.INVALID_ARGUMENT);
    assert.equal(error.details, 'input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56');

    error = await rejection(client.getModel('no-such-model'));
    assert.equal(error.code, status.NOT_FOUND);
    assert.match(error.details, /no model "no-such-model"/);

    error = await rejection(client.blockForward({
      model: 'tiny-llama', layer_start: 3, hidden_states: toTensor(new Float32Array(48), [1, 48])}));
    assert.equal(error.code, status.OUT_OF_RANGE);
    assert.match(error.details, /^layer_start: 3 is past the last layer/);

    // A deadline that has already passed fails on the client, never reaching a kernel.
    error = await rejection(client.listModels({deadline: Date.now() - 1}));
    assert.equal(error.code, status.DEADLINE_EXCEEDED);
    assert.equal(status[error.code], 'DEADLINE_EXCEEDED');
  });
});
