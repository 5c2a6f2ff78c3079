// --layers=START:END (server/models/layer_span.h): the flag's parsing, a
// repository that loads only the span's blocks (demo and a real checkpoint), the
// span in ModelInfo, FAILED for a model with fewer layers than END, and
// OUT_OF_RANGE for calls outside the span (ResolveLayerRange, which BlockForward
// and OpenSession share).
#include "server/models/layer_span.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/models/checkpoint.h"
#include "server/models/model_loader.h"
#include "server/models/model_repository.h"
#include "server/ops/block_forward.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kTinyLlama[] = LAYERSERVE_SOURCE_DIR "/tests/golden/models/tiny-llama";

TEST(ParseLayerSpanTest, EmptyIsEveryLayer) {
  const absl::StatusOr<LayerSpan> span = ParseLayerSpan("");
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_TRUE(span->all());
  EXPECT_EQ(span->ToString(), "");
}

TEST(ParseLayerSpanTest, StartEnd) {
  const absl::StatusOr<LayerSpan> span = ParseLayerSpan("3:6");
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(span->start, 3);
  EXPECT_EQ(span->end, 6);
  EXPECT_FALSE(span->all());
  EXPECT_EQ(span->ToString(), "3:6");
}

TEST(ParseLayerSpanTest, ErrorsNameTheFlagAndTheText) {
  for (const char* text : {"3", "3:", ":6", "a:b", "1:2:3", "3-6", " 3:6x"}) {
    EXPECT_THAT(
        ParseLayerSpan(text),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("--layers"), HasSubstr(text), HasSubstr("START:END"))))
        << text;
  }
  EXPECT_THAT(ParseLayerSpan("-1:4"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--layers: START -1 must be >= 0")));
  EXPECT_THAT(ParseLayerSpan("4:4"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--layers: END 4 must be above START 4")));
  EXPECT_THAT(ParseLayerSpan("5:2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--layers: END 2 must be above START 5")));
}

TEST(LayerSpanRepositoryTest, DemoHoldsOnlyTheSpanWithTheFullModelsWeights) {
  const auto full = ModelRepository::Demo(kernels::WeightType::kFloat32);
  const auto span = ModelRepository::Demo(kernels::WeightType::kFloat32, {1, 3});
  const Model& f = *full->models()[0];
  const Model& s = *span->models()[0];
  ASSERT_TRUE(s.ready()) << s.error;
  EXPECT_EQ(s.blocks.size(), 2u);
  EXPECT_EQ(s.span_start, 1);
  EXPECT_EQ(s.span_end, 3);
  // Layer 1 of the span replica is layer 1 of the full model, byte for byte.
  EXPECT_EQ(s.layer_weights(1).bytes(), f.layer_weights(1).bytes());
  EXPECT_EQ(s.layer_weights(2).attn_norm_weight, f.layer_weights(2).attn_norm_weight);
  v1::ModelInfo info;
  span->Describe(s.name, &info);
  EXPECT_EQ(info.num_layers(), 4);
  EXPECT_EQ(info.span_layer_start(), 1);
  EXPECT_EQ(info.span_num_layers(), 2);
  full->Describe(f.name, &info);
  EXPECT_EQ(info.span_layer_start(), 0);
  EXPECT_EQ(info.span_num_layers(), 4);
}

TEST(LayerSpanRepositoryTest, CheckpointLoadsOnlyTheSpansBlocks) {
  const std::unique_ptr<Model> model = ModelRepository::LoadModel(
      "tiny-llama", kTinyLlama, kernels::WeightType::kFloat32, {1, 3});
  ASSERT_TRUE(model->ready()) << model->error;
  EXPECT_EQ(model->config.num_layers, 3);
  EXPECT_EQ(model->blocks.size(), 2u);
  EXPECT_EQ(model->span_start, 1);
  EXPECT_EQ(model->span_end, 3);
}

TEST(LayerSpanRepositoryTest, ModelWithFewerLayersThanEndFailsNamingBoth) {
  const std::unique_ptr<Model> model = ModelRepository::LoadModel(
      "tiny-llama", kTinyLlama, kernels::WeightType::kFloat32, {2, 8});
  EXPECT_FALSE(model->ready());
  EXPECT_THAT(model->error, AllOf(HasSubstr("--layers=2:8"), HasSubstr("8"),
                                  HasSubstr("the model has 3 layers")));
  EXPECT_TRUE(model->blocks.empty());
  const auto demo = ModelRepository::Demo(kernels::WeightType::kFloat32, {0, 5});
  EXPECT_FALSE(demo->models()[0]->ready());
  EXPECT_THAT(demo->models()[0]->error, HasSubstr("ends at layer 5 but the model has 4"));
  EXPECT_EQ(demo->default_model(), nullptr);
}

TEST(LayerSpanRangeTest, InsideTheSpanResolves) {
  const auto models = ModelRepository::Demo(kernels::WeightType::kFloat32, {1, 3});
  const absl::StatusOr<LayerRange> range = ResolveLayerRange(*models, "", 1, 2);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->start, 1);
  EXPECT_EQ(range->count, 2);
  EXPECT_TRUE(ResolveLayerRange(*models, "demo", 2, 1).ok());
}

TEST(LayerSpanRangeTest, OutsideTheSpanIsOutOfRangeNamingSpanAndAsked) {
  const auto models = ModelRepository::Demo(kernels::WeightType::kFloat32, {1, 3});
  EXPECT_THAT(ResolveLayerRange(*models, "", 0, 1),
              StatusIs(absl::StatusCode::kOutOfRange,
                       AllOf(HasSubstr("layers 0..0 of model \"demo\""),
                             HasSubstr("outside this server's span, layers 1..2"),
                             HasSubstr("--layers=1:3"))));
  EXPECT_THAT(ResolveLayerRange(*models, "", 2, 2),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("layers 2..3 of model")));
  // Past the model's end is still the model's error, not the span's.
  EXPECT_THAT(ResolveLayerRange(*models, "", 4, 1),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("past the last layer of model \"demo\" (4 layers)")));
}

