"""The send fast paths (batch decoding with raw properties, response templates, cached index hashing, single-message
store append) must write exactly the bytes of the general paths: same commit log, consume queues, index entries and
responses. Each piece is checked against its reference, then a real in-process broker is driven twice with the same
mixed traffic, once with every fast path disabled."""

from __future__ import annotations

import os
import random
import struct

import pytest

import broker.core.send_batch as send_batch_module
import broker.processors.send as send_module
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.remoting_connection import ServerProtocol
from broker.store.index import KeyHasher
from protocol.codes import RequestCode, SerializeType
from protocol.command import RemotingCommand, ResponseTemplate, encode_command
from protocol.hashing import index_key_hash
from protocol.ids import UniqKeyGenerator
from protocol.message import BatchEntry, decode_batch_body, encode_batch_body, iter_batch_entries
from protocol.properties import decode_properties, encode_properties, scan_producer_properties
from tests.support.broker_process import free_port



FIXED_MS = 1_763_712_000_123
SEND_OK_ITEMS = [("msgId", None), ("queueId", None), ("queueOffset", None), ("MSG_REGION", "DefaultRegion"),
                 ("TRACE_ON", "true")]


# ---- pieces -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.MSGPACK])
@pytest.mark.parametrize("with_transaction_id", [False, True])
def test_response_template_equals_general_encoder(serialize_type, with_transaction_id):
    items = SEND_OK_ITEMS + ([("transactionId", None)] if with_transaction_id else [])
    template = ResponseTemplate(int(serialize_type), 0, items)
    rnd = random.Random(7)
    alphabet = 'AB09"\\\u00e9\u20ac\U0001F600\x01\x00'
    for _ in range(500):
        values = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40))) for _ in range(len(items) - 2)]
        opaque = rnd.choice([0, 1, 127, 128, 65535, 2**31 - 1, -7, -2**31, rnd.randint(-2**31, 2**31 - 1)])
        request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque, 0, serialize_type=int(serialize_type))
        variables = iter(values)
        ext = {key: next(variables) if value is None else value for key, value in items}
        assert template.encode(opaque, *values) == encode_command(request.make_response(0, None, ext))


def test_producer_layout_scan_agrees_with_decode_properties():
    samples = [
        "UNIQ_KEY\x01U1\x02", "TAGS\x01TagA\x02UNIQ_KEY\x01U1\x02", "TAGS\x01a b\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U\x02",
        "KEYS\x01k\x02UNIQ_KEY\x01U\x02", "TAGS\x01a\x01b\x02UNIQ_KEY\x01U\x02",  # a value may hold \x01
        # not the usual layout: must be refused (None) so the caller decodes them
        "UNIQ_KEY\x01U", "UNIQ_KEY\x01\x02", "TAGS\x01\x02UNIQ_KEY\x01U\x02", "TAGS\x01t\x02", "",
        "UNIQ_KEY\x01U\x02TAGS\x01t\x02", "TAGS\x01t\x02TAGS\x01u\x02UNIQ_KEY\x01U\x02", "WAIT\x01true\x02UNIQ_KEY\x01U\x02",
        "TAGS\x01t\u00e9\x02UNIQ_KEY\x01U\x02", "UNIQ_KEY\x01U\x02\x02", "\x02UNIQ_KEY\x01U\x02",
    ]
    for text in samples:
        found = scan_producer_properties(text.encode())
        if found is None:
            continue
        props = decode_properties(text)
        tags, keys, uniq = (None if v is None else v.decode() for v in found)
        assert (tags, keys, uniq) == (props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY")), text
        assert set(props) <= {"TAGS", "KEYS", "UNIQ_KEY"}, text
    assert scan_producer_properties(b"TAGS\x01TagA\x02UNIQ_KEY\x01U1\x02") == (b"TagA", None, b"U1")
    assert scan_producer_properties(b"UNIQ_KEY\x01U\x02TAGS\x01t\x02") is None
    assert scan_producer_properties("TAGS\x01t\u00e9\x02UNIQ_KEY\x01U\x02".encode()) is None


def test_iter_batch_entries_matches_decode_batch_body():
    entries = [BatchEntry(i, bytes([i]) * i, f"TAGS\x01t{i}\x02UNIQ_KEY\x01U{i}\x02") for i in range(1, 20)]
    body = encode_batch_body(entries)
    raw = list(iter_batch_entries(body))
    assert [(f, b, p.decode()) for f, b, p in raw] == [(e.flag, e.body, e.properties) for e in entries]
    assert decode_batch_body(memoryview(body)) == entries


def test_key_hasher_matches_reference():
    hasher = KeyHasher()
    rnd = random.Random(11)
    alphabet = "ABCDEF0123456789xyz #\u00e9\u20ac\U0001F600"
    uniq = UniqKeyGenerator()
    batches = [[uniq.next() for _ in range(300)]]
    for _ in range(300):
        batches.append(["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40)))
                        for _ in range(rnd.randint(0, 12))])
    for keys in batches:
        for topic in ("T", "TopicTest", "t\u00f6", "x" * 200):
            expected = [index_key_hash(f"{topic}#{key}") for key in keys]
            assert hasher.hash_many(topic, keys) == expected
            assert [hasher(topic, key) for key in keys] == expected


# ---- whole broker: fast paths vs general paths ---------------------------------------------------------------------
class _Transport:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.frames.append(bytes(data))

    def writelines(self, chunks) -> None:
        self.frames.append(b"".join(bytes(c) for c in chunks))

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 40000)

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


