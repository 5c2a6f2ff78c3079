"""Session: a KV-cache session on one layerserve replica, for incremental decoding.

    with client.open_session(model="tiny-llama", num_layers=2) as session:
        out = session.forward(prompt_hidden)       # prefill: [T, D]
        out = session.forward(next_token_hidden)   # one step: [1, D]
        out.hidden_states, out.length              # length: tokens now cached

The server keeps the keys and values of every token sent so far, so each call sends
only its new tokens; positions continue from the cached length unless given. A
session holds one sequence and takes one call at a time (a second concurrent call
fails with ABORTED): use it from one thread. Errors, as LayerServeError:
NOT_FOUND when the session is unknown, closed, expired, evicted or lives on another
replica (open a new one and prefill again); OUT_OF_RANGE past max_length.

Every call of a session carries its id in the x-layerserve-session header, so a load
balancer routing on it keeps the session's calls on the replica that opened it
(docs/operations/sessions.md). Forward calls are never retried: one whose answer was lost
may have appended its tokens already, and a retry would append them twice.

Many sessions in one call (Client.step): row b of hidden_states [B, T, D] continues
session b, all of them in one BlockForward (session_ids), all or nothing:

    a, b = client.open_session(model="tiny-llama"), client.open_session(model="tiny-llama")
    out = client.step([a, b], prompts, sequence_lengths=[5, 3])  # ragged prefill
    out = client.step([a, b], next_tokens)                       # [2, 1, D]
    out.hidden_states, out.lengths, a.length                     # lengths: [6, 4]

When one session is unknown, busy, full or mismatched the call fails with the status
that session alone would get, its message naming the row ("session_ids[1]: ..."), and
no session advances. Like forward, a step is never retried.
"""
import dataclasses
from typing import TYPE_CHECKING, Any, List, Optional

import grpc
import numpy as np
from numpy.typing import ArrayLike

from .errors import LayerServeError
from .tensors import DType

if TYPE_CHECKING:  # Only for the hints: client.py imports this module.
    from .client import Client

# The metadata header that carries a session call's session id.
SESSION_HEADER = "x-layerserve-session"

# A timeout not given: the Client's (None means no deadline). Typed Any so that it
# can stand as the default of an Optional[float] argument.
_UNSET: Any = object()


@dataclasses.dataclass
class SessionForwardResult:
    """One Session.forward: the hidden states of the tokens sent (the shape sent)
    and the number of tokens the session holds after the call."""
    hidden_states: np.ndarray
    length: int


@dataclasses.dataclass
class StepResult:
    """One Client.step: the hidden states of every row (the shape sent; a row's
    padding past its sequence length comes back as zeros) and each session's number
    of tokens after the call, in the order of the sessions given."""
    hidden_states: np.ndarray
    lengths: List[int]


class Session:
    """Made by Client.open_session; see the module docstring."""

    def __init__(self, client: "Client", session_id: str, ttl_ms: int, model: str,
                 layer_start: int, num_layers: int, max_length: int):
        self._client = client
        self.id = session_id
        self.ttl_ms = ttl_ms          # The server closes it after this long idle.
        self.model = model
        self.layer_start = layer_start
        self.num_layers = num_layers
        self.max_length = max_length  # 0 = the model's maximum.
        self.length = 0               # Tokens cached, as of the last forward.
        self.closed = False

    def forward(self, hidden_states: ArrayLike, *, positions: Optional[ArrayLike] = None,
                position_offset: int = 0, dtype: DType = None, output_dtype: DType = None,
                timeout: Optional[float] = _UNSET) -> SessionForwardResult:
        """Appends hidden_states [T, D] (or [1, T, D]) to the session and runs the
        session's blocks on them, attending over the cache and the new tokens.
        positions / position_offset override where the tokens sit (default: right
        after the cached ones). timeout: seconds (None: no deadline), default the
        Client's."""
        result = self._client._session_forward(
            self.id, hidden_states, positions=positions, position_offset=position_offset,
            dtype=dtype, output_dtype=output_dtype, timeout=timeout)
        self.length = result.length
        return result

    def close(self, *, timeout: Optional[float] = _UNSET) -> None:
        """Frees the session's cache on the server. NOT_FOUND if it is already gone
        (expired, evicted, closed)."""
        self._client.close_session(self.id, timeout=timeout)
        self.closed = True

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.closed:
            return
        try:
            self.close()
        except LayerServeError as error:
            # Already gone (what close wants) or the call failed: never hide the
            # exception that ended the with-block.
            if exc_type is None and error.code != grpc.StatusCode.NOT_FOUND:
                raise

    def __repr__(self) -> str:
        return f"Session({self.id!r}, length={self.length})"
