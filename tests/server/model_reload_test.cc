// Reloading the model repository: the scan that says what changed (added, removed,
// changed by the stamps of config.json and the weight files) and the swap of the
// served set (a model held by a call survives a reload that removes it; Find after
// a reload gives the new version; a changed model that fails to load keeps its old
// version serving; sessions of a replaced model end with NOT_FOUND).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/models/model_repository.h"
#include "server/models/repository_scan.h"
#include "server/sessions/session_store.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

namespace fs = std::filesystem;
using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const fs::path kModels = LAYERSERVE_SOURCE_DIR "/tests/golden/models";

std::vector<std::string> Names(const std::vector<FoundModel>& found) {
  std::vector<std::string> names;
  for (const FoundModel& model : found) names.push_back(model.name);
  return names;
}

class ModelReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/model_reload_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    repo_ = pattern;
  }
  void TearDown() override { fs::remove_all(repo_); }

  // Puts golden model `golden` at `name` in the repository, replacing what was.
  void Put(const std::string& name, const std::string& golden) {
    fs::remove_all(repo_ / name);
    fs::copy(kModels / golden, repo_ / name);
  }
  // Rewrites a file with one more byte: its stamp moves whatever the clock's grain.
  void Touch(const std::string& name, const std::string& file) {
    std::ofstream(repo_ / name / file, std::ios::app) << " ";
  }
  std::map<std::string, ModelFilesStamp> Stamps() {
    std::map<std::string, ModelFilesStamp> stamps;
    const std::vector<FoundModel> found = *ScanRepository(repo_.string());
    for (const FoundModel& model : found) {
      stamps[model.name] = model.stamp;
    }
    return stamps;
  }
  ReloadReport Reload(ModelRepository& models) {
    absl::StatusOr<RepositoryChanges> changes = models.Scan();
    EXPECT_TRUE(changes.ok()) << changes.status();
    std::vector<std::shared_ptr<Model>> loaded;
    for (const auto* list : {&changes->added, &changes->changed}) {
      for (const FoundModel& found : *list) loaded.push_back(models.LoadFound(found));
    }
    return models.Publish(*changes, std::move(loaded));
  }
  std::unique_ptr<ModelRepository> Load() {
    auto models = ModelRepository::Load(repo_.string(), kernels::WeightType::kFloat32);
    EXPECT_TRUE(models.ok()) << models.status();
    return *std::move(models);
  }

  fs::path repo_;
};

TEST_F(ModelReloadTest, ScanSeesAddedRemovedAndChangedModels) {
  Put("a", "tiny-mistral");
  Put("b", "tiny-mistral");
  Put("c", "tiny-llama");
  fs::create_directory(repo_ / "not-a-model");  // No config.json.
  const auto before = Stamps();
  EXPECT_EQ(before.size(), 3u);
  // The stamp covers the config, the weights and the shard index.
  EXPECT_EQ(before.at("c").size(), 4u);

  fs::remove_all(repo_ / "a");
  Touch("b", "config.json");
  Put("d", "tiny-mistral");
  std::ofstream(repo_ / "c" / "README.md") << "not read by the server";
  const RepositoryChanges changes =
      CompareRepository(before, *ScanRepository(repo_.string()));
  EXPECT_THAT(Names(changes.added), ElementsAre("d"));
  EXPECT_THAT(changes.removed, ElementsAre("a"));
  EXPECT_THAT(Names(changes.changed), ElementsAre("b"));
  EXPECT_THAT(changes.unchanged, ElementsAre("c"));
}

TEST_F(ModelReloadTest, ScanSeesWeightsRewrittenOrAShardAdded) {
  Put("a", "tiny-mistral");
  Put("b", "tiny-llama");
  const auto before = Stamps();
  Touch("a", "model.safetensors");
  std::ofstream(repo_ / "b" / "model-00003-of-00003.safetensors") << "x";
  const RepositoryChanges changes =
      CompareRepository(before, *ScanRepository(repo_.string()));
  EXPECT_THAT(Names(changes.changed), ElementsAre("a", "b"));
  EXPECT_TRUE(CompareRepository(Stamps(), *ScanRepository(repo_.string())).empty());
}

