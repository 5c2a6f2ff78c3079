#!/usr/bin/env bash
# Generates the Go code of proto/layerserve/v1/layerserve.proto into
# client/go/gen/layerserve/v1 (package layerservev1), with Debian bookworm's protoc
# 3.21, protoc-gen-go 1.28 and protoc-gen-go-grpc 1.0 (scripts/install-deps). The
# code is committed: `go get` users build it without protoc.
#
#   client/go/generate.sh           regenerate the committed code
#   client/go/generate.sh --check   generate into a temporary directory and fail when
#                                   it differs from the committed code (CTest
#                                   go_client_generated)
#
# The Go import path is given with protoc's M option, not with a go_package option
# in the .proto: editing the .proto would recompile the whole C++ tree.
# PROTOC, PROTOC_GEN_GO and PROTOC_GEN_GO_GRPC name other binaries.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto_dir="$here/../../proto"
module=github.com/layerserve/layerserve/client/go
mapping="Mlayerserve/v1/layerserve.proto=$module/gen/layerserve/v1;layerservev1"
generated=gen/layerserve/v1

generate() { # $1: the directory that stands for the module's root
  "${PROTOC:-protoc}" -I "$proto_dir" \
    --plugin=protoc-gen-go="${PROTOC_GEN_GO:-$(command -v protoc-gen-go)}" \
    --plugin=protoc-gen-go-grpc="${PROTOC_GEN_GO_GRPC:-$(command -v protoc-gen-go-grpc)}" \
    --go_out="$1" --go_opt="module=$module,$mapping" \
    --go-grpc_out="$1" --go-grpc_opt="module=$module,$mapping" \
    layerserve/v1/layerserve.proto
}

case "${1:-}" in
  "")
    rm -rf "${here:?}/$generated"
    generate "$here"
    echo "generate.sh: wrote client/go/$generated"
    ;;
  --check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp"
    if ! diff -ru "$here/$generated" "$tmp/$generated"; then
      echo "generate.sh: client/go/$generated does not match proto/layerserve/v1/layerserve.proto" \
        "(diff above: - committed, + generated now)."
      echo "generate.sh: regenerate it with client/go/generate.sh and commit the result."
      exit 1
    fi
    echo "generate.sh: client/go/$generated matches the .proto"
    ;;
  *)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac
