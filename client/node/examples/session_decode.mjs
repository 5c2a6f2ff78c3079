#!/usr/bin/env node
// session_decode.js's example through ESM: the package comes in by `import`, its
// "import" export (lib/index.mjs).
import * as layerserve from 'layerserve-client';
import example from './session_decode.js';

process.exitCode = await example.main(layerserve, process.argv.slice(2));
