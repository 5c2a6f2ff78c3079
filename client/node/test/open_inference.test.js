'use strict';
// The Open Inference Protocol (inference.GRPCInferenceService) on the real layerserve
// binary serving its built-in `demo` model, called through stubs that
// @grpc/proto-loader makes at run time from the project's own
// proto/inference/grpc_service.proto: what a Triton or KServe client in any language
// sees. ModelInfer answers are checked byte for byte against the layerserve.v1 calls
// they map to (BlockForward, Normalize, a KV-cache session), loaded the same way from
// proto/layerserve/v1/layerserve.proto.
const {describe, before, after, test} = require('node:test');
const assert = require('node:assert/strict');
const {execFileSync} = require('node:child_process');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const ref = require('./reference');
const {rejection, startServer} = require('./server');

const SOURCE_DIR = process.env.LAYERSERVE_SOURCE_DIR || path.resolve(__dirname, '../../..');
const PROTO_DIR = path.join(SOURCE_DIR, 'proto');
// As client/node/lib/proto.js loads layerserve.proto: .proto field names, int64 as
// numbers, enum names, every field present.
const LOADER_OPTIONS = {keepCase: true, longs: Number, enums: String, defaults: true,
                        oneofs: true, includeDirs: [PROTO_DIR]};
const HIDDEN = 512;  // The demo model's hidden_size.
const STATUS = grpc.status;
// What the unserved RPCs' messages end with.
const SERVED = 'it serves ServerLive, ServerReady, ModelReady, ServerMetadata, ' +
               'ModelMetadata, ModelConfig, ModelInfer, ModelStreamInfer';

function load(file) {
  return grpc.loadPackageDefinition(protoLoader.loadSync(file, LOADER_OPTIONS));
}

// A unary call as a promise.
function unary(stub, method, request, metadata = new grpc.Metadata()) {
  return new Promise((resolve, reject) => {
    stub[method](request, metadata, {deadline: Date.now() + 30000},
                 (error, response) => (error ? reject(error) : resolve(response)));
  });
}

// The header a load balancer routes a sequence's requests on.
function sequenceHeader(id) {
  const metadata = new grpc.Metadata();
  metadata.set('x-layerserve-sequence', String(id));
  return metadata;
}

const bytesOf = (values) => Buffer.from(Float32Array.from(values).buffer);

// A raw FP32 input of the demo model with its bytes, for ModelInfer.
function hiddenRequest(values, shape, id, parameters = {}) {
  return {model_name: 'demo', id, parameters,
          inputs: [{name: 'hidden_states', datatype: 'FP32', shape}],
          raw_input_contents: [bytesOf(values)]};
}

