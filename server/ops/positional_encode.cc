#include "server/ops/positional_encode.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/ops/input_stats.h"
#include "server/ops/positions.h"
#include "server/ops/worker_context.h"

namespace layerserve {
namespace {

// A visitor of the job variant made of one lambda per method.
template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

// OK if the product of `dims` (each >= 1) is at most kMaxGeneratedElements;
// otherwise RESOURCE_EXHAUSTED naming `what` (e.g. "alibi: bias [...]"), the dims
// and the limit: the proto's code for a request over the server's element limit.
absl::Status CheckGeneratedSize(absl::string_view what,
                                const std::vector<int64_t>& dims) {
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (elements > kMaxGeneratedElements / d) {  // Also keeps the product in int64.
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " = ", ShapeToString(dims),
                       " is over the server's limit of ", kMaxGeneratedElements,
                       " elements per generated tensor; request fewer rows "
                       "at a time"));
    }
    elements *= d;
  }
  return absl::OkStatus();
}

// A query_offset field: >= 0, and offset + length must fit in int64.
absl::Status CheckQueryOffset(absl::string_view field, int64_t offset, int64_t length) {
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", offset, " must be >= 0"));
  }
  if (offset > std::numeric_limits<int64_t>::max() - length) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", offset, " + ", length, " queries overflows"));
  }
  return absl::OkStatus();
}

// A length field that must be >= 1 (a query or key length without a tensor).
absl::Status CheckLength(absl::string_view field, int64_t value, absl::string_view why) {
  if (value >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", value, " must be >= 1", why));
}

absl::StatusOr<SinusoidalJob> ParseSinusoidal(const v1::Sinusoidal& s,
                                              v1::DataType output_dtype) {
  SinusoidalJob job;
  switch (s.layout()) {
    case v1::Sinusoidal::LAYOUT_UNSPECIFIED:
    case v1::Sinusoidal::INTERLEAVED:
      job.layout = kernels::SinusoidalLayout::kInterleaved;
      break;
    case v1::Sinusoidal::CONCATENATED:
      job.layout = kernels::SinusoidalLayout::kConcatenated;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("sinusoidal.layout: unknown Layout ", static_cast<int>(s.layout()),
                       "; expected INTERLEAVED or CONCATENATED"));
  }
  if (s.has_base()) {
    job.base = s.base();
    if (!std::isfinite(job.base) || job.base <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sinusoidal.base: ", job.base, " must be finite and > 0"));
    }
  }
  int64_t batch = 1, tokens = 0;
  ElementType input_type = ElementType::kFloat32;  // A generated table's default.
  if (s.has_input()) {
    job.has_input = true;
    ASSIGN_OR_RETURN(job.input, DecodeTensor(s.input(), "sinusoidal.input", {2, 3}));
    const TensorInfo& info = job.input.info;
    job.shape = info.shape;
    job.dim = info.last_dim();
    if (job.dim % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sinusoidal.input.shape: last dimension ", job.dim,
                       " must be even (sin and cos pairs)"));
    }
    tokens = info.shape[info.shape.size() - 2];
    batch = info.shape.size() == 3 ? info.shape[0] : 1;
    input_type = info.dtype;
  } else {
    if (s.num_positions() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("sinusoidal.num_positions: ", s.num_positions(),
                       " must be >= 1 without input (the table length)"));
    }
    if (s.dim() < 2 || s.dim() % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sinusoidal.dim: ", s.dim(),
          " must be even and >= 2 without input (the table width: sin and cos pairs)"));
    }
    RETURN_IF_ERROR(CheckGeneratedSize("sinusoidal: table [num_positions,dim]",
                                       {s.num_positions(), s.dim()}));
    job.dim = s.dim();
    tokens = s.num_positions();
    job.shape = {tokens, job.dim};
  }
  job.rows = batch * tokens;
  ASSIGN_OR_RETURN(job.positions, ResolvePositions(s.position_offset(), s.positions(),
                                                   batch, tokens, "sinusoidal."));
  ASSIGN_OR_RETURN(job.output_type,
                   ResolveOutputType(output_dtype, input_type, "output_dtype"));
  return job;
}

