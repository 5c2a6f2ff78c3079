'use strict';
// The package as a user gets it: `npm pack` here, `npm install` of the tarball into an
// empty npm project in a temporary directory (outside the repository, offline: the
// dependencies come from the npm cache the build filled), then, from that project, the
// packaged example through `require`, `import` and its bin command against the real
// layerserve (the built-in demo model), recording every .proto file read (all inside the
// installed package), and `tsc --noEmit` on a TypeScript example using index.d.ts.
// Env (CTest node_client_package): LAYERSERVE_SERVER, LAYERSERVE_NPM (npm),
// LAYERSERVE_TSC (typescript's bin/tsc, from the build tree's node_modules).
const {describe, before, after, test} = require('node:test');
const assert = require('node:assert/strict');
const {execFile} = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {promisify} = require('node:util');
const {startServer} = require('./server');

const run = promisify(execFile);
const SOURCE = path.resolve(__dirname, '..');
const {version: VERSION} = require('../package.json');
const NPM = process.env.LAYERSERVE_NPM || 'npm';
const STEPS = 5;
const SUMMARY = new RegExp(`^ok: \\d+ model\\(s\\); Normalize matches; session on demo layers ` +
                           `0\\.\\.\\d+: prefill 4 \\+ ${STEPS} steps, length ${4 + STEPS}; closed\\n$`);

// The environment of every command: nothing that points at the repository's protos or
// node_modules.
const env = {...process.env};
for (const name of ['LAYERSERVE_PROTO_DIR', 'LAYERSERVE_HEALTH_PROTO', 'NODE_PATH']) {
  delete env[name];
}

describe('the packed layerserve-client installed into an empty project', () => {
  let tmp;
  let project;
  let installed;
  let packed;
  let server;

  before(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'layerserve-node-package-'));
    project = path.join(tmp, 'project');
    installed = path.join(project, 'node_modules', 'layerserve-client');
    fs.mkdirSync(path.join(tmp, 'pack'));
    const {stdout} = await run(NPM, ['pack', '--json', '--pack-destination',
                                     path.join(tmp, 'pack')], {cwd: SOURCE, env});
    [packed] = JSON.parse(stdout);
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, 'package.json'),
                     JSON.stringify({name: 'empty-project', version: '1.0.0', private: true}));
    await run(NPM, ['install', path.join(tmp, 'pack', packed.filename), '--offline',
                    '--no-audit', '--no-fund', '--loglevel=error'],
              {cwd: project, env});
    server = await startServer();
  });

  after(async () => {
    if (server) assert.equal(await server.stop(), 0, server.output());
    if (tmp) fs.rmSync(tmp, {recursive: true, force: true});
  });

  test('npm pack makes layerserve-client-VERSION.tgz with the protos, types and examples',
       () => {
    assert.equal(packed.filename, `layerserve-client-${VERSION}.tgz`);
    const files = packed.files.map((f) => f.path);
    for (const file of ['package.json', 'index.d.ts', 'lib/index.js', 'lib/index.mjs',
                        'examples/session_decode.js', 'examples/session_decode.mjs',
                        'proto/layerserve/v1/layerserve.proto',
                        'proto/grpc/health/v1/health.proto']) {
      assert.ok(files.includes(file), `${file} not in the tarball: ${files}`);
    }
    // The copies are made for the tarball only (postpack): the source tree keeps none.
    assert.equal(fs.existsSync(path.join(SOURCE, 'proto')), false);
    // The installed protos are the repository's, unchanged.
    assert.equal(fs.readFileSync(path.join(installed, 'proto/layerserve/v1/layerserve.proto'), 'utf8'),
                 fs.readFileSync(path.join(SOURCE, '../../proto/layerserve/v1/layerserve.proto'), 'utf8'));
  });

  // Runs the example (command and its first arguments) in the project, recording the
  // .proto files read; checks the exit code (run rejects on another), the summary line
  // and that every .proto read is the package's.
  async function runExample(command, ...args) {
    const record = path.join(tmp, `protos-${Math.random().toString(36).slice(2)}.txt`);
    fs.writeFileSync(record, '');
    const preload = JSON.stringify(path.join(__dirname, 'record_proto_reads.js'));
    const {stdout, stderr} = await run(
        command, [...args, '--address', server.target, '--steps', String(STEPS)],
        {cwd: project, env: {...env, LAYERSERVE_RECORD_PROTOS: record,
                             NODE_OPTIONS: `${env.NODE_OPTIONS ?? ''} --require ${preload}`}});
    assert.match(stdout, SUMMARY, stderr);
    const read = fs.readFileSync(record, 'utf8').trim().split('\n');
    assert.deepEqual([...new Set(read)].sort(), [
      path.join(installed, 'proto/grpc/health/v1/health.proto'),
      path.join(installed, 'proto/layerserve/v1/layerserve.proto'),
    ]);
  }

  test('the example runs through require', async () => {
    await runExample(process.execPath, path.join(installed, 'examples/session_decode.js'));
  });

  test('the example runs through import', async () => {
    await runExample(process.execPath, path.join(installed, 'examples/session_decode.mjs'));
  });

  test('the example runs as the layerserve-client-example command', async () => {
    // node_modules/.bin's link, run by its #! line as `npx layerserve-client-example` would.
    await runExample(path.join(project, 'node_modules/.bin/layerserve-client-example'));
  });

  test('require and import give the same exports; the protos are the package\'s', async () => {
    const check = (kind) => `
      const names = Object.keys(lib).sort();
      if (names.length < 15 || lib.VERSION !== ${JSON.stringify(VERSION)}) throw new Error(names);
      console.log(JSON.stringify({names, protoDir: lib.DEFAULT_PROTO_DIR,
                                  health: lib.DEFAULT_HEALTH_PROTO, kind: '${kind}'}));`;
    const cjs = await run(process.execPath,
                          ['-e', `const lib = require('layerserve-client');${check('require')}`],
                          {cwd: project, env});
    const esm = await run(process.execPath,
                          ['--input-type=module', '-e',
                           `import * as all from 'layerserve-client';
                            const {default: _, ...lib} = all;${check('import')}`],
                          {cwd: project, env});
    const a = JSON.parse(cjs.stdout);
    const b = JSON.parse(esm.stdout);
    assert.deepEqual(b.names, a.names);
    assert.equal(a.protoDir, path.join(installed, 'proto'));
    assert.equal(a.health, path.join(installed, 'proto/grpc/health/v1/health.proto'));
    assert.equal(b.protoDir, a.protoDir);
  });

  test('tsc --noEmit accepts the TypeScript example against index.d.ts', async () => {
    assert.ok(process.env.LAYERSERVE_TSC, 'LAYERSERVE_TSC is not set (typescript\'s bin/tsc)');
    const tsc = path.resolve(process.env.LAYERSERVE_TSC);
    const dir = path.join(project, 'ts');
    fs.mkdirSync(dir);
    for (const file of fs.readdirSync(path.join(__dirname, 'typescript'))) {
      fs.copyFileSync(path.join(__dirname, 'typescript', file), path.join(dir, file));
    }
    // tsc prints its errors on stdout; a failure rejects with them.
    try {
      await run(process.execPath, [tsc, '-p', path.join(dir, 'tsconfig.json')], {cwd: dir, env});
    } catch (error) {
      assert.fail(`tsc failed:\n${error.stdout}${error.stderr}`);
    }
  });
});
