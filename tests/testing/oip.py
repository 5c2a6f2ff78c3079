"""Open Inference Protocol (inference.GRPCInferenceService) requests and answers for
the end-to-end tests, with the layerserve.v1 tensors carrying the same bytes, so a
test can send one computation both ways and compare the answers byte for byte."""
import numpy as np

from inference import grpc_service_pb2 as oip
from layerserve.v1 import layerserve_pb2 as pb

V1_DTYPE = {"FP32": pb.FLOAT32, "BF16": pb.BFLOAT16, "FP16": pb.FLOAT16}


def encode(values, datatype) -> bytes:
    """Little-endian bytes of `values` in the protocol's `datatype`. BF16 rounds
    float32 to nearest even (numpy has no bfloat16)."""
    a = np.ascontiguousarray(values)
    if datatype == "INT64":
        return a.astype("<i8").tobytes()
    a = a.astype(np.float32)
    if datatype == "FP32":
        return a.astype("<f4").tobytes()
    if datatype == "FP16":
        return a.astype("<f2").tobytes()
    assert datatype == "BF16", datatype
    bits = a.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


def v1_tensor(values, datatype) -> pb.Tensor:
    """The layerserve.v1 tensor of the bytes encode() sends."""
    a = np.asarray(values)
    return pb.Tensor(shape=list(a.shape), dtype=V1_DTYPE[datatype],
                     data=encode(a, datatype))


def parameter(value) -> oip.InferParameter:
    """An InferParameter of a Python value, typed as the value is."""
    if isinstance(value, oip.InferParameter):
        return value
    if isinstance(value, bool):
        return oip.InferParameter(bool_param=value)
    if isinstance(value, int):
        return oip.InferParameter(int64_param=value)
    if isinstance(value, float):
        return oip.InferParameter(double_param=value)
    return oip.InferParameter(string_param=value)


def infer_request(model, inputs=(), params=None, typed=False, outputs=(), id="",
                  version=""):
    """A ModelInferRequest. `inputs`: (name, array, datatype) triples, in order;
    `typed`: every input in typed contents (fp32_contents, int64_contents) instead of
    raw_input_contents; `outputs`: the output names to ask for."""
    request = oip.ModelInferRequest(model_name=model, model_version=version, id=id)
    for name, values, datatype in inputs:
        a = np.asarray(values)
        tensor = request.inputs.add(name=name, datatype=datatype, shape=list(a.shape))
        if not typed:
            request.raw_input_contents.append(encode(a, datatype))
        elif datatype == "INT64":
            tensor.contents.int64_contents.extend(int(v) for v in a.ravel())
        else:
            assert datatype == "FP32", "the protocol has typed contents for FP32 only"
            tensor.contents.fp32_contents.extend(a.astype(np.float32).ravel().tolist())
    for name, value in (params or {}).items():
        request.parameters[name].CopyFrom(parameter(value))
    for name in outputs:
        request.outputs.add(name=name)
    return request


def answers(response):
    """{output name: (datatype, shape, raw bytes)} of a ModelInferResponse."""
    assert len(response.outputs) == len(response.raw_output_contents), response
    return {out.name: (out.datatype, list(out.shape), raw)
            for out, raw in zip(response.outputs, response.raw_output_contents)}


def v1_answers(response, names):
    """answers()'s form of the v1 response's tensors `names` (its fields)."""
    datatypes = {dtype: name for name, dtype in V1_DTYPE.items()}
    tensors = {name: getattr(response, name) for name in names}
    return {name: (datatypes[t.dtype], list(t.shape), t.data)
            for name, t in tensors.items()}
