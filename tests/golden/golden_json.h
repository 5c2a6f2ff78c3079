// What every golden-file loader needs from nlohmann::json: the file's cases, float32
// values written by the generators (numbers as double rounded to float32, which
// gives back the exact float32 each generator wrote; "nan", "inf", "-inf" as
// strings), shapes, and size checks that name the case. Errors throw
// std::runtime_error.
#ifndef LAYERSERVE_TESTS_GOLDEN_GOLDEN_JSON_H_
#define LAYERSERVE_TESTS_GOLDEN_GOLDEN_JSON_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace layerserve::golden {

// Calls on_case with each entry of the "cases" of the golden file at `path`, in
// order. Every error (the file cannot be opened, bad JSON, a missing key, a check
// failed in on_case) throws std::runtime_error prefixed with the path.
void ForEachCase(const std::string& path,
                 const std::function<void(const nlohmann::json&)>& on_case);

float Float(const nlohmann::json& value);
// Empty for null.
std::vector<float> Floats(const nlohmann::json& values);
int64_t Product(const std::vector<int64_t>& shape);
// The golden files' closeness: |got - expected| <= tolerance * max(1, |expected|);
// a NaN expected needs a NaN, an infinity the same infinity.
bool WithinTolerance(float got, float expected, double tolerance);
// Throws "case NAME: WHAT has N values, expected M" unless got == expected.
void CheckCount(const std::string& case_name, const std::string& what, size_t got,
                int64_t expected);

}  // namespace layerserve::golden

#endif  // LAYERSERVE_TESTS_GOLDEN_GOLDEN_JSON_H_
