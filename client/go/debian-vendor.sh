#!/usr/bin/env bash
# Makes MODULE_ROOT/vendor from Debian's Go sources, so that the module builds in
# module mode with no module proxy and no module cache (Go's vendor mode):
#
#   client/go/debian-vendor.sh MODULE_ROOT
#
# Debian bookworm ships grpc-go, protobuf-go and their dependencies as source trees
# under /usr/share/gocode/src (scripts/install-deps), not as a module cache. In
# vendor mode Go reads no module graph and checks no go.sum: it takes each package
# from vendor/ and the module of each from vendor/modules.txt, which must list the
# go.mod's requirements at the go.mod's versions. So the go.mod stays what a user with
# a proxy resolves (grpc v1.33.3, protobuf v1.28.1...), and the sources built are
# Debian's (where an indirect version differs, e.g. x/net, Debian's newer one).
#
# Every module MODULE_ROOT/go.mod requires gets vendor/<module> -> its source: the
# directory of a `replace X => DIR` in that go.mod (and then DIR/go.mod's own
# requirements are vendored too: a module under test, required by a user's module),
# else /usr/share/gocode/src/<module> (GOCODE names another tree). A module that is
# in neither fails with its name. vendor/ is replaced whole; the links are absolute.
set -euo pipefail
[ $# -eq 1 ] || {
  echo "usage: $0 MODULE_ROOT" >&2
  exit 2
}
root=$(cd "$1" && pwd)
gocode=${GOCODE:-/usr/share/gocode/src}

# "module version" for each requirement of go.mod $1 (both go.mod forms).
requires() {
  awk '/^require[ \t]*\(/ { block = 1; next }
       block && /^\)/ { block = 0; next }
       block && NF >= 2 && $1 !~ /^\/\// { print $1, $2; next }
       /^require[ \t]+[^( \t]/ { print $2, $3 }' "$1"
}

# "module directory" for each `replace module => directory` of go.mod $1 (a
# replacement by another module version is not vendored from Debian: not supported).
replaces() {
  awk '/^replace[ \t]*\(/ { block = 1; next }
       block && /^\)/ { block = 0; next }
       (block || /^replace[ \t]/) && /=>/ {
         line = $0; sub(/^replace[ \t]+/, "", line); split(line, side, /[ \t]*=>[ \t]*/)
         split(side[1], old, /[ \t]+/); split(side[2], new, /[ \t]+/)
         if (old[1] == "") { old[1] = old[2] }
         print old[1], new[1] }' "$1" | awk '$2 ~ /^(\/|\.\/|\.\.\/)/'
}

# The go directive of go.mod $1, if any. Some of Debian's repacked trees have no
# go.mod: then nothing is printed and modules.txt gets no "## go" line for that
# module, as `go mod vendor` writes for a module without one (a missing file is an
# expected case, not an error to hide).
go_version() { awk '$1 == "go" { print $2; exit }' "$1" 2>/dev/null || true; }

# The import paths of the packages in module $1's directory $2: directories with
# non-test .go files, as `go mod vendor` lists them (no testdata, no _ or . names,
# no nested module).
packages() {
  (cd "$2" && find -L . -mindepth 1 -type d \( -name testdata -o -name vendor -o -name '[._]*' \
    -o -exec test -e '{}/go.mod' ';' \) -prune -o -type f -name '*.go' ! -name '*_test.go' \
    -printf '%h\n') | sort -u | sed "s#^\.#$1#"
}

declare -A version source explicit
order=()
replaced=$(replaces "$root/go.mod")
add() { # module version explicit(0/1)
  [ -z "${version[$1]:-}" ] || return 0
  version[$1]=$2
  explicit[$1]=$3
  order+=("$1")
  local dir
  dir=$(awk -v m="$1" '$1 == m { print $2 }' <<<"$replaced")
  if [ -n "$dir" ]; then
    case "$dir" in /*) ;; *) dir="$root/$dir" ;; esac
    source[$1]=$(cd "$dir" && pwd)
  elif [ -d "$gocode/$1" ]; then
    source[$1]="$gocode/$1"
  else
    echo "debian-vendor.sh: module $1 $2 (required by $root/go.mod) is not in $gocode:" \
      "install its Debian package (golang-...-dev, scripts/install-deps)" >&2
    exit 1
  fi
}
while read -r m v; do add "$m" "$v" 1; done < <(requires "$root/go.mod")
# Then what the replaced modules require, as far as the go.mod does not say.
for ((i = 0; i < ${#order[@]}; i++)); do
  m=${order[$i]}
  [ "${source[$m]}" = "$gocode/$m" ] && continue
  while read -r r v; do add "$r" "$v" 0; done < <(requires "${source[$m]}/go.mod")
done

rm -rf "$root/vendor"
mkdir -p "$root/vendor"
for m in "${order[@]}"; do
  mkdir -p "$root/vendor/$(dirname "$m")"
  ln -s "${source[$m]}" "$root/vendor/$m"
  arrow=""
  dir=$(awk -v m="$m" '$1 == m { print $2 }' <<<"$replaced")
  [ -z "$dir" ] || arrow=" => $dir"
  meta=()
  [ "${explicit[$m]}" = 1 ] && meta+=("explicit")
  gv=$(go_version "${source[$m]}/go.mod")
  [ -z "$gv" ] || meta+=("go $gv")
  {
    echo "# $m ${version[$m]}$arrow"
    [ ${#meta[@]} -eq 0 ] || (IFS=';'; echo "## ${meta[*]}" | sed 's/;/; /g')
    packages "$m" "${source[$m]}"
  } >>"$root/vendor/modules.txt"
done
# A replacement of every version (no version on its left) has a line of its own.
while read -r m dir; do
  [ -z "$m" ] || echo "# $m => $dir" >>"$root/vendor/modules.txt"
done <<<"$replaced"
echo "debian-vendor.sh: $root/vendor: ${#order[@]} modules"
