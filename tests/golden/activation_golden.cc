// Parses activation_golden.json with nlohmann::json. Numbers are read as double and
// rounded to float32, which gives back the exact float32 values the generator wrote
// (it checks that for every number); "nan", "inf" and "-inf" are strings.
#include "tests/golden/activation_golden.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tests/golden/golden_json.h"

namespace layerserve::golden {
int64_t ActivationGoldenCase::elements() const { return Product(shape); }

std::vector<ActivationGoldenCase> LoadActivationGolden(const std::string& path) {
  std::vector<ActivationGoldenCase> cases;
  ForEachCase(path, [&cases](const nlohmann::json& j) {
    ActivationGoldenCase c;
    c.name = j.at("name").get<std::string>();
    c.activation = j.at("activation").get<std::string>();
    c.form = j.at("form").get<std::string>();
    c.shape = j.at("shape").get<std::vector<int64_t>>();
    c.expected_shape = j.at("expected_shape").get<std::vector<int64_t>>();
    c.input = Floats(j.at("input"));
    c.gate = Floats(j.at("gate"));
    c.expected = Floats(j.at("expected"));
    if (c.shape.empty() || c.expected_shape.size() != c.shape.size()) {
      throw std::runtime_error("case " + c.name + ": bad shapes");
    }
    if (c.form != "elementwise" && c.form != "gated" && c.form != "packed") {
      throw std::runtime_error("case " + c.name + ": unknown form " + c.form);
    }
    CheckCount(c.name, "input", c.input.size(), c.elements());
    CheckCount(c.name, "gate", c.gate.size(), c.form == "gated" ? c.elements() : 0);
    CheckCount(c.name, "expected", c.expected.size(),
               c.form == "packed" ? c.elements() / 2 : c.elements());
    CheckCount(c.name, "expected_shape", c.expected.size(), Product(c.expected_shape));
    cases.push_back(std::move(c));
  });
  return cases;
}

}  // namespace layerserve::golden