TEST_F(ModelReloadTest, ScanOfAMissingDirectoryIsNotFound) {
  EXPECT_THAT(ScanRepository((repo_ / "missing").string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

TEST_F(ModelReloadTest, HeldModelSurvivesItsRemovalAndFindGivesTheNewVersion) {
  Put("a", "tiny-mistral");
  Put("b", "tiny-mistral");
  auto models = Load();
  const std::shared_ptr<const Model> held_a = *models->Find("a");
  const std::shared_ptr<const Model> held_b = *models->Find("b");
  EXPECT_EQ(held_b->version, 1);

  fs::remove_all(repo_ / "a");
  Put("b", "tiny-llama");  // Other numbers, other shape.
  Put("c", "tiny-mistral");
  const ReloadReport report = Reload(*models);
  EXPECT_THAT(report.added, ElementsAre("c"));
  EXPECT_THAT(report.replaced, ElementsAre("b"));
  EXPECT_THAT(report.removed, ElementsAre("a"));
  EXPECT_THAT(report.failed, IsEmpty());
  EXPECT_EQ(report.ToString(),
            "added [c], replaced [b], removed [a], failed [], unchanged 0");

  // What a call holds still works: its weights are still there.
  EXPECT_TRUE(held_a->retired.load());
  EXPECT_TRUE(held_b->retired.load());
  ASSERT_TRUE(held_a->ready());
  EXPECT_EQ(held_a->blocks.size(), static_cast<size_t>(held_a->config.num_layers));
  EXPECT_GT(held_a->layer_weights(0).bytes(), 0);

  EXPECT_THAT(models->Find("a"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"a\"")));
  const std::shared_ptr<const Model> new_b = *models->Find("b");
  EXPECT_NE(new_b, held_b);
  EXPECT_EQ(new_b->version, 2);
  EXPECT_FALSE(new_b->retired.load());
  EXPECT_EQ(new_b->config.model_type, "llama");
  EXPECT_EQ((*models->Find("c"))->version, 1);
  v1::ModelInfo info;
  ASSERT_TRUE(models->Describe("b", &info));
  EXPECT_EQ(info.version(), 2);
  EXPECT_EQ(info.state(), v1::ModelInfo::READY);
  EXPECT_EQ(info.reload_error(), "");

  // Nothing changed since: nothing to do.
  EXPECT_TRUE(models->Scan()->empty());
}

TEST_F(ModelReloadTest, BrokenReplacementKeepsTheOldVersionServing) {
  Put("a", "tiny-mistral");
  auto models = Load();
  const std::shared_ptr<const Model> old = *models->Find("a");
  std::ofstream(repo_ / "a" / "config.json", std::ios::trunc) << "{ not json";
  const ReloadReport report = Reload(*models);
  ASSERT_EQ(report.failed.size(), 1u);
  EXPECT_EQ(report.failed[0].first, "a");
  EXPECT_THAT(report.kept, ElementsAre("a"));
  EXPECT_THAT(report.ToString(), HasSubstr("(the old version serves)"));
  EXPECT_EQ(*models->Find("a"), old);
  EXPECT_FALSE(old->retired.load());
  v1::ModelInfo info;
  ASSERT_TRUE(models->Describe("a", &info));
  EXPECT_EQ(info.state(), v1::ModelInfo::READY);
  EXPECT_EQ(info.version(), 1);
  EXPECT_THAT(info.reload_error(), HasSubstr("config.json"));
  // The broken files are not tried again until they change.
  EXPECT_TRUE(models->Scan()->empty());

  Put("a", "tiny-mistral");  // Fixed.
  const ReloadReport fixed = Reload(*models);
  EXPECT_THAT(fixed.replaced, ElementsAre("a"));
  ASSERT_TRUE(models->Describe("a", &info));
  EXPECT_EQ(info.version(), 2);
  EXPECT_EQ(info.reload_error(), "");
}

TEST_F(ModelReloadTest, BrokenNewModelIsFailedAndAModelAddedAgainContinuesItsVersion) {
  Put("a", "tiny-mistral");
  auto models = Load();
  fs::create_directory(repo_ / "broken");
  std::ofstream(repo_ / "broken" / "config.json") << "{}";
  Put("a", "tiny-llama");
  EXPECT_EQ(Reload(*models).failed.size(), 1u);
  EXPECT_THAT(models->Find("broken"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("broken")));
  v1::ModelInfo info;
  ASSERT_TRUE(models->Describe("broken", &info));
  EXPECT_EQ(info.state(), v1::ModelInfo::FAILED);
  EXPECT_EQ(info.reload_error(), "");

  fs::remove_all(repo_ / "a");
  EXPECT_THAT(Reload(*models).removed, ElementsAre("a"));
  Put("a", "tiny-mistral");
  EXPECT_THAT(Reload(*models).added, ElementsAre("a"));
  // Version 3, not 1 again: calls still on version 1 never batch with it.
  EXPECT_EQ((*models->Find("a"))->version, 3);
}

TEST_F(ModelReloadTest, SessionsOfAReplacedModelEndAndOthersSurvive) {
  Put("a", "tiny-mistral");
  Put("b", "tiny-mistral");
  auto models = Load();
  SessionOptions options;
  options.replica = "replica";
  SessionStore sessions(options, nullptr);
  const std::string on_a = *sessions.Open(*models->Find("a"), 0, 1, 0);
  const std::string on_b = *sessions.Open(*models->Find("b"), 0, 1, 0);
  // A call on `a` runs across the reload: it keeps its lease and its model.
  absl::StatusOr<SessionLease> running = sessions.Acquire(on_a, 1);
  ASSERT_TRUE(running.ok());

  Touch("a", "config.json");
  EXPECT_THAT(Reload(*models).replaced, ElementsAre("a"));
  sessions.Sweep();
  EXPECT_EQ(sessions.active(), 2);  // `a`'s is busy: it ends when its call does.
  EXPECT_TRUE(running->get()->model->retired.load());
  running->Release(/*computed=*/false);

  EXPECT_THAT(
      sessions.Acquire(on_a, 1),
      StatusIs(absl::StatusCode::kNotFound,
               AllOf(HasSubstr("model \"a\" was reloaded"), HasSubstr("prefill again"))));
  EXPECT_TRUE(sessions.Acquire(on_b, 1).ok());
  EXPECT_EQ(sessions.active(), 1);
}

}  // namespace
}  // namespace layerserve
