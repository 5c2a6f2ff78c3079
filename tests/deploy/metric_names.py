"""The metric names the dashboard shows (all of them must be on it: the first
dashboard's, and the sessions row's), as Prometheus stores them, and the names a
PromQL expression refers to. Alerts and dashboard panels may only use these, so a
typo or a renamed metric fails the tests."""
import re

_COUNTERS = ["requests_total", "request_bytes_total", "response_bytes_total",
             "nonfinite_values_total", "saturated_values_total", "zero_variance_rows_total",
             "session_expiries_total", "session_evictions_total", "session_tokens_total"]
_GAUGES = ["queue_depth", "inflight_requests", "build_info", "active_sessions",
           "kv_cache_bytes"]
_HISTOGRAMS = ["request_duration_seconds", "queue_duration_seconds",
               "compute_duration_seconds", "batch_size", "batch_rows", "output_abs_max",
               "output_rms", "attention_entropy_nats", "decode_step_duration_seconds"]

DESIGN_METRICS = (
    {f"layerserve_{n}" for n in _COUNTERS + _GAUGES}
    | {f"layerserve_{n}{s}" for n in _HISTOGRAMS for s in ("_bucket", "_sum", "_count")})

# Exported later than the first set: alerts may use them; the dashboard need not
# show them.
ADDED_METRICS = {"layerserve_model_reloads_total"}

_NAME = re.compile(r"\blayerserve_[a-z_]+\b|\bup(?=\s*\{)")


def referenced_metrics(expr):
    """Metric names in a PromQL expression (layerserve_* and up)."""
    return set(_NAME.findall(expr))
