#!/usr/bin/env node
'use strict';
// The installed package's example (the `layerserve-client-example` command): lists the
// served models, checks one RMSNorm against the formula, then decodes on a KV-cache
// session of the default model's blocks: a short prefill and N one-token steps, each
// reply's session length checked, and closes the session. One summary line on stdout
// and exit 0; an error goes to stderr with a non-zero exit.
//
//   layerserve-client-example [--address HOST:PORT] [--steps N]     (npx ..., or)
//   node node_modules/layerserve-client/examples/session_decode.js  (require)
//   node node_modules/layerserve-client/examples/session_decode.mjs (import)
//
// The session calls carry the session id in the x-layerserve-session header, so the
// example runs as well through a load balancer routing on it (deploy/nginx).
// A real decoder would embed each new token here; the example sends made-up hidden
// states, since the token embedding and LM head stay on the client.

const USAGE = 'usage: layerserve-client-example [--address HOST:PORT] [--steps N]';
const PREFILL = 4;  // Tokens of the prompt.

// {address, steps} from argv, or throws a message for stderr.
function parseArgs(argv) {
  const args = {address: '127.0.0.1:50051', steps: 20};
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${name} needs a value\n${USAGE}`);
    if (name === '--address') {
      args.address = value;
    } else if (name === '--steps') {
      args.steps = Number(value);
      if (!Number.isInteger(args.steps) || args.steps < 0) {
        throw new Error(`--steps ${value}: want an integer >= 0`);
      }
    } else {
      throw new Error(`unknown argument ${name}\n${USAGE}`);
    }
  }
  return args;
}

// `rows` made-up hidden states of width d, different for each `seed`.
function hidden(rows, d, seed) {
  return Float32Array.from({length: rows * d}, (_, i) => Math.cos(seed * 7.1 + i * 0.37) / 4);
}

// lib: the package's exports (require or import); returns the exit code.
async function main(lib, argv) {
  const {LayerClient, status, toTensor, fromTensor} = lib;
  let args;
  try {
    args = parseArgs(argv);
  } catch (error) {
    console.error(error.message);
    return 2;
  }
  const client = new LayerClient(args.address, {deadlineMs: 30000});
  try {
    const models = await client.listModels();
    if (models.length === 0) throw new Error('the server lists no model');

    // RMSNorm over the last dim of a [2, 8] batch, against the formula.
    const d = 8;
    const x = Float32Array.from({length: 2 * d}, (_, i) => Math.sin(i + 1));
    const {output} = await client.normalize({kind: 'RMS_NORM', input: toTensor(x, [2, d]),
                                             epsilon: 1e-6});
    const y = fromTensor(output);
    for (let r = 0; r < 2; r++) {
      const row = x.subarray(r * d, (r + 1) * d);
      const rms = Math.sqrt(row.reduce((s, v) => s + v * v, 0) / d + 1e-6);
      row.forEach((v, i) => {
        // Written so that a NaN fails too.
        if (!(Math.abs(y[r * d + i] - v / rms) <= 1e-5)) {
          throw new Error(`Normalize: element ${r * d + i} is ${y[r * d + i]}, want ${v / rms}`);
        }
      });
    }

    // A session on the blocks the server holds of its default model.
    const model = await client.getModel('');
    if (model.state !== 'READY') throw new Error(`model ${model.name}: ${model.state} ${model.error}`);
    const D = model.hidden_size;
    const {session_id: sessionId} = await client.openSession({
      model: model.name, layer_start: model.span_layer_start, num_layers: model.span_num_layers});
    try {
      const request = (tokens, seed) => ({
        model: model.name, layer_start: model.span_layer_start,
        num_layers: model.span_num_layers, session_id: sessionId,
        hidden_states: toTensor(hidden(tokens, D, seed), [1, tokens, D])});
      let reply = await client.blockForward(request(PREFILL, 0));
      if (reply.session_length !== PREFILL) {
        throw new Error(`prefill: session length ${reply.session_length}, want ${PREFILL}`);
      }
      for (let step = 1; step <= args.steps; step++) {
        reply = await client.blockForward(request(1, step));
        const want = PREFILL + step;
        if (reply.session_length !== want) {
          throw new Error(`step ${step}: session length ${reply.session_length}, want ${want}`);
        }
        if (!fromTensor(reply.hidden_states).every(Number.isFinite)) {
          throw new Error(`step ${step}: hidden states not finite`);
        }
      }
    } finally {
      await client.closeSession(sessionId);
    }
    console.log(`ok: ${models.length} model(s); Normalize matches; session on ${model.name} ` +
                `layers ${model.span_layer_start}..` +
                `${model.span_layer_start + model.span_num_layers - 1}: prefill ${PREFILL} + ` +
                `${args.steps} steps, length ${PREFILL + args.steps}; closed`);
    return 0;
  } catch (error) {
    // A failed call has a gRPC status code and the server's message.
    const code = error.code === undefined ? '' : `${status[error.code] ?? error.code}: `;
    console.error(`error: ${code}${error.details ?? error.message}`);
    return 1;
  } finally {
    client.close();
  }
}

module.exports = {main};

if (require.main === module) {
  main(require('layerserve-client'), process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
