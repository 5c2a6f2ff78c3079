'use strict';
// Loads layerserve.proto and grpc.health.v1's health.proto at run time with
// @grpc/proto-loader: no generated code to keep in step with the .proto.
//
// Loader options, the conventions every caller of this package sees:
// - keepCase: true. Field names are the .proto's snake_case (`hidden_states`,
//   `output_dtype`), the same as in the proto comments and every other language's docs.
// - longs: Number. int64 fields (shapes, positions, lengths) are plain JS numbers;
//   exact below 2^53, far above any tensor dimension or position. Requests may pass
//   numbers (or numeric strings).
// - enums: String. Responses carry enum names ('FLOAT32', 'READY', 'RMS_NORM');
//   requests accept names or numbers.
// - defaults: true. Responses have every field: scalars at their zero value, arrays
//   empty, unset message fields null (e.g. ModelInfo.rope of GPT-2).
// - oneofs: true. A message with a oneof gets a property naming the field that is
//   set (PositionalEncodeRequest.method === 'rope').
// proto3 `optional` fields (epsilon, theta, causal...) are sent only when defined.
const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const LOADER_OPTIONS = {keepCase: true, longs: Number, enums: String, defaults: true,
                        oneofs: true};

// Where the .proto files are unless the caller says otherwise. An installed package
// reads its own copies in proto/ (scripts/copy-protos.js puts them in the tarball) and
// nothing outside itself. The source tree, told apart by scripts/ (which the tarball
// leaves out: package.json "files"), reads the repository's proto/ (this file is
// client/node/lib/proto.js) and Debian's grpc-proto package, never a copy that a pack
// may be writing at that moment.
const PACKAGE = path.resolve(__dirname, '..');
const SOURCE_TREE = fs.existsSync(path.join(PACKAGE, 'scripts', 'copy-protos.js'));
const DEFAULT_PROTO_DIR = process.env.LAYERSERVE_PROTO_DIR ||
    (SOURCE_TREE ? path.resolve(PACKAGE, '..', '..', 'proto') : path.join(PACKAGE, 'proto'));
const DEFAULT_HEALTH_PROTO = process.env.LAYERSERVE_HEALTH_PROTO ||
    (SOURCE_TREE ? '/usr/share/grpc-proto/grpc/health/v1/health.proto' :
        path.join(PACKAGE, 'proto', 'grpc', 'health', 'v1', 'health.proto'));

// Parsing a .proto takes milliseconds: each file is loaded once per process.
const loaded = new Map();
function once(key, load) {
  if (!loaded.has(key)) loaded.set(key, load());
  return loaded.get(key);
}

// The `layerserve.v1` namespace: service constructor LayerService and the messages.
function loadLayerServe(protoDir = DEFAULT_PROTO_DIR) {
  return once(`layerserve:${protoDir}`, () => {
    const definition = protoLoader.loadSync('layerserve/v1/layerserve.proto',
                                            {...LOADER_OPTIONS, includeDirs: [protoDir]});
    return grpc.loadPackageDefinition(definition).layerserve.v1;
  });
}

// The `grpc.health.v1` namespace: service constructor Health.
function loadHealth(healthProto = DEFAULT_HEALTH_PROTO) {
  return once(`health:${healthProto}`, () => {
    const definition = protoLoader.loadSync(healthProto, LOADER_OPTIONS);
    return grpc.loadPackageDefinition(definition).grpc.health.v1;
  });
}

module.exports = {loadLayerServe, loadHealth, LOADER_OPTIONS, DEFAULT_PROTO_DIR,
                  DEFAULT_HEALTH_PROTO};
