// Parses norm_golden.json with nlohmann::json through golden_json.h: numbers are
// read as double and rounded to float32, which gives back the exact float32 values
// the generator wrote (it checks that for every number); "nan", "inf" and "-inf"
// are strings.
#include "tests/golden/norm_golden.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tests/golden/golden_json.h"

namespace layerserve::golden {
namespace {

void CheckSize(const std::string& what, const NormGoldenCase& c,
               const std::vector<float>& values, int64_t expected, bool optional) {
  if (optional && values.empty()) return;
  if (static_cast<int64_t>(values.size()) != expected) {
    throw std::runtime_error("case " + c.name + ": " + what + " has " +
                             std::to_string(values.size()) + " values, shape needs " +
                             std::to_string(expected));
  }
}

}  // namespace

int64_t NormGoldenCase::rows() const {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return rows;
}

std::vector<NormGoldenCase> LoadNormGolden(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::vector<NormGoldenCase> cases;
  try {
    const nlohmann::json doc = nlohmann::json::parse(file);
    for (const auto& j : doc.at("cases")) {
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
      CheckSize("input", c, c.input, n, false);
      CheckSize("expected", c, c.expected, n, false);
      CheckSize("weight", c, c.weight, c.dim(), true);
      CheckSize("bias", c, c.bias, c.dim(), true);
      CheckSize("residual", c, c.residual, n, true);
      CheckSize("expected_residual_out", c, c.expected_residual_out,
                c.residual.empty() ? 0 : n, c.residual.empty());
      cases.push_back(std::move(c));
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return cases;
}

}  // namespace layerserve::golden