describe('inference.GRPCInferenceService on a real server', () => {
  let server;
  let oip;
  let v1;

  before(async () => {
    server = await startServer();  // The built-in demo model.
    const credentials = grpc.credentials.createInsecure();
    oip = new (load('inference/grpc_service.proto').inference.GRPCInferenceService)(
        server.target, credentials);
    v1 = new (load('layerserve/v1/layerserve.proto').layerserve.v1.LayerService)(
        server.target, credentials);
  });

  after(async () => {
    oip.close();
    v1.close();
    assert.equal(await server.stop(), 0, server.output());  // Drained cleanly.
  });

  test('ServerLive, ServerReady, ModelReady', async () => {
    assert.equal((await unary(oip, 'ServerLive', {})).live, true);
    assert.equal((await unary(oip, 'ServerReady', {})).ready, true);
    assert.equal((await unary(oip, 'ModelReady', {name: 'demo', version: '1'})).ready, true);
    // Unknown: not ready, not an error (a probe's answer).
    assert.equal((await unary(oip, 'ModelReady', {name: 'no-such-model'})).ready, false);
  });

  test('ServerMetadata names layerserve, its version and the extensions', async () => {
    const metadata = await unary(oip, 'ServerMetadata', {});
    assert.equal(metadata.name, 'layerserve');
    // `layerserve --version` prints "layerserve <version>".
    const printed = execFileSync(process.env.LAYERSERVE_SERVER, ['--version'], {encoding: 'utf8'});
    assert.equal(printed.trim(), `layerserve ${metadata.version}`);
    assert.deepEqual(metadata.extensions, ['model_configuration', 'sequence', 'parameters']);
  });

  test('ModelMetadata and ModelConfig of demo', async () => {
    const metadata = await unary(oip, 'ModelMetadata', {name: 'demo'});
    assert.equal(metadata.name, 'demo');
    assert.deepEqual(metadata.versions, ['1']);
    assert.equal(metadata.platform, 'layerserve');
    const signature = (tensors) => tensors.map((t) => [t.name, t.datatype, t.shape]);
    assert.deepEqual(signature(metadata.inputs), [
      ['hidden_states', 'FP32', [-1, -1, HIDDEN]],
      ['positions', 'INT64', [-1]],
      ['sequence_lengths', 'INT64', [-1]],
    ]);
    assert.deepEqual(signature(metadata.outputs), [['hidden_states', 'FP32', [-1, -1, HIDDEN]]]);

    const {config} = await unary(oip, 'ModelConfig', {name: 'demo'});
    assert.equal(config.name, 'demo');
    assert.equal(config.max_batch_size, 0);  // B is part of hidden_states' dims.
    assert.deepEqual(config.input.map((t) => [t.name, t.data_type, t.optional]), [
      ['hidden_states', 'TYPE_FP32', false],
      ['positions', 'TYPE_INT64', true],
      ['sequence_lengths', 'TYPE_INT64', true],
    ]);
    assert.deepEqual(config.output.map((t) => [t.name, t.data_type, t.dims]),
                     [['hidden_states', 'TYPE_FP32', [-1, -1, HIDDEN]]]);
    // A repository model takes sequences; idle ones end after the session TTL (5 min).
    assert.equal(config.scheduling_choice, 'sequence_batching');
    assert.equal(config.sequence_batching.max_sequence_idle_microseconds, 300e6);
    // The v1 ModelInfo's fields, as text.
    assert.equal(config.parameters.hidden_size.string_value, String(HIDDEN));
    assert.equal(config.parameters.architecture.string_value, 'llama');
    assert.equal(config.parameters.num_layers.string_value, '4');

    const error = await rejection(unary(oip, 'ModelMetadata', {name: 'demo', version: '2'}));
    assert.equal(error.code, STATUS.NOT_FOUND);
    assert.equal(error.details, 'version: model "demo" serves version 1, not "2"');
  });

  test('ModelInfer on demo: raw FP32 equals v1 BlockForward byte for byte', async () => {
    const shape = [1, 3, HIDDEN];
    const x = ref.randn(3 * HIDDEN, 21);
    const positions = [5, 6, 7];
    const request = hiddenRequest(x, shape, 'block-1', {
      layer_start: {int64_param: 1}, num_layers: {string_param: '3'}});
    // positions as a raw INT64 input: every input raw, in the order of `inputs`.
    request.inputs.push({name: 'positions', datatype: 'INT64', shape: [3]});
    request.raw_input_contents.push(Buffer.from(BigInt64Array.from(positions, BigInt).buffer));
    const response = await unary(oip, 'ModelInfer', request);
    assert.equal(response.model_name, 'demo');
    assert.equal(response.model_version, '1');
    assert.equal(response.id, 'block-1');
    assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]),
                     [['hidden_states', 'FP32', shape]]);
    assert.deepEqual(response.parameters, {});  // No sequence, no statistics.

    const want = await unary(v1, 'BlockForward', {
      model: 'demo', layer_start: 1, num_layers: 3, positions,
      hidden_states: {shape, dtype: 'FLOAT32', data: bytesOf(x)}});
    assert.equal(response.raw_output_contents.length, 1);
    assert.ok(response.raw_output_contents[0].equals(want.hidden_states.data),
              'ModelInfer and BlockForward differ');
  });

  test('ModelInfer on normalize: typed fp32_contents equals v1 Normalize', async () => {
    const d = 16;
    const x = ref.randn(3 * d, 22);
    const w = ref.randn(d, 23);
    const response = await unary(oip, 'ModelInfer', {
      model_name: 'normalize',
      inputs: [
        {name: 'input', datatype: 'FP32', shape: [3, d], contents: {fp32_contents: Array.from(x)}},
        {name: 'weight', datatype: 'FP32', shape: [d], contents: {fp32_contents: Array.from(w)}},
      ],
      parameters: {kind: {string_param: 'RMS_NORM'}, epsilon: {double_param: 1e-3}},
      outputs: [{name: 'output'}]});
    assert.equal(response.model_version, '1');
    assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]),
                     [['output', 'FP32', [3, d]]]);
    const want = await unary(v1, 'Normalize', {
      kind: 'RMS_NORM', epsilon: 1e-3,
      input: {shape: [3, d], dtype: 'FLOAT32', data: bytesOf(x)},
      weight: {shape: [d], dtype: 'FLOAT32', data: bytesOf(w)}});
    assert.ok(response.raw_output_contents[0].equals(want.output.data),
              'ModelInfer and Normalize differ');

    // An unknown parameter: the message lists the model's parameters.
    const error = await rejection(unary(oip, 'ModelInfer', {
      model_name: 'normalize',
      inputs: [{name: 'input', datatype: 'FP32', shape: [d], contents: {fp32_contents: Array.from(w)}}],
      parameters: {kind: {string_param: 'RMS_NORM'}, eps: {double_param: 1e-3}}}));
    assert.equal(error.code, STATUS.INVALID_ARGUMENT);
    assert.equal(error.details, 'eps: no parameter "eps"; the parameters are kind, epsilon, ' +
                                'weight_offset, output_dtype');
  });

  test('ModelStreamInfer: a sequence of three steps in order, errors in-stream', async () => {
    const sequenceId = 4242;
    const steps = [0, 1, 2].map((t) => ref.randn(HIDDEN, 30 + t));
    const step = (t, parameters) => hiddenRequest(steps[t], [1, 1, HIDDEN], `step-${t}`, {
      sequence_id: {int64_param: sequenceId}, ...parameters});
    const d = 8;
    const requests = [
      // The start runs every block of demo; the later steps keep its layers.
      step(0, {sequence_start: {bool_param: true}, num_layers: {int64_param: 4}}),
      {model_name: 'no-such-model', id: 'bad-model'},
      step(1, {}),
      step(2, {sequence_end: {bool_param: true}}),
      // After the end: the sequence is closed.
      {...step(0, {}), id: 'after-end'},
      // And the stream still serves a stateless request.
      {model_name: 'normalize', id: 'plain',
       inputs: [{name: 'input', datatype: 'FP32', shape: [d],
                 contents: {fp32_contents: Array.from(ref.randn(d, 40))}}],
       parameters: {kind: {string_param: 'LAYER_NORM'}}},
    ];

    // One HTTP/2 stream: its requests reach one replica whatever the balancer does;
    // the header is there for a balancer that routes on it.
    const responses = await new Promise((resolve, reject) => {
      const got = [];
      const call = oip.ModelStreamInfer(sequenceHeader(sequenceId),
                                        {deadline: Date.now() + 60000});
      call.on('data', (response) => got.push(response));
      call.on('error', reject);
      call.on('end', () => resolve(got));
      for (const request of requests) call.write(request);
      call.end();
    });

    assert.deepEqual(responses.map((r) => r.infer_response.id), requests.map((r) => r.id));
    const [start, badModel, middle, end, afterEnd, plain] = responses;
    for (const [t, response] of [start, middle, end].entries()) {
      assert.equal(response.error_message, '', `step ${t}`);
      const answer = response.infer_response;
      assert.deepEqual(answer.outputs.map((o) => [o.name, o.datatype, o.shape]),
                       [['hidden_states', 'FP32', [1, 1, HIDDEN]]]);
      // The tokens cached after the step: one per step.
      assert.deepEqual(answer.parameters.session_length,
                       {int64_param: t + 1, parameter_choice: 'int64_param'});
    }
    assert.equal(badModel.error_message,
                 'NOT_FOUND: model_name: no model "no-such-model"; this server serves ' +
                 'normalize, activate, positional_encode and its repository\'s demo');
    assert.equal(badModel.infer_response.model_name, 'no-such-model');
    assert.equal(afterEnd.error_message,
                 `NOT_FOUND: sequence_id: sequence "${sequenceId}" was closed; start it ` +
                 'again (sequence_start) and prefill again');
    assert.equal(afterEnd.infer_response.model_name, 'demo');
    assert.deepEqual(afterEnd.infer_response.outputs, []);
    assert.equal(plain.error_message, '');
    assert.deepEqual(plain.infer_response.outputs.map((o) => o.shape), [[d]]);

    // The same steps on a v1 KV-cache session give the same bytes.
    const {session_id} = await unary(v1, 'OpenSession', {model: 'demo', num_layers: 4});
    for (const [t, response] of [start, middle, end].entries()) {
      const want = await unary(v1, 'BlockForward', {
        model: 'demo', num_layers: 4, session_id,
        hidden_states: {shape: [1, 1, HIDDEN], dtype: 'FLOAT32', data: bytesOf(steps[t])}});
      assert.equal(want.session_length, t + 1);
      assert.ok(response.infer_response.raw_output_contents[0].equals(want.hidden_states.data),
                `step ${t} differs from the v1 session's`);
    }
    await unary(v1, 'CloseSession', {session_id});
  });

  test('unary sequence steps carry the affinity header; unknown ids are NOT_FOUND', async () => {
    const id = 'chat-7';  // A string sequence_id.
    const header = sequenceHeader(id);
    const x = ref.randn(2 * HIDDEN, 50);
    const first = await unary(oip, 'ModelInfer', hiddenRequest(x, [2, HIDDEN], 'prefill', {
      sequence_id: {string_param: id}, sequence_start: {bool_param: true}}), header);
    assert.equal(first.parameters.session_length.int64_param, 2);
    const last = await unary(oip, 'ModelInfer', hiddenRequest(x.subarray(0, HIDDEN), [1, HIDDEN],
                                                              'decode', {
      sequence_id: {string_param: id}, sequence_end: {bool_param: true}}), header);
    assert.equal(last.parameters.session_length.int64_param, 3);

    const error = await rejection(unary(oip, 'ModelInfer', hiddenRequest(
        x.subarray(0, HIDDEN), [1, HIDDEN], 'unknown', {sequence_id: {int64_param: 999}})));
    assert.equal(error.code, STATUS.NOT_FOUND);
    assert.match(error.details, /^sequence_id: sequence "999" is unknown on this replica/);
  });

  test('an RPC layerserve does not serve is UNIMPLEMENTED, naming it', async () => {
    const error = await rejection(unary(oip, 'ModelStatistics', {name: 'demo'}));
    assert.equal(error.code, STATUS.UNIMPLEMENTED);
    assert.equal(error.details,
                 `inference.GRPCInferenceService/ModelStatistics is not served by layerserve; ${SERVED}`);
  });
});
