#!/usr/bin/env python3
"""Checks that the names the project's Markdown gives still name something real.
Every Markdown file of the tree (README.md, docs/**, client/**, deploy/**, ...) is
read; a finding is printed as FILE:LINE: NAME (why). Four kinds of drift:

- paths: a repository path in code (a code span or a code block) whose first part
  is a top-level folder of the tree (`client/cpp/client.h`, `deploy/k8s/base`)
  must exist, in the tree, relative to the doc, or (docs/clients/X.md) in
  client/X; with more than two parts, only when its first two name a folder (so a
  path inside an installed package is not taken for the tree's). A `build/...`
  path must exist in the build directory (the one CTest runs against) or be an
  output the CMake files declare (an executable in its folder or its
  RUNTIME_OUTPUT_DIRECTORY, a ${CMAKE_CURRENT_BINARY_DIR}/... path, a build/...
  path a script under scripts/ writes). Paths with
  placeholders (<...>, {...}, $X, ...), git tags (client/go/v0.1.0) and folders the
  doc's own commands make (mkdir -p) are skipped; globs (*) must match something.
- flags: a command in code that runs one of our binaries (`layerserve`,
  `layerserve-cli`, `layerserve-bench`, by name or path, or the layerserve image
  after `docker run` / `podman run`) may only pass flags that binary's --help
  names; so may the first cell of a Markdown table row that starts with a `--flag`
  (a flag table), against the flags of any of the three. Flags of other programs
  (cmake, pip, kubectl, docker's own) are not checked.
- metrics: a name `layerserve_...` that looks like a metric (followed by { or [,
  ending in a Prometheus suffix such as _total, _seconds, _bytes, or sharing its
  first or last word with a registered metric; CMake targets such as
  layerserve_block_bench are not metrics) must be registered in server/
  (BuildCounter() ... .Name("layerserve_...")); histograms add _bucket, _sum and
  _count. A name ending in _ or followed by * is a prefix and must start some
  metric.
- citations: no Markdown file and no source file (code, scripts, CMake, YAML...;
  not client/go/gen, which follows the proto) may cite a design document or
  numbered issues of a tracker that are not in the repository: they say the fact.

Usage: tests/docs/check_names.py [--build-dir DIR] [SOURCE_DIR]
Exits 1 listing every finding; 0 when there is none.
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

FENCE = re.compile(r"^ {0,3}(```|~~~)")
SPAN = re.compile(r"(`+)(.+?)\1")
SKIP_DIRS = {".git", "build", "node_modules", "__pycache__", "_deps", "third_party"}
BINARIES = ("layerserve", "layerserve-cli", "layerserve-bench")

# Written so that this file does not match itself.
CITATIONS = [
    (re.compile(r"\bDESIGN" + r"\.md\b"), "cites a design document not in the repository"),
    (re.compile(r"\b[Ii]ssue" + r" #?[0-9]+"), "cites an issue of a tracker not in the repository"),
]
SOURCE_EXTS = (".cc", ".h", ".hpp", ".cpp", ".c", ".py", ".go", ".js", ".mjs", ".cjs",
               ".ts", ".sh", ".cmake", ".proto", ".yaml", ".yml", ".toml", ".md", ".json",
               ".txt", ".cfg", ".in")
SOURCE_NAMES = ("Dockerfile", "CMakeLists.txt")

METRIC = re.compile(r"(?<![\w$.\-/])layerserve_[a-z0-9_]+")
METRIC_SUFFIXES = ("_total", "_seconds", "_bytes", "_bucket", "_sum", "_count", "_info",
                   "_ratio", "_nats")
REGISTERED = re.compile(r"Build(Counter|Gauge|Histogram|Summary)\(\)\s*"
                        r"\.Name\(\"(layerserve_\w+)\"\)")
CMAKE_TARGET = re.compile(r"\b(?:add_executable|add_library|add_custom_target)\(\s*(\w+)"
                          r"|\badd_test\(\s*NAME\s+(\w+)")


# ---------------------------------------------------------------- the tree
def walk(source_dir, want):
    """Relative paths below source_dir (sorted) for which want(name) holds,
    skipping build trees, VCS data and installed packages."""
    found = []
    for root, dirs, names in os.walk(source_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")
                         and not d.startswith("build-"))
        for name in sorted(names):
            if want(name):
                found.append(os.path.relpath(os.path.join(root, name), source_dir))
    return found


def markdown_files(source_dir):
    return walk(source_dir, lambda n: n.endswith(".md"))


def code_segments(text):
    """(line, kind, code) for the code of a Markdown text: kind 'block' for a
    logical line of a fenced block (lines ending in a backslash joined), 'span'
    for a code span, 'row' for a table row's first cell."""
    out, fenced, pending, start = [], None, "", 0
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fenced:
            if m and m.group(1) == fenced:
                fenced = None
                if pending:
                    out.append((start, "block", pending))
                    pending = ""
                continue
            if not pending:
                start = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
            else:
                out.append((start, "block", pending + line))
                pending = ""
            continue
        if m:
            fenced = m.group(1)
            continue
        for s in SPAN.finditer(line):
            out.append((number, "span", s.group(2).strip()))
        if line.lstrip().startswith("|"):
            cells = line.strip().strip("|").split("|")
            if cells and re.match(r"\s*`--", cells[0]):
                out.append((number, "row", cells[0]))
    return out


