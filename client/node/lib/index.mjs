// `import ... from 'layerserve-client'`: the CommonJS module's exports (the same
// objects `require` gives), named for ESM; the default export is the whole module.
import client from './index.js';

export default client;
export const {
  LayerClient, DEFAULT_RETRY, SESSION_HEADER, status, credentials,
  toTensor, fromTensor, numElements, floatToBfloat16Bits, bfloat16BitsToFloat,
  floatToHalfBits, halfBitsToFloat,
  loadLayerServe, loadHealth, LOADER_OPTIONS, DEFAULT_PROTO_DIR, DEFAULT_HEALTH_PROTO,
  VERSION,
} = client;
