"""The one exception every Client method raises."""
from typing import List, Optional, Tuple

import grpc

try:  # google/rpc/*.proto, generated beside the layerserve stubs (docs/clients/python.md)
    from google.rpc import error_details_pb2, status_pb2
except ImportError:  # pragma: no cover - stubs generated without them
    error_details_pb2 = status_pb2 = None

# The trailer in which gRPC carries a google.rpc.Status with the error's details.
STATUS_DETAILS_KEY = "grpc-status-details-bin"


class LayerServeError(Exception):
    """A failed call: the gRPC status code and the server's message.

    Codes follow layerserve.proto: INVALID_ARGUMENT names the field and the numbers
    (also raised before sending when an array cannot become a tensor), NOT_FOUND an
    unknown model, OUT_OF_RANGE a layer or position past the end, RESOURCE_EXHAUSTED
    a full queue or an oversized request, DEADLINE_EXCEEDED the call's timeout,
    UNAVAILABLE an unreachable or draining server (after the retries ran out).

    The server's standard error details, when it sent them:
      field_violations: [(field, description)] of an INVALID_ARGUMENT's
        google.rpc.BadRequest, field a request field path ("hidden_states.shape",
        "positions[2]"); [] otherwise.
      retry_delay: seconds, from a RESOURCE_EXHAUSTED's google.rpc.RetryInfo (a full
        queue, a KV cache that busy sessions fill, the server out of memory: the
        same request may succeed then); None otherwise, and where no retry can
        succeed.
    """

    def __init__(self, code: grpc.StatusCode, details: str, attempts: int = 1,
                 field_violations: Optional[List[Tuple[str, str]]] = None,
                 retry_delay: Optional[float] = None):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        # How many times the call was sent (more than 1 after UNAVAILABLE retries).
        self.attempts = attempts
        self.field_violations = list(field_violations or [])
        self.retry_delay = retry_delay

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, attempts: int = 1) -> "LayerServeError":
        field_violations, retry_delay = _standard_details(error)
        return cls(error.code(), error.details() or "", attempts,
                   field_violations=field_violations, retry_delay=retry_delay)


def _standard_details(error: grpc.RpcError) -> Tuple[List[Tuple[str, str]], Optional[float]]:
    """(field_violations, retry_delay) of the google.rpc.Status in the error's
    trailer; ([], None) without one."""
    violations: List[Tuple[str, str]] = []
    delay: Optional[float] = None
    trailer = getattr(error, "trailing_metadata", None)
    if status_pb2 is None or trailer is None:
        return violations, delay
    for key, value in trailer() or ():
        if key != STATUS_DETAILS_KEY:
            continue
        status = status_pb2.Status()
        status.ParseFromString(value)
        for detail in status.details:
            bad_request = error_details_pb2.BadRequest()
            retry_info = error_details_pb2.RetryInfo()
            if detail.Unpack(bad_request):
                violations += [(v.field, v.description) for v in bad_request.field_violations]
            elif detail.Unpack(retry_info):
                delay = retry_info.retry_delay.ToTimedelta().total_seconds()
    return violations, delay
