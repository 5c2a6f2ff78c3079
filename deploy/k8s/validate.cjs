// Schema check of rendered Kubernetes manifests, offline:
//   kubectl kustomize deploy/k8s/base > all.yaml
//   NODE_PATH=.../node_modules node deploy/k8s/validate.cjs all.yaml
// Each object is validated twice: by kubernetes-models' JSON schemas (types,
// required fields, formats) and, as a TypeScript literal of the same package's
// interface, by the compiler, which also rejects unknown (misspelt) fields.
// Prints "valid KIND/NAME" per object; exits 1 on the first file with errors.
"use strict";
const fs = require("fs");
const yaml = require("js-yaml");
const { typecheck } = require("../typecheck.cjs");

// apiVersion -> the npm module with its models.
function modelModule(apiVersion) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}`;
  }
  return `kubernetes-models/${apiVersion}`;
}

const docs = yaml.loadAll(fs.readFileSync(process.argv[2], "utf8")).filter(Boolean);
const errors = [];
const imports = [];
const literals = [];
docs.forEach((doc, i) => {
  const what = `${doc.kind}/${doc.metadata && doc.metadata.name}`;
  const module = modelModule(doc.apiVersion);
  let Model;
  try {
    Model = require(module)[doc.kind];
  } catch (e) {
    Model = undefined;
  }
  if (!Model) {
    errors.push(`${what}: no model for ${doc.apiVersion} ${doc.kind}`);
    return;
  }
  try {
    new Model(doc).validate();
  } catch (e) {
    errors.push(`${what}: ${e.message}`);
    return;
  }
  imports.push(`import type { I${doc.kind} as T${i} } from "${module}";`);
  literals.push(`// ${what}\nexport const o${i}: T${i} = ${JSON.stringify(doc, null, 2)};`);
});
if (errors.length === 0) {
  const diagnostics = typecheck("k8s", imports.join("\n") + "\n" + literals.join("\n"));
  errors.push(...diagnostics);
}
if (errors.length > 0) {
  console.error(errors.join("\n"));
  process.exit(1);
}
docs.forEach((doc) => console.log(`valid ${doc.kind}/${doc.metadata.name}`));
