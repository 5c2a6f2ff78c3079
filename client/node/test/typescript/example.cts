// The same declarations as CommonJS TypeScript sees them through `require`.
import layerserve = require('layerserve-client');

export async function firstModel(address: string): Promise<string> {
  const client = new layerserve.LayerClient(address, {retry: false});
  const [model] = await client.listModels();
  client.close();
  const t: layerserve.Tensor = layerserve.toTensor([1, 2, 3, 4], [2, 2], 'FLOAT16');
  return `${model.name} ${model.num_layers} ${layerserve.fromTensor(t)[3]}`;
}
