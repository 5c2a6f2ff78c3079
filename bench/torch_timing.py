"""What the PyTorch peer benchmarks (bench/torch_*_bench.py) share: timing a call
the same way in each, and reading the C++ benchmark's JSON whose tables they merge
with theirs."""
import json
import re
import statistics
import time


def median_seconds(fn, samples, target_sample_seconds, warmups=5):
    """fn's time per call: the median of `samples` samples, each timing as many calls
    as fill target_sample_seconds (counted from one timed call), after `warmups`
    untimed calls (allocator caches, lazy init)."""
    for _ in range(warmups):
        fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    calls = max(1, int(target_sample_seconds / max(once, 1e-7)))
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def load_cpp_medians(path, pattern):
    """{(benchmark, *arguments): median GB/s} from Google Benchmark JSON, for every
    benchmark whose name matches `pattern` (a regex whose first group is the
    benchmark and the others its integer arguments)."""
    with open(path) as f:
        data = json.load(f)
    medians = {}
    for bench in data["benchmarks"]:
        m = re.match(pattern, bench["name"])
        if m:
            key = (m.group(1),) + tuple(int(g) for g in m.groups()[1:])
            medians[key] = bench["bytes_per_second"] / 1e9
    return medians
