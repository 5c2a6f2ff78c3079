"""Retries of UNAVAILABLE calls with capped exponential backoff and full jitter.

Only UNAVAILABLE is retried: layerserve.proto gives it for a draining server and
gRPC for an unreachable one, and every layerserve RPC is a pure computation, so
sending it again is safe. Except a session step: a BlockForward with session_id or
session_ids appends to KV caches, and one whose answer was lost may have appended
already, so Client sends those once (Session.forward, Client.step). Every other code is the answer (INVALID_ARGUMENT will not
change by repeating it; DEADLINE_EXCEEDED means the time is spent). The call's
deadline covers all attempts and the waits between them.
"""
import dataclasses
import random
import time
from typing import Callable, Optional, TypeVar

import grpc

from .errors import LayerServeError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How UNAVAILABLE calls are retried. max_attempts=1 turns retries off."""

    max_attempts: int = 4            # Sends in all, the first included.
    initial_backoff: float = 0.05    # Seconds: the cap of the first wait.
    max_backoff: float = 2.0         # Seconds: no wait is longer.
    multiplier: float = 2.0          # Growth of the cap per retry.

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not (0 <= self.initial_backoff <= self.max_backoff) or self.multiplier < 1:
            raise ValueError("need 0 <= initial_backoff <= max_backoff and multiplier >= 1")

    def backoff_cap(self, retry: int) -> float:
        """Upper bound of the wait before retry number `retry` (1 = the first)."""
        return min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))

    def backoff(self, retry: int, rng: random.Random) -> float:
        """The wait before retry `retry`: uniform in [0, cap] ("full jitter", so
        clients that failed together do not come back together)."""
        return rng.uniform(0.0, self.backoff_cap(retry))


def call_with_retries(attempt: Callable[[Optional[float]], T], policy: RetryPolicy,
                      timeout: Optional[float], sleep: Callable[[float], None],
                      rng: random.Random, clock: Callable[[], float] = time.monotonic) -> T:
    """Runs attempt(remaining_timeout) until it returns, retrying on UNAVAILABLE as
    `policy` says within `timeout` seconds (None: no deadline). Raises
    LayerServeError with the last status when it gives up."""
    deadline = None if timeout is None else clock() + timeout
    attempts = 0
    while True:
        remaining = None if deadline is None else max(0.0, deadline - clock())
        attempts += 1
        try:
            return attempt(remaining)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE or attempts >= policy.max_attempts:
                raise LayerServeError.from_rpc_error(error, attempts) from error
            wait = policy.backoff(attempts, rng)
            if deadline is not None and clock() + wait >= deadline:
                # No time left for another try: the server's answer is more useful
                # than a DEADLINE_EXCEEDED of our own making.
                raise LayerServeError.from_rpc_error(error, attempts) from error
            sleep(wait)
