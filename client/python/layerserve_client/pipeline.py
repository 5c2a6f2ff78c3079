"""Pipeline: one model split across replicas that each serve a span of its layers
(the server's --layers=START:END), chained from the client as Petals does.

    stages = [("10.0.0.1:50051", 0, 11),
              (["10.0.0.2:50051", "10.0.0.3:50051"], 11, 11),   # two replicas
              ("10.0.0.4:50051", 22, 10)]
    with Pipeline(stages, model="llama", token="...") as pipeline:
        out = pipeline.forward(embeddings)                      # [T, D] or [B, T, D]
        with pipeline.open_session() as session:
            step = session.forward(prompt_embeddings)           # prefill
            step = session.forward(next_token_embedding)        # [1, D]
            step.hidden_states, step.stage_seconds
        a, b = pipeline.open_session(), pipeline.open_session()
        step = pipeline.step([a, b], prompts, sequence_lengths=[5, 3])  # one call a stage
        step = pipeline.step([a, b], next_tokens)                       # [2, 1, D]

    pipeline = Pipeline.from_servers(["10.0.0.1:50051", ...])   # spans from GetModel

Each replica gets its own Client, made with the Pipeline's keyword arguments
(token, TLS files, timeout, retry...), so every call carries the same credentials.

Fault tolerance. A stateless forward that finds a replica UNAVAILABLE (after the
Client's own retries) goes to the stage's next replica. A session keeps the
inputs it sent to each stage; when a stage's replica is lost (UNAVAILABLE, or
NOT_FOUND because its session was evicted or the replica restarted) it opens a
session on another replica of that stage (the same one again if there is no
other: a restarted replica), re-sends the stage's cached inputs as one prefill,
then the step, and carries on: the caller sees no error. The recovered cache is
the same keys and values up to float32 rounding (a prefill sums in another order
than the steps did), so later outputs match to ~1e-6 rather than bit for bit.

Many sessions in one call per stage (Pipeline.step): row b continues
PipelineSession b, and each stage gets one BlockForward carrying every session's
stage session (session_ids), all or nothing. A stage's sessions normally share one
replica; rows whose sessions live on different replicas (one was recovered while
another was not yet) go as one call per replica. Recovery is forward's: a call that
fails because its replica is lost (UNAVAILABLE, or NOT_FOUND without a row)
re-opens each of its sessions on the stage's next replica, a NOT_FOUND naming a row
("session_ids[2]: ...") re-opens that session alone; nothing was appended by the
failed call, so the step is then sent again.
"""
import dataclasses
import re
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np
from numpy.typing import ArrayLike

from .client import Client
from .errors import LayerServeError
from .session import Session
from .tensors import DType

# A stage's replica is lost: try another one (sessions: re-prefill there).
_LOST = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND)

StageSpec = Tuple[Union[str, Sequence[str]], int, int]

# The row a multi-session call's error names: "session_ids[3]: ...".
_ROW = re.compile(r"^session_ids\[(\d+)\]: ")


def _invalid(message: str) -> LayerServeError:
    return LayerServeError(grpc.StatusCode.INVALID_ARGUMENT, message, attempts=0)


@dataclasses.dataclass
class PipelineForwardResult:
    """One PipelineSession.forward: the last stage's hidden states, the tokens the
    session holds, each stage's wall time in seconds (a recovery included) and the
    replica that answered it."""
    hidden_states: np.ndarray
    length: int
    stage_seconds: List[float]
    stage_targets: List[str]


@dataclasses.dataclass
class PipelineStepResult:
    """One Pipeline.step: the last stage's hidden states of every row (the shape
    sent; padding past a row's sequence length is zeros), each session's number of
    tokens, each stage's wall time in seconds (recoveries included) and, per stage,
    the replica that answered each row."""
    hidden_states: np.ndarray
    lengths: List[int]
    stage_seconds: List[float]
    stage_targets: List[List[str]]


class _Stage:
    """Blocks layer_start .. layer_start + num_layers - 1 and the replicas serving
    them, one Client each; `current` is the replica in use."""

    def __init__(self, targets: Union[str, Sequence[str]], layer_start: int, num_layers: int,
                 client_options: Dict[str, Any]):
        targets = [targets] if isinstance(targets, str) else list(targets)
        if not targets:
            raise _invalid(f"stages: layers {layer_start}.. have no target")
        self.layer_start = layer_start
        self.num_layers = num_layers
        self.clients = [Client(t, **client_options) for t in targets]
        self.current = 0

    @property
    def client(self) -> Client:
        return self.clients[self.current]

    def next_replica(self) -> None:
        """Moves to the next replica (back to the same one if it is the only one:
        it may have restarted)."""
        self.current = (self.current + 1) % len(self.clients)

    def describe(self) -> str:
        return (f"layers {self.layer_start}..{self.layer_start + self.num_layers - 1} "
                f"on {', '.join(c.target for c in self.clients)}")


