"""A gRPC proxy in front of a real layerserve, for retry, deadline and TLS tests.

It forwards every unary call's bytes untouched to `upstream`, but first can fail the
first `fail_first` calls with `fail_code`, and delay each call by `delay` seconds.
It counts the calls it received per method, so a test sees how often the client sent,
and records each call's x-layerserve-session header (`sessions`: (method, value or
None)), passing it on, and its authorization header (`authorization`: (method,
value or None)), not passed on.
Listens on 127.0.0.1, on `port` (0: the OS picks), with TLS if server_credentials.
"""
import threading
import time
from concurrent import futures

import grpc


class FlakyProxy:
    def __init__(self, upstream: str, fail_first: int = 0,
                 fail_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE, delay: float = 0.0,
                 server_credentials=None, port: int = 0):
        self.fail_first = fail_first
        self.fail_code = fail_code
        self.delay = delay
        self.calls = {}
        self.sessions = []
        self.authorization = []
        self._lock = threading.Lock()
        self._upstream = grpc.insecure_channel(upstream)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers([_Handler(self)])
        address = f"127.0.0.1:{port}"
        if server_credentials is None:
            port = self._server.add_insecure_port(address)
        else:
            port = self._server.add_secure_port(address, server_credentials)
        self.port = port
        self.target = f"127.0.0.1:{port}"
        self._server.start()

    def count(self, method_suffix: str) -> int:
        with self._lock:
            return sum(n for m, n in self.calls.items() if m.endswith(method_suffix))

    def _forward(self, method, request: bytes, context) -> bytes:
        received = dict(context.invocation_metadata())
        header = received.get("x-layerserve-session")
        with self._lock:
            self.sessions.append((method.rsplit("/", 1)[-1], header))
            self.authorization.append((method.rsplit("/", 1)[-1],
                                       received.get("authorization")))
            self.calls[method] = self.calls.get(method, 0) + 1
            seen = sum(self.calls.values())
        if self.delay:
            time.sleep(self.delay)
        if seen <= self.fail_first:
            context.abort(self.fail_code, f"proxy: failing call {seen} of {self.fail_first}")
        try:
            metadata = None if header is None else (("x-layerserve-session", header),)
            return self._upstream.unary_unary(method)(request,
                                                      timeout=context.time_remaining(),
                                                      metadata=metadata)
        except grpc.RpcError as error:
            context.abort(error.code(), error.details())

    def stop(self):
        self._server.stop(grace=None)
        self._upstream.close()


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, proxy):
        self._proxy = proxy

    def service(self, handler_call_details):
        method = handler_call_details.method
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: self._proxy._forward(method, request, context))
