'use strict';
// Session calls carry the session id in the x-layerserve-session metadata header, the
// one a load balancer routes on (deploy/nginx/nginx.conf): a LayerClient talks to the
// real layerserve (its built-in demo model) through a gRPC proxy that records each
// call's method and header before passing the request bytes on unchanged.
const {describe, before, after, test} = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const {LayerClient, SESSION_HEADER, loadLayerServe, toTensor} = require('../lib');
const {startServer} = require('./server');

const HIDDEN = 512;  // The demo model's hidden_size.
const bytes = (b) => b;  // The proxy moves messages as they are, unparsed.

// A gRPC server on 127.0.0.1 that forwards every LayerService call to `target` and
// pushes {method, session} (the header's values) onto `seen`. Resolves to
// {address, close}.
async function recordingProxy(target, seen) {
  const {LayerService} = loadLayerServe();
  const upstream = new grpc.Client(target, grpc.credentials.createInsecure());
  const definition = {};
  const handlers = {};
  for (const [name, method] of Object.entries(LayerService.service)) {
    definition[name] = {...method, requestSerialize: bytes, requestDeserialize: bytes,
                        responseSerialize: bytes, responseDeserialize: bytes};
    handlers[name] = (call, callback) => {
      seen.push({method: name, session: call.metadata.get(SESSION_HEADER)});
      upstream.makeUnaryRequest(method.path, bytes, bytes, call.request, new grpc.Metadata(),
                                {deadline: Date.now() + 30000}, callback);
    };
  }
  const server = new grpc.Server();
  server.addService(definition, handlers);
  const port = await new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(),
                     (error, bound) => (error ? reject(error) : resolve(bound)));
  });
  return {
    address: `127.0.0.1:${port}`,
    close: () => {
      upstream.close();
      server.forceShutdown();
    },
  };
}

describe('the x-layerserve-session header', () => {
  let server;
  let proxy;
  let client;
  const seen = [];

  before(async () => {
    server = await startServer();
    proxy = await recordingProxy(server.target, seen);
    client = new LayerClient(proxy.address, {deadlineMs: 30000});
  });

  after(async () => {
    client.close();
    proxy.close();
    assert.equal(await server.stop(), 0, server.output());
  });

  test('rides on session calls only, with the session id', async () => {
    const a = await client.openSession({num_layers: 1});
    const b = await client.openSession({num_layers: 1});
    const x = Float32Array.from({length: 2 * HIDDEN}, (_, i) => Math.sin(i) / 4);
    const one = await client.blockForward({num_layers: 1, session_id: a.session_id,
                                           hidden_states: toTensor(x, [1, 2, HIDDEN])});
    assert.equal(one.session_length, 2);  // The real server answered through the proxy.
    const both = await client.step([b, a], toTensor(x, [2, 1, HIDDEN]));
    assert.deepEqual(both.session_lengths, [1, 3]);
    await client.blockForward({num_layers: 1, hidden_states: toTensor(x, [2, HIDDEN])});
    await client.closeSession(a.session_id);
    await client.closeSession(b.session_id);

    assert.deepEqual(seen, [
      {method: 'OpenSession', session: []},
      {method: 'OpenSession', session: []},
      {method: 'BlockForward', session: [a.session_id]},
      // Many sessions: the first one's id, as the Python client sends.
      {method: 'BlockForward', session: [b.session_id]},
      {method: 'BlockForward', session: []},  // No session: no header.
      {method: 'CloseSession', session: [a.session_id]},
      {method: 'CloseSession', session: [b.session_id]},
    ]);
    assert.notEqual(a.session_id, b.session_id);
  });
});
