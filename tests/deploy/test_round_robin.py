"""Client-side balancing, as over the headless Service (deploy/k8s): one channel to
three replicas with gRPC's round_robin policy and client-side health checking. Calls
rotate over all three; a replica that starts draining (health NOT_SERVING) leaves
the rotation, and calls go on without errors."""
import json

import grpc
import numpy as np

from checked_normalize import checked_normalize
from conftest import SERVICE_NAME
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from metrics_text import requests_ok
from server_process import ServerProcess, wait_for

CALLS = 60

SERVICE_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    # Watch grpc.health.v1 per replica: NOT_SERVING takes it out of the rotation.
    "healthCheckConfig": {"serviceName": SERVICE_NAME},
    # A call that races the health update and reaches the draining replica gets
    # UNAVAILABLE: retried on another.
    "methodConfig": [{
        "name": [{"service": SERVICE_NAME}],
        "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s", "maxBackoff": "0.5s",
                        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}],
})


def test_round_robin_over_three_replicas_and_around_a_draining_one():
    replicas = [ServerProcess("--compute-threads=1", "--shutdown-grace=30s") for _ in range(3)]
    rng = np.random.default_rng(11)
    try:
        target = "ipv4:" + ",".join(r.target for r in replicas)
        with grpc.insecure_channel(target, options=[("grpc.service_config", SERVICE_CONFIG)]) as channel:
            stub = pb_grpc.LayerServiceStub(channel)
            # Until every replica has answered once, all three subchannels are up.
            assert wait_for(lambda: (checked_normalize(stub, rng) or True)
                            and all(requests_ok(r.metrics()) > 0 for r in replicas),
                            timeout=30)
            before = [requests_ok(r.metrics()) for r in replicas]
            for _ in range(CALLS):
                checked_normalize(stub, rng)
            served = [requests_ok(r.metrics()) - b for r, b in zip(replicas, before)]
            # round_robin over three ready replicas: an even share each.
            assert served == [CALLS // 3] * 3, served

            draining = replicas[1]
            others = [replicas[0], replicas[2]]
            before = [requests_ok(r.metrics()) for r in others]
            draining_before = requests_ok(draining.metrics())
            draining.proc.terminate()
            # Until the replica has taken the signal, a call may still be served by it.
            assert wait_for(lambda: "draining" in draining.output(), timeout=30)
            for _ in range(CALLS):
                checked_normalize(stub, rng)
            assert draining.stop() == 0, draining.output()
            served = [requests_ok(r.metrics()) - b for r, b in zip(others, before)]
            # Every call after the SIGTERM was answered OK by the two others.
            assert sum(served) == CALLS, served
            assert min(served) >= CALLS // 4, served
            assert "stopped" in draining.output()
            assert draining_before >= CALLS // 3
    finally:
        for r in replicas:
            assert r.stop() == 0, r.output()
