// Parses rope_golden.json with nlohmann::json. Numbers are read as double and
// rounded to float32, which gives back the exact float32 values the generator
// wrote (it checks that for every number).
#include "tests/golden/rope_golden.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "tests/golden/golden_json.h"

namespace layerserve::golden {
namespace {

std::optional<float> OptionalFloat(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return Float(j);
}

}  // namespace

std::vector<int64_t> RopeGoldenCase::ResolvedPositions(bool* shared) const {
  const int64_t t_count = tokens();
  *shared = positions.size() != static_cast<size_t>(batch() * t_count) || batch() == 1;
  if (positions.empty()) {
    std::vector<int64_t> out(t_count);
    for (int64_t t = 0; t < t_count; ++t) out[t] = position_offset + t;
    return out;
  }
  return *shared ? std::vector<int64_t>(positions.begin(), positions.begin() + t_count)
                 : positions;
}

std::vector<RopeGoldenCase> LoadRopeGolden(const std::string& path) {
  std::vector<RopeGoldenCase> cases;
  ForEachCase(path, [&cases](const nlohmann::json& j) {
    RopeGoldenCase c;
    c.name = j.at("name").get<std::string>();
    c.style = j.at("style").get<std::string>();
    c.layout = j.at("layout").get<std::string>();
    c.query_shape = j.at("query_shape").get<std::vector<int64_t>>();
    if (!j.at("key_shape").is_null()) {
      c.key_shape = j.at("key_shape").get<std::vector<int64_t>>();
    }
    c.theta = Float(j.at("theta"));
    c.rotary_dim = j.at("rotary_dim").get<int64_t>();
    const nlohmann::json& s = j.at("scaling");
    c.scaling.type = s.at("type").get<std::string>();
    c.scaling.factor = Float(s.at("factor"));
    c.scaling.original_max_position_embeddings =
        s.at("original_max_position_embeddings").get<int64_t>();
    c.scaling.beta_fast = OptionalFloat(s.at("beta_fast"));
    c.scaling.beta_slow = OptionalFloat(s.at("beta_slow"));
    c.scaling.attention_factor = OptionalFloat(s.at("attention_factor"));
    c.scaling.low_freq_factor = OptionalFloat(s.at("low_freq_factor"));
    c.scaling.high_freq_factor = OptionalFloat(s.at("high_freq_factor"));
    c.position_offset = j.at("position_offset").get<int64_t>();
    c.positions = j.at("positions").get<std::vector<int64_t>>();
    c.inv_freq = Floats(j.at("inv_freq"));
    c.attention_scaling = Float(j.at("attention_scaling"));
    c.query = Floats(j.at("query"));
    c.key = Floats(j.at("key"));
    c.expected_query = Floats(j.at("expected_query"));
    c.expected_key = Floats(j.at("expected_key"));

    if (c.query_shape.size() != 4 || (c.layout != "BHTD" && c.layout != "BTHD") ||
        (c.style != "HALF" && c.style != "INTERLEAVED") ||
        (!c.key_shape.empty() && c.key_shape.size() != 4)) {
      throw std::runtime_error("case " + c.name + ": bad shape, layout or style");
    }
    CheckCount(c.name, "query", c.query.size(), Product(c.query_shape));
    CheckCount(c.name, "expected_query", c.expected_query.size(), Product(c.query_shape));
    const int64_t key_size = c.key_shape.empty() ? 0 : Product(c.key_shape);
    CheckCount(c.name, "key", c.key.size(), key_size);
    CheckCount(c.name, "expected_key", c.expected_key.size(), key_size);
    CheckCount(c.name, "inv_freq", c.inv_freq.size(), c.resolved_rotary_dim() / 2);
    cases.push_back(std::move(c));
  });
  return cases;
}

}  // namespace layerserve::golden
