#include "tools/loadgen/prometheus_text.h"

#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace layerserve::client {
namespace {

bool IsNameChar(char c, bool first) {
  return absl::ascii_isalpha(c) || c == '_' || c == ':' ||
         (!first && absl::ascii_isdigit(c));
}

// Reads a metric or label name at the start of *s.
bool ConsumeName(absl::string_view* s, std::string* name) {
  size_t n = 0;
  while (n < s->size() && IsNameChar((*s)[n], n == 0)) ++n;
  if (n == 0) return false;
  *name = std::string(s->substr(0, n));
  s->remove_prefix(n);
  return true;
}

// Reads a quoted label value at the start of *s, unescaping it.
bool ConsumeQuoted(absl::string_view* s, std::string* value) {
  if (s->empty() || s->front() != '"') return false;
  value->clear();
  for (size_t i = 1; i < s->size(); ++i) {
    const char c = (*s)[i];
    if (c == '"') {
      s->remove_prefix(i + 1);
      return true;
    }
    if (c == '\\') {
      if (++i == s->size()) return false;
      const char e = (*s)[i];
      value->push_back(e == 'n' ? '\n' : e);
    } else {
      value->push_back(c);
    }
  }
  return false;  // No closing quote.
}

// Case-insensitive for the special values: prometheus-cpp writes "Nan".
bool ParseValue(absl::string_view text, double* value) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "+inf" || lower == "inf") {
    *value = std::numeric_limits<double>::infinity();
  } else if (lower == "-inf") {
    *value = -std::numeric_limits<double>::infinity();
  } else if (lower == "nan") {
    *value = std::numeric_limits<double>::quiet_NaN();
  } else {
    return absl::SimpleAtod(text, value);
  }
  return true;
}

bool ParseLine(absl::string_view line, MetricSample* sample) {
  if (!ConsumeName(&line, &sample->name)) return false;
  if (!line.empty() && line.front() == '{') {
    line.remove_prefix(1);
    while (true) {
      line = absl::StripLeadingAsciiWhitespace(line);
      if (!line.empty() && line.front() == '}') {
        line.remove_prefix(1);
        break;
      }
      std::string key, value;
      if (!ConsumeName(&line, &key)) return false;
      line = absl::StripLeadingAsciiWhitespace(line);
      if (line.empty() || line.front() != '=') return false;
      line.remove_prefix(1);
      line = absl::StripLeadingAsciiWhitespace(line);
      if (!ConsumeQuoted(&line, &value)) return false;
      sample->labels[key] = std::move(value);
      line = absl::StripLeadingAsciiWhitespace(line);
      if (!line.empty() && line.front() == ',') line.remove_prefix(1);
    }
  }
  // The value, then an optional timestamp.
  std::vector<absl::string_view> fields =
      absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (fields.empty() || fields.size() > 2) return false;
  return ParseValue(fields[0], &sample->value);
}

bool Matches(const MetricSample& s, absl::string_view name, const MetricLabels& match) {
  if (s.name != name) return false;
  for (const auto& [key, value] : match) {
    auto it = s.labels.find(key);
    if (it == s.labels.end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<MetricSample>> ParsePrometheusText(absl::string_view text) {
  std::vector<MetricSample> samples;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    MetricSample sample;
    if (!ParseLine(line, &sample)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics line ", line_number, ": cannot parse '", line, "'"));
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

double SumSamples(const std::vector<MetricSample>& samples, absl::string_view name,
                  const MetricLabels& match, bool* found) {
  double sum = 0;
  bool any = false;
  for (const MetricSample& s : samples) {
    if (!Matches(s, name, match)) continue;
    sum += s.value;
    any = true;
  }
  if (found != nullptr) *found = any;
  return sum;
}

std::map<std::string, double> SumSamplesBy(const std::vector<MetricSample>& samples,
                                           absl::string_view name, absl::string_view by,
                                           const MetricLabels& match) {
  std::map<std::string, double> sums;
  for (const MetricSample& s : samples) {
    if (!Matches(s, name, match)) continue;
    auto it = s.labels.find(by);
    if (it != s.labels.end()) sums[it->second] += s.value;
  }
  return sums;
}

}  // namespace layerserve::client
