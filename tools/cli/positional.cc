// positional-encode: one of the five positional methods (--method), with .npy
// tensors in and out.
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/cli/commands.h"
#include "tools/cli/common.h"

namespace layerserve::client {
namespace {

// Flags every method takes.
constexpr const char* kCommonFlags[] = {"method", "out", "wire-dtype", "out-dtype",
                                        "json"};

struct Method {
  const char* name;
  std::vector<const char*> flags;  // Besides kCommonFlags.
  std::vector<const char*> required;
};

const std::vector<Method>& Methods() {
  static const auto* methods = new std::vector<Method>{
      {"sinusoidal",
       {"input", "num-positions", "dim", "base", "layout", "position-offset",
        "positions"},
       {}},
      {"learned", {"input", "table", "position-offset", "positions"}, {"input", "table"}},
      {"rope",
       {"query", "key", "key-out", "layout", "theta", "rotary-dim", "style", "scaling",
        "factor", "original-max-position-embeddings", "beta-fast", "beta-slow",
        "attention-factor", "low-freq-factor", "high-freq-factor", "position-offset",
        "positions"},
       {"query"}},
      {"alibi",
       {"num-heads", "query-length", "key-length", "query-offset", "symmetric", "scores"},
       {}},
      {"t5-bias",
       {"table", "bidirectional", "num-buckets", "max-distance", "query-length",
        "key-length", "query-offset"},
       {"table"}},
  };
  return *methods;
}

// Sets the optional float field through `set` when flag `name` is given.
template <typename Set>
absl::Status OptionalFloat(const FlagValues& flags, const char* name, Set set) {
  if (flags.count(name) == 0) return absl::OkStatus();
  absl::StatusOr<double> value = DoubleFlag(flags, name, 0);
  if (!value.ok()) return value.status();
  set(static_cast<float>(*value));
  return absl::OkStatus();
}

// The request fields of each method from its flags. Returns a usage error's status,
// or OK; tensors are loaded afterwards.
absl::Status SetSinusoidal(const FlagValues& flags, v1::Sinusoidal* s) {
  absl::StatusOr<int64_t> num_positions = Int64Flag(flags, "num-positions", 0);
  if (!num_positions.ok()) return num_positions.status();
  absl::StatusOr<int64_t> dim = Int64Flag(flags, "dim", 0);
  if (!dim.ok()) return dim.status();
  s->set_num_positions(*num_positions);
  s->set_dim(*dim);
  if (absl::Status st = OptionalFloat(flags, "base", [&](float v) { s->set_base(v); });
      !st.ok()) {
    return st;
  }
  if (flags.count("layout") != 0) {
    absl::StatusOr<v1::Sinusoidal::Layout> layout =
        EnumFlag<v1::Sinusoidal::Layout>("layout", flags.at("layout"));
    if (!layout.ok()) return layout.status();
    s->set_layout(*layout);
  }
  absl::StatusOr<Positions> positions = ParsePositions(flags);
  if (!positions.ok()) return positions.status();
  s->set_position_offset(positions->offset);
  s->mutable_positions()->Add(positions->positions.begin(), positions->positions.end());
  return absl::OkStatus();
}

absl::Status SetRope(const FlagValues& flags, v1::Rope* r) {
  if (flags.count("layout") != 0) {
    absl::StatusOr<v1::Rope::Layout> layout =
        EnumFlag<v1::Rope::Layout>("layout", flags.at("layout"));
    if (!layout.ok()) return layout.status();
    r->set_layout(*layout);
  }
  if (flags.count("style") != 0) {
    absl::StatusOr<v1::Rope::Style> style =
        EnumFlag<v1::Rope::Style>("style", flags.at("style"));
    if (!style.ok()) return style.status();
    r->set_style(*style);
  }
  if (absl::Status st = OptionalFloat(flags, "theta", [&](float v) { r->set_theta(v); });
      !st.ok()) {
    return st;
  }
  absl::StatusOr<int64_t> rotary_dim = Int64Flag(flags, "rotary-dim", 0);
  if (!rotary_dim.ok()) return rotary_dim.status();
  r->set_rotary_dim(*rotary_dim);

  v1::RopeScaling* scaling = r->mutable_scaling();
  if (flags.count("scaling") != 0) {
    absl::StatusOr<v1::RopeScaling::Type> type = EnumFlag<v1::RopeScaling::Type>(
        "scaling", flags.at("scaling"), /*allow_zero=*/true);
    if (!type.ok()) return type.status();
    scaling->set_type(*type);
  }
  absl::StatusOr<double> factor = DoubleFlag(flags, "factor", 0);
  if (!factor.ok()) return factor.status();
  scaling->set_factor(static_cast<float>(*factor));
  absl::StatusOr<int64_t> original =
      Int64Flag(flags, "original-max-position-embeddings", 0);
  if (!original.ok()) return original.status();
  scaling->set_original_max_position_embeddings(*original);
  for (absl::Status st :
       {OptionalFloat(flags, "beta-fast", [&](float v) { scaling->set_beta_fast(v); }),
        OptionalFloat(flags, "beta-slow", [&](float v) { scaling->set_beta_slow(v); }),
        OptionalFloat(flags, "attention-factor",
                      [&](float v) { scaling->set_attention_factor(v); }),
        OptionalFloat(flags, "low-freq-factor",
                      [&](float v) { scaling->set_low_freq_factor(v); }),
        OptionalFloat(flags, "high-freq-factor",
                      [&](float v) { scaling->set_high_freq_factor(v); })}) {
    if (!st.ok()) return st;
  }
  if (flags.count("key") != flags.count("key-out")) {
    return absl::InvalidArgumentError("--key and --key-out go together");
  }
  absl::StatusOr<Positions> positions = ParsePositions(flags);
  if (!positions.ok()) return positions.status();
  r->set_position_offset(positions->offset);
  r->mutable_positions()->Add(positions->positions.begin(), positions->positions.end());
  return absl::OkStatus();
}

// query-length, key-length and query-offset of ALiBi and T5 (same names, same
// meaning); `set` receives them in that order.
template <typename Set>
absl::Status SetBiasGeometry(const FlagValues& flags, Set set) {
  absl::StatusOr<int64_t> tq = Int64Flag(flags, "query-length", 0);
  if (!tq.ok()) return tq.status();
  absl::StatusOr<int64_t> tk = Int64Flag(flags, "key-length", 0);
  if (!tk.ok()) return tk.status();
  absl::StatusOr<int64_t> offset = Int64Flag(flags, "query-offset", 0);
  if (!offset.ok()) return offset.status();
  set(*tq, *tk, *offset);
  return absl::OkStatus();
}

absl::Status SetAlibi(const FlagValues& flags, v1::Alibi* a) {
  absl::StatusOr<int64_t> heads = Int64Flag(flags, "num-heads", 0);
  if (!heads.ok()) return heads.status();
  a->set_num_heads(*heads);
  a->set_symmetric(flags.count("symmetric") != 0);
  return SetBiasGeometry(flags, [&](int64_t tq, int64_t tk, int64_t offset) {
    a->set_query_length(tq);
    a->set_key_length(tk);
    a->set_query_offset(offset);
  });
}

absl::Status SetT5(const FlagValues& flags, v1::T5Bias* t) {
  t->set_bidirectional(flags.count("bidirectional") != 0);
  absl::StatusOr<int64_t> buckets = Int64Flag(flags, "num-buckets", 0);
  if (!buckets.ok()) return buckets.status();
  t->set_num_buckets(*buckets);
  absl::StatusOr<int64_t> max_distance = Int64Flag(flags, "max-distance", 0);
  if (!max_distance.ok()) return max_distance.status();
  t->set_max_distance(*max_distance);
  return SetBiasGeometry(flags, [&](int64_t tq, int64_t tk, int64_t offset) {
    t->set_query_length(tq);
    t->set_key_length(tk);
    t->set_query_offset(offset);
  });
}

}  // namespace

int RunPositionalEncode(Client& client, const FlagValues& flags) {
  if (flags.count("method") == 0) return UsageError("positional-encode needs --method");
  if (flags.count("out") == 0) return UsageError("positional-encode needs --out");
  const std::string& name = flags.at("method");
  const Method* method = nullptr;
  std::vector<std::string> names;
  for (const Method& m : Methods()) {
    names.push_back(m.name);
    if (m.name == name) method = &m;
  }
  if (method == nullptr) {
    return UsageError(absl::StrCat("--method must be one of ", absl::StrJoin(names, ", "),
                                   ", not '", name, "'"));
  }
  // The command accepts every method's flags; refuse those of another method
  // rather than ignore them silently.
  for (const auto& entry : flags) {
    // Not a structured binding: C++17 lets no lambda capture one (clang refuses).
    const std::string& flag = entry.first;
    auto in = [&](const auto& list) {
      return std::find(std::begin(list), std::end(list), flag) != std::end(list);
    };
    if (!in(kCommonFlags) && !in(method->flags)) {
      return UsageError(absl::StrCat("--", flag, " does not apply to --method ", name));
    }
  }
  for (const char* required : method->required) {
    if (flags.count(required) == 0) {
      return UsageError(absl::StrCat("--method ", name, " needs --", required));
    }
  }
  absl::StatusOr<TensorFormats> formats = ParseTensorFormats(flags);
  if (!formats.ok()) return UsageError(formats.status().message());
  v1::PositionalEncodeRequest request;
  // Generated tables (sinusoidal, alibi without scores) have no input to take their
  // dtype from: an explicit --wire-dtype also asks for the response in it.
  request.set_output_dtype(formats->wire);
  v1::DataType wire = formats->wire;

  absl::Status set;
  bool loaded = true;
  if (name == "sinusoidal") {
    set = SetSinusoidal(flags, request.mutable_sinusoidal());
    if (set.ok() && flags.count("input") != 0) {
      loaded = LoadTensor(flags.at("input"), &wire,
                          request.mutable_sinusoidal()->mutable_input());
    }
  } else if (name == "learned") {
    v1::Learned* learned = request.mutable_learned();
    absl::StatusOr<Positions> positions = ParsePositions(flags);
    set = positions.status();
    if (set.ok()) {
      learned->set_position_offset(positions->offset);
      learned->mutable_positions()->Add(positions->positions.begin(),
                                        positions->positions.end());
      loaded = LoadTensor(flags.at("input"), &wire, learned->mutable_input()) &&
               LoadTensor(flags.at("table"), &wire, learned->mutable_table());
    }
  } else if (name == "rope") {
    v1::Rope* rope = request.mutable_rope();
    set = SetRope(flags, rope);
    if (set.ok()) {
      loaded = LoadTensor(flags.at("query"), &wire, rope->mutable_query()) &&
               (flags.count("key") == 0 ||
                LoadTensor(flags.at("key"), &wire, rope->mutable_key()));
    }
  } else if (name == "alibi") {
    set = SetAlibi(flags, request.mutable_alibi());
    if (set.ok() && flags.count("scores") != 0) {
      loaded = LoadTensor(flags.at("scores"), &wire,
                          request.mutable_alibi()->mutable_scores());
    }
  } else {  // t5-bias
    set = SetT5(flags, request.mutable_t5_bias());
    if (set.ok()) {
      loaded = LoadTensor(flags.at("table"), &wire,
                          request.mutable_t5_bias()->mutable_table());
    }
  }
  if (!set.ok()) return UsageError(set.message());
  if (!loaded) return kExitUsageOrFile;

  absl::StatusOr<v1::PositionalEncodeResponse> response =
      client.PositionalEncode(request);
  if (!response.ok()) return RpcError(response.status());
  return SaveOutputs(
      flags, formats->out,
      {{"output", &response->output(), "out"},
       {"key", response->has_key() ? &response->key() : nullptr, "key-out"}});
}

}  // namespace layerserve::client
