#include "server/models/layer_span.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace layerserve {

std::string LayerSpan::ToString() const {
  if (all()) return "";
  return absl::StrCat(start, ":", end);
}

absl::StatusOr<LayerSpan> ParseLayerSpan(absl::string_view text) {
  if (text.empty()) return LayerSpan{};
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  LayerSpan span;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &span.start) ||
      !absl::SimpleAtoi(parts[1], &span.end)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--layers: \"", text, "\" is not START:END (half-open, zero-based, e.g. 0:16)"));
  }
  if (span.start < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layers: START ", span.start, " must be >= 0"));
  }
  if (span.end <= span.start) {
    return absl::InvalidArgumentError(absl::StrCat("--layers: END ", span.end,
                                                   " must be above START ", span.start,
                                                   " (the span is half-open)"));
  }
  return span;
}

}  // namespace layerserve
