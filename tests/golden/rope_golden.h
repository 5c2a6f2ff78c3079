// Loader for tests/golden/rope_golden.json, the RoPE cases computed by PyTorch as
// Hugging Face does (tests/golden/make_rope_golden.py documents the schema and the
// tolerances). Shared by the kernel golden test and the server-level test that
// sends the same cases as Rope messages. Plain functions; safe from any thread.
#ifndef LAYERSERVE_TESTS_GOLDEN_ROPE_GOLDEN_H_
#define LAYERSERVE_TESTS_GOLDEN_ROPE_GOLDEN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace layerserve::golden {

// Tolerances from make_rope_golden.py: |got - expected| <= tol * max(1, |expected|).
inline constexpr double kRopeFloat32Tolerance = 1e-5;
inline constexpr double kRopeBfloat16Tolerance = 2e-2;

struct RopeGoldenScaling {
  std::string type;  // "NONE", "LINEAR", "DYNAMIC_NTK", "YARN" or "LLAMA3".
  float factor = 1;
  int64_t original_max_position_embeddings = 0;
  // Unset (null in the file): the defaults apply.
  std::optional<float> beta_fast, beta_slow, attention_factor;
  std::optional<float> low_freq_factor, high_freq_factor;
};

struct RopeGoldenCase {
  std::string name;
  std::string style;                 // "HALF" or "INTERLEAVED".
  std::string layout;                // "BHTD" or "BTHD".
  std::vector<int64_t> query_shape;  // Rank 4 in `layout`.
  std::vector<int64_t> key_shape;    // Empty: no key.
  float theta = 0;
  int64_t rotary_dim = 0;  // As in the request: 0 = head dim.
  RopeGoldenScaling scaling;
  int64_t position_offset = 0;
  std::vector<int64_t> positions;  // Empty, T or B*T entries.
  // PyTorch's float32 frequencies (HF's buffer) and attention factor.
  std::vector<float> inv_freq;
  float attention_scaling = 1;
  // Flat, row-major in `layout`. key and expected_key are empty without a key.
  std::vector<float> query, key, expected_query, expected_key;

  bool bhtd() const { return layout == "BHTD"; }
  int64_t batch() const { return query_shape[0]; }
  int64_t tokens() const { return bhtd() ? query_shape[2] : query_shape[1]; }
  int64_t head_dim() const { return query_shape[3]; }
  int64_t resolved_rotary_dim() const {
    return rotary_dim == 0 ? head_dim() : rotary_dim;
  }
  // Heads of a shape in `layout`.
  int64_t heads(const std::vector<int64_t>& shape) const {
    return bhtd() ? shape[1] : shape[2];
  }
  // The positions of the proto's rule: B*T entries, or T shared by every row
  // (then `shared` is set and T entries are returned).
  std::vector<int64_t> ResolvedPositions(bool* shared) const;
};

// Reads and checks every case (array sizes against the shapes). Throws
// std::runtime_error naming the file and the problem.
std::vector<RopeGoldenCase> LoadRopeGolden(const std::string& path);

}  // namespace layerserve::golden

#endif  // LAYERSERVE_TESTS_GOLDEN_ROPE_GOLDEN_H_
