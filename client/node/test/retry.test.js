'use strict';
// Retries of UNAVAILABLE (lib/retry.js) against the real layerserve binary: a port
// where nothing listens until a TCP proxy to the server comes up there, as when a
// replica restarts, within the retry budget; with retries off the same call fails
// with UNAVAILABLE. Against a fake LayerService that is always UNAVAILABLE: session
// steps, of one session or many (step), are sent once, other calls retried.
const {describe, before, after, test} = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const grpc = require('@grpc/grpc-js');
const {LayerClient, status, toTensor, loadLayerServe} = require('../lib');
const {resolveRetry} = require('../lib/retry');
const {rejection, startServer} = require('./server');

// A loopback port the OS just handed out, with nothing listening on it.
function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const {port} = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

// Forwards connections to 127.0.0.1:port to upstream ("host:port"); resolves to the
// proxy server once it listens.
function proxy(port, upstream) {
  const [host, upstreamPort] = [upstream.slice(0, upstream.lastIndexOf(':')),
                                Number(upstream.slice(upstream.lastIndexOf(':') + 1))];
  const sockets = new Set();
  const server = net.createServer((inbound) => {
    const outbound = net.connect(upstreamPort, host);
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    inbound.pipe(outbound).pipe(inbound);
  });
  server.destroyAll = () => {
    for (const s of sockets) s.destroy();
    server.close();
  };
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}

const REQUEST = {kind: 'RMS_NORM', input: toTensor(new Float32Array([1, 2, 3, 4]), [1, 4])};

describe('retries against a restarting server', () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.output());
  });

  test('a call succeeds once a server listens, within the retry budget', async () => {
    const port = await freePort();
    const client = new LayerClient(`127.0.0.1:${port}`, {
      retry: {maxAttempts: 8, initialBackoffMs: 100, maxBackoffMs: 1000}});
    let up = null;
    const timer = setTimeout(async () => {
      up = await proxy(port, server.target);
    }, 100);
    try {
      const response = await client.normalize(REQUEST, {deadlineMs: 20000});
      assert.deepEqual(response.output.shape.map(Number), [1, 4]);
      assert.ok(up !== null, 'answered before anything listened');
    } finally {
      clearTimeout(timer);
      client.close();
      if (up) up.destroyAll();
    }
  });

  test('with retries off the same call fails with UNAVAILABLE', async () => {
    const port = await freePort();
    const client = new LayerClient(`127.0.0.1:${port}`, {retry: false});
    try {
      const error = await rejection(client.normalize(REQUEST, {deadlineMs: 10000}));
      assert.equal(error.code, status.UNAVAILABLE);
    } finally {
      client.close();
    }
  });
});

test('resolveRetry: defaults, overrides, off, and bad policies', () => {
  assert.deepEqual(resolveRetry(undefined),
                   {maxAttempts: 4, initialBackoffMs: 50, maxBackoffMs: 2000, multiplier: 2});
  assert.equal(resolveRetry({maxAttempts: 6}).maxAttempts, 6);
  assert.equal(resolveRetry(false), null);
  assert.equal(resolveRetry({maxAttempts: 1}), null);
  assert.throws(() => resolveRetry({maxAttempts: 0}), /maxAttempts/);
  assert.throws(() => resolveRetry({initialBackoffMs: 5000}), /initialBackoffMs/);
});

// A LayerService whose BlockForward always answers UNAVAILABLE, counting its calls.
async function unavailableServer() {
  const {LayerService} = loadLayerServe();
  const server = new grpc.Server();
  const counter = {calls: 0};
  server.addService(LayerService.service, {
    BlockForward: (call, callback) => {
      counter.calls++;
      callback({code: status.UNAVAILABLE, details: 'draining'});
    },
  });
  const port = await new Promise((resolve, reject) => server.bindAsync(
      '127.0.0.1:0', grpc.ServerCredentials.createInsecure(),
      (error, bound) => (error ? reject(error) : resolve(bound))));
  return {target: `127.0.0.1:${port}`, counter, stop: () => server.forceShutdown()};
}

test('session steps of one session or many are sent once; other calls are retried', async () => {
  const fake = await unavailableServer();
  const client = new LayerClient(fake.target, {
    retry: {maxAttempts: 3, initialBackoffMs: 1, maxBackoffMs: 2}});
  const hidden = toTensor(new Float32Array(4), [2, 1, 2]);
  const sends = async (call) => {
    const before = fake.counter.calls;
    const error = await rejection(call());
    assert.equal(error.code, status.UNAVAILABLE);
    return fake.counter.calls - before;
  };
  try {
    assert.equal(await sends(() => client.blockForward({session_id: 'r.1', hidden_states: hidden})), 1);
    assert.equal(await sends(() => client.blockForward({session_ids: ['r.1', 'r.2'],
                                                         hidden_states: hidden})), 1);
    assert.equal(await sends(() => client.step(['r.1', {session_id: 'r.2'}], hidden)), 1);
    assert.equal(await sends(() => client.blockForward({hidden_states: hidden})), 3);
  } finally {
    client.close();
    fake.stop();
  }
});
