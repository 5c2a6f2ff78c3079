#include "tools/loadgen/options.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/cli/flags.h"
#include "tools/cli/security_flags.h"

namespace layerserve::client {

const char kBenchUsage[] =
    R"(Usage: layerserve-bench [flags]

A load generator for a layerserve server (like Triton's perf_analyzer): sends one
kind of request with random inputs, closed loop at each --concurrency or open loop
at each --rate, and reports throughput, latency percentiles, errors by status code
and, with --metrics-url, the server's own counts and mean batch size.

Target:
  --target T            HOST:PORT, a comma list of IP:PORT, or a gRPC URI
                        (default 127.0.0.1:50051)
  --timeout-ms N        deadline of each request (default 30000); never retried
  --tls                 connect with TLS, trusting the system's root certificates
  --tls-ca FILE         connect with TLS, trusting the PEM certificates in FILE
  --tls-cert FILE --tls-key FILE
                        present this client certificate and key (PEM), for a
                        server with --tls-client-ca (mutual TLS); implies TLS
  --token-file FILE     send the bearer token in FILE on every request but
                        health (server --auth-token-file); without this flag,
                        the environment variable LAYERSERVE_TOKEN, if set
Request:
  --method M            normalize (default), activate, sinusoidal, rope, alibi,
                        block-forward, decode, get-model, list-models, health
  --shape D0,D1,...     input shape (default 8,768): normalize, activate
                        [..., D]; sinusoidal [B, T, D]; rope query [B, H, T, Dh]
                        (the key the same); alibi scores [B, H, TQ, TK]
  --wire-dtype D        float32 (default), bfloat16 or float16
  --kind K              normalize: rms (default) or layer
  --activation A        activate: silu (default), gelu, swiglu (packed [..., 2F])...
  --model NAME          block-forward, get-model (default: the server's default)
  --batch B --tokens T  block-forward hidden states [B, T, hidden] (default 1, 16)
  --layers N            block-forward, decode: blocks per request (default 1)
  --steps N             decode: each sending thread keeps a KV-cache session:
                        its first request opens it and prefills --tokens tokens,
                        then each request is one token, for N steps (default
                        256); then a new session. Requests/s = tokens/s
  --sessions-per-call N decode: each sending thread keeps N sessions and each
                        request steps all of them in one BlockForward
                        (session_ids): a prefill of N x --tokens, then N tokens
                        per request (default 1: one session per call). Tokens/s
                        = N x requests/s
  --pipeline H:P,H:P... decode: through every layer of a model split across
                        these servers (each started with --layers=START:END),
                        one session per stage, in place of --target; --layers
                        is not used
  --seed S              random inputs and Poisson arrivals (default 1)
Load:
  --concurrency C,...   closed loop: C requests in flight, one thread each
                        (default 1); one result per level
  --rate R,...          open loop: R requests/s, one result per level; latency
                        counts from the scheduled send time, so a client that
                        falls behind shows as latency (and late_sends)
  --distribution D      open loop arrivals: poisson (default) or constant
  --max-threads N       open loop: sender threads (default 64)
  --channels N          connections, shared round robin by the threads
                        (default: one per thread)
  --duration D          length of each level (default 10s), or
  --requests N          exactly N requests per level
  --warmup D            load before each level, not reported (default 1s; 0s: none)
Output:
  --metrics-url URL     the server's http://HOST:PORT/metrics, scraped before and
                        after each level: the server's requests_total by code
                        and mean batch size over the level
  --json                one JSON object on stdout instead of the table
  --help                this text
  --version             print "layerserve-bench VERSION"
)";

namespace {

// The flags besides the security ones (kSecurityFlags).
constexpr FlagSpec kBenchFlags[] = {
    {"target", true},
    {"timeout-ms", true},
    {"method", true},
    {"shape", true},
    {"wire-dtype", true},
    {"kind", true},
    {"activation", true},
    {"model", true},
    {"batch", true},
    {"tokens", true},
    {"layers", true},
    {"seed", true},
    {"steps", true},
    {"concurrency", true},
    {"rate", true},
    {"distribution", true},
    {"max-threads", true},
    {"channels", true},
    {"duration", true},
    {"requests", true},
    {"warmup", true},
    {"metrics-url", true},
    {"json", false},
    {"pipeline", true},
    {"sessions-per-call", true},
};

constexpr const char* kMethods[] = {
    "normalize",     "activate", "sinusoidal", "rope",        "alibi",
    "block-forward", "decode",   "get-model",  "list-models", "health"};

// `value` must be >= `min`.
absl::Status AtLeast(absl::string_view flag, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be >= ", min, ", got ", value));
}

}  // namespace

absl::StatusOr<BenchOptions> ParseBenchArgs(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h" || arg == "help") {
      return absl::CancelledError("help");
    }
  }
  size_t pos = 0;
  std::vector<FlagSpec> specs(std::begin(kBenchFlags), std::end(kBenchFlags));
  specs.insert(specs.end(), std::begin(kSecurityFlags), std::end(kSecurityFlags));
  absl::StatusOr<FlagValues> parsed = ParseFlags(args, &pos, specs);
  if (!parsed.ok()) return parsed.status();
  if (pos != args.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", args[pos], "'"));
  }
  const FlagValues& flags = *parsed;
  BenchOptions o;
  o.target = FlagOr(flags, "target", o.target);
  o.json = flags.count("json") != 0;
  o.metrics_url = FlagOr(flags, "metrics-url", "");
  o.security = SecurityFlagsOf(flags);
  if (absl::Status s = CheckSecurityFlags(o.security); !s.ok()) return s;

// Assigns the parsed value of a StatusOr-returning expression or returns its error.
#define LS_BENCH_ASSIGN(lhs, expr)                \
  do {                                            \
    auto value_or = (expr);                       \
    if (!value_or.ok()) return value_or.status(); \
    lhs = *std::move(value_or);                   \
  } while (0)

