// Type-checked (tsc --noEmit, never run) against the installed package's index.d.ts by
// test/package.test.js: the main calls with their real argument shapes, their results'
// fields, and @ts-expect-error on misuses the declarations must reject.
import {LayerClient, SESSION_HEADER, VERSION, fromTensor, status, toTensor} from 'layerserve-client';
import type {BlockForwardResponse, LayerServeError, ModelInfo, Tensor} from 'layerserve-client';
import layerserve from 'layerserve-client';  // The whole module, as `require` gives it.

async function decode(address: string, steps: number): Promise<number> {
  const client = new LayerClient(address, {deadlineMs: 10000, retry: {maxAttempts: 3},
                                           tokenFile: undefined});
  const models: ModelInfo[] = await client.listModels();
  const names: string[] = models.filter((m) => m.state === 'READY').map((m) => m.name);
  const model = await client.getModel('');
  const d: number = model.hidden_size;
  const theta: number | undefined = model.rope?.theta;

  const x = Float32Array.from({length: 2 * d}, (_, i) => Math.sin(i));
  const normalized = await client.normalize({kind: 'RMS_NORM', input: toTensor(x, [2, d]),
                                             epsilon: 1e-6}, {deadlineMs: 500});
  const y: Float32Array = fromTensor(normalized.output);
  const residual: Tensor | null = normalized.residual_out;
  await client.activate({activation: 'SWIGLU', input: toTensor(x, [2, d], 'BFLOAT16')});
  await client.positionalEncode({rope: {query: toTensor(x, [1, 1, 2, d]), theta: 10000}});

  const {session_id: sessionId, ttl_ms: ttl} = await client.openSession(
      {model: model.name, layer_start: model.span_layer_start, num_layers: model.span_num_layers});
  let reply: BlockForwardResponse = await client.blockForward(
      {session_id: sessionId, hidden_states: toTensor(x, [1, 2, d])}, {deadline: new Date()});
  const length: number = reply.session_length;
  const other = await client.openSession({num_layers: 1});
  reply = await client.step([sessionId, other], toTensor(x, [2, 1, d]), {sequenceLengths: [1, 1]});
  const lengths: number[] = reply.session_lengths;
  const shape: number[] = reply.hidden_states.shape;
  await client.closeSession(sessionId);
  const serving: boolean = (await client.health()) === 'SERVING';
  client.close();

  try {
    await client.normalize({kind: 2, input: {shape: [1], dtype: 'FLOAT32', data: Buffer.alloc(3)}});
  } catch (e) {
    const error = e as LayerServeError;
    if (error.code === status.INVALID_ARGUMENT) return error.details.length;
  }
  // @ts-expect-error: blockForward takes a request object, not a tensor.
  await client.blockForward(toTensor(x, [2, d]));
  // @ts-expect-error: session_length is a number.
  const wrong: string = reply.session_length;
  // @ts-expect-error: no such dtype.
  toTensor(x, [2, d], 'FLOAT64');
  // @ts-expect-error: step wants an array of sessions.
  await client.step(sessionId, toTensor(x, [1, 1, d]));
  // @ts-expect-error: an unknown option.
  new LayerClient(address, {deadline: 5});
  return names.length + y.length + (residual === null ? 0 : 1) + (theta ?? 0) + ttl + length +
      lengths.length + shape.length + (serving ? 1 : 0) + steps + wrong.length +
      SESSION_HEADER.length + VERSION.length + layerserve.numElements([2, 3]);
}

export {decode};