class Pipeline:
    """See the module docstring. stages: ordered (targets, layer_start,
    num_layers), each stage starting where the one before ends; `targets` is one
    address or a list of replicas of that stage. model: "" = each server's
    default. Other keyword arguments go to every replica's Client."""

    def __init__(self, stages: Sequence[StageSpec], model: str = "",
                 **client_options: Any):
        stages = list(stages)
        if not stages:
            raise _invalid("stages: empty; give (targets, layer_start, num_layers) each")
        for i, (_, start, count) in enumerate(stages):
            if count < 1:
                raise _invalid(f"stages[{i}]: num_layers {count} must be >= 1")
            if i > 0:
                end = stages[i - 1][1] + stages[i - 1][2]
                if start != end:
                    raise _invalid(f"stages[{i}]: starts at layer {start} but stages[{i - 1}] "
                                   f"ends before layer {end} "
                                   f"({'gap' if start > end else 'overlap'})")
        self.model = model
        self._stages = []
        try:
            for targets, start, count in stages:
                self._stages.append(_Stage(targets, start, count, client_options))
        except Exception:
            self.close()
            raise
        # Each stage's wall time in seconds in the last forward().
        self.last_stage_seconds: List[float] = []

    @classmethod
    def from_servers(cls, targets: Sequence[str], model: str = "",
                     **client_options: Any) -> "Pipeline":
        """A pipeline over `targets` ordered by the span each one serves (GetModel):
        servers with the same span become replicas of one stage. Fails with
        INVALID_ARGUMENT naming the servers when the spans leave a gap, overlap or
        do not cover the model's layers."""
        spans: Dict[Tuple[int, int], List[str]] = {}  # (start, count) -> targets
        total = None
        for target in targets:
            with Client(target, **client_options) as client:
                info = client.get_model(model)
            if info.state != "READY":
                raise _invalid(f"{target}: model {info.name!r} is {info.state}: {info.error}")
            if total is not None and info.num_layers != total[0]:
                raise _invalid(f"{target}: model {info.name!r} has {info.num_layers} layers, "
                               f"{total[1]} says {total[0]}")
            total = total or (info.num_layers, target)
            spans.setdefault((info.span_layer_start, info.span_num_layers), []).append(target)
        if total is None:
            raise _invalid("targets: empty")
        ordered = sorted(spans.items())
        expected = 0
        for (start, count), servers in ordered:
            if start != expected:
                kind = "gap" if start > expected else "overlap"
                raise _invalid(
                    f"targets: the spans leave a {kind} at layer {min(start, expected)}: "
                    f"{', '.join(servers)} serve layers {start}..{start + count - 1}, "
                    f"the servers before end at layer {expected - 1}")
            expected = start + count
        if expected != total[0]:
            raise _invalid(f"targets: the spans end at layer {expected - 1}; the model has "
                           f"{total[0]} layers")
        return cls([(servers, start, count) for (start, count), servers in ordered],
                   model=model, **client_options)

    @property
    def stages(self) -> List[Tuple[List[str], int, int]]:
        """(targets, layer_start, num_layers) of each stage."""
        return [([c.target for c in s.clients], s.layer_start, s.num_layers)
                for s in self._stages]

    def forward(self, hidden_states: ArrayLike, **kwargs: Any) -> np.ndarray:
        """hidden_states through every stage in order; the last stage's output.
        Keyword arguments (positions, position_offset, sequence_lengths, causal,
        dtype, output_dtype, timeout) are Client.block_forward's, the same for
        every stage. A stage whose replica is UNAVAILABLE goes to its next one."""
        x: Any = hidden_states  # Each stage's output: an np.ndarray.
        self.last_stage_seconds = []
        for stage in self._stages:
            started = time.perf_counter()
            for attempt in range(len(stage.clients)):
                try:
                    x = stage.client.block_forward(
                        x, model=self.model, layer_start=stage.layer_start,
                        num_layers=stage.num_layers, **kwargs)
                    break
                except LayerServeError as error:
                    if (error.code != grpc.StatusCode.UNAVAILABLE
                            or attempt + 1 == len(stage.clients)):
                        raise
                    stage.next_replica()
            self.last_stage_seconds.append(time.perf_counter() - started)
        return x

    def step(self, sessions: Sequence["PipelineSession"], hidden_states: ArrayLike,
             sequence_lengths: Optional[Sequence[int]] = None, *, dtype: DType = None,
             output_dtype: DType = None,
             timeout: Optional[float] = None) -> PipelineStepResult:
        """Many sessions through every stage, one call per stage (Client.step):
        row b of hidden_states [B, T, D] ([T, D]: one session) is appended to
        sessions[b], a PipelineSession of this pipeline. sequence_lengths (B
        entries in [1, T]) makes the rows ragged. Bit for bit what each session's
        forward of its row would give. A stage whose replica is lost is recovered
        as in forward (see the module docstring). timeout: seconds per stage call
        (None: the Clients'). A step that fails at a later stage leaves the
        earlier stages' sessions advanced, as forward does."""
        sessions = list(sessions)
        if not sessions:
            raise _invalid("sessions: empty; give one PipelineSession per row")
        for b, session in enumerate(sessions):
            if not isinstance(session, PipelineSession) or session._pipeline is not self:
                raise _invalid(f"sessions[{b}]: not a PipelineSession of this pipeline")
            for c in range(b):
                if sessions[c] is session:
                    raise _invalid(f"sessions[{b}]: repeats sessions[{c}]")
        x = np.asarray(hidden_states, dtype=np.float32)
        shape = x.shape
        if x.ndim == 2:
            x = x[None]
        if x.ndim != 3 or x.shape[0] != len(sessions):
            raise _invalid(f"hidden_states: shape {list(shape)} for {len(sessions)} "
                           "sessions; want [B, T, D] with B = the number of sessions")
        if sequence_lengths is None:
            lengths = [x.shape[1]] * len(sessions)
        else:
            lengths = [int(n) for n in sequence_lengths]
            if len(lengths) != len(sessions):
                raise _invalid(f"sequence_lengths: {len(lengths)} entries for "
                               f"{len(sessions)} sessions")
            for b, n in enumerate(lengths):
                if not 1 <= n <= x.shape[1]:
                    raise _invalid(f"sequence_lengths[{b}]: {n} must be in [1, "
                                   f"{x.shape[1]}]")
        options: Dict[str, Any] = {"dtype": dtype, "output_dtype": output_dtype}
        if timeout is not None:
            options["timeout"] = timeout
        seconds, targets = [], []
        for index in range(len(self._stages)):
            started = time.perf_counter()
            x, stage_targets, new_lengths = self._step_stage(index, sessions, x, lengths,
                                                             options)
            seconds.append(time.perf_counter() - started)
            targets.append(stage_targets)
        for session, length in zip(sessions, new_lengths):
            session.length = length
        return PipelineStepResult(x.reshape(shape), new_lengths, seconds, targets)

    def _step_stage(self, index: int, sessions: List["PipelineSession"], x: np.ndarray,
                    lengths: List[int], options: Dict[str, Any]
                    ) -> Tuple[np.ndarray, List[str], List[int]]:
        """Stage `index` of Pipeline.step: one Client.step per replica holding the
        rows' sessions (normally one), recovering lost sessions; records each row's
        real tokens for a later re-prefill. Returns the output [B, T, D], each
        row's replica target and each session's length."""
        out = np.zeros(x.shape, dtype=np.float32)
        targets: List[str] = [""] * len(sessions)
        new_lengths = [0] * len(sessions)
        rows_left = list(range(len(sessions)))
        # Each failed call recovers at least one session; a row's session is
        # recovered at most once per attempt of the stage's replicas.
        budget = len(sessions) * len(self._stages[index].clients) + 1
        while rows_left:
            groups: Dict[int, List[int]] = {}
            clients = {}
            for b in rows_left:
                client = sessions[b]._sessions[index]._client
                groups.setdefault(id(client), []).append(b)
                clients[id(client)] = client
            key, rows = next(iter(groups.items()))
            client = clients[key]
            try:
                result = client.step([sessions[b]._sessions[index] for b in rows],
                                     x[rows], [lengths[b] for b in rows], **options)
            except LayerServeError as error:
                budget -= 1
                if error.code not in _LOST or budget <= 0:
                    raise
                # NOT_FOUND naming a row: that session alone (evicted, expired);
                # otherwise the replica: every session on it.
                row = None
                if error.code == grpc.StatusCode.NOT_FOUND:
                    row = _ROW.match(error.details)
                lost = [rows[int(row.group(1))]] if row else rows
                for b in lost:
                    sessions[b]._recover(index, error, options)
                continue
            out[rows] = result.hidden_states
            for i, b in enumerate(rows):
                targets[b] = client.target
                new_lengths[b] = result.lengths[i]
                sessions[b]._inputs[index].append(
                    np.array(x[b, :lengths[b]], dtype=np.float32))
            rows_left = [b for b in rows_left if b not in rows]
        return out, targets, new_lengths

    def open_session(self, max_length: int = 0) -> "PipelineSession":
        """A session per stage, for incremental decoding across the pipeline; a
        context manager that closes them all."""
        return PipelineSession(self, max_length)

    def close(self) -> None:
        for stage in self._stages:
            for client in stage.clients:
                client.close()

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PipelineSession:
    """Made by Pipeline.open_session; see the module docstring. Positions continue
    from the cached tokens (explicit positions are not taken: a re-prefill could
    not repeat them). Use from one thread."""

    def __init__(self, pipeline: Pipeline, max_length: int):
        self._pipeline = pipeline
        self.max_length = max_length
        self.length = 0
        # How many times a stage was re-opened on a replica and re-prefilled.
        self.recoveries = 0
        self._sessions = []
        # Per stage: the inputs sent so far ([T, D] each), for a re-prefill.
        self._inputs: List[List[np.ndarray]] = [[] for _ in pipeline._stages]
        try:
            for stage in pipeline._stages:
                self._sessions.append(self._open(stage))
        except Exception:
            self.close()
            raise

    @property
    def session_ids(self) -> List[str]:
        """The server session id of each stage, as of now."""
        return [session.id for session in self._sessions]

    def _open(self, stage: _Stage) -> Session:
        return stage.client.open_session(
            model=self._pipeline.model, layer_start=stage.layer_start,
            num_layers=stage.num_layers, max_length=self.max_length)

    def _recover(self, index: int, error: LayerServeError,
                 options: Dict[str, Any]) -> None:
        """Stage `index` lost its session: open one on another replica (trying each
        once) and re-send the stage's cached inputs as one prefill, with the step's
        call options (the same wire dtype)."""
        stage = self._pipeline._stages[index]
        lost = self._sessions[index]._client
        for attempt in range(len(stage.clients)):
            # The stage's current replica, unless that is the lost one (another
            # session's recovery may have moved there already: sessions stepped
            # together stay together).
            if attempt > 0 or stage.client is lost:
                stage.next_replica()
            try:
                session = self._open(stage)
                if self._inputs[index]:
                    session.forward(np.concatenate(self._inputs[index]), **options)
            except LayerServeError as next_error:
                if next_error.code not in _LOST:
                    raise
                error = next_error
                continue
            self._sessions[index] = session
            self.recoveries += 1
            return
        raise LayerServeError(error.code, f"{stage.describe()}: every replica failed; "
                              f"last: {error.details}", error.attempts)

    def forward(self, hidden_states: ArrayLike, *, dtype: DType = None,
                output_dtype: DType = None,
                timeout: Optional[float] = None) -> PipelineForwardResult:
        """Appends hidden_states [T, D] (or [1, T, D]) to every stage's session in
        turn. timeout: seconds per stage call (None: the Clients')."""
        x = np.asarray(hidden_states, dtype=np.float32)
        options: Dict[str, Any] = {"dtype": dtype, "output_dtype": output_dtype}
        if timeout is not None:
            options["timeout"] = timeout
        seconds, targets = [], []
        for index, stage in enumerate(self._pipeline._stages):
            started = time.perf_counter()
            try:
                result = self._sessions[index].forward(x, **options)
            except LayerServeError as error:
                if error.code not in _LOST:
                    raise
                self._recover(index, error, options)
                result = self._sessions[index].forward(x, **options)
            self._inputs[index].append(x.reshape(-1, x.shape[-1]))
            seconds.append(time.perf_counter() - started)
            targets.append(stage.client.target)
            x = result.hidden_states
        self.length = result.length
        return PipelineForwardResult(x, self.length, seconds, targets)

    def close(self) -> None:
        """Closes every stage's session; one already gone or unreachable is fine."""
        for session in self._sessions:
            try:
                session.close()
            except LayerServeError as error:
                if error.code not in _LOST:
                    raise

    def __enter__(self) -> "PipelineSession":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.close()
        except LayerServeError:
            if exc_type is None:
                raise
