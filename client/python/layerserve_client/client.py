"""Client: typed Python calls to a layerserve server.

One Client owns one gRPC channel (one HTTP/2 connection per backend) and is safe to
use from many threads at once, as gRPC channels are. For many large concurrent
messages prefer one Client per thread (one channel carried ~0.5 GB/s of 4 MB
messages, one per thread ~0.85 GB/s: docs/perf/2026-11-30-grpc-end-to-end.md). Arrays go in as numpy arrays (anything np.asarray takes) and come
back as float32 numpy arrays whatever dtype travelled on the wire.
"""
import json
import ipaddress
import random
import time
from typing import (Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence, Tuple,
                    Union, overload)

import grpc
import numpy as np
from numpy.typing import ArrayLike

from . import allocator, health
from .auth import BearerToken, PathLike, channel_credentials
from ._stubs import pb, pb_grpc
from .errors import LayerServeError
from .results import BlockForwardResult, ModelInfo, NormalizeResult, RopeResult
from .retry import RetryPolicy, call_with_retries
from .session import _UNSET, SESSION_HEADER, Session, SessionForwardResult, StepResult
from .tensors import DType, from_tensor, to_tensor, wire_dtype

DEFAULT_TARGET = "127.0.0.1:50051"
# The server's default --max-message-bytes; gRPC's own default (4 MiB) is too small
# for block activations.
DEFAULT_MAX_MESSAGE_BYTES = 256 << 20

# An enum argument: the proto name (any case), a short form, or the number.
EnumValue = Union[str, int]
# A Hugging Face rope_scaling dict, ModelInfo.rope.scaling, or a pb.RopeScaling.
Scaling = Union[Mapping[str, Any], "pb.RopeScaling", None]

# Short names for enum values, besides the proto names (any case).
_NORM_ALIASES = {"RMS": "RMS_NORM", "RMSNORM": "RMS_NORM", "LAYER": "LAYER_NORM",
                 "LAYERNORM": "LAYER_NORM", "LN": "LAYER_NORM"}
_ACTIVATION_ALIASES = {"SWISH": "SILU", "GELU_NEW": "GELU_TANH",
                       "GELU_PYTORCH_TANH": "GELU_TANH"}
# Hugging Face rope_scaling "type"/"rope_type" values.
_SCALING_ALIASES = {"DEFAULT": "NONE", "DYNAMIC": "DYNAMIC_NTK"}
_SCALING_FIELDS = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                   "attention_factor", "low_freq_factor", "high_freq_factor")


def _invalid(message: str) -> LayerServeError:
    """A request refused before sending, reported as the server would report it."""
    return LayerServeError(grpc.StatusCode.INVALID_ARGUMENT, message, attempts=0)


def _enum(enum: Any, value: EnumValue, field: str,
          aliases: Optional[Dict[str, str]] = None) -> int:
    """The number of an enum value given as a number or a name (any case)."""
    if isinstance(value, str):
        name = value.upper()
        name = (aliases or {}).get(name, name)
        if name in enum.keys():
            return enum.Value(name)
    elif isinstance(value, int) and value in enum.values():
        return int(value)
    raise _invalid(f"{field}: unknown value {value!r}; one of {', '.join(enum.keys())}")


def _tensor(array: ArrayLike, dtype: DType, field: str) -> "pb.Tensor":
    try:
        return to_tensor(array, dtype, field)
    except ValueError as error:
        raise _invalid(str(error)) from None


def _array(tensor: "pb.Tensor", field: str) -> np.ndarray:
    try:
        return from_tensor(tensor, field)
    except ValueError as error:  # A server bug, but say what it was.
        raise LayerServeError(grpc.StatusCode.INTERNAL, f"response {error}") from None


def _int_list(values: Optional[ArrayLike]) -> List[int]:
    """Integers of any shape flattened row-major: positions [T] or [B, T] become
    the proto's positions[b * T + t]. None is empty."""
    if values is None:
        return []
    return [int(v) for v in np.asarray(values, dtype=np.int64).reshape(-1)]