// A Llama checkpoint of `layers` layers of zeros (hidden 256, d_ff 512: 2.6 MB
// per layer), the layers one after another in the file, and its config.json.
struct ZeroLlama {
  static constexpr int64_t kHidden = 256, kFfn = 512;
  static constexpr int64_t kLayerBytes =
      (4 * kHidden * kHidden + 3 * kHidden * kFfn + 2 * kHidden) * 4;
  std::string dir, config;

  explicit ZeroLlama(int64_t layers) {
    dir = ::testing::TempDir() + "/zero-llama-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    nlohmann::json c = {{"model_type", "llama"},     {"hidden_size", kHidden},
                        {"intermediate_size", kFfn}, {"num_attention_heads", 4},
                        {"num_key_value_heads", 4},  {"num_hidden_layers", layers},
                        {"rms_norm_eps", 1e-5},      {"max_position_embeddings", 64},
                        {"hidden_act", "silu"}};
    config = c.dump();
    nlohmann::json header = nlohmann::json::object();
    int64_t offset = 0;
    const std::pair<const char*, std::vector<int64_t>> tensors[] = {
        {"input_layernorm.weight", {kHidden}},
        {"post_attention_layernorm.weight", {kHidden}},
        {"self_attn.q_proj.weight", {kHidden, kHidden}},
        {"self_attn.k_proj.weight", {kHidden, kHidden}},
        {"self_attn.v_proj.weight", {kHidden, kHidden}},
        {"self_attn.o_proj.weight", {kHidden, kHidden}},
        {"mlp.gate_proj.weight", {kFfn, kHidden}},
        {"mlp.up_proj.weight", {kFfn, kHidden}},
        {"mlp.down_proj.weight", {kHidden, kFfn}}};
    for (int64_t layer = 0; layer < layers; ++layer) {
      for (const auto& [name, shape] : tensors) {
        int64_t bytes = 4;
        for (int64_t d : shape) bytes *= d;
        header["model.layers." + std::to_string(layer) + "." + name] = {
            {"dtype", "F32"},
            {"shape", shape},
            {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
      }
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    const uint64_t length = text.size();
    out.write(reinterpret_cast<const char*>(&length), 8);  // Little-endian x86-64.
    out << text << std::string(offset, '\0');
  }
  ~ZeroLlama() { std::filesystem::remove_all(dir); }
};

// Resident bytes of this process's mappings of `path` (/proc/self/smaps).
int64_t MappedResidentBytes(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  const std::string canonical = std::filesystem::canonical(path).string();
  std::string line;
  bool inside = false;
  int64_t total = 0;
  while (std::getline(smaps, line)) {
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first.find('-') != std::string::npos) {  // A mapping's first line.
      std::string perms, offset, device, inode, file;
      fields >> perms >> offset >> device >> inode >> file;
      inside = file == canonical;
    } else if (inside && first == "Rss:") {
      int64_t kib = 0;
      fields >> kib;
      total += kib * 1024;
    }
  }
  return total;
}

// Loading a span reads only its blocks' bytes of the memory-mapped file: the
// mapping's resident pages are the span's, plus what the kernel maps around a
// fault on each side (the file's page cache comes in folios of up to 2 MiB on
// ext4, mapped whole: 10.6 MB resident for the 7.9 MB span here, on Linux 6.18)
// and the header. Loading every layer maps them all (21 MB), which shows the
// measure sees the pages a load touches.
TEST(LayerSpanLoadTest, OnlyTheSpansPagesOfTheCheckpointAreTouched) {
  const ZeroLlama file(8);
  const absl::StatusOr<ModelConfig> config = ParseModelConfig(file.config, "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string path = file.dir + "/model.safetensors";
  {
    absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(file.dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    const auto blocks =
        LoadBlocks(*config, *checkpoint, kernels::WeightType::kFloat32, 3, 6);
    ASSERT_TRUE(blocks.ok()) << blocks.status();
    EXPECT_EQ(blocks->size(), 3u);
    const int64_t resident = MappedResidentBytes(path);
    EXPECT_GE(resident, 3 * ZeroLlama::kLayerBytes);
    EXPECT_LE(resident, 3 * ZeroLlama::kLayerBytes + (4 << 20) + (64 << 10));
  }
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(file.dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_TRUE(LoadBlocks(*config, *checkpoint, kernels::WeightType::kFloat32, 0, 8).ok());
  EXPECT_GE(MappedResidentBytes(path), 8 * ZeroLlama::kLayerBytes);
}

}  // namespace
}  // namespace layerserve
