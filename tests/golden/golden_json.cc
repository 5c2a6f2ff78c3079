#include "tests/golden/golden_json.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace layerserve::golden {

void ForEachCase(const std::string& path,
                 const std::function<void(const nlohmann::json&)>& on_case) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot open " + path);
  try {
    const nlohmann::json doc = nlohmann::json::parse(file);
    for (const auto& j : doc.at("cases")) on_case(j);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

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

bool WithinTolerance(float got, float expected, double tolerance) {
  if (std::isnan(expected)) return std::isnan(got);
  if (std::isinf(expected)) return got == expected;
  const double limit =
      tolerance * std::max(1.0, std::fabs(static_cast<double>(expected)));
  return std::fabs(static_cast<double>(got) - expected) <= limit;
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void CheckCount(const std::string& case_name, const std::string& what, size_t got,
                int64_t expected) {
  if (static_cast<int64_t>(got) != expected) {
    throw std::runtime_error("case " + case_name + ": " + what + " has " +
                             std::to_string(got) + " values, expected " +
                             std::to_string(expected));
  }
}

}  // namespace layerserve::golden