  int64_t timeout_ms;
  LS_BENCH_ASSIGN(timeout_ms, Int64Flag(flags, "timeout-ms", 30000));
  if (absl::Status s = AtLeast("timeout-ms", timeout_ms, 1); !s.ok()) return s;
  o.timeout = absl::Milliseconds(timeout_ms);

  o.method = FlagOr(flags, "method", o.method);
  if (std::find(std::begin(kMethods), std::end(kMethods), o.method) ==
      std::end(kMethods)) {
    return absl::InvalidArgumentError(absl::StrCat("--method must be one of ",
                                                   absl::StrJoin(kMethods, ", "),
                                                   ", not '", o.method, "'"));
  }
  if (flags.count("shape") != 0) {
    LS_BENCH_ASSIGN(o.shape, ParseInt64List("shape", flags.at("shape")));
    for (int64_t d : o.shape) {
      if (absl::Status s = AtLeast("shape", d, 1); !s.ok()) return s;
    }
  }
  const std::string wire = FlagOr(flags, "wire-dtype", "float32");
  if (wire == "float32") {
    o.wire_dtype = v1::FLOAT32;
  } else if (wire == "bfloat16") {
    o.wire_dtype = v1::BFLOAT16;
  } else if (wire == "float16") {
    o.wire_dtype = v1::FLOAT16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--wire-dtype must be float32, bfloat16 or float16, not '", wire, "'"));
  }
  o.kind = FlagOr(flags, "kind", o.kind);
  if (o.kind != "rms" && o.kind != "layer") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kind must be rms or layer, not '", o.kind, "'"));
  }
  if (flags.count("activation") != 0) {
    LS_BENCH_ASSIGN(o.activation,
                    EnumFlag<v1::Activation>("activation", flags.at("activation")));
  }
  o.model = FlagOr(flags, "model", "");
  LS_BENCH_ASSIGN(o.batch, Int64Flag(flags, "batch", o.batch));
  LS_BENCH_ASSIGN(o.tokens, Int64Flag(flags, "tokens", o.tokens));
  LS_BENCH_ASSIGN(o.layers, Int64Flag(flags, "layers", o.layers));
  LS_BENCH_ASSIGN(o.steps, Int64Flag(flags, "steps", o.steps));
  if (flags.count("pipeline") != 0) {
    o.pipeline = absl::StrSplit(flags.at("pipeline"), ',', absl::SkipEmpty());
    if (o.method != "decode") {
      return absl::InvalidArgumentError(
          absl::StrCat("--pipeline is for --method decode, not ", o.method));
    }
    if (o.pipeline.empty()) {
      return absl::InvalidArgumentError("--pipeline needs HOST:PORT,HOST:PORT,...");
    }
  }
  LS_BENCH_ASSIGN(o.sessions_per_call,
                  Int64Flag(flags, "sessions-per-call", o.sessions_per_call));
  if (flags.count("sessions-per-call") != 0 && o.method != "decode") {
    return absl::InvalidArgumentError(
        absl::StrCat("--sessions-per-call is for --method decode, not ", o.method));
  }
  for (auto [name, value] : {std::pair<const char*, int64_t>{"batch", o.batch},
                             {"tokens", o.tokens},
                             {"layers", o.layers},
                             {"steps", o.steps},
                             {"sessions-per-call", o.sessions_per_call}}) {
    if (absl::Status s = AtLeast(name, value, 1); !s.ok()) return s;
  }
  int64_t seed;
  LS_BENCH_ASSIGN(seed, Int64Flag(flags, "seed", 1));
  o.seed = static_cast<uint64_t>(seed);

  if (flags.count("concurrency") != 0 && flags.count("rate") != 0) {
    return absl::InvalidArgumentError(
        "--concurrency (closed loop) and --rate (open loop) exclude each other");
  }
  if (flags.count("rate") != 0) {
    LS_BENCH_ASSIGN(o.rates, ParseDoubleList("rate", flags.at("rate")));
    for (double r : o.rates) {
      if (!(r > 0) || !std::isfinite(r)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--rate values must be > 0 requests/s, got ", r));
      }
    }
  } else {
    o.concurrency = {1};
    if (flags.count("concurrency") != 0) {
      LS_BENCH_ASSIGN(o.concurrency,
                      ParseInt64List("concurrency", flags.at("concurrency")));
    }
    for (int64_t c : o.concurrency) {
      if (absl::Status s = AtLeast("concurrency", c, 1); !s.ok()) return s;
    }
  }
  const std::string distribution = FlagOr(flags, "distribution", "poisson");
  if (distribution != "poisson" && distribution != "constant") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--distribution must be poisson or constant, not '", distribution, "'"));
  }
  if (flags.count("distribution") != 0 && o.rates.empty()) {
    return absl::InvalidArgumentError("--distribution needs --rate (open loop)");
  }
  o.poisson = distribution == "poisson";
  LS_BENCH_ASSIGN(o.max_threads, Int64Flag(flags, "max-threads", o.max_threads));
  if (absl::Status s = AtLeast("max-threads", o.max_threads, 1); !s.ok()) return s;
  LS_BENCH_ASSIGN(o.channels, Int64Flag(flags, "channels", 0));
  if (absl::Status s = AtLeast("channels", o.channels, 0); !s.ok()) return s;

  if (flags.count("duration") != 0 && flags.count("requests") != 0) {
    return absl::InvalidArgumentError("--duration and --requests exclude each other");
  }
  LS_BENCH_ASSIGN(o.duration, DurationFlag(flags, "duration", o.duration));
  if (o.duration <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--duration must be > 0");
  }
  LS_BENCH_ASSIGN(o.requests, Int64Flag(flags, "requests", 0));
  if (flags.count("requests") != 0) {
    if (absl::Status s = AtLeast("requests", o.requests, 1); !s.ok()) return s;
  }
  LS_BENCH_ASSIGN(o.warmup, DurationFlag(flags, "warmup", o.warmup));
#undef LS_BENCH_ASSIGN
  return o;
}

}  // namespace layerserve::client