class _ReferenceHasher(KeyHasher):
    def __call__(self, topic: str, key: str) -> int:
        return index_key_hash(f"{topic}#{key}")

    def hash_many(self, topic: str, keys) -> list[int]:
        return [index_key_hash(f"{topic}#{key}") for key in keys]


class _GeneralTemplate(ResponseTemplate):
    def __init__(self, serialize_type: int, code: int, ext_items) -> None:
        super().__init__(serialize_type, code, ext_items)
        self.encode = self._general_encode


def _batch_entry(flag: int, body: bytes, raw_props: bytes) -> bytes:
    """One batch entry with properties given as raw bytes (to include invalid UTF-8)."""
    head = struct.pack(">iiiii", 20 + len(body) + 2 + len(raw_props), 0, 0, flag, len(body))
    return head + body + struct.pack(">h", len(raw_props)) + raw_props


def _traffic() -> list[bytes]:
    """Frames of mixed sends: V1/V2, JSON/msgpack, batches with every properties shape, a long topic."""
    born = FIXED_MS - 5
    frames = []
    opaque = 0

    def request(code, ext, body, serialize_type):
        nonlocal opaque
        opaque += 1
        cmd = RemotingCommand.request(code, ext, body, opaque=opaque, serialize_type=serialize_type)
        frames.append(encode_command(cmd))

    def v2(topic, queue_id, props, batch=False):
        return {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0", "g": str(born),
                "h": "0", "i": props, "j": "0", "k": "false", "m": "true" if batch else "false"}

    single_props = [
        "TAGS\x01TagA\x02UNIQ_KEY\x017F000001000100000000000000000001\x02",
        "UNIQ_KEY\x017F000001000100000000000000000002\x02",
        "TAGS\x01TagB\x02KEYS\x01k1 k2\x02UNIQ_KEY\x017F000001000100000000000000000003\x02",
        "TAGS\x01TagC\x02",  # no UNIQ_KEY: the broker makes one
        encode_properties({"user": "v\u00e9", "TAGS": "T\u00e9"}),
        "",
    ]
    for i, props in enumerate(single_props):
        for st in (SerializeType.JSON, SerializeType.MSGPACK):
            request(RequestCode.SEND_MESSAGE_V2, v2("PerfTopic", i % 2, props), b"single-%d" % i, int(st))
    v1 = {"producerGroup": "pg", "topic": "PerfTopic", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
          "queueId": "1", "sysFlag": "0", "bornTimestamp": str(born), "flag": "3", "properties": single_props[0]}
    request(RequestCode.SEND_MESSAGE, v1, b"v1", int(SerializeType.ROCKETMQ))
    long_topic = "L" * 150  # refused by the broker (topics > 127 characters): the same error either way
    request(RequestCode.SEND_MESSAGE_V2, v2(long_topic, 0, single_props[0]), b"long", int(SerializeType.JSON))

    raw_props = [
        b"UNIQ_KEY\x017F000001000100000000000000000010\x02",
        b"TAGS\x01TagA\x02UNIQ_KEY\x017F000001000100000000000000000011\x02",
        b"TAGS\x01TagA\x02KEYS\x01order-1 order-2\x02UNIQ_KEY\x017F000001000100000000000000000012\x02",
        b"KEYS\x01only-key\x02UNIQ_KEY\x017F000001000100000000000000000013\x02",
        b"TAGS\x01TagZ\x02",  # no UNIQ_KEY
        "TAGS\x01T\u00e9\x02UNIQ_KEY\x01U\u00e9\x02".encode(),  # non-ASCII
        b"TAGS\x01bad\xff\xfe\x02UNIQ_KEY\x017F000001000100000000000000000014\x02",  # invalid UTF-8: replaced
        b"WAIT\x01true\x02TAGS\x01TagW\x02UNIQ_KEY\x017F000001000100000000000000000015\x02",
        b"",
    ]
    for round_ in range(3):
        body = b"".join(_batch_entry(i % 3, b"batch-%d-%d" % (round_, i), props)
                        for i, props in enumerate(raw_props * 4))
        for st in (SerializeType.JSON, SerializeType.MSGPACK):
            request(RequestCode.SEND_BATCH_MESSAGE, v2("PerfBatch", round_ % 4, "WAIT\x01true\x02", True), body,
                    int(st))
    return frames