# ---------------------------------------------------------------- paths
PLACEHOLDER = re.compile(r"[<>{}$]|\.\.\.|\bNAME\b|\bX\b|\bVERSION\b|/v(\d|VERSION)[^/]*$")
TOKEN_SPLIT = re.compile(r"[\s;|&()=,\"'`]+|:(?=[\w.])")


def path_candidates(code, top_level, source_dir):
    """Tokens of code that name a repository path: the first part a top-level
    folder of the tree (or build/), and the first two parts an existing folder
    when there are more than two (so a path inside an installed package, like
    proto/grpc/..., is not taken for one of the tree's)."""
    for token in TOKEN_SPLIT.split(code):
        if PLACEHOLDER.search(token):  # before the trailing "..." is stripped below
            continue
        token = token.strip().rstrip(".,:;)!?")
        if token.startswith("./"):
            token = token[2:]
        token = re.sub(r"(:\d+(-\d+)?|#L\d+(-L\d+)?)$", "", token)
        if "/" not in token or "://" in token or PLACEHOLDER.search(token):
            continue
        parts = token.rstrip("/").split("/")
        if parts[0] == "build":
            yield token
        elif parts[0] in top_level and (
                len(parts) <= 2 or os.path.isdir(os.path.join(source_dir, *parts[:2]))):
            yield token


def made_paths(text):
    """Paths a doc's own commands create (mkdir -p PATH): they need not exist."""
    made = set()
    for m in re.finditer(r"\bmkdir\s+(?:-p\s+)?([^\s;&|]+)", text):
        made.add(m.group(1).strip("/"))
    return made


BINARY_DIR_VAR = re.compile(r"\$\{(CMAKE_CURRENT_BINARY_DIR|PROJECT_BINARY_DIR|CMAKE_BINARY_DIR)\}"
                            r"/([\w./+-]+)")
ADD_EXECUTABLE = re.compile(r"\badd_executable\(\s*([\w.+-]+)")
OUTPUT_DIRECTORY = re.compile(r"set_target_properties\(([^)]*?)\bPROPERTIES\b[^)]*?"
                              r"RUNTIME_OUTPUT_DIRECTORY\s+"
                              r"\$\{(?:PROJECT|CMAKE)_BINARY_DIR\}/([\w./-]+)")


