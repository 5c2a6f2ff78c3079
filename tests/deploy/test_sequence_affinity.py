"""Open Inference Protocol sequences through deploy/nginx/nginx.conf over three real
replicas: requests carrying the x-layerserve-sequence header are hashed on it, so
every request of a sequence, its start included, reaches the replica that holds it.
12 sequences of ModelInfer calls (start with 3 tokens, 3 steps, end with one more)
all succeed and equal one forward pass of their 7 tokens; the replicas' ModelInfer
counters add up to exactly those calls, none NOT_FOUND. Without the header the same
requests are balanced round robin and continuations get NOT_FOUND "is unknown on
this replica": the affinity comes from the header. A ModelStreamInfer call is one
HTTP/2 stream, so its sequence needs no header."""
import shutil

import grpc
import numpy as np
import pytest

from inference import grpc_service_pb2 as oip
from inference import grpc_service_pb2_grpc as oip_grpc
from metrics_text import parse_samples
from server_process import SOURCE_DIR, ServerProcess
from test_nginx import Nginx

HEADER = "x-layerserve-sequence"
MODEL = "tiny-llama"  # A golden checkpoint: hidden size 48, 3 layers.
HIDDEN = 48
SEQUENCES, PREFILL, STEPS = 12, 3, 3
TOKENS = PREFILL + STEPS + 1  # The end request brings one more token.


@pytest.fixture
def replicas(tmp_path):
    """Three servers of one repository: sequences need a repository model."""
    repository = tmp_path / "models"
    shutil.copytree(SOURCE_DIR / "tests" / "golden" / "models" / MODEL, repository / MODEL)
    servers = [ServerProcess("--compute-threads=1", f"--model-repository={repository}")
               for _ in range(3)]
    yield servers
    for s in servers:
        assert s.stop() == 0, s.output()


def request(x, sequence_id=0, start=False, end=False):
    r = oip.ModelInferRequest(model_name=MODEL)
    r.inputs.add(name="hidden_states", datatype="FP32", shape=list(x.shape))
    r.raw_input_contents.append(np.ascontiguousarray(x, "<f4").tobytes())
    if sequence_id:
        r.parameters["sequence_id"].int64_param = sequence_id
        r.parameters["sequence_start"].bool_param = start
        r.parameters["sequence_end"].bool_param = end
    return r


def hidden_states(response):
    [raw] = response.raw_output_contents
    return np.frombuffer(raw, "<f4").reshape(-1, HIDDEN)


def infer(stub, x, sequence_id, header=True, **flags):
    metadata = ((HEADER, str(sequence_id)),) if header else None
    return stub.ModelInfer(request(x, sequence_id, **flags), timeout=30, metadata=metadata)


def model_infer(replica, code):
    """layerserve_requests_total of ModelInfer on MODEL with `code`."""
    return sum(value for labels, value in
               parse_samples(replica.metrics(), "layerserve_requests_total")
               if labels.get("method") == "ModelInfer" and labels.get("model") == MODEL
               and labels.get("code") == code)


def assert_close(got, whole, what):
    bound = 1e-4 * np.maximum(1.0, np.abs(whole))
    assert np.all(np.abs(got - whole) <= bound), what


def test_sequences_stay_on_their_replica_with_the_header_and_break_without(replicas,
                                                                           tmp_path):
    rng = np.random.default_rng(31)
    tokens = {1000 + i: rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
              for i in range(SEQUENCES)}
    # The reference: each sequence's tokens as one forward pass, on one server.
    with grpc.insecure_channel(replicas[0].target) as channel:
        direct = oip_grpc.GRPCInferenceServiceStub(channel)
        whole = {s: hidden_states(direct.ModelInfer(request(x), timeout=30))
                 for s, x in tokens.items()}

    nginx = Nginx(tmp_path, replicas)
    try:
        before = [model_infer(r, "OK") for r in replicas]
        with grpc.insecure_channel(f"127.0.0.1:{nginx.port}") as channel:
            stub = oip_grpc.GRPCInferenceServiceStub(channel)
            got = {s: [] for s in tokens}
            # Every sequence starts before any steps, so each replica holds several
            # at once. Then one sequence after the other runs to its end: under
            # round robin its consecutive requests would reach all three replicas.
            for s, x in tokens.items():
                reply = infer(stub, x[:PREFILL], s, start=True)
                assert reply.parameters["session_length"].int64_param == PREFILL
                got[s].append(hidden_states(reply))
            for s, x in tokens.items():
                for t in range(PREFILL, TOKENS):
                    reply = infer(stub, x[t:t + 1], s, end=t == TOKENS - 1)
                    assert reply.parameters["session_length"].int64_param == t + 1
                    got[s].append(hidden_states(reply))
            for s in tokens:
                assert_close(np.concatenate(got[s]), whole[s], s)

            # Exactly those calls, each sequence's all on one replica (a multiple of
            # its 5 requests), none refused; the hash spread them.
            served = [model_infer(r, "OK") - b for r, b in zip(replicas, before)]
            assert sum(served) == SEQUENCES * (STEPS + 2), served
            assert all(n % (STEPS + 2) == 0 for n in served), served
            assert sum(n > 0 for n in served) >= 2, served
            assert [model_infer(r, "NOT_FOUND") for r in replicas] == [0, 0, 0]

            # Without the header nginx balances each request round robin: a
            # continuation that reaches another replica than the start's is refused.
            codes = []
            for s in (2000, 2001):
                infer(stub, tokens[1000][:PREFILL], s, header=False, start=True)
                for t in range(PREFILL, TOKENS - 1):
                    try:
                        infer(stub, tokens[1000][t:t + 1], s, header=False)
                        codes.append("OK")
                    except grpc.RpcError as error:
                        assert error.code() == grpc.StatusCode.NOT_FOUND, error
                        assert f'sequence "{s}" is unknown on this replica' in \
                            error.details()
                        codes.append("NOT_FOUND")
            assert codes.count("NOT_FOUND") >= 1, codes

            # One ModelStreamInfer call is one HTTP/2 stream, so one upstream: its
            # sequence's requests need no header to stay together.
            x = tokens[1001]
            requests = [request(x[:PREFILL], 3000, start=True)] + [
                request(x[t:t + 1], 3000, end=t == TOKENS - 1)
                for t in range(PREFILL, TOKENS)]
            replies = list(stub.ModelStreamInfer(iter(requests), timeout=30))
            assert [r.error_message for r in replies] == [""] * len(requests)
            assert_close(np.concatenate([hidden_states(r.infer_response)
                                         for r in replies]), whole[1001], "stream")
    finally:
        assert nginx.stop() == 0