async def _run(tmp_path, name: str, general: bool, monkeypatch, port: int) -> tuple[list[bytes], dict[str, bytes]]:
    root = tmp_path / name
    config = BrokerConfig(
        broker_name="perf", broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=port,
        namesrv_addr=None, enable_embedded_namesrv=False, enable_vip_channel=False,
        store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20_000,
        max_hash_slot_num=997, max_index_num=4000)
    instance = Broker(config)
    instance.store._clock_ms = lambda: FIXED_MS
    send = instance.send_service
    send.uniq = UniqKeyGenerator("127.0.0.1", pid=1, salt=2, clock=lambda: FIXED_MS / 1000)
    send.random.seed(5)
    if general:
        monkeypatch.setattr(send_batch_module, "match_producer_layout", lambda raw: None)
        monkeypatch.setattr(send_module, "ResponseTemplate", _GeneralTemplate)
        store = instance.store
        store.append_one = lambda message: store.append([message])
        store.index.hasher = _ReferenceHasher()
    await instance.start()
    transport = _Transport()
    protocol = ServerProtocol(instance.server)
    protocol.connection_made(transport)
    try:
        for data in _traffic():
            protocol.data_received(data)
        protocol.connection_lost(None)
        await instance.store.flush()
    finally:
        await instance.shutdown()
        monkeypatch.undo()
    files: dict[str, bytes] = {}
    store_root = root
    for directory, _dirs, names in os.walk(store_root):
        for file_name in names:
            path = os.path.join(directory, file_name)
            rel = os.path.relpath(path, store_root)
            if rel.startswith(("commitlog", "consumequeue")):
                files[rel] = open(path, "rb").read()
            elif rel.startswith("index"):
                files["index/" + str(len([k for k in files if k.startswith("index/")]))] = open(path, "rb").read()
    return transport.frames, files


async def test_fast_paths_write_the_same_bytes_as_general_paths(tmp_path, monkeypatch):
    port = free_port()  # the same store host (ip:port) in both runs
    fast_frames, fast_files = await _run(tmp_path, "fast", False, monkeypatch, port)
    general_frames, general_files = await _run(tmp_path, "general", True, monkeypatch, port)
    assert len(b"".join(fast_frames)) > 0
    assert b"".join(fast_frames) == b"".join(general_frames)
    assert sorted(fast_files) == sorted(general_files)
    assert any(name.startswith("index/") for name in fast_files)
    for name in fast_files:
        assert fast_files[name] == general_files[name], name
