"""The standard grpc.health.v1.Health/Check messages, without generated code.

Debian ships no grpcio-health-checking, and generating health.proto into the usual
module names would clash with other users of it in the same process. The two small
messages are declared here in a private descriptor pool (same wire format as
grpc/health/v1/health.proto) so nothing else in the process can collide with them.
"""
from typing import Any, Tuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

CHECK_METHOD = "/grpc.health.v1.Health/Check"


def _messages() -> Tuple[Any, Any]:
    f = descriptor_pb2.FileDescriptorProto(
        name="grpc/health/v1/health.proto", package="grpc.health.v1", syntax="proto3")
    request = f.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1,
                      type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    response = f.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(name="status", number=1,
                       type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM,
                       label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                       type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    factory = message_factory.MessageFactory(pool)
    return (factory.GetPrototype(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
            factory.GetPrototype(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")))


HealthCheckRequest, HealthCheckResponse = _messages()


def status_name(response: Any) -> str:
    """SERVING, NOT_SERVING, UNKNOWN or SERVICE_UNKNOWN."""
    enum = HealthCheckResponse.DESCRIPTOR.enum_types_by_name["ServingStatus"]
    return enum.values_by_number[response.status].name
