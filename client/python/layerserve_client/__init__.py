"""layerserve_client: a typed Python client for the layerserve gRPC service.

    from layerserve_client import Client
    with Client("127.0.0.1:50051") as client:
        y = client.normalize(x, "rms", weight=w, epsilon=1e-6)

See docs/clients/python.md.
"""
from ._stubs import pb, pb_grpc
from ._version import __version__
from .allocator import keep_freed_buffers
from .client import Client, channel_target, rope_scaling
from .errors import LayerServeError
from .pipeline import Pipeline, PipelineForwardResult, PipelineSession, PipelineStepResult
from .results import BlockForwardResult, ModelInfo, NormalizeResult, RopeConfig, RopeResult
from .retry import RetryPolicy
from .session import SESSION_HEADER, Session, SessionForwardResult, StepResult
from .tensors import (bfloat16_bits_to_float32, float32_to_bfloat16_bits, from_tensor,
                      round_to_bfloat16, to_tensor)

__all__ = [
    "__version__", "Client", "keep_freed_buffers", "LayerServeError", "RetryPolicy",
    "NormalizeResult", "RopeResult",
    "BlockForwardResult", "ModelInfo", "RopeConfig", "to_tensor", "from_tensor",
    "float32_to_bfloat16_bits", "bfloat16_bits_to_float32", "round_to_bfloat16",
    "channel_target", "rope_scaling", "pb", "pb_grpc", "Session",
    "SessionForwardResult", "SESSION_HEADER", "Pipeline", "PipelineSession",
    "PipelineForwardResult", "StepResult", "PipelineStepResult",
]
