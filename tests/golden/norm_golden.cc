// Parses norm_golden.json with nlohmann::json through golden_json.h: numbers are
// read as double and rounded to float32, which gives back the exact float32 values
// the generator wrote (it checks that for every number); "nan", "inf" and "-inf"
// are strings.
#include "tests/golden/norm_golden.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tests/golden/golden_json.h"

namespace layerserve::golden {

int64_t NormGoldenCase::rows() const {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return rows;
}

std::vector<NormGoldenCase> LoadNormGolden(const std::string& path) {
  std::vector<NormGoldenCase> cases;
  ForEachCase(path, [&cases](const nlohmann::json& j) {
    NormGoldenCase c;
    c.name = j.at("name").get<std::string>();
    c.kind = j.at("kind").get<std::string>();
    c.shape = j.at("shape").get<std::vector<int64_t>>();
    c.epsilon = Float(j.at("epsilon"));
    c.weight_offset = j.at("weight_offset").get<bool>();
    c.input = Floats(j.at("input"));
    c.weight = Floats(j.at("weight"));
    c.bias = Floats(j.at("bias"));
    c.residual = Floats(j.at("residual"));
    c.expected = Floats(j.at("expected"));
    c.expected_residual_out = Floats(j.at("expected_residual_out"));
    if (c.shape.empty() || (c.kind != "layer_norm" && c.kind != "rms_norm")) {
      throw std::runtime_error("case " + c.name + ": bad kind or empty shape");
    }
    const int64_t n = c.rows() * c.dim();
    CheckCount(c.name, "input", c.input.size(), n);
    CheckCount(c.name, "expected", c.expected.size(), n);
    // Optional: empty when absent.
    if (!c.weight.empty()) CheckCount(c.name, "weight", c.weight.size(), c.dim());
    if (!c.bias.empty()) CheckCount(c.name, "bias", c.bias.size(), c.dim());
    if (!c.residual.empty()) CheckCount(c.name, "residual", c.residual.size(), n);
    CheckCount(c.name, "expected_residual_out", c.expected_residual_out.size(),
               c.residual.empty() ? 0 : n);
    cases.push_back(std::move(c));
  });
  return cases;
}

}  // namespace layerserve::golden
