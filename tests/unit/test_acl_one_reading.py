"""One reading, one decision: for every request code that names or reaches a topic or group, whatever way a client
writes the request, the resources the authorizer checked are the resources the handler used.

A real Broker (ACL on, an unrestricted admin account so that every request reaches its handler) is fed frames through
its real connection protocol. Each frame is generated: long or short field names (and both at once, disagreeing),
str or bytes values, duplicated keys whose copies disagree, the JSON, ROCKETMQ and msgpack header serializations, and
JSON bodies with duplicated keys. The authorizer's decisions are recorded, and so is every topic or group name the
handler passes to the store and the managers (and the topic of every record it looks up by offset). Names come from a
per-request pool of tokens, so a name the handler used can be traced to the request.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.acl.resources import ADMIN_CODES, RESOURCE_CODES
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.managers.consumer_filter import ConsumerFilterManager
from broker.managers.consumer_manager import ConsumerManager
from broker.managers.consumer_offset import ConsumerOffsetManager
from broker.managers.producer_manager import ProducerManager
from broker.managers.rebalance_lock import RebalanceLockManager
from broker.managers.subscription_group import SubscriptionGroupManager
from broker.managers.topic_config import TopicConfigManager
from broker.remoting_connection import ServerProtocol
from broker.store.message_store import MessageStore
from protocol.acl_signature import sign
from protocol.codes import RequestCode
from protocol.command import RemotingCommand, decode_command, encode_command
from protocol.frame import FrameDecoder
from protocol.ids import offset_msg_id, pack_host
from protocol.message import BatchEntry, decode_record, encode_batch_body
from tests.support.broker_process import free_port as _free_port

KEY, SECRET = "probe_admin", "probe_secret"
TOPICS = ["TopAlpha", "TopBravo", "TopCharlie"]
GROUPS = ["GrpAlpha", "GrpBravo", "GrpCharlie"]
RECORD_TOPICS = ["RecAlpha", "RecBravo"]
TOKEN = re.compile(r"(Top|Grp|Rec)(Alpha|Bravo|Charlie)")
SPIED = (MessageStore, TopicConfigManager, SubscriptionGroupManager, ConsumerOffsetManager, ConsumerManager,
         ProducerManager, RebalanceLockManager, ConsumerFilterManager)
# Codes with a handler that name no topic or group beyond what admin-only already covers.
NAMES_NOTHING = {RequestCode.CHECK_TRANSACTION_STATE, RequestCode.GET_ALL_DELAY_OFFSET}
# Codes whose success means the handler acted on every name it was authorized for; the others may succeed without
# touching one (a TAG subscription needs no check, statistics skip a topic this broker does not have).
TOUCHES_WHEN_DONE = {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                     RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.QUERY_CONSUMER_OFFSET,
                     RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.LOCK_BATCH_MQ, RequestCode.HEART_BEAT,
                     RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.GET_MAX_OFFSET,
                     RequestCode.GET_MIN_OFFSET, RequestCode.QUERY_MESSAGE}


# ---- what the handler used ----------------------------------------------------------------------------------
# Set in the task that feeds a request's frame: the handler, and the tasks it starts, inherit it; the broker's
# background services (offset persistence, flushes) run in contexts of their own and are not recorded.
# The number of the request being fed: a task a previous request started, still running, is not this one's.
IN_REQUEST: contextvars.ContextVar[int] = contextvars.ContextVar("in_request", default=0)


class Spy:
    def __init__(self) -> None:
        self.on = False
        self.request = -1  # the request whose handler is being watched
        self.names: set[str] = set()

    def note(self, value: Any, depth: int = 0) -> None:
        if depth > 4 or value is None:
            return
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value)[:4096].decode("utf-8", "replace")
        if isinstance(value, str):
            self.names.update(m.group(0) for m in TOKEN.finditer(value))
            return
        if isinstance(value, dict):
            for k, v in list(value.items())[:64]:
                self.note(k, depth + 1)
                self.note(v, depth + 1)
            return
        if isinstance(value, (list, tuple, set, frozenset)):
            for item in list(value)[:64]:
                self.note(item, depth + 1)
            return
        for attr in ("topic", "topic_name", "consumer_group", "group", "group_name", "subscriptions", "mq_set"):
            inner = getattr(value, attr, None)
            if inner is not None and not callable(inner):
                self.note(inner, depth + 1)

    def wrap(self, name: str, fn: Any) -> Any:
        spy = self

        def spied(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            if spy.on and IN_REQUEST.get() == spy.request:
                spy.note(args[1:])
                spy.note(kwargs)
                if name.startswith("look"):
                    spy.note_record(result)
            return result
        spied.__wrapped__ = fn
        return spied

    def note_record(self, result: Any) -> None:
        if isinstance(result, (bytes, bytearray, memoryview)) and result:
            try:
                self.note(decode_record(bytes(result)).topic)
            except ValueError:
                pass
        elif result is not None:
            self.note(getattr(result, "topic", None))


def resource_token(resource: str) -> str:
    return resource[len("%RETRY%"):] if resource.startswith("%RETRY%") else resource


# ---- the broker ---------------------------------------------------------------------------------------------
class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        self.writes.append(b"".join(bytes(c) for c in chunks))

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 40000)

    def set_write_buffer_limits(self, high: Any = None, low: Any = None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass



class Harness:
    def __init__(self, tmp: Any, spy: Spy) -> None:
        acl = tmp / "plain_acl.yml"
        acl.write_text(f"accounts:\n  - accessKey: {KEY}\n    secretKey: {SECRET}\n    admin: true\n")
        port = _free_port()
        self.config = BrokerConfig(
            broker_name="probe", broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=port,
            ha_listen_port=_free_port(), namesrv_addr=None, enable_embedded_namesrv=False, enable_vip_channel=False,
            store_path_root_dir=str(tmp / "store"), mapped_file_size_commit_log=1 << 20,
            mapped_file_size_consume_queue=20_000, max_hash_slot_num=997, max_index_num=4000,
            acl_enable=True, acl_file=str(acl), auto_create_topic_enable=True, dashboard_port=0,
            enable_grpc_proxy=False)
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(self.config)
        self.loop.run_until_complete(self.broker.start())
        self.spy = spy
        self.checked: list[list[tuple[str, int]]] = []
        authorizer = self.broker.authorizer
        decide = authorizer.decide

        def recording_decide(principal: Any, needs: Any, **kwargs: Any) -> Any:
            self.checked.append(list(needs))
            return decide(principal, needs, **kwargs)
        authorizer.decide = recording_decide
        self.transport = _Transport()
        self.protocol = ServerProtocol(self.broker.server)
        self.protocol.connection_made(self.transport)
        self.opaque = 0
        self.record_offsets: dict[int, str] = {}
        for topic in RECORD_TOPICS:  # records to reach by offset
            for _ in range(2):
                response = self.request(RequestCode.SEND_MESSAGE, {
                    "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                    "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
                    "properties": "KEYS\x01k\x02"}, b"body")
                assert response.code == 0, response
                msg_id = response.ext_fields["msgId"]
        for offset in range(0, self.broker.store.commit_log.max_offset):
            record = self.broker.store.look_record(offset)
            if record is not None and record.topic in RECORD_TOPICS:
                self.record_offsets[offset] = record.topic
            if len(self.record_offsets) >= 4:
                break
        assert msg_id and len(self.record_offsets) == 4

    def frame(self, raw: bytes) -> RemotingCommand:
        before = len(self.transport.writes)

        async def feed() -> None:  # inside the loop, as a real connection's data arrives
            IN_REQUEST.set(self.opaque)
            self.spy.request = self.opaque
            self.protocol.data_received(raw)
        self.loop.run_until_complete(feed())
        for _ in range(20):
            if len(self.transport.writes) > before:
                break
            self.loop.run_until_complete(asyncio.sleep(0.005))
        decoder = FrameDecoder()
        responses = [cmd for chunk in self.transport.writes[before:] for cmd in decoder.feed(chunk)]
        del self.transport.writes[:]
        assert responses, "no answer"
        return responses[-1]

    def request(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        self.opaque += 1
        fields = dict(fields, AccessKey=KEY)
        fields["Signature"] = sign(SECRET, fields, body)
        return self.frame(encode_command(RemotingCommand.request(code, fields, body, opaque=self.opaque)))

    def close(self) -> None:
        self.protocol.connection_lost(None)
        self.loop.run_until_complete(self.broker.shutdown())
        self.loop.close()


# ---- frames in every shape ----------------------------------------------------------------------------------
def encode_frame(code: int, opaque: int, pairs: list[tuple[str, Any]], body: bytes, serialization: int) -> bytes:
    """A request frame whose extFields are ``pairs`` in order, duplicates kept (the last one wins on decoding)."""
    if serialization == 0:  # JSON, written by hand so that duplicated keys survive
        ext = ",".join(json.dumps(k) + ":" + json.dumps(v) for k, v in pairs)
        header = ('{"code":%d,"extFields":{%s},"flag":0,"language":"JAVA","opaque":%d,'
                  '"serializeTypeCurrentRPC":"JSON","version":479}' % (code, ext, opaque)).encode()
    elif serialization == 1:  # ROCKETMQ binary
        entries = b"".join(struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode()))
                           + v.encode() for k, v in pairs)
        header = struct.pack(">hbhiii", code, 0, 479, opaque, 0, 0) + struct.pack(">i", len(entries)) + entries
    else:  # msgpack; values may be bytes (msgpack's bin type)
        packer = msgpack.Packer(use_bin_type=True)
        header = (b"\x87" + packer.pack("code") + packer.pack(code) + packer.pack("extFields")
                  + packer.pack_map_pairs(pairs) + packer.pack("flag") + packer.pack(0) + packer.pack("language")
                  + packer.pack("JAVA") + packer.pack("opaque") + packer.pack(opaque) + packer.pack("version")
                  + packer.pack(479) + packer.pack("serializeTypeCurrentRPC") + packer.pack("MSGPACK"))
    return struct.pack(">ii", 4 + len(header) + len(body), (serialization << 24) | len(header)) + header + body


def signed_pairs(code: int, pairs: list[tuple[str, Any]], body: bytes, serialization: int) -> list[tuple[str, Any]]:
    """``pairs`` plus AccessKey and the Signature of what the broker will decode (the last duplicate wins)."""
    pairs = pairs + [("AccessKey", KEY)]
    decoded = decode_command(encode_frame(code, 1, pairs, body, serialization)[4:]).ext_fields
    return pairs + [("Signature", sign(SECRET, decoded, body))]


@st.composite
def request_shapes(draw: Any, harness_offsets: list[int]) -> tuple[int, list[tuple[str, Any]], bytes, int]:
    code = draw(st.sampled_from(sorted(RESOURCE_CODES - {RequestCode.SEND_REPLY_MESSAGE,
                                                         RequestCode.SEND_REPLY_MESSAGE_V2})))
    serialization = draw(st.sampled_from([0, 1, 2]))
    topic = st.sampled_from(TOPICS)
    group = st.sampled_from(GROUPS)
    offset = st.sampled_from(harness_offsets)
    pairs: list[tuple[str, Any]] = []
    body = b""

    def put(long: str, value: str, short: str | None = None) -> None:
        """One field, maybe preceded by a disagreeing duplicate, maybe under its short name, maybe twice over."""
        if draw(st.booleans()):
            pairs.append((long, draw(st.sampled_from(TOPICS + GROUPS))))  # an earlier copy: overwritten
        style = draw(st.sampled_from(["long", "short", "both"])) if short else "long"
        if style in ("long", "both"):
            pairs.append((long, value))
        if style in ("short", "both"):
            pairs.append((short, draw(st.sampled_from(TOPICS)) if style == "both" else value))

    def json_body(obj: dict) -> bytes:
        text = json.dumps(obj)
        if draw(st.booleans()):  # a duplicated first key in the body, disagreeing with the later copy
            key = next(iter(obj))
            value = draw(st.sampled_from(GROUPS)) if key in ("group", "consumerGroup") else "another-client"
            text = "{" + json.dumps(key) + ":" + json.dumps(value) + "," + text[1:]
        return text.encode()

    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        short = code != RequestCode.SEND_MESSAGE or draw(st.booleans())
        names = [("producerGroup", "a", "pg"), ("topic", "b", draw(topic)), ("defaultTopic", "c", "TBW102"),
                 ("defaultTopicQueueNums", "d", "4"), ("queueId", "e", "0"), ("sysFlag", "f", "0"),
                 ("bornTimestamp", "g", "0"), ("flag", "h", "0")]
        for long, letter, value in names:
            if long == "topic":
                put(long, value, letter if short else None)
            else:
                pairs.append((letter if short else long, value))
        if code == RequestCode.SEND_BATCH_MESSAGE:
            body = encode_batch_body([BatchEntry(0, b"one", ""), BatchEntry(0, b"two", "")])
        else:
            body = b"payload"
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        put("consumerGroup", draw(group))
        put("topic", draw(topic))
        pairs += [("queueId", "0"), ("queueOffset", "0"), ("maxMsgNums", "1"), ("sysFlag", "0")]
    elif code == RequestCode.QUERY_MESSAGE:
        put("topic", draw(st.sampled_from(TOPICS + RECORD_TOPICS)))
        pairs += [("key", "k"), ("maxNum", "4"), ("beginTimestamp", "0"), ("endTimestamp", str(1 << 60))]
    elif code == RequestCode.VIEW_MESSAGE_BY_ID:
        pairs.append(("offset", str(draw(offset))))
        if draw(st.booleans()):
            put("topic", draw(topic))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        put("group", draw(group))
        pairs += [("offset", str(draw(offset))), ("delayLevel", "1")]
        if draw(st.booleans()):
            put("originTopic", draw(topic))
    elif code == RequestCode.END_TRANSACTION:
        pairs += [("producerGroup", "pg"), ("tranStateTableOffset", "0"), ("commitLogOffset", str(draw(offset))),
                  ("commitOrRollback", "8"), ("msgId", "x")]
        if draw(st.booleans()):
            put("topic", draw(topic))
    elif code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        put("consumerGroup", draw(group))
        pairs += [("clientId", "c"), ("msgId", offset_msg_id(pack_host("127.0.0.1", 10911), draw(offset)))]
    elif code == RequestCode.HEART_BEAT:
        body = json_body({"clientID": "c1", "producerDataSet": [], "consumerDataSet": [
            {"groupName": draw(group), "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
             "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
             "subscriptionDataSet": [{"topic": draw(topic), "subString": "*", "tagsSet": [], "codeSet": [],
                                      "subVersion": 1, "expressionType": "TAG"}]}]})
    elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        body = json_body({"consumerGroup": draw(group), "clientId": "c1", "onlyThisBroker": True,
                          "mqSet": [{"topic": draw(topic), "brokerName": "probe", "queueId": 0}]})
    elif code == RequestCode.CHECK_CLIENT_CONFIG:
        body = json_body({"group": draw(group), "clientId": "c1", "subscriptionData": {
            "topic": draw(topic), "subString": "*", "expressionType": "TAG"}})
    elif code == RequestCode.INVOKE_BROKER_TO_RESET_OFFSET:
        put("group", draw(group))
        put("topic", draw(topic))
        pairs += [("timestamp", "-1")]
    elif code in (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET):
        put("consumerGroup", draw(group))
        put("topic", draw(topic))
        pairs += [("queueId", "0"), ("commitOffset", "0")]
    elif code == RequestCode.GET_CONSUME_STATS:
        put("consumerGroup", draw(group))
        if draw(st.booleans()):
            put("topic", draw(topic))
    elif code in (RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                  RequestCode.GET_CONSUMER_RUNNING_INFO):
        put("consumerGroup", draw(group))
        pairs.append(("clientId", "c1"))
    elif code == RequestCode.UNREGISTER_CLIENT:
        pairs.append(("clientID", "c1"))
        put("consumerGroup", draw(group))
    else:  # the topic-only reads: offsets, store time, statistics
        put("topic", draw(st.sampled_from(TOPICS + RECORD_TOPICS)))
        pairs += [("queueId", "0"), ("timestamp", "0")]
    if serialization == 2 and draw(st.booleans()):
        pairs = [(k, v.encode()) for k, v in pairs]  # msgpack bin values: bytes where a client sends them
    return code, pairs, body, serialization


@pytest.fixture(scope="module")
def harness(tmp_path_factory: Any) -> Any:
    spy = Spy()
    patched = []
    for cls in SPIED:
        for name, fn in list(vars(cls).items()):
            if callable(fn) and not name.startswith("_") and not isinstance(fn, (staticmethod, classmethod, type)):
                patched.append((cls, name, fn))
                setattr(cls, name, spy.wrap(name, fn))
    try:
        h = Harness(tmp_path_factory.mktemp("one-reading"), spy)
        yield h
        h.close()
    finally:
        for cls, name, fn in patched:
            setattr(cls, name, fn)


def test_every_handled_code_is_classified(harness: Harness) -> None:
    """A code with a handler either has a resource rule, is admin-only, or names nothing."""
    unclassified = set(harness.broker.dispatch_table) - RESOURCE_CODES - ADMIN_CODES - NAMES_NOTHING
    assert not unclassified, sorted(unclassified)


_OFFSETS: list[int] = []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_the_handler_uses_only_what_the_authorizer_checked(harness: Harness, data: Any) -> None:
    code, pairs, body, serialization = data.draw(request_shapes(sorted(harness.record_offsets)))
    pairs = signed_pairs(code, pairs, body, serialization)
    harness.opaque += 1
    harness.checked.clear()
    harness.spy.names.clear()
    harness.spy.on = True
    try:
        response = harness.frame(encode_frame(code, harness.opaque, pairs, body, serialization))
    finally:
        harness.spy.on = False
    in_request = {m.group(0) for _, v in pairs for m in TOKEN.finditer(v.decode() if isinstance(v, bytes) else v)}
    in_request |= {m.group(0) for m in TOKEN.finditer(body.decode("utf-8", "replace"))}
    in_request |= set(RECORD_TOPICS)  # reached through an offset
    used = harness.spy.names & in_request
    checked = {resource_token(resource) for needs in harness.checked for resource, _ in needs}
    note = f"code={code} serialization={serialization} pairs={pairs} body={body[:200]!r} answer={response.code} " \
           f"{response.remark!r}"
    assert harness.checked or response.code != 0, "a request was answered without a decision: " + note
    assert used <= checked, f"used {sorted(used - checked)} unchecked; checked {sorted(checked)}; {note}"
    if response.code == 0 and code in TOUCHES_WHEN_DONE:
        # a request that succeeded used every resource it was authorized for (nothing checked in its place)
        assert checked <= used, f"checked {sorted(checked - used)} not used; {note}"
