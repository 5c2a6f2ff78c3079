"""The one exception every Client method raises."""
import grpc


class LayerServeError(Exception):
    """A failed call: the gRPC status code and the server's message.

    Codes follow layerserve.proto: INVALID_ARGUMENT names the field and the numbers
    (also raised before sending when an array cannot become a tensor), NOT_FOUND an
    unknown model, OUT_OF_RANGE a layer or position past the end, RESOURCE_EXHAUSTED
    a full queue or an oversized request, DEADLINE_EXCEEDED the call's timeout,
    UNAVAILABLE an unreachable or draining server (after the retries ran out).
    """

    def __init__(self, code: grpc.StatusCode, details: str, attempts: int = 1):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        # How many times the call was sent (more than 1 after UNAVAILABLE retries).
        self.attempts = attempts

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, attempts: int = 1) -> "LayerServeError":
        return cls(error.code(), error.details() or "", attempts)
