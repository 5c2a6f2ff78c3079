'use strict';
// Preloaded (node --require) by package.test.js into the installed example: appends the
// absolute path of every .proto file the process reads to the file named by
// LAYERSERVE_RECORD_PROTOS, so the test can check that all of them are inside the
// installed package. @grpc/proto-loader (protobufjs) reads each one with
// fs.readFileSync, looked up on the fs module at call time.
const fs = require('node:fs');
const path = require('node:path');

const record = process.env.LAYERSERVE_RECORD_PROTOS;
const readFileSync = fs.readFileSync;
fs.readFileSync = function(file, ...rest) {
  if (typeof file === 'string' && file.endsWith('.proto')) {
    fs.appendFileSync(record, `${path.resolve(file)}\n`);
  }
  return readFileSync.call(this, file, ...rest);
};
