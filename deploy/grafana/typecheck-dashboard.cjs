// Type-checks a Grafana dashboard JSON against @grafana/schema's Dashboard type,
// offline:  NODE_PATH=.../node_modules node typecheck-dashboard.cjs dashboard.json
// The JSON becomes a TypeScript object literal, so the compiler checks every field
// (misspelt ones included). Panels are held to their plugin's own option types
// (timeseries, stat) and targets to the Prometheus query fields Grafana reads,
// which @grafana/schema leaves open. Prints "valid: N panels"; exits 1 on errors.
"use strict";
const fs = require("fs");
const { typecheck } = require("../typecheck.cjs");

const dashboard = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const source = `
import type { Dashboard, Panel, RowPanel, DataSourceRef } from "@grafana/schema";
import type * as timeseries from "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";
import type * as stat from "@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen";

// A Prometheus query as Grafana's Prometheus data source reads it.
interface PrometheusTarget {
  refId: string;
  expr: string;
  datasource?: DataSourceRef;
  legendFormat?: string;
  instant?: boolean;
  range?: boolean;
  format?: "time_series" | "table" | "heatmap";
  interval?: string;
  hide?: boolean;
  editorMode?: "code" | "builder";
}
// JSON holds enum members as their string values ("line", not GraphDrawStyle.Line).
type Json<T> = T extends string ? \`\${T}\`
  : T extends (infer U)[] ? Json<U>[]
  : T extends object ? { [K in keyof T]: Json<T[K]> }
  : T;
type PluginPanel<Type extends string, Options, FieldConfig> =
  Omit<Panel<Json<Options>, Json<FieldConfig>>, "type" | "options" | "targets"> &
  { type: Type; options?: Json<Options>; targets: PrometheusTarget[] };
type LayerservePanel =
  | PluginPanel<"timeseries", timeseries.Options, timeseries.FieldConfig>
  | PluginPanel<"stat", stat.Options, {}>
  | (Omit<RowPanel, "panels"> & { panels: LayerservePanel[] });

export const typed: Omit<Dashboard, "panels"> & { panels: LayerservePanel[] } =
${JSON.stringify(dashboard, null, 2)};
`;
const errors = typecheck("dashboard", source);
if (errors.length > 0) {
  console.error(errors.join("\n"));
  process.exit(1);
}
console.log(`valid: ${dashboard.panels.length} panels`);
