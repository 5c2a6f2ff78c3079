'use strict';
// LayerClient against secured servers (the real layerserve binary): a bearer token
// from the option or a file, the server's UNAUTHENTICATED answers to a wrong or missing
// token, health without one, a session carrying it, mutual TLS with and without a
// client certificate, the option errors, and the token in no error or output.
// The PKI and the server's token file come from tests/testing/pki.py.
const {describe, before, after, test} = require('node:test');
const assert = require('node:assert/strict');
const {execFile, execFileSync} = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const util = require('node:util');
const {LayerClient, status, toTensor} = require('../lib');
const {rejection, startServer} = require('./server');

const SOURCE_DIR = process.env.LAYERSERVE_SOURCE_DIR || path.resolve(__dirname, '../../..');
const MODELS = path.join(SOURCE_DIR, 'tests/golden/models');
// pki.py's two tokens (the server accepts either).
const TOKEN = 's3cret-token-one-0123456789abcdef';
const OTHER_TOKEN = 's3cret-token-two-fedcba9876543210';
const WRONG_TOKEN = 'wrong-token-5555aaaa5555aaaa';
const MISSING = 'missing credentials: this server requires "authorization: Bearer <token>" metadata';

// Fails if any token appears in text (an error rendered every way, or a program's output).
function assertNoToken(text, what) {
  for (const token of [TOKEN, OTHER_TOKEN, WRONG_TOKEN]) {
    assert.ok(!text.includes(token), `${what} shows a token:\n${text}`);
  }
}

function errorText(error) {
  return `${error.message}\n${error.details}\n${error.stack}\n${util.inspect(error, {depth: 5})}`;
}

// Runs examples/example.js with args; resolves to {code, output} (stdout + stderr).
function runExample(args) {
  const script = path.join(__dirname, '..', 'examples', 'example.js');
  return new Promise((resolve) => {
    execFile(process.execPath, [script, ...args], (error, out, err) =>
      resolve({code: error ? error.code : 0, output: out + err}));
  });
}

let dir;
before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'layerserve-node-security-'));
  execFileSync('/usr/bin/python3', [path.join(SOURCE_DIR, 'tests/testing/pki.py'), dir]);
  // The clients' token files: surrounding whitespace and CRLF are dropped on reading.
  fs.writeFileSync(path.join(dir, 'right'), `  ${TOKEN}\r\n`);
  fs.writeFileSync(path.join(dir, 'wrong'), `${WRONG_TOKEN}\n`);
  fs.writeFileSync(path.join(dir, 'empty'), '\n \n');
});
after(() => fs.rmSync(dir, {recursive: true, force: true}));

describe('a server with --auth-token-file', () => {
  let server;
  const clients = [];
  const connect = (options) => {
    const client = new LayerClient(server.target, {deadlineMs: 30000, ...options});
    clients.push(client);
    return client;
  };

  before(async () => {
    server = await startServer([`--model-repository=${MODELS}`,
                                `--auth-token-file=${path.join(dir, 'tokens')}`]);
  });
  after(async () => {
    for (const client of clients) client.close();
    assert.equal(await server.stop(), 0, server.output());
  });

  test('the right token, given or from a file, is accepted', async () => {
    for (const options of [{token: TOKEN}, {token: OTHER_TOKEN},
                           {tokenFile: path.join(dir, 'right')}]) {
      const models = await connect(options).listModels();
      assert.ok(models.some((m) => m.name === 'tiny-gemma'), JSON.stringify(options));
    }
  });

  test('a wrong or missing token gets UNAUTHENTICATED with the server\'s message', async () => {
    for (const [options, message] of [[{token: WRONG_TOKEN}, 'invalid bearer token'],
                                      [{tokenFile: path.join(dir, 'wrong')}, 'invalid bearer token'],
                                      [{}, MISSING]]) {
      const error = await rejection(connect(options).getModel(''));
      assert.equal(error.code, status.UNAUTHENTICATED, JSON.stringify(options));
      assert.equal(error.details, message);
      assertNoToken(errorText(error), 'the error');
    }
  });

  test('health answers without a token', async () => {
    assert.equal(await connect({}).health(), 'SERVING');
    assert.equal(await connect({token: TOKEN}).health(), 'SERVING');
  });

  test('a session carries the token on every call', async () => {
    const client = connect({tokenFile: path.join(dir, 'right')});
    const model = await client.getModel('');
    const session = await client.openSession({model: model.name, num_layers: model.num_layers});
    const h = new Float32Array(2 * model.hidden_size).fill(0.25);
    const out = await client.blockForward({model: model.name, num_layers: model.num_layers,
                                           session_id: session.session_id,
                                           hidden_states: toTensor(h, [1, 2, model.hidden_size])});
    assert.equal(out.session_length, 2);
    await client.closeSession(session.session_id);
    // Without the token the same session's calls are refused before they reach it.
    const error = await rejection(connect({}).closeSession(session.session_id));
    assert.equal(error.code, status.UNAUTHENTICATED);
  });

  test('the example passes --token-file, and hides a wrong token', async () => {
    let run = await runExample(['--target', server.target, '--token-file', path.join(dir, 'right')]);
    assert.equal(run.code, 0, run.output);
    assert.match(run.output, /health: SERVING/);
    run = await runExample(['--target', server.target, '--token-file', path.join(dir, 'wrong')]);
    assert.equal(run.code, 2, run.output);
    assert.match(run.output, /error: UNAUTHENTICATED: invalid bearer token/);
    assertNoToken(run.output, 'the example\'s output');
  });
});