def _dtype_number(dtype: DType, field: str) -> int:
    """pb.DataType of an output_dtype argument; None = the server's default."""
    if dtype is None:
        return pb.DATA_TYPE_UNSPECIFIED
    try:
        return wire_dtype(dtype)
    except ValueError as error:
        raise _invalid(f"{field}: {error}") from None


def rope_scaling(scaling: Scaling) -> Optional["pb.RopeScaling"]:
    """A pb.RopeScaling from None, a pb.RopeScaling, or a dict: a Hugging Face
    config.json `rope_scaling` ("type" or "rope_type": linear, dynamic, yarn, llama3,
    default) or ModelInfo.rope.scaling. Unknown keys are refused, not ignored."""
    if scaling is None or isinstance(scaling, pb.RopeScaling):
        return scaling
    fields = dict(scaling)
    kind = fields.pop("type", None)
    kind = fields.pop("rope_type", kind)
    unknown = set(fields) - set(_SCALING_FIELDS)
    if unknown:
        raise _invalid(f"rope.scaling: unknown fields {sorted(unknown)}; known: type, "
                       f"rope_type, {', '.join(_SCALING_FIELDS)}")
    message = pb.RopeScaling(type=_enum(pb.RopeScaling.Type, kind or "NONE",
                                        "rope.scaling.type", _SCALING_ALIASES))
    for name, value in fields.items():
        if value is not None:
            setattr(message, name, value)
    return message


def channel_target(targets: Union[str, Sequence[str]]) -> str:
    """The gRPC target for one target or several. Several must be IP literals
    ("10.0.0.5:50051", "[::1]:50051"); gRPC's ipv4:/ipv6: schemes take such lists.
    For host names use one DNS name that resolves to every replica."""
    if isinstance(targets, str):
        return targets
    targets = list(targets)
    if len(targets) == 1:
        return targets[0]
    if not targets:
        raise ValueError("no target")
    families = set()
    for target in targets:
        host, _, port = target.rpartition(":")
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            raise ValueError(f"{target!r}: several targets must be IP:port; for host "
                             "names give one DNS name (e.g. dns:///layerserve:50051) "
                             "that resolves to every replica") from None
        if not port.isdigit():
            raise ValueError(f"{target!r}: no port")
        families.add(address.version)
    if len(families) != 1:
        raise ValueError("several targets must all be IPv4 or all IPv6")
    return f"ipv{families.pop()}:" + ",".join(targets)


