"""The project's gRPC definitions (protocol/grpc/*.proto, written from the reference notes) against the compiled
descriptors of the official RocketMQ 5.x Python SDK (PyPI rocketmq-python-client): every message, field, enum value
and RPC we define must have the SDK's name, number, type and presence, so the two speak the same wire format.

Each side is loaded in its own process (both register the package apache.rocketmq.v2 in protobuf's default pool)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DUMP = r"""
import importlib, json, sys
modules = [importlib.import_module(m) for m in sys.argv[1:]]
out = {"messages": {}, "enums": {}, "services": {}}

def repeated(f):
    return f.is_repeated if hasattr(f, "is_repeated") else f.label == 3

def message(desc):
    out["messages"][desc.full_name] = {
        f.name: [f.number, f.type, repeated(f), f.message_type.full_name if f.message_type else
                 (f.enum_type.full_name if f.enum_type else ""), f.has_presence,
                 f.containing_oneof.name if f.containing_oneof and not f.containing_oneof.name.startswith("_")
                 else ""]
        for f in desc.fields}
    for nested in desc.nested_types:
        if not nested.GetOptions().map_entry:
            message(nested)

for module in modules:
    fd = module.DESCRIPTOR
    for desc in fd.message_types_by_name.values():
        message(desc)
    for enum in fd.enum_types_by_name.values():
        out["enums"][enum.full_name] = {v.name: v.number for v in enum.values}
    for service in fd.services_by_name.values():
        out["services"][service.full_name] = {
            m.name: [m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming]
            for m in service.methods}
print(json.dumps(out))
"""


def _dump(*modules: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", DUMP, *modules], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_our_definitions_match_the_official_sdk():
    ours = _dump("protocol.grpc.definition_pb2", "protocol.grpc.service_pb2")
    sdk = _dump("rocketmq.grpc_protocol.definition_pb2", "rocketmq.grpc_protocol.service_pb2")
    assert len(ours["messages"]) == 54 and len(ours["enums"]) == 11
    for name, fields in ours["messages"].items():
        assert name in sdk["messages"], f"{name} is not an SDK message"
        assert fields == sdk["messages"][name], name
    for name, values in ours["enums"].items():
        assert values == sdk["enums"][name], name
    service = "apache.rocketmq.v2.MessagingService"
    for rpc, shape in ours["services"][service].items():
        assert shape == sdk["services"][service][rpc], rpc
    used = {"QueryRoute", "Heartbeat", "SendMessage", "QueryAssignment", "ReceiveMessage", "AckMessage",
            "ForwardMessageToDeadLetterQueue", "EndTransaction", "Telemetry", "NotifyClientTermination",
            "ChangeInvisibleDuration", "RecallMessage"}
    assert set(ours["services"][service]) == used


def test_the_generated_modules_are_current():
    """protocol/grpc/*_pb2.py were generated from the .proto files as they are (the command is in
    definition.proto): a .proto change without regenerating fails here."""
    from google.protobuf import descriptor_pb2

    from protocol.grpc import definition_pb2, service_pb2

    for module, name in ((definition_pb2, "definition"), (service_pb2, "service")):
        compiled = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(compiled)
        proc = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", "--include_imports",
                               "--descriptor_set_out=/dev/stdout", f"protocol/grpc/{name}.proto"],
                              cwd=ROOT, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        fresh = descriptor_pb2.FileDescriptorSet.FromString(proc.stdout)
        [source] = [f for f in fresh.file if f.name == f"protocol/grpc/{name}.proto"]
        source.ClearField("source_code_info")
        _drop_json_names(source)
        _drop_json_names(compiled)
        assert source == compiled, f"regenerate protocol/grpc/{name}_pb2.py (see definition.proto)"


def _drop_json_names(file_proto) -> None:
    """protoc's descriptor set names each field's JSON name; the one compiled into a module may not."""
    pending = list(file_proto.message_type)
    while pending:
        message = pending.pop()
        for field in message.field:
            field.ClearField("json_name")
        pending.extend(message.nested_type)