def build_outputs(source_dir):
    """Paths (relative to the build directory) the CMake files declare: each
    executable (in its folder's build folder, or the RUNTIME_OUTPUT_DIRECTORY set
    for it) and each ${CMAKE_CURRENT_BINARY_DIR}/... or ${PROJECT_BINARY_DIR}/...
    they name, and the build/... paths the scripts under scripts/ name. So a
    build/ path can be checked without a full build."""
    executables, moved, outputs = {}, {}, set()
    for rel in walk(source_dir, lambda n: n == "CMakeLists.txt" or n.endswith(".cmake")):
        folder = os.path.dirname(rel)
        with open(os.path.join(source_dir, rel), encoding="utf-8") as f:
            text = f.read()
        for name in ADD_EXECUTABLE.findall(text):
            executables[name] = folder
        for targets, directory in OUTPUT_DIRECTORY.findall(text):
            for name in targets.split():
                moved[name] = directory
        for var, path in BINARY_DIR_VAR.findall(text):
            if "${" not in path:
                outputs.add(os.path.normpath(os.path.join(folder, path) if var ==
                                             "CMAKE_CURRENT_BINARY_DIR" else path))
    for name, folder in executables.items():
        outputs.add(os.path.normpath(os.path.join(moved.get(name, folder), name)))
    # What the scripts write below build/ (scripts/test's build/test-results).
    for rel in walk(os.path.join(source_dir, "scripts"), lambda n: True):
        try:
            with open(os.path.join(source_dir, "scripts", rel), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for path in re.findall(r"(?<![\w.-])build/([\w.+-]+(?:/[\w.+-]+)*)", text):
            outputs.add(os.path.normpath(path))
    return outputs


def path_exists(token, source_dir, build_dir, bases=(), made=(), outputs=()):
    """token exists in the tree (or, for build/..., in build_dir or among the
    outputs the CMake files declare), or relative to one of bases (the doc's
    folder, the client package it describes), or below a folder the doc's commands
    make."""
    if any(token.strip("/") == m or token.startswith(m + "/") for m in made):
        return True
    if token.startswith("build/"):
        if build_dir is None:
            return True
        roots, token = [build_dir], token[len("build/"):]
        declared = os.path.normpath(token)
        if any(o == declared or o.startswith(declared + "/") for o in outputs):
            return True
    else:
        roots = [source_dir] + [os.path.join(source_dir, b) for b in bases]
    for root in roots:
        full = os.path.join(root, token)
        if glob.glob(full) if any(c in token for c in "*?[") else os.path.exists(full):
            return True
    return False


def bases_of(rel):
    """Folders a doc's paths may be relative to besides the root: its own, and for
    docs/clients/X.md the package client/X."""
    bases = [os.path.dirname(rel)]
    m = re.match(r"docs/clients/(\w+)\.md$", rel)
    if m:
        bases.append(os.path.join("client", m.group(1)))
    return bases


# ---------------------------------------------------------------- flags
FLAG = re.compile(r"^--([a-zA-Z][\w-]*)")
COMMAND_SPLIT = re.compile(r"\|\||&&|[|;()`]|\$\(")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
WRAPPERS = {"sudo", "exec", "nohup", "time", "env", "command"}
IMAGE = re.compile(r"(?:^|/)layerserve(?::[\w.\-]+)?$")
# docker/podman run options that take a value (the word after them is no image).
RUN_VALUE_OPTIONS = {"-p", "--publish", "-v", "--volume", "-e", "--env", "--name", "-n",
                     "--network", "--hostname", "-h", "-w", "--workdir", "-u", "--user",
                     "--mount", "--env-file", "--entrypoint", "--platform", "-m",
                     "--memory", "--cpus", "--label", "-l", "--pull", "--add-host"}


def help_flags(build_dir):
    """{binary: set of flag names} from each binary's --help in build_dir/bin."""
    flags = {}
    for binary in BINARIES:
        path = os.path.join(build_dir, "bin", binary)
        if not os.access(path, os.X_OK):
            raise SystemExit(f"check_names: {path} is not built (run ./scripts/build)")
        run = subprocess.run([path, "--help"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=30)
        flags[binary] = {f.replace("_", "-") for f in re.findall(r"--([a-z][\w-]*)", run.stdout)}
    return flags


def aliases_of(text):
    """{'$VAR': binary} for each shell variable a doc sets to one of our binaries
    (cli=build/bin/layerserve-cli), so that `$cli health` is checked too."""
    found = {}
    assignment = r"(?m)^\s*(?:export\s+)?(\w+)=\S*?\b(layerserve(?:-cli|-bench)?)\s*$"
    for m in re.finditer(assignment, text):
        found["$" + m.group(1)] = found["${%s}" % m.group(1)] = m.group(2)
    return found


def invoked_flags(code, aliases=None):
    """(binary, flag) for each flag passed to one of our binaries in code: a command
    whose first word (after VAR=value assignments and sudo/exec/env...) is
    layerserve, layerserve-cli or layerserve-bench (or a path to one), or
    `docker run` / `podman run` of an image named layerserve (its flags go to the
    server). A `#` comment ends the code."""
    code = re.sub(r"(^|\s)#.*$", "", code)
    for command in COMMAND_SPLIT.split(code):
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        while words and (ENV_ASSIGNMENT.match(words[0]) or words[0] in WRAPPERS):
            words = words[1:]
        if not words:
            continue
        binary, args = os.path.basename(words[0]), words[1:]
        binary = (aliases or {}).get(words[0], binary)
        if binary in ("docker", "podman") and args[:1] == ["run"]:
            args, binary = args[1:], None
            for i, word in enumerate(args):
                if word.startswith("-"):
                    continue
                if i > 0 and args[i - 1] in RUN_VALUE_OPTIONS:
                    continue
                if IMAGE.search(word):
                    binary, args = "layerserve", args[i + 1:]
                break
        if binary not in BINARIES:
            continue
        for word in args:
            if word in (">", "<", "2>", "2>&1"):
                break
            f = FLAG.match(word)
            if f:
                yield binary, f.group(1).replace("_", "-")


# ---------------------------------------------------------------- metrics
def registered_metrics(source_dir):
    """Every series name the server can export: the registered families, and a
    histogram's _bucket/_sum/_count (a summary's _sum/_count)."""
    names = set()
    for rel in walk(os.path.join(source_dir, "server"), lambda n: n.endswith((".cc", ".h"))):
        with open(os.path.join(source_dir, "server", rel), encoding="utf-8") as f:
            for kind, name in REGISTERED.findall(f.read()):
                names.add(name)
                if kind == "Histogram":
                    names.update(name + s for s in ("_bucket", "_sum", "_count"))
                elif kind == "Summary":
                    names.update(name + s for s in ("_sum", "_count"))
    return names


def cmake_targets(source_dir):
    names = set()
    for rel in walk(source_dir, lambda n: n == "CMakeLists.txt" or n.endswith(".cmake")):
        with open(os.path.join(source_dir, rel), encoding="utf-8") as f:
            for a, b in CMAKE_TARGET.findall(f.read()):
                names.add(a or b)
    return names


def metric_findings(rel, text, metrics, targets):
    last_words = {m.rsplit("_", 1)[-1] for m in metrics}
    first_words = {m.split("_")[1] for m in metrics}
    for number, line in enumerate(text.split("\n"), 1):
        for m in METRIC.finditer(line):
            name, after = m.group(0), line[m.end():m.end() + 1]
            if name in targets or name in metrics:
                continue
            if name.endswith("_") or after == "*":
                if not any(x.startswith(name) for x in metrics):
                    yield f"{rel}:{number}: {name} (no registered metric starts with it)"
                continue
            looks_like_metric = (after in ("{", "[") or name.endswith(METRIC_SUFFIXES)
                                 or name.rsplit("_", 1)[-1] in last_words
                                 or name.split("_")[1] in first_words)
            if looks_like_metric:
                yield f"{rel}:{number}: {name} (not a metric the server registers)"


# ---------------------------------------------------------------- all
def citation_findings(source_dir):
    """Citations of a design document or tracker issues in docs and code."""
    def want(name):
        return (name.endswith(SOURCE_EXTS) or name in SOURCE_NAMES
                or name.startswith("Dockerfile") or "." not in name)

    for rel in walk(source_dir, want):
        if "/gen/" in rel or rel.startswith("client/go/gen"):
            continue  # generated: follows the proto
        try:
            with open(os.path.join(source_dir, rel), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if "." not in os.path.basename(rel) and not text.startswith("#!") \
                and not os.path.basename(rel).startswith("Dockerfile"):
            continue  # a file without extension counts when it is a script
        for number, line in enumerate(text.split("\n"), 1):
            for pattern, why in CITATIONS:
                m = pattern.search(line)
                if m:
                    yield f"{rel}:{number}: {m.group(0)} ({why}: write the fact itself)"


def findings(source_dir, build_dir=None, flags=None):
    """Every finding, FILE:LINE: NAME (why). flags: {binary: set of flag names}
    (from the binaries' --help when None and build_dir is set; flags are not
    checked when both are None)."""
    if flags is None and build_dir is not None:
        flags = help_flags(build_dir)
    top_level = {n for n in os.listdir(source_dir) if not n.startswith(".")
                 and n not in SKIP_DIRS and os.path.isdir(os.path.join(source_dir, n))}
    metrics = registered_metrics(source_dir)
    targets = cmake_targets(source_dir)
    outputs = build_outputs(source_dir)
    out = []
    for rel in markdown_files(source_dir):
        with open(os.path.join(source_dir, rel), encoding="utf-8") as f:
            text = f.read()
        bases, made, aliases = bases_of(rel), made_paths(text), aliases_of(text)
        for number, kind, code in code_segments(text):
            where = f"{rel}:{number}"
            if kind != "row":
                for token in path_candidates(code, top_level, source_dir):
                    if not path_exists(token, source_dir, build_dir, bases, made, outputs):
                        place = "the build directory" if token.startswith("build/") else "the tree"
                        out.append(f"{where}: {token} (no such path in {place})")
            if flags is None:
                continue
            if kind == "row":
                every = set().union(*flags.values())
                for name in re.findall(r"`--([a-zA-Z][\w-]*)", code):
                    if name.replace("_", "-") not in every:
                        out.append(f"{where}: --{name} (in a flag table; no binary of "
                                   f"ours has it in its --help)")
            else:
                for binary, name in invoked_flags(code, aliases):
                    if name not in flags[binary] and name not in ("help", "version"):
                        out.append(f"{where}: --{name} (passed to {binary}, which has no "
                                   f"such flag in its --help)")
        out.extend(metric_findings(rel, text, metrics, targets))
    out.extend(citation_findings(source_dir))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", help="the build directory (paths build/..., "
                        "and bin/ for the --help of our binaries)")
    parser.add_argument("source_dir", nargs="?", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    args = parser.parse_args(argv)
    source_dir = os.path.abspath(args.source_dir)
    files = markdown_files(source_dir)
    if not files:
        print(f"check_names: no Markdown under {source_dir}")
        return 1
    found = findings(source_dir, args.build_dir)
    for line in found:
        print(line)
    print(f"check_names: {len(found)} finding(s) in {len(files)} Markdown file(s) and the "
          f"code comments" + ("" if args.build_dir else " (no --build-dir: build/ paths "
                              "and flags not checked)"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