class Client:
    """A connection to a layerserve server (or several replicas).

    target: "host:port", any gRPC target URI, or a list of "IP:port" replicas
        (spread over with round_robin).
    credentials: grpc.ChannelCredentials (e.g. grpc.ssl_channel_credentials(...))
        for TLS; None = plaintext unless tls_* files are given.
    tls_ca, tls_cert, tls_key: TLS from PEM files instead of `credentials` (not
        both): the CA to trust (default the system's) and, for a server with
        --tls-client-ca, the client certificate and its key (both or neither).
    token, token_file: a bearer token, or a file holding one (read once, here;
        surrounding whitespace stripped); not both. Sent as "authorization:
        Bearer ..." on every LayerService call, sessions' included; not on
        health(), which the server answers without one. Over plaintext it travels
        in clear. Never shown in a repr or an error.
    timeout: default deadline of each call in seconds (None: none), covering its
        retries. Each method takes its own `timeout` too.
    retry: how UNAVAILABLE is retried (RetryPolicy(max_attempts=1): never).
    load_balancing: gRPC policy name; default round_robin for several targets,
        gRPC's pick_first otherwise.
    max_message_bytes: largest request and response (default 256 MiB, as the server).
    options: extra gRPC channel arguments [(name, value)].
    keep_freed_buffers: opt in to allocator.keep_freed_buffers(): glibc's malloc
        then reuses freed buffers of up to 32 MiB in the whole process (once per
        process, on glibc only), so calls with MiB-sized tensors stop faulting fresh
        pages in at every call. Off by default: it changes the malloc settings of
        the whole process, which a library does only when asked.
    sleep, rng: the wait between retries and its jitter source (tests inject them).
    """

    def __init__(self, target: Union[str, Sequence[str]] = DEFAULT_TARGET, *,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None, token_file: Optional[PathLike] = None,
                 tls_ca: Optional[PathLike] = None, tls_cert: Optional[PathLike] = None,
                 tls_key: Optional[PathLike] = None,
                 timeout: Optional[float] = 30.0,
                 retry: RetryPolicy = RetryPolicy(),
                 load_balancing: Optional[str] = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 options: Sequence[Tuple[str, Any]] = (),
                 keep_freed_buffers: bool = False,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: Optional[random.Random] = None):
        address = channel_target(target)
        # Arguments first: a mistake raises before a channel exists.
        credentials = channel_credentials(credentials, tls_ca, tls_cert, tls_key)
        self._token = BearerToken.from_arguments(token, token_file)
        if keep_freed_buffers:
            allocator.keep_freed_buffers()
        if load_balancing is None and not isinstance(target, str) and len(target) > 1:
            load_balancing = "round_robin"
        channel_options: List[Tuple[str, Any]] = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            # After a failed connection gRPC waits 1 s (growing to 120 s) before it
            # tries again, and calls meanwhile fail at once with UNAVAILABLE, so
            # retries sooner than that would all be wasted: reconnect on the retry
            # policy's schedule instead.
            ("grpc.initial_reconnect_backoff_ms", max(10, int(retry.initial_backoff * 1000))),
            ("grpc.max_reconnect_backoff_ms", max(10, int(retry.max_backoff * 1000))),
        ]
        if load_balancing:
            channel_options.append(("grpc.service_config", json.dumps(
                {"loadBalancingConfig": [{load_balancing: {}}]})))
        # gRPC takes the first of duplicate arguments: the caller's must replace ours.
        channel_options = list(dict([*channel_options, *options]).items())
        if credentials is None:
            self._channel = grpc.insecure_channel(address, options=channel_options)
        else:
            self._channel = grpc.secure_channel(address, credentials, options=channel_options)
        self._stub = pb_grpc.LayerServiceStub(self._channel)
        self._health_check = self._channel.unary_unary(
            health.CHECK_METHOD,
            request_serializer=health.HealthCheckRequest.SerializeToString,
            response_deserializer=health.HealthCheckResponse.FromString)
        self.target = address
        self.timeout = timeout
        self.retry = retry
        self._sleep = sleep
        self._rng = rng or random.Random()

    # ---- lifetime

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- one place where calls are made

    def _call(self, method: Callable[..., Any], request: Any, timeout: Optional[float], *,
              session_id: str = "", retry: Optional[RetryPolicy] = None,
              authorize: bool = True) -> Any:
        """method(request) under the retry policy and deadline; with a session_id
        the call carries it in the x-layerserve-session header, and unless
        authorize is False the Client's bearer token (if any)."""
        timeout = self.timeout if timeout is _UNSET else timeout
        metadata: Tuple[Tuple[str, str], ...] = ()
        if authorize and self._token is not None:
            metadata += self._token.metadata
        if session_id:
            metadata += ((SESSION_HEADER, session_id),)
        return call_with_retries(
            lambda remaining: method(request, timeout=remaining, metadata=metadata or None),
            retry or self.retry, timeout, self._sleep, self._rng)

    # ---- Normalize

    # Without a residual: the normalized array; with one, NormalizeResult.
    @overload
    def normalize(self, x: ArrayLike, kind: EnumValue = ..., *,
                  weight: Optional[ArrayLike] = ..., bias: Optional[ArrayLike] = ...,
                  epsilon: Optional[float] = ..., weight_offset: bool = ...,
                  residual: None = ..., dtype: DType = ..., output_dtype: DType = ...,
                  timeout: Optional[float] = ...) -> np.ndarray: ...

    @overload
    def normalize(self, x: ArrayLike, kind: EnumValue = ..., *,
                  weight: Optional[ArrayLike] = ..., bias: Optional[ArrayLike] = ...,
                  epsilon: Optional[float] = ..., weight_offset: bool = ...,
                  residual: ArrayLike, dtype: DType = ..., output_dtype: DType = ...,
                  timeout: Optional[float] = ...) -> NormalizeResult: ...

    def normalize(self, x: ArrayLike, kind: EnumValue = "rms", *,
                  weight: Optional[ArrayLike] = None, bias: Optional[ArrayLike] = None,
                  epsilon: Optional[float] = None, weight_offset: bool = False,
                  residual: Optional[ArrayLike] = None, dtype: DType = None,
                  output_dtype: DType = None, timeout: Optional[float] = _UNSET
                  ) -> Union[np.ndarray, NormalizeResult]:
        """LayerNorm ("layer") or RMSNorm ("rms") of x [..., D] over its last dim.

        weight, bias: [D] (bias only with "layer"); epsilon: default 1e-5 layer,
        1e-6 rms; weight_offset: scale by (1 + weight), as Gemma stores it.
        residual: same shape as x; the server normalizes x + residual and this
        returns NormalizeResult(output, residual=x + residual). Without a residual
        it returns the normalized array. dtype: the wire dtype of every tensor sent
        (default: float16 for float16 arrays, float32 for others; "bfloat16" by
        name). The output's wire dtype is x's unless output_dtype says otherwise.
        """
        request = pb.NormalizeRequest(
            kind=_enum(pb.NormKind, kind, "kind", _NORM_ALIASES),
            input=_tensor(x, dtype, "input"), weight_offset=weight_offset,
            output_dtype=_dtype_number(output_dtype, "output_dtype"))
        if weight is not None:
            request.weight.CopyFrom(_tensor(weight, dtype, "weight"))
        if bias is not None:
            request.bias.CopyFrom(_tensor(bias, dtype, "bias"))
        if epsilon is not None:
            request.epsilon = epsilon
        if residual is not None:
            request.residual.CopyFrom(_tensor(residual, dtype, "residual"))
        response = self._call(self._stub.Normalize, request, timeout)
        output = _array(response.output, "output")
        if residual is None:
            return output
        return NormalizeResult(output, _array(response.residual_out, "residual_out"))

    # ---- Activate

    def activate(self, x: ArrayLike, activation: EnumValue, *,
                 gate: Optional[ArrayLike] = None, dtype: DType = None,
                 output_dtype: DType = None,
                 timeout: Optional[float] = _UNSET) -> np.ndarray:
        """An activation by name (relu, gelu, gelu_tanh, silu, sigmoid, tanh,
        quick_gelu) of x, any shape; or a gated one (swiglu, geglu, geglu_tanh,
        reglu) = act(gate) * up with x = up [..., F] and `gate` [..., F], or without
        `gate` x = one packed [..., 2F] tensor, gate first (vLLM's SiluAndMul)."""
        request = pb.ActivateRequest(
            activation=_enum(pb.Activation, activation, "activation", _ACTIVATION_ALIASES),
            input=_tensor(x, dtype, "input"),
            output_dtype=_dtype_number(output_dtype, "output_dtype"))
        if gate is not None:
            request.gate.CopyFrom(_tensor(gate, dtype, "gate"))
        return _array(self._call(self._stub.Activate, request, timeout).output, "output")

    # ---- PositionalEncode

    def _positional(self, request: "pb.PositionalEncodeRequest",
                    timeout: Optional[float]) -> "pb.PositionalEncodeResponse":
        return self._call(self._stub.PositionalEncode, request, timeout)

    def sinusoidal(self, x: Optional[ArrayLike] = None, *, num_positions: int = 0,
                   dim: int = 0, base: Optional[float] = None,
                   layout: EnumValue = "interleaved", position_offset: int = 0,
                   positions: Optional[ArrayLike] = None, dtype: DType = None,
                   output_dtype: DType = None,
                   timeout: Optional[float] = _UNSET) -> np.ndarray:
        """Vaswani et al.'s encoding: x [B, T, D] or [T, D] plus the table, or (x
        None) the table [num_positions, dim]. layout: interleaved (sin, cos pairs,
        the paper) or concatenated (all sin then all cos, fairseq/HF)."""
        method = pb.Sinusoidal(
            layout=_enum(pb.Sinusoidal.Layout, layout, "sinusoidal.layout"),
            position_offset=position_offset, positions=_int_list(positions))
        if base is not None:
            method.base = base
        if x is None:
            method.num_positions, method.dim = num_positions, dim
        else:
            method.input.CopyFrom(_tensor(x, dtype, "sinusoidal.input"))
        request = pb.PositionalEncodeRequest(
            sinusoidal=method, output_dtype=_dtype_number(output_dtype, "output_dtype"))
        return _array(self._positional(request, timeout).output, "output")

    def learned(self, x: ArrayLike, table: ArrayLike, *, position_offset: int = 0,
                positions: Optional[ArrayLike] = None, dtype: DType = None,
                output_dtype: DType = None,
                timeout: Optional[float] = _UNSET) -> np.ndarray:
        """x [B, T, D] or [T, D] plus table[position] (table [max_len, D]); a
        position past the table is OUT_OF_RANGE."""
        method = pb.Learned(input=_tensor(x, dtype, "learned.input"),
                            table=_tensor(table, dtype, "learned.table"),
                            position_offset=position_offset, positions=_int_list(positions))
        request = pb.PositionalEncodeRequest(
            learned=method, output_dtype=_dtype_number(output_dtype, "output_dtype"))
        return _array(self._positional(request, timeout).output, "output")

    # Without a key: the rotated query; with one, RopeResult.
    @overload
    def rope(self, query: ArrayLike, key: None = ..., *,
             positions: Optional[ArrayLike] = ..., position_offset: int = ...,
             theta: Optional[float] = ..., rotary_dim: int = ..., style: EnumValue = ...,
             layout: EnumValue = ..., scaling: Scaling = ..., dtype: DType = ...,
             output_dtype: DType = ..., timeout: Optional[float] = ...) -> np.ndarray: ...

    @overload
    def rope(self, query: ArrayLike, key: ArrayLike, *,
             positions: Optional[ArrayLike] = ..., position_offset: int = ...,
             theta: Optional[float] = ..., rotary_dim: int = ..., style: EnumValue = ...,
             layout: EnumValue = ..., scaling: Scaling = ..., dtype: DType = ...,
             output_dtype: DType = ..., timeout: Optional[float] = ...) -> RopeResult: ...

    def rope(self, query: ArrayLike, key: Optional[ArrayLike] = None, *,
             positions: Optional[ArrayLike] = None, position_offset: int = 0,
             theta: Optional[float] = None, rotary_dim: int = 0, style: EnumValue = "half",
             layout: EnumValue = "bhtd", scaling: Scaling = None, dtype: DType = None,
             output_dtype: DType = None,
             timeout: Optional[float] = _UNSET) -> Union[np.ndarray, RopeResult]:
        """Rotary embedding of query [B, Hq, T, Dh] (layout "bhtd") or [B, T, Hq, Dh]
        ("bthd") and optionally key (Hkv heads). style: half (rotate_half: Llama,
        NeoX) or interleaved (GPT-J); rotary_dim: leading dims that rotate (0 = all);
        scaling: see rope_scaling() (a HF rope_scaling dict works). Returns the
        rotated query, or RopeResult(query, key) when a key was given."""
        method = pb.Rope(query=_tensor(query, dtype, "rope.query"),
                         layout=_enum(pb.Rope.Layout, layout, "rope.layout"),
                         rotary_dim=rotary_dim,
                         style=_enum(pb.Rope.Style, style, "rope.style"),
                         position_offset=position_offset, positions=_int_list(positions))
        if key is not None:
            method.key.CopyFrom(_tensor(key, dtype, "rope.key"))
        if theta is not None:
            method.theta = theta
        scaling = rope_scaling(scaling)
        if scaling is not None:
            method.scaling.CopyFrom(scaling)
        request = pb.PositionalEncodeRequest(
            rope=method, output_dtype=_dtype_number(output_dtype, "output_dtype"))
        response = self._positional(request, timeout)
        rotated = _array(response.output, "output")
        if key is None:
            return rotated
        return RopeResult(rotated, _array(response.key, "key"))

    def alibi(self, scores: Optional[ArrayLike] = None, *, num_heads: int = 0,
              query_length: int = 0, key_length: int = 0, query_offset: int = 0,
              symmetric: bool = False, dtype: DType = None, output_dtype: DType = None,
              timeout: Optional[float] = _UNSET) -> np.ndarray:
        """ALiBi: scores [B, H, Tq, Tk] or [H, Tq, Tk] plus the bias, or (scores
        None) the bias [num_heads, query_length, key_length] itself. Causal form
        slope * (j - (query_offset + i)) unless symmetric (-slope * |...|)."""
        method = pb.Alibi(num_heads=num_heads, query_length=query_length,
                          key_length=key_length, query_offset=query_offset,
                          symmetric=symmetric)
        if scores is not None:
            method.scores.CopyFrom(_tensor(scores, dtype, "alibi.scores"))
        request = pb.PositionalEncodeRequest(
            alibi=method, output_dtype=_dtype_number(output_dtype, "output_dtype"))
        return _array(self._positional(request, timeout).output, "output")

    def t5_bias(self, table: ArrayLike, query_length: int, key_length: int, *,
                bidirectional: bool = False, num_buckets: int = 0, max_distance: int = 0,
                query_offset: int = 0, dtype: DType = None, output_dtype: DType = None,
                timeout: Optional[float] = _UNSET) -> np.ndarray:
        """T5's bucketed relative position bias [H, Tq, Tk] from the checkpoint's
        relative_attention_bias table [num_buckets, H]. bidirectional for an
        encoder; max_distance default 128 (0 = default)."""
        method = pb.T5Bias(table=_tensor(table, dtype, "t5_bias.table"),
                           bidirectional=bidirectional, num_buckets=num_buckets,
                           max_distance=max_distance, query_length=query_length,
                           key_length=key_length, query_offset=query_offset)
        request = pb.PositionalEncodeRequest(
            t5_bias=method, output_dtype=_dtype_number(output_dtype, "output_dtype"))
        return _array(self._positional(request, timeout).output, "output")

    # ---- BlockForward

    # Without attention_stats: the hidden states; with, BlockForwardResult.
    @overload
    def block_forward(self, hidden_states: ArrayLike, *, model: str = ...,
                      layer_start: int = ..., num_layers: int = ...,
                      positions: Optional[ArrayLike] = ..., position_offset: int = ...,
                      sequence_lengths: Optional[ArrayLike] = ...,
                      causal: Optional[bool] = ..., attention_stats: Literal[False] = ...,
                      dtype: DType = ..., output_dtype: DType = ...,
                      timeout: Optional[float] = ...) -> np.ndarray: ...

    @overload
    def block_forward(self, hidden_states: ArrayLike, *, model: str = ...,
                      layer_start: int = ..., num_layers: int = ...,
                      positions: Optional[ArrayLike] = ..., position_offset: int = ...,
                      sequence_lengths: Optional[ArrayLike] = ...,
                      causal: Optional[bool] = ..., attention_stats: Literal[True],
                      dtype: DType = ..., output_dtype: DType = ...,
                      timeout: Optional[float] = ...) -> BlockForwardResult: ...

    def block_forward(self, hidden_states: ArrayLike, *, model: str = "",
                      layer_start: int = 0, num_layers: int = 1,
                      positions: Optional[ArrayLike] = None, position_offset: int = 0,
                      sequence_lengths: Optional[ArrayLike] = None,
                      causal: Optional[bool] = None, attention_stats: bool = False,
                      dtype: DType = None, output_dtype: DType = None,
                      timeout: Optional[float] = _UNSET
                      ) -> Union[np.ndarray, BlockForwardResult]:
        """Runs blocks layer_start .. layer_start + num_layers - 1 of `model` (""
        = the server's default) on hidden_states [B, T, D] or [T, D]. positions
        ([T] or [B, T]) or position_offset place the tokens; sequence_lengths (B
        entries) marks right padding (padded rows come back as zeros); causal
        defaults to the model's. Returns the hidden states after the last block,
        or BlockForwardResult(hidden_states, attention_entropy) when
        attention_stats is set."""
        request = pb.BlockForwardRequest(
            model=model, layer_start=layer_start, num_layers=num_layers,
            hidden_states=_tensor(hidden_states, dtype, "hidden_states"),
            position_offset=position_offset, positions=_int_list(positions),
            sequence_lengths=_int_list(sequence_lengths),
            want_attention_stats=attention_stats,
            output_dtype=_dtype_number(output_dtype, "output_dtype"))
        if causal is not None:
            request.causal = causal
        response = self._call(self._stub.BlockForward, request, timeout)
        hidden = _array(response.hidden_states, "hidden_states")
        if not attention_stats:
            return hidden
        entropy = {s.layer: np.asarray(s.head_entropy_nats, dtype=np.float32)
                   for s in response.attention_stats}
        return BlockForwardResult(hidden, entropy)

    # ---- sessions (KV cache for incremental decoding; see session.py)

    def open_session(self, *, model: str = "", layer_start: int = 0, num_layers: int = 1,
                     max_length: int = 0, timeout: Optional[float] = _UNSET) -> Session:
        """Opens a KV-cache session for blocks layer_start .. layer_start +
        num_layers - 1 of `model` ("" = the default), holding at most max_length
        tokens (0 = the model's maximum). Returns a Session (a context manager
        that closes it). Retried on UNAVAILABLE: a lost answer leaves only an
        unused session that expires after its TTL."""
        response = self._call(self._stub.OpenSession, pb.OpenSessionRequest(
            model=model, layer_start=layer_start, num_layers=num_layers,
            max_length=max_length), timeout)
        return Session(self, response.session_id, response.ttl_ms, model, layer_start,
                       num_layers, max_length)

    def close_session(self, session_id: str, *,
                      timeout: Optional[float] = _UNSET) -> None:
        """Closes a session by id. NOT_FOUND if unknown, closed, expired or
        evicted."""
        self._call(self._stub.CloseSession, pb.CloseSessionRequest(session_id=session_id),
                   timeout, session_id=session_id)

    def _session_forward(self, session_id: str, hidden_states: ArrayLike, *,
                         positions: Optional[ArrayLike], position_offset: int,
                         dtype: DType, output_dtype: DType,
                         timeout: Optional[float]) -> SessionForwardResult:
        request = pb.BlockForwardRequest(
            session_id=session_id,
            hidden_states=_tensor(hidden_states, dtype, "hidden_states"),
            position_offset=position_offset, positions=_int_list(positions),
            output_dtype=_dtype_number(output_dtype, "output_dtype"))
        # One attempt only: see session.py.
        response = self._call(self._stub.BlockForward, request, timeout,
                              session_id=session_id, retry=RetryPolicy(max_attempts=1))
        return SessionForwardResult(_array(response.hidden_states, "hidden_states"),
                                    int(response.session_length))

    def step(self, sessions: Sequence[Union[Session, str]], hidden_states: ArrayLike,
             sequence_lengths: Optional[Sequence[int]] = None, *, dtype: DType = None,
             output_dtype: DType = None, timeout: Optional[float] = _UNSET) -> StepResult:
        """Many sessions in one BlockForward call (session_ids): row b of
        hidden_states [B, T, D] continues sessions[b] (a Session or its id), exactly
        as session b's own forward of that row would, bit for bit. [T, D] is one
        session's row. sequence_lengths (B entries in [1, T]) makes the rows ragged:
        row b adds its first sequence_lengths[b] tokens; its padded rows of the
        output are zeros. Positions continue from each session's length.

        All or nothing: when one session is unknown, busy, full or not of the same
        model and layers as the others, the call fails (LayerServeError) with the
        status that session alone would get, its message naming the row
        ("session_ids[2]: ..."), and no session advances. Never retried, as
        Session.forward. Returns StepResult(hidden_states, lengths) and sets each
        Session's `length`. The sessions live on one replica: the call carries the
        first one's id in the x-layerserve-session header."""
        sessions = list(sessions)
        if not sessions:
            raise _invalid("sessions: empty; give one Session or session id per row")
        ids = []
        for b, session in enumerate(sessions):
            if isinstance(session, Session):
                ids.append(session.id)
            elif isinstance(session, str):
                ids.append(session)
            else:
                raise _invalid(f"sessions[{b}]: a Session or a session id, not "
                               f"{type(session).__name__}")
        request = pb.BlockForwardRequest(
            session_ids=ids, hidden_states=_tensor(hidden_states, dtype, "hidden_states"),
            sequence_lengths=_int_list(sequence_lengths),
            output_dtype=_dtype_number(output_dtype, "output_dtype"))
        # One attempt only: a call whose answer was lost may have appended already.
        response = self._call(self._stub.BlockForward, request, timeout,
                              session_id=ids[0], retry=RetryPolicy(max_attempts=1))
        lengths = [int(n) for n in response.session_lengths]
        if len(lengths) != len(ids):  # A server bug, but say what it was.
            raise LayerServeError(grpc.StatusCode.INTERNAL,
                                  f"response session_lengths: {len(lengths)} entries for "
                                  f"{len(ids)} sessions")
        for session, length in zip(sessions, lengths):
            if isinstance(session, Session):
                session.length = length
        return StepResult(_array(response.hidden_states, "hidden_states"), lengths)

    # ---- models and health

    def list_models(self, *, timeout: Optional[float] = _UNSET) -> List[ModelInfo]:
        """Every model the server has, READY or FAILED (with its error)."""
        response = self._call(self._stub.ListModels, pb.ListModelsRequest(), timeout)
        return [ModelInfo.from_proto(m) for m in response.models]

    def get_model(self, name: str = "", *, timeout: Optional[float] = _UNSET) -> ModelInfo:
        """One model ("" = the default); NOT_FOUND if the server has no such model."""
        return ModelInfo.from_proto(
            self._call(self._stub.GetModel, pb.GetModelRequest(name=name), timeout))

    def health(self, service: str = "", *, timeout: Optional[float] = _UNSET) -> str:
        """grpc.health.v1 status of `service` ("" = the server, or
        "layerserve.v1.LayerService"): SERVING, NOT_SERVING (draining), or
        SERVICE_UNKNOWN for a service the server does not know."""
        try:
            # No token: the server answers health checks without one, and a probe
            # has no business carrying a secret.
            response = self._call(self._health_check,
                                  health.HealthCheckRequest(service=service), timeout,
                                  authorize=False)
        except LayerServeError as error:
            if error.code == grpc.StatusCode.NOT_FOUND:  # health.proto's "unknown"
                return "SERVICE_UNKNOWN"
            raise
        return health.status_name(response)
