// Parses activation_golden.json with nlohmann::json. Numbers are read as double and
// rounded to float32, which gives back the exact float32 values the generator wrote
// (it checks that for every number); "nan", "inf" and "-inf" are strings.
#include "tests/golden/activation_golden.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace layerserve::golden {
namespace {

float Float(const nlohmann::json& v) {
  if (v.is_number()) return static_cast<float>(v.get<double>());
  const std::string s = v.get<std::string>();
  if (s == "nan") return std::numeric_limits<float>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<float>::infinity();
  if (s == "-inf") return -std::numeric_limits<float>::infinity();
  throw std::runtime_error("bad number \"" + s + "\"");
}

std::vector<float> Floats(const nlohmann::json& j) {
  std::vector<float> out;
  if (j.is_null()) return out;
  out.reserve(j.size());
  for (const auto& v : j) out.push_back(Float(v));
  return out;
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void CheckSize(const ActivationGoldenCase& c, const std::string& what,
               const std::vector<float>& values, int64_t expected) {
  if (static_cast<int64_t>(values.size()) != expected) {
    throw std::runtime_error("case " + c.name + ": " + what + " has " +
                             std::to_string(values.size()) + " values, shape needs " +
                             std::to_string(expected));
  }
}

}  // namespace

int64_t ActivationGoldenCase::elements() const { return Product(shape); }

std::vector<ActivationGoldenCase> LoadActivationGolden(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::vector<ActivationGoldenCase> cases;
  try {
    const nlohmann::json doc = nlohmann::json::parse(file);
    for (const auto& j : doc.at("cases")) {
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
      CheckSize(c, "input", c.input, c.elements());
      CheckSize(c, "gate", c.gate, c.form == "gated" ? c.elements() : 0);
      CheckSize(c, "expected", c.expected,
                c.form == "packed" ? c.elements() / 2 : c.elements());
      CheckSize(c, "expected_shape", c.expected, Product(c.expected_shape));
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