// OUT_OF_RANGE for the first position past a table of `table_rows` rows, naming the
// field it came from.
absl::Status CheckLearnedPositions(const v1::Learned& l, int64_t tokens,
                                   int64_t table_rows) {
  if (l.positions().empty()) {
    const int64_t last = l.position_offset() + tokens - 1;  // Overflow checked already.
    if (last < table_rows) return absl::OkStatus();
    return absl::OutOfRangeError(absl::StrCat(
        "learned.position_offset: ", l.position_offset(), " + ", tokens,
        " tokens reaches position ", last, ", past the table's ", table_rows, " rows"));
  }
  for (int i = 0; i < l.positions_size(); ++i) {
    if (l.positions(i) >= table_rows) {
      return absl::OutOfRangeError(absl::StrCat("learned.positions[", i, "]: position ",
                                                l.positions(i), " is past the table's ",
                                                table_rows, " rows"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LearnedJob> ParseLearned(const v1::Learned& l, v1::DataType output_dtype) {
  LearnedJob job;
  if (!l.has_input()) return absl::InvalidArgumentError("learned.input: required");
  if (!l.has_table()) return absl::InvalidArgumentError("learned.table: required");
  ASSIGN_OR_RETURN(job.input, DecodeTensor(l.input(), "learned.input", {2, 3}));
  const TensorInfo& info = job.input.info;
  ASSIGN_OR_RETURN(job.table, DecodeTensor(l.table(), "learned.table", {2, 2}));
  if (job.table.info.shape[1] != info.last_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("learned.table.shape: last dimension ", job.table.info.shape[1],
                     " does not match input's last dimension ", info.last_dim()));
  }
  const int64_t tokens = info.shape[info.shape.size() - 2];
  const int64_t batch = info.shape.size() == 3 ? info.shape[0] : 1;
  ASSIGN_OR_RETURN(job.positions, ResolvePositions(l.position_offset(), l.positions(),
                                                   batch, tokens, "learned."));
  RETURN_IF_ERROR(CheckLearnedPositions(l, tokens, job.table.info.shape[0]));
  ASSIGN_OR_RETURN(job.output_type,
                   ResolveOutputType(output_dtype, info.dtype, "output_dtype"));
  return job;
}

// `field` (num_heads, query_length, key_length) given alongside scores must be 0
// (take the scores') or equal the scores' value.
absl::Status CheckMatchesScores(absl::string_view field, int64_t value,
                                int64_t from_scores, absl::string_view scores_dim) {
  if (value == 0 || value == from_scores) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("alibi.", field, ": ", value, " does not match the scores' ",
                   scores_dim, " = ", from_scores, " (leave it 0 to take the scores')"));
}

absl::StatusOr<AlibiJob> ParseAlibi(const v1::Alibi& a, v1::DataType output_dtype) {
  AlibiJob job;
  job.shape.symmetric = a.symmetric();
  ElementType input_type = ElementType::kFloat32;  // The generated bias's default.
  if (a.has_scores()) {
    job.has_scores = true;
    ASSIGN_OR_RETURN(job.scores, DecodeTensor(a.scores(), "alibi.scores", {3, 4}));
    const std::vector<int64_t>& shape = job.scores.info.shape;
    const size_t rank = shape.size();
    job.batch = rank == 4 ? shape[0] : 1;
    job.shape.heads = shape[rank - 3];
    job.shape.query_length = shape[rank - 2];
    job.shape.key_length = shape[rank - 1];
    RETURN_IF_ERROR(CheckMatchesScores("num_heads", a.num_heads(), job.shape.heads, "H"));
    RETURN_IF_ERROR(CheckMatchesScores("query_length", a.query_length(),
                                       job.shape.query_length, "Tq"));
    RETURN_IF_ERROR(
        CheckMatchesScores("key_length", a.key_length(), job.shape.key_length, "Tk"));
    job.output_shape = shape;
    input_type = job.scores.info.dtype;
  } else {
    RETURN_IF_ERROR(
        CheckLength("alibi.num_heads", a.num_heads(), " (required without scores)"));
    RETURN_IF_ERROR(CheckLength("alibi.query_length", a.query_length(),
                                " (required without scores)"));
    RETURN_IF_ERROR(
        CheckLength("alibi.key_length", a.key_length(), " (required without scores)"));
    job.shape.heads = a.num_heads();
    job.shape.query_length = a.query_length();
    job.shape.key_length = a.key_length();
    job.output_shape = {job.shape.heads, job.shape.query_length, job.shape.key_length};
    RETURN_IF_ERROR(CheckGeneratedSize("alibi: bias [num_heads,query_length,key_length]",
                                       job.output_shape));
  }
  RETURN_IF_ERROR(
      CheckQueryOffset("alibi.query_offset", a.query_offset(), job.shape.query_length));
  job.shape.query_offset = a.query_offset();
  ASSIGN_OR_RETURN(job.output_type,
                   ResolveOutputType(output_dtype, input_type, "output_dtype"));
  return job;
}

absl::StatusOr<T5BiasJob> ParseT5Bias(const v1::T5Bias& t, v1::DataType output_dtype) {
  T5BiasJob job;
  if (!t.has_table()) return absl::InvalidArgumentError("t5_bias.table: required");
  ASSIGN_OR_RETURN(job.table, DecodeTensor(t.table(), "t5_bias.table", {2, 2}));
  const int64_t buckets = job.table.info.shape[0];
  if (t.num_buckets() != 0 && t.num_buckets() != buckets) {
    return absl::InvalidArgumentError(absl::StrCat(
        "t5_bias.num_buckets: ", t.num_buckets(), " does not match table.shape[0] = ",
        buckets, " (leave it 0 to take the table's)"));
  }
  // Hugging Face halves the buckets per direction when bidirectional, then makes
  // half of those exact; the log buckets divide by that exact count.
  const int64_t min_buckets = t.bidirectional() ? 4 : 2;
  if (buckets < min_buckets) {
    return absl::InvalidArgumentError(absl::StrCat(
        "t5_bias.table.shape[0]: ", buckets, " buckets; ",
        t.bidirectional() ? "bidirectional" : "causal", " T5 bias needs >= ", min_buckets,
        " (at least one exact bucket", t.bidirectional() ? " per direction)" : ")"));
  }
  int64_t max_distance = kDefaultT5MaxDistance;
  if (t.max_distance() != 0) {
    max_distance = t.max_distance();
    if (max_distance < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("t5_bias.max_distance: ", max_distance, " must be >= 1"));
    }
  }
  const int64_t max_exact = (t.bidirectional() ? buckets / 2 : buckets) / 2;
  if (max_distance <= max_exact) {
    return absl::InvalidArgumentError(absl::StrCat(
        "t5_bias.max_distance: ", max_distance, " must be > ", max_exact,
        ", the exact buckets of ", buckets,
        t.bidirectional() ? " bidirectional" : " causal",
        " buckets (the log buckets divide by log(max_distance / ", max_exact, "))"));
  }
  RETURN_IF_ERROR(CheckLength("t5_bias.query_length", t.query_length(), ""));
  RETURN_IF_ERROR(CheckLength("t5_bias.key_length", t.key_length(), ""));
  RETURN_IF_ERROR(
      CheckQueryOffset("t5_bias.query_offset", t.query_offset(), t.query_length()));
  const int64_t heads = job.table.info.shape[1];
  RETURN_IF_ERROR(CheckGeneratedSize("t5_bias: bias [H,query_length,key_length]",
                                     {heads, t.query_length(), t.key_length()}));
  job.shape.num_buckets = buckets;
  job.shape.heads = heads;
  job.shape.bidirectional = t.bidirectional();
  job.shape.max_distance = max_distance;
  job.shape.query_length = t.query_length();
  job.shape.key_length = t.key_length();
  job.shape.query_offset = t.query_offset();
  ASSIGN_OR_RETURN(job.output_type,
                   ResolveOutputType(output_dtype, job.table.info.dtype, "output_dtype"));
  return job;
}

// Every kernel takes its output's statistics in the pass that writes it
// (`stats`), so the reply is not read again for its numeric health.
OutputHealth Run(kernels::PositionalContext& context, const SinusoidalJob& job,
                 v1::PositionalEncodeResponse* response) {
  kernels::ValueStats stats;
  return FillTensor(
      job.shape, job.rows * job.dim, job.output_type, response->mutable_output(),
      [&](float* out) {
        kernels::Sinusoidal(context, job.has_input ? job.input.values.data() : nullptr,
                            job.positions.data(), job.rows, job.dim, job.base, job.layout,
                            out, &stats);
      },
      &stats);
}

OutputHealth Run(kernels::PositionalContext&, const LearnedJob& job,
                 v1::PositionalEncodeResponse* response) {
  const TensorInfo& info = job.input.info;
  kernels::ValueStats stats;
  return FillTensor(
      info.shape, info.elements, job.output_type, response->mutable_output(),
      [&](float* out) {
        kernels::Learned(job.input.values.data(), job.positions.data(), info.rows(),
                         info.last_dim(), job.table.values.data(), out, &stats);
      },
      &stats);
}

OutputHealth Run(kernels::PositionalContext&, const RopeJob& job,
                 v1::PositionalEncodeResponse* response) {
  return RunRope(job, response);
}

OutputHealth Run(kernels::PositionalContext&, const AlibiJob& job,
                 v1::PositionalEncodeResponse* response) {
  std::vector<float> slopes(job.shape.heads);
  kernels::AlibiSlopes(job.shape.heads, slopes.data());
  const int64_t count =
      job.batch * job.shape.heads * job.shape.query_length * job.shape.key_length;
  kernels::ValueStats stats;
  return FillTensor(
      job.output_shape, count, job.output_type, response->mutable_output(),
      [&](float* out) {
        kernels::Alibi(slopes.data(), job.shape,
                       job.has_scores ? job.scores.values.data() : nullptr, job.batch,
                       out, &stats);
      },
      &stats);
}

OutputHealth Run(kernels::PositionalContext& context, const T5BiasJob& job,
                 v1::PositionalEncodeResponse* response) {
  const kernels::T5BiasShape& s = job.shape;
  kernels::ValueStats stats;
  return FillTensor(
      {s.heads, s.query_length, s.key_length}, s.heads * s.query_length * s.key_length,
      job.output_type, response->mutable_output(),
      [&](float* out) {
        kernels::T5Bias(context, job.table.values.data(), s, out, &stats);
      },
      &stats);
}

}  // namespace

absl::StatusOr<PositionalEncodeJob> ParsePositionalEncodeRequest(
    const v1::PositionalEncodeRequest& request) {
  const v1::DataType output_dtype = request.output_dtype();
  switch (request.method_case()) {
    case v1::PositionalEncodeRequest::kSinusoidal:
      return ParseSinusoidal(request.sinusoidal(), output_dtype);
    case v1::PositionalEncodeRequest::kLearned:
      return ParseLearned(request.learned(), output_dtype);
    case v1::PositionalEncodeRequest::kRope:
      return ParseRope(request.rope(), output_dtype);
    case v1::PositionalEncodeRequest::kAlibi:
      return ParseAlibi(request.alibi(), output_dtype);
    case v1::PositionalEncodeRequest::kT5Bias:
      return ParseT5Bias(request.t5_bias(), output_dtype);
    case v1::PositionalEncodeRequest::METHOD_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "method: set one of sinusoidal, learned, rope, alibi, t5_bias");
}

OutputHealth RunPositionalEncode(kernels::PositionalContext& context,
                                 const PositionalEncodeJob& job,
                                 v1::PositionalEncodeResponse* response) {
  return std::visit(
      [&](const auto& method_job) { return Run(context, method_job, response); }, job);
}

int64_t PositionalEncodeOp::Elements(const Job& job) {
  return std::visit(
      Overloaded{[](const SinusoidalJob& j) { return j.rows * j.dim; },
                 [](const LearnedJob& j) { return j.input.info.elements; },
                 [](const RopeJob& j) {
                   return j.query.info.elements + (j.has_key ? j.key.info.elements : 0);
                 },
                 [](const AlibiJob& j) {
                   return j.batch * j.shape.heads * j.shape.query_length *
                          j.shape.key_length;
                 },
                 [](const T5BiasJob& j) {
                   return j.shape.heads * j.shape.query_length * j.shape.key_length;
                 }},
      job);
}

// The additive encodings add a finite value to each input value (x + NaN or
// +-Inf is not finite), and RoPE's x * cos + partner * sin is not finite when x is
// not (Inf * 0 is NaN); pass-through dims are copies. T5's output holds only the
// table entries its buckets select, so its table is read.
kernels::ValueStats PositionalEncodeOp::InputStats(const Job& job,
                                                   const OutputHealth& output) {
  return std::visit(
      Overloaded{
          [&](const SinusoidalJob& j) {
            return j.has_input ? StatsUnlessOutputFinite(j.input, output)
                               : kernels::ValueStats();
          },
          [&](const LearnedJob& j) { return StatsUnlessOutputFinite(j.input, output); },
          [&](const RopeJob& j) {
            kernels::ValueStats s = StatsUnlessOutputFinite(j.query, output);
            if (j.has_key) s.Merge(StatsUnlessOutputFinite(j.key, output));
            return s;
          },
          [&](const AlibiJob& j) {
            return j.has_scores ? StatsUnlessOutputFinite(j.scores, output)
                                : kernels::ValueStats();
          },
          [](const T5BiasJob& j) { return ValueStatsOf(j.table); }},
      job);
}

ElementType PositionalEncodeOp::OutputType(const Job& job) {
  return std::visit([](const auto& j) { return j.output_type; }, job);
}

OutputHealth PositionalEncodeOp::Run(WorkerContext& worker, const Job& job,
                                     Response* response) {
  return RunPositionalEncode(worker.positional, job, response);
}

}  // namespace layerserve
