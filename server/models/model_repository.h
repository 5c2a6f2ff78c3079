// The models a server serves: one per sub-directory of --model-repository (Hugging
// Face layout), or the built-in `demo` model. A model whose checkpoint fails to load
// is listed as FAILED with its error; the others serve.
//
// A reload (SIGHUP, --repository-poll-interval; server/rpc/reloader.h) rescans the
// directory and swaps in a new set of models: Scan, then LoadFound for each new or
// changed model (slow, while the old set serves), then Publish, which replaces the
// set at once. Every reader takes a snapshot and holds its models by shared_ptr: a
// call or session keeps the version it started with alive until it ends, whatever
// reloads do meanwhile. Thread-safe; one reload at a time.
#ifndef LAYERSERVE_SERVER_MODELS_MODEL_REPOSITORY_H_
#define LAYERSERVE_SERVER_MODELS_MODEL_REPOSITORY_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/block/block.h"
#include "kernels/linear/linear.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/models/layer_span.h"
#include "server/models/model_config.h"
#include "server/models/repository_scan.h"

namespace layerserve {

struct Model {
  std::string name;
  ModelConfig config;
  kernels::BlockConfig block;
  kernels::WeightType weight_type = kernels::WeightType::kFloat32;
  // The layers served, span_start .. span_end - 1 of config.num_layers: all of
  // them unless --layers names fewer. blocks holds exactly those.
  int64_t span_start = 0;
  int64_t span_end = 0;
  // kInt8 weights' inputs per scale as asked for (--weight-group-size; 0: one scale
  // per output). 0 for the other types.
  int64_t weight_group_size = 0;
  std::vector<kernels::BlockWeights> blocks;  // Empty when loading failed.
  std::string error;                          // Why loading failed; empty if ready.
  // 1 as loaded at start; each reload that loads the model again loads version + 1
  // (a model removed and added back too).
  // Jobs of different versions never share a batch (BlockForwardOp::BatchKey).
  int64_t version = 1;
  // Set once a reload replaced or removed this version. Sessions on it then end
  // (SessionStore: NOT_FOUND, "reloaded") while calls already running finish on it.
  // The one thing that changes in a published (const) model, hence mutable.
  mutable std::atomic<bool> retired{false};

  bool ready() const { return error.empty(); }
  // Block `layer` of the model, span_start <= layer < span_end.
  const kernels::BlockWeights& layer_weights(int64_t layer) const {
    return blocks[layer - span_start];
  }
};

// Sets `model`'s span from `span` and its config: FAILED_PRECONDITION when the
// model has fewer layers than the span's end.
absl::Status SetModelSpan(const LayerSpan& span, Model& model);
// Sets how `model`'s weights are held (Model::weight_type, weight_group_size).
void SetModelWeightFormat(const kernels::WeightFormat& format, Model& model);

// What a reload did, for its log line and the health service and metrics.
struct ReloadReport {
  std::vector<std::string> added;     // New and ready.
  std::vector<std::string> replaced;  // Changed; the new version serves.
  std::vector<std::string> removed;   // Gone from the directory.
  // Loads that failed, with the error: a new model (listed FAILED), or a changed
  // one (its old version keeps serving, ModelInfo.reload_error says why).
  std::vector<std::pair<std::string, std::string>> failed;
  // Failed loads whose old version keeps serving (a subset of `failed`'s names).
  std::vector<std::string> kept;
  int64_t unchanged = 0;

  // "added [a], replaced [b], removed [c], failed [d: why], unchanged N".
  std::string ToString() const;
};

class ModelRepository {
 public:
  using ModelPtr = std::shared_ptr<const Model>;

  // Loads every sub-directory of `dir` that holds a config.json. Fails only if
  // `dir` cannot be listed; each model's own failure is kept in that model.
  // `span`: the layers of each model to load and serve; a model with fewer
  // layers than span.end is FAILED.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> Load(
      const std::string& dir, kernels::WeightFormat format, LayerSpan span = {});
  // Of the built-in `demo` model alone (server/models/demo_model.h).
  static std::unique_ptr<ModelRepository> Demo(kernels::WeightFormat format,
                                               LayerSpan span = {});
  // One model from a checkpoint directory (used by Load and by tests).
  static std::unique_ptr<Model> LoadModel(const std::string& name, const std::string& dir,
                                          kernels::WeightFormat format,
                                          LayerSpan span = {});

  // A repository of these models and nothing to reload: the warm-up of the
  // versions a reload loaded, before they are published.
  static std::unique_ptr<ModelRepository> Of(std::vector<ModelPtr> models);

  // NOT_FOUND for an unknown name; FAILED_PRECONDITION for a model that failed to
  // load. An empty name is the default model. The version current now.
  absl::StatusOr<ModelPtr> Find(absl::string_view name) const;
  // The current models, by name.
  std::vector<ModelPtr> models() const;
  // The model used for an empty name: the first ready one by name. Null if none.
  ModelPtr default_model() const;

  // Every model, by name (ListModels).
  void DescribeAll(v1::ListModelsResponse* response) const;
  // The model `name` (empty: the default one); false when there is none.
  bool Describe(absl::string_view name, v1::ModelInfo* info) const;

  // The directory a reload rescans; empty for the demo model (nothing to reload).
  const std::string& dir() const { return dir_; }
  // Reload, step 1: what changed in dir() since the current models were loaded (or
  // their load last tried). NOT_FOUND if the directory cannot be listed.
  absl::StatusOr<RepositoryChanges> Scan() const;
  // Step 2, slow, while the current set serves: one new or changed model, loaded
  // as the version after the current one (--weight-dtype, --layers as at start).
  std::shared_ptr<Model> LoadFound(const FoundModel& found) const;
  // Step 3: swaps in what step 2 loaded (`loaded`, one per added and changed model
  // of `changes`, in any order) and drops the removed models, in one step. A
  // changed model that failed to load keeps its ready old version, with the error
  // kept for ModelInfo.reload_error. The versions swapped out are retired.
  ReloadReport Publish(const RepositoryChanges& changes,
                       std::vector<std::shared_ptr<Model>> loaded);

 private:
  struct Entry {
    ModelPtr model;
    ModelFilesStamp stamp;     // Of the files last loaded or tried.
    std::string reload_error;  // The last try failed, and `model` is the old one.
  };
  // What readers see; never changed once published.
  struct State {
    std::map<std::string, Entry> entries;  // By name.
    ModelPtr default_model;                // The first ready one by name.
  };

  ModelRepository(std::string dir, kernels::WeightFormat format, LayerSpan span,
                  std::vector<Entry> entries);
  static std::shared_ptr<const State> MakeState(std::map<std::string, Entry> entries);
  std::shared_ptr<const State> state() const;
  static void Describe(const State& state, const Entry& entry, v1::ModelInfo* info);

  const std::string dir_;
  const kernels::WeightFormat format_;
  const LayerSpan span_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const State> state_ ABSL_GUARDED_BY(mu_);
  // The last version of each removed model: one added again continues from it,
  // so a name and version always mean the same weights (batch keys rely on it).
  std::map<std::string, int64_t> removed_versions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_MODEL_REPOSITORY_H_
