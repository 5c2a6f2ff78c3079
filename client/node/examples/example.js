#!/usr/bin/env node
'use strict';
// Calls a running layerserve from Node.js: health, the served models, RMSNorm of a
// small batch checked against the formula, and a one-block forward pass.
//
//   cd client/node && npm ci
//   node examples/example.js [--target 127.0.0.1:50051] [--token-file F]
//                            [--tls-ca CA.crt] [--tls-cert C.crt --tls-key C.key]
// For a secured server: --token-file for --auth-token-file, --tls-ca for --tls-cert,
// --tls-cert/--tls-key for --tls-client-ca.
const {LayerClient, status, toTensor, fromTensor} = require('..');

// The value after --name, or undefined.
function flag(name) {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : undefined;
}

async function main() {
  const target = flag('--target') ?? '127.0.0.1:50051';
  let client;
  try {
    client = new LayerClient(target, {deadlineMs: 10000, tokenFile: flag('--token-file'),
                                      tlsCa: flag('--tls-ca'), tlsCert: flag('--tls-cert'),
                                      tlsKey: flag('--tls-key')});
  } catch (error) {  // A bad option or an unreadable file (the message never holds the token).
    console.error(`error: ${error.message}`);
    return 1;
  }
  try {
    console.log(`health: ${await client.health()}`);
    for (const m of await client.listModels()) {
      console.log(`model ${m.name}: ${m.architecture}, ${m.num_layers} layers, hidden ` +
                  `${m.hidden_size}, ${m.state}${m.is_default ? ' [default]' : ''}`);
    }

    // RMSNorm over the last dim of a [2, 8] batch.
    const d = 8;
    const x = Float32Array.from({length: 2 * d}, (_, i) => Math.sin(i + 1));
    const {output} = await client.normalize({kind: 'RMS_NORM', input: toTensor(x, [2, d]),
                                             epsilon: 1e-6});
    const y = fromTensor(output);
    let worst = 0;  // Math.max keeps a NaN, and `worst < 1e-5` below fails on it.
    for (let r = 0; r < 2; r++) {
      const row = x.subarray(r * d, (r + 1) * d);
      const rms = Math.sqrt(row.reduce((s, v) => s + v * v, 0) / d + 1e-6);
      row.forEach((v, i) => { worst = Math.max(worst, Math.abs(y[r * d + i] - v / rms)); });
    }
    console.log(`RMSNorm of [2, ${d}]: max |server - formula| = ${worst.toExponential(2)}`);

    // One block of the default model on 3 tokens, sent and returned as bfloat16.
    const model = await client.getModel();
    const hidden = Float32Array.from({length: 3 * model.hidden_size}, (_, i) => Math.cos(i) / 4);
    const block = await client.blockForward({
      hidden_states: toTensor(hidden, [3, model.hidden_size], 'BFLOAT16')});
    console.log(`BlockForward on ${model.name}: shape [${block.hidden_states.shape}] ` +
                `${block.hidden_states.dtype}`);
    return worst < 1e-5 ? 0 : 1;
  } catch (error) {
    // A failed call: a gRPC status code and the server's message.
    console.error(`error: ${status[error.code] ?? error.code}: ${error.details ?? error.message}`);
    return 2;
  } finally {
    client.close();
  }
}

main().then((code) => { process.exitCode = code; });
