'use strict';
// layerserve's Node.js client: a LayerService wrapper and tensor helpers.
module.exports = {
  ...require('./client'),
  ...require('./tensor'),
  ...require('./proto'),
};
