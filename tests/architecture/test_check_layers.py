"""The layering check itself: it passes the real tree (its own ctest) and it finds
an upward include, a downward one being fine."""
import os

import check_layers


def make_tree(root, files):
    for layer in check_layers.LAYERS:
        os.makedirs(os.path.join(root, layer), exist_ok=True)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(text)


def test_upward_include_is_reported(tmp_path):
    make_tree(tmp_path, {
        "server/ops/normalize.cc": '#include "server/rpc/service.h"\n',
        "kernels/norm/norm.cc": '#include <vector>\n#include "layerserve/v1/layerserve.pb.h"\n',
    })
    found = check_layers.violations(str(tmp_path))
    assert len(found) == 2, found
    assert found[0].startswith('kernels/norm/norm.cc: includes "layerserve/v1/layerserve.pb.h"')
    assert found[1].startswith('server/ops/normalize.cc: includes "server/rpc/service.h" '
                               '(server/rpc)')


def test_downward_and_own_includes_pass(tmp_path):
    make_tree(tmp_path, {
        "server/rpc/service.cc": '#include "server/rpc/service.h"\n'
                                 '#include "server/ops/normalize.h"\n'
                                 '#include "kernels/norm/norm.h"\n#include "absl/status/status.h"\n',
        "client/cpp/npy.cc": '#include "common/dtype.h"\n',
    })
    assert check_layers.violations(str(tmp_path)) == []


def test_client_may_not_include_kernels(tmp_path):
    make_tree(tmp_path, {"client/cpp/npy.h": '#include "kernels/dtype.h"\n'})
    assert check_layers.violations(str(tmp_path)) == [
        'client/cpp/npy.h: includes "kernels/dtype.h" (kernels), but client/cpp may '
        "include only ['common', 'proto']"]


def test_kernel_families_include_only_what_is_below_them(tmp_path):
    make_tree(tmp_path, {
        "kernels/norm/norm_fast.cc": '#include "kernels/value_stats/value_stats.h"\n'
                                     '#include "kernels/linear/linear.h"\n',
        "kernels/block/block.cc": '#include "kernels/norm/norm.h"\n'
                                  '#include "kernels/linear/amx/tiles.h"\n',
        "kernels/linear/amx/few_rows.cc": '#include "kernels/linear/linear_internal.h"\n',
        "kernels/stray.cc": "",
    })
    assert check_layers.violations(str(tmp_path)) == [
        'kernels/norm/norm_fast.cc: includes "kernels/linear/linear.h" (kernels/linear), '
        "but kernels/norm may include only ['common', 'kernels/common', "
        "'kernels/value_stats']",
        "kernels/stray.cc: in no family folder of kernels/ (LAYERS)"]


def test_proto_helpers_are_the_proto_layer(tmp_path):
    make_tree(tmp_path, {
        "proto/wire_dtype.h": '#include "common/dtype.h"\n'
                              '#include "layerserve/v1/layerserve.pb.h"\n',
        "client/cpp/tensor_util.cc": '#include "proto/wire_dtype.h"\n',
        "kernels/norm/norm.cc": '#include "proto/wire_dtype.h"\n',
    })
    assert check_layers.violations(str(tmp_path)) == [
        'kernels/norm/norm.cc: includes "proto/wire_dtype.h" (proto), but kernels/norm may '
        "include only ['common', 'kernels/common', 'kernels/value_stats']"]
