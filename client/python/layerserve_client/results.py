"""What Client methods return when there is more than one array, and model
descriptions as plain Python values (enum values by their proto names)."""
import dataclasses
from typing import Dict, Optional

import numpy as np

from ._stubs import pb


@dataclasses.dataclass
class NormalizeResult:
    """Normalize with a residual: norm(input + residual), and that sum (the
    residual stream for the next sub-layer)."""
    output: np.ndarray
    residual: np.ndarray


@dataclasses.dataclass
class RopeResult:
    """RoPE with a key: both rotated, each in its request's shape and layout."""
    query: np.ndarray
    key: np.ndarray


@dataclasses.dataclass
class BlockForwardResult:
    """BlockForward with attention statistics."""
    hidden_states: np.ndarray
    # Absolute block index -> mean attention entropy (nats) per query head, float32 [H].
    attention_entropy: Dict[int, np.ndarray]


@dataclasses.dataclass
class RopeConfig:
    theta: float
    rotary_dim: int
    style: str                 # HALF or INTERLEAVED
    # Only the fields the server set, proto names ("type": "LLAMA3", "factor": 8.0,
    # ...); Client.rope(scaling=...) takes it back as is.
    scaling: Dict[str, object]


@dataclasses.dataclass
class ModelInfo:
    name: str
    architecture: str
    state: str                 # READY or FAILED
    error: str                 # Why it FAILED; empty when READY.
    is_default: bool
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    activation: str            # e.g. SWIGLU
    norm: str                  # LAYER_NORM or RMS_NORM
    norm_epsilon: float
    rope: Optional[RopeConfig]  # None for models without rotary positions (GPT-2).
    max_position_embeddings: int
    weight_dtype: str          # FLOAT32, BFLOAT16 or INT8
    # The layers this server serves (--layers): span_layer_start ..
    # span_layer_start + span_num_layers - 1 of num_layers. 0, 0 when FAILED.
    span_layer_start: int = 0
    span_num_layers: int = 0
    weight_group_size: int = 0  # INT8: inputs per scale (0: one per output); else 0
    # 1 as loaded at start, +1 each time a repository reload loads it again.
    version: int = 0
    # Why the last reload could not load changed files; the version above serves.
    reload_error: str = ""

    @classmethod
    def from_proto(cls, info: "pb.ModelInfo") -> "ModelInfo":
        rope = None
        if info.HasField("rope"):
            rope = RopeConfig(theta=info.rope.theta, rotary_dim=info.rope.rotary_dim,
                              style=pb.Rope.Style.Name(info.rope.style),
                              scaling=scaling_to_dict(info.rope.scaling))
        return cls(
            name=info.name, architecture=info.architecture,
            state=pb.ModelInfo.State.Name(info.state), error=info.error,
            is_default=info.is_default, num_layers=info.num_layers,
            hidden_size=info.hidden_size, num_attention_heads=info.num_attention_heads,
            num_key_value_heads=info.num_key_value_heads, head_dim=info.head_dim,
            intermediate_size=info.intermediate_size,
            activation=pb.Activation.Name(info.activation), norm=pb.NormKind.Name(info.norm),
            norm_epsilon=info.norm_epsilon, rope=rope,
            max_position_embeddings=info.max_position_embeddings,
            weight_dtype=pb.DataType.Name(info.weight_dtype),
            span_layer_start=info.span_layer_start, span_num_layers=info.span_num_layers,
            weight_group_size=info.weight_group_size, version=info.version,
            reload_error=info.reload_error)


def scaling_to_dict(scaling: "pb.RopeScaling") -> Dict[str, object]:
    out: Dict[str, object] = {"type": pb.RopeScaling.Type.Name(scaling.type)}
    if scaling.type == pb.RopeScaling.NONE:
        return out
    out["factor"] = scaling.factor
    if scaling.original_max_position_embeddings:
        out["original_max_position_embeddings"] = scaling.original_max_position_embeddings
    for field in ("beta_fast", "beta_slow", "attention_factor", "low_freq_factor",
                  "high_freq_factor"):
        if scaling.HasField(field):
            out[field] = getattr(scaling, field)
    return out