describe('a server with --tls-client-ca (mutual TLS)', () => {
  let server;
  const clients = [];
  const connect = (options) => {
    const client = new LayerClient(server.target, {deadlineMs: 10000, ...options});
    clients.push(client);
    return client;
  };

  before(async () => {
    server = await startServer([`--tls-cert=${path.join(dir, 'server.crt')}`,
                                `--tls-key=${path.join(dir, 'server.key')}`,
                                `--tls-client-ca=${path.join(dir, 'ca.crt')}`]);
  });
  after(async () => {
    for (const client of clients) client.close();
    assert.equal(await server.stop(), 0, server.output());
  });

  test('a client certificate signed by the CA is accepted', async () => {
    const client = connect({tlsCa: path.join(dir, 'ca.crt'), tlsCert: path.join(dir, 'client.crt'),
                            tlsKey: path.join(dir, 'client.key')});
    assert.ok((await client.listModels()).length > 0);  // The built-in demo model.
    assert.equal(await client.health(), 'SERVING');
  });

  test('no client certificate, or one from another CA, is refused', async () => {
    for (const options of [{tlsCa: path.join(dir, 'ca.crt')},
                           {tlsCa: path.join(dir, 'ca.crt'), tlsCert: path.join(dir, 'stranger.crt'),
                            tlsKey: path.join(dir, 'stranger.key')}]) {
      const error = await rejection(connect(options).listModels({deadlineMs: 5000}));
      assert.equal(error.code, status.UNAVAILABLE, `${JSON.stringify(options)}: ${error.message}`);
    }
  });

  test('the example passes --tls-ca, --tls-cert and --tls-key', async () => {
    const run = await runExample(['--target', server.target, '--tls-ca', path.join(dir, 'ca.crt'),
                                  '--tls-cert', path.join(dir, 'client.crt'),
                                  '--tls-key', path.join(dir, 'client.key')]);
    assert.match(run.output, /health: SERVING/);
  });
});

describe('option errors', () => {
  // Construction fails before any connection: the target need not exist.
  const make = (options) => () => new LayerClient('127.0.0.1:1', options);

  test('a certificate without its key, or a key without its certificate', () => {
    assert.throws(make({tlsCert: path.join(dir, 'client.crt')}),
                  {message: 'LayerClient: options tlsCert and tlsKey go together: tlsCert was given alone'});
    assert.throws(make({tlsKey: path.join(dir, 'client.key')}), /tlsKey was given alone/);
  });

  test('credentials together with tls* files', () => {
    const {credentials} = require('../lib');
    assert.throws(make({credentials: credentials.createInsecure(), tlsCa: path.join(dir, 'ca.crt')}),
                  /options credentials and tlsCa\/tlsCert\/tlsKey both/);
  });

  test('token and tokenFile both', () => {
    let error;
    try {
      make({token: TOKEN, tokenFile: path.join(dir, 'right')})();
    } catch (e) {
      error = e;
    }
    assert.equal(error.message, 'LayerClient: options token and tokenFile both given a token: give one');
    assertNoToken(errorText(error), 'the error');
  });

  test('an unreadable, empty or multi-line token file names the path, not the content', () => {
    const missing = path.join(dir, 'no-such-file');
    assert.throws(make({tokenFile: missing}),
                  {message: `LayerClient: tokenFile ${missing}: cannot read it (ENOENT)`});
    assert.throws(make({tokenFile: path.join(dir, 'empty')}), /tokenFile .*empty is empty$/);
    // pki.py's server file holds both tokens on separate lines: not a client's token.
    const tokens = path.join(dir, 'tokens');
    let error;
    try {
      make({tokenFile: tokens})();
    } catch (e) {
      error = e;
    }
    assert.match(error.message, /^LayerClient: tokenFile .*tokens must hold one token on one line/);
    assertNoToken(errorText(error), 'the error');
  });

  test('a token with a line break or space is refused without showing it', () => {
    let error;
    try {
      make({token: `${TOKEN}\n`})();
    } catch (e) {
      error = e;
    }
    assert.match(error.message, /^LayerClient: option token must be a non-empty string/);
    assertNoToken(errorText(error), 'the error');
    assert.throws(make({token: ''}), /option token must be a non-empty string/);
  });

  test('the example reports an unreadable token file', async () => {
    const run = await runExample(['--target', '127.0.0.1:1', '--token-file', path.join(dir, 'nope')]);
    assert.equal(run.code, 1, run.output);
    assert.match(run.output, /error: LayerClient: tokenFile .*nope: cannot read it \(ENOENT\)/);
  });
});
