// Triton's sequence extension on layerserve's KV-cache sessions. The request
// parameters `sequence_id` (a uint64, int64 or string; 0 and "" mean none),
// `sequence_start` and `sequence_end` (bools) say which sequence a ModelInfer
// request continues: a start opens a session over the request's model and layers
// (SessionStore::OpenSequence) and runs its tokens; later requests with the id
// append to it; an end closes it once its tokens ran. Unknown and ended ids are
// NOT_FOUND, worded as the session store words its sessions'; the store's TTL, byte
// cap and eviction apply. Stateless.
#ifndef LAYERSERVE_SERVER_OIP_SEQUENCE_H_
#define LAYERSERVE_SERVER_OIP_SEQUENCE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/models/model_repository.h"
#include "server/sessions/session_store.h"

namespace layerserve::oip {

// Whether a request parameter belongs to the sequence extension (not to the
// operation's mapping).
bool IsSequenceParameter(absl::string_view name);

struct SequenceControl {
  std::string id;  // Empty: the request is not part of a sequence.
  bool start = false;
  bool end = false;
  // Set by JoinSequence when it opened the session (a start).
  bool opened = false;

  bool any() const { return !id.empty(); }
};

// The request's sequence parameters. INVALID_ARGUMENT for a start or end without an
// id, or values of the wrong type.
absl::StatusOr<SequenceControl> ParseSequenceControl(
    const inference::ModelInferRequest& request);

// Points `request` (already filled from the ModelInferRequest) at the sequence's
// session, first opening it on a start. Errors: ResolveLayerRange's for a start
// (the request's model and layers), OpenSequence's, INVALID_ARGUMENT for a
// request that names a session_id as well.
absl::Status JoinSequence(SequenceControl& sequence, const ModelRepository& models,
                          SessionStore& sessions, v1::BlockForwardRequest* request);

// After the request was answered `status`: an end closes the sequence once its
// tokens ran; a start that opened a session and then failed closes it, so the id is
// not left open on an empty cache. A failed end leaves the sequence as it was. Errors of
// the close itself are dropped (the session may have gone meanwhile).
void LeaveSequence(const SequenceControl& sequence, absl::StatusCode status,
                   SessionStore& sessions);

}  // namespace layerserve::oip

#endif  // LAYERSERVE_SERVER_OIP_SEQUENCE_H_
