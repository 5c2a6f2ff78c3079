// Replays every committed input of every fuzz target in the normal build: the seed
// corpus (fuzz/corpus/<target>/) and each crash the fuzzers found
// (fuzz/regressions/<target>/, kept after the fix as regression tests). A target
// that crashes or breaks an invariant aborts this test. The corpus must also keep
// reaching both sides of each target (accepted and rejected inputs), so a target
// cannot quietly stop exercising the code it is meant to.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "gtest/gtest.h"

namespace layerserve::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;  // The folder name under fuzz/corpus and fuzz/regressions.
  Outcome (*function)(const uint8_t*, size_t);
  bool has_rejections;  // Some inputs of this target must be refused.
};

std::ostream& operator<<(std::ostream& os, const Target& target) {
  return os << target.name;
}

const Target kTargets[] = {
    {"normalize", FuzzNormalize, true},
    {"activate", FuzzActivate, true},
    {"positional_encode", FuzzPositionalEncode, true},
    {"block_forward", FuzzBlockForward, true},
    {"safetensors", FuzzSafetensors, true},
    {"model_config", FuzzModelConfig, true},
    {"tensor_codec", FuzzTensorCodec, true},
    {"batch_queues", FuzzBatchQueues, false},
    {"model_infer", FuzzModelInfer, true},
};

std::vector<fs::path> FilesIn(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

Outcome Replay(const Target& target, const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  return target.function(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

class ReplayTest : public ::testing::TestWithParam<Target> {};

TEST_P(ReplayTest, SeedCorpusRunsAndReachesEveryOutcome) {
  const Target& target = GetParam();
  const fs::path dir = fs::path(LAYERSERVE_SOURCE_DIR) / "fuzz" / "corpus" / target.name;
  const std::vector<fs::path> files = FilesIn(dir);
  // A target with no seeds would fuzz from nothing and replay nothing: a failure,
  // never a pass or a skip.
  ASSERT_FALSE(files.empty()) << "no seed corpus for " << target.name << ": " << dir
                              << " is missing or empty (fuzz/make_corpus.py writes it)";
  ASSERT_GE(files.size(), 3u) << dir;
  std::map<Outcome, int> outcomes;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    const Outcome outcome = Replay(target, file);
    // Seeds are made to be requests: none may be unparsable bytes.
    EXPECT_NE(outcome, Outcome::kUnparsable);
    ++outcomes[outcome];
  }
  EXPECT_GE(outcomes[Outcome::kAccepted], 1) << "no seed gets through to the Run step";
  if (target.has_rejections) {
    EXPECT_GE(outcomes[Outcome::kRejected], 1) << "no seed exercises a rejection";
  }
}

TEST_P(ReplayTest, RegressionsNoLongerCrash) {
  const Target& target = GetParam();
  const fs::path dir =
      fs::path(LAYERSERVE_SOURCE_DIR) / "fuzz" / "regressions" / target.name;
  const std::vector<fs::path> files = FilesIn(dir);
  // Nothing to replay is not a pass: the run says which targets have no regressions.
  if (files.empty()) {
    GTEST_SKIP() << "no regressions recorded for " << target.name << " yet";
  }
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    Replay(target, file);  // Aborts (fails the test) if the bug is back.
  }
}

// Every folder under fuzz/corpus and fuzz/regressions is a target above: inputs filed
// under a misspelt or removed target would otherwise never be replayed.
TEST(ReplayFolders, EveryFolderIsATarget) {
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path root = fs::path(LAYERSERVE_SOURCE_DIR) / "fuzz" / kind;
    if (!fs::is_directory(root)) continue;  // No regressions at all yet.
    for (const auto& entry : fs::directory_iterator(root)) {
      const std::string name = entry.path().filename().string();
      const bool known = std::any_of(std::begin(kTargets), std::end(kTargets),
                                     [&](const Target& t) { return name == t.name; });
      EXPECT_TRUE(known) << entry.path() << " is not a fuzz target of this test";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, ReplayTest, ::testing::ValuesIn(kTargets),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace layerserve::fuzz
