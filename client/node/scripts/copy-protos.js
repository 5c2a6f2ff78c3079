#!/usr/bin/env node
'use strict';
// npm's prepack and postpack: copies the .proto files the client loads into the
// package's proto/ folder (gitignored) before `npm pack` makes the tarball, and removes
// them after, so an installed package reads nothing outside itself while the
// repository keeps one copy of each .proto. lib/proto.js in the source tree never
// reads these copies.
//   node scripts/copy-protos.js          copy (prepack)
//   node scripts/copy-protos.js --clean  remove (postpack)
const fs = require('node:fs');
const path = require('node:path');

const PACKAGE = path.resolve(__dirname, '..');
const TARGET = path.join(PACKAGE, 'proto');
// Target path in the package <- source file. The health service comes from Debian's
// grpc-proto package (scripts/install-deps installs it).
const FILES = {
  'layerserve/v1/layerserve.proto':
      path.resolve(PACKAGE, '..', '..', 'proto', 'layerserve', 'v1', 'layerserve.proto'),
  'grpc/health/v1/health.proto': process.env.LAYERSERVE_HEALTH_PROTO ||
      '/usr/share/grpc-proto/grpc/health/v1/health.proto',
};

fs.rmSync(TARGET, {recursive: true, force: true});
if (process.argv[2] !== '--clean') {
  for (const [to, from] of Object.entries(FILES)) {
    if (!fs.existsSync(from)) {
      console.error(`copy-protos: ${from} is missing (run npm pack in the repository's ` +
                    'client/node, with grpc-proto installed)');
      process.exit(1);
    }
    fs.mkdirSync(path.dirname(path.join(TARGET, to)), {recursive: true});
    fs.copyFileSync(from, path.join(TARGET, to));
  }
}
