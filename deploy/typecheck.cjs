// Type-checks TypeScript source text against the npm packages of
// deploy/package.json with the TypeScript compiler API, so a JSON or YAML document
// written as an object literal gets the compiler's checks, excess (misspelt)
// properties included, which the packages' runtime schemas accept silently.
// Used by k8s/validate.cjs and grafana/typecheck-dashboard.cjs; needs NODE_PATH
// set to the node_modules folder those packages were installed in.
"use strict";
const fs = require("fs");
const path = require("path");

// Returns the compiler's diagnostics as "file:line: message" strings ([] = OK).
function typecheck(name, source) {
  const ts = require("typescript");
  const nodeModules = process.env.NODE_PATH.split(path.delimiter)[0];
  // Beside node_modules, so imports of the packages resolve as in a project.
  const dir = path.join(path.dirname(nodeModules), "typecheck");
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, name + ".ts");
  fs.writeFileSync(file, source);
  const program = ts.createProgram([file], {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    target: ts.ScriptTarget.ES2020,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
  });
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const text = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    if (!d.file) return text;
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    return `${path.basename(d.file.fileName)}:${line + 1}: ${text}`;
  });
}

module.exports = { typecheck };
