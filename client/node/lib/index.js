'use strict';
// layerserve's Node.js client: a LayerService wrapper and tensor helpers. The types are
// in ../index.d.ts; ESM's `import` gets the same objects through index.mjs.
module.exports = {
  ...require('./client'),
  ...require('./tensor'),
  ...require('./proto'),
  // The package's version; package.json holds the one literal.
  VERSION: require('../package.json').version,
};
