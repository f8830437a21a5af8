"""Our client's plain-ACL signatures, checked on the frames a small recording server decodes off the wire.

The recording server plays name server and broker at once (the route it hands out points back at itself), decodes
every frame with the project's decoder (what the broker sees) and answers just enough for the client to go on. Each
recorded request is verified with protocol.acl_signature.signature_matches, the broker's recipe.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from client import Credentials, Message, Producer, PullConsumer
from client.admin import cli
from client.remoting import RemotingClient
from protocol.acl_signature import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    signature_matches,
)
from protocol.codes import RequestCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand, decode_command, encode_command

ACCESS = "orders_app"
SECRET = "orders-secret-1"
TOPIC = "SignedTopic"


class RecordingServer:
    """Name server + broker in one: records every decoded request, answers each code minimally."""

    def __init__(self, announce_msgpack: bool = False) -> None:
        self.announce_msgpack = announce_msgpack
        self.requests: list[RemotingCommand] = []
        self.server: asyncio.Server | None = None
        self.addr = ""
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> RecordingServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        for writer in self._writers:
            writer.close()
        self.server.close()
        await self.server.wait_closed()

    def codes(self) -> set[int]:
        return {cmd.code for cmd in self.requests}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        try:
            while True:
                head = await reader.readexactly(4)
                cmd = decode_command(await reader.readexactly(int.from_bytes(head, "big")))
                if cmd.flag & 1:
                    continue
                self.requests.append(cmd)
                reply = self._answer(cmd)
                if not cmd.flag & 2:
                    writer.write(encode_command(reply))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, cmd: RemotingCommand) -> RemotingCommand:
        code = cmd.code
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            route = {"queueDatas": [{"brokerName": "b1", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
                                     "topicSysFlag": 0}],
                     "brokerDatas": [{"cluster": "c1", "brokerName": "b1", "brokerAddrs": {"0": self.addr}}]}
            return cmd.make_response(ResponseCode.SUCCESS, body=json.dumps(route).encode())
        if code == RequestCode.HEART_BEAT:
            ext = {"serializeTypes": "JSON,MSGPACK"} if self.announce_msgpack else None
            return cmd.make_response(ResponseCode.SUCCESS, ext_fields=ext)
        if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            return cmd.make_response(ResponseCode.SUCCESS, ext_fields={
                "msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "0"})
        if code == RequestCode.PULL_MESSAGE:
            return cmd.make_response(ResponseCode.PULL_NOT_FOUND, ext_fields={
                "nextBeginOffset": "0", "minOffset": "0", "maxOffset": "0", "suggestWhichBrokerId": "0"})
        if code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
            return cmd.make_response(ResponseCode.SUCCESS, body=b'{"topicList":["SignedTopic"]}')
        if code == RequestCode.QUERY_CONSUMER_OFFSET:
            return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        return cmd.make_response(ResponseCode.SUCCESS)


@pytest.fixture
async def recorder():
    started: list[RecordingServer] = []

    async def make(announce_msgpack: bool = False) -> RecordingServer:
        server = await RecordingServer(announce_msgpack).start()
        started.append(server)
        return server

    yield make
    for server in started:
        await server.stop()


def assert_all_signed(requests: list[RemotingCommand], secret: str = SECRET, access_key: str = ACCESS) -> None:
    assert requests
    for cmd in requests:
        ext = cmd.ext_fields or {}
        assert ext.get(ACCESS_KEY) == access_key, cmd
        assert signature_matches(secret, ext, cmd.body), f"signature does not verify: {cmd!r}"
        assert not signature_matches(secret + "x", ext, cmd.body)


async def produce_and_pull(addr: str, credentials: Credentials | None) -> None:
    async with Producer("pg_signed", addr, credentials=credentials) as producer:
        await producer.send(Message(TOPIC, b"hello", tags="TagA", keys="k1"))
        await producer.send(Message(TOPIC, b"x" * 5000))  # compressed body
        await producer.send_batch([Message(TOPIC, b"one"), Message(TOPIC, bytes(range(256)))])
        await producer.send_oneway(Message(TOPIC, b"fire and forget"))
    async with PullConsumer("cg_signed", addr, credentials=credentials) as consumer:
        queues = await consumer.fetch_message_queues(TOPIC)
        await consumer.pull(queues[0], "TagA", offset=0, max_nums=8)
        await consumer.update_offset(queues[0], 0)


@pytest.mark.parametrize("msgpack", [False, True], ids=["json", "msgpack"])
async def test_producer_and_pull_consumer_sign_every_request(recorder, msgpack):
    server = await recorder(announce_msgpack=msgpack)
    await asyncio.wait_for(produce_and_pull(server.addr, Credentials(ACCESS, SECRET)), 20)
    await asyncio.sleep(0.1)  # the one-way send and the unregisters
    codes = server.codes()
    for code in (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.HEART_BEAT, RequestCode.SEND_MESSAGE_V2,
                 RequestCode.SEND_BATCH_MESSAGE, RequestCode.PULL_MESSAGE, RequestCode.UNREGISTER_CLIENT):
        assert code in codes, f"request code {code} never seen: {sorted(codes)}"
    assert_all_signed(server.requests)
    sends = [c for c in server.requests if c.code == RequestCode.SEND_MESSAGE_V2]
    assert len(sends) == 3 and any(c.flag & 2 for c in sends)  # the one-way send is signed too
    assert all(c.body for c in sends)
    serialized = {c.serialize_type for c in server.requests if c.code != RequestCode.GET_ROUTEINFO_BY_TOPIC}
    assert serialized == ({SerializeType.JSON, SerializeType.MSGPACK} if msgpack else {SerializeType.JSON})


async def test_without_credentials_no_acl_field_is_sent(recorder):
    server = await recorder(announce_msgpack=True)
    await asyncio.wait_for(produce_and_pull(server.addr, None), 20)
    await asyncio.sleep(0.1)
    assert RequestCode.SEND_BATCH_MESSAGE in server.codes() and RequestCode.PULL_MESSAGE in server.codes()
    for cmd in server.requests:
        assert not {ACCESS_KEY, SIGNATURE, SECURITY_TOKEN} & set(cmd.ext_fields or {}), cmd


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.MSGPACK, SerializeType.ROCKETMQ])
async def test_values_are_signed_as_the_broker_decodes_them(recorder, serialize_type):
    """Numbers, booleans, enums, None, non-ASCII and lone surrogates: signed as the text the encoder writes."""
    server = await recorder()
    client = RemotingClient(credentials=Credentials(ACCESS, SECRET, security_token="tok-123"))
    try:
        conn = await client.connection(server.addr)
        conn.serialize_type = serialize_type
        ext = {"topic": "Tópic✓", "queueId": 3, "big": 1 << 40, "flag": True, "off": False, "none": None,
               "code": RequestCode.PULL_MESSAGE, "odd": "a\udcffb", SIGNATURE: "stale"}
        await asyncio.wait_for(client.invoke(server.addr, RemotingCommand(code=999, ext_fields=ext,
                                                                          body=b"\x00\xffbody"), 3.0), 5)
    finally:
        await client.close()
    (cmd,) = server.requests
    assert cmd.serialize_type == serialize_type
    assert cmd.ext_fields[SECURITY_TOKEN] == "tok-123" and "none" not in cmd.ext_fields
    assert cmd.ext_fields["queueId"] == "3" and cmd.ext_fields["flag"] == "true" and cmd.ext_fields["odd"] == "a?b"
    assert_all_signed(server.requests)


async def test_sync_facade_takes_credentials(recorder):
    from client import sync

    server = await recorder()

    def blocking() -> None:
        with sync.Producer("pg_sync", server.addr, credentials=Credentials(ACCESS, SECRET)) as producer:
            producer.send(Message(TOPIC, b"from a thread"))

    await asyncio.wait_for(asyncio.to_thread(blocking), 20)
    assert RequestCode.SEND_MESSAGE_V2 in server.codes()
    assert_all_signed(server.requests)


async def test_mqadmin_signs_with_options(recorder):
    server = await recorder()
    argv = ["topicList", "-n", server.addr, "--access-key", ACCESS, "--secret-key", SECRET]
    assert await asyncio.wait_for(asyncio.to_thread(cli.main, argv), 20) == 0
    assert server.codes() == {RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER}
    assert_all_signed(server.requests)


async def test_mqadmin_signs_with_environment(recorder, monkeypatch):
    server = await recorder()
    monkeypatch.setenv("ROCKETMQ_ACCESS_KEY", "env_account")
    monkeypatch.setenv("ROCKETMQ_SECRET_KEY", "env-secret-9")
    argv = ["updateTopic", "-n", server.addr, "-b", server.addr, "-t", TOPIC]
    assert await asyncio.wait_for(asyncio.to_thread(cli.main, argv), 20) == 0
    assert RequestCode.UPDATE_AND_CREATE_TOPIC in server.codes()
    assert_all_signed(server.requests, secret="env-secret-9", access_key="env_account")


async def test_mqadmin_without_credentials_does_not_sign(recorder, monkeypatch):
    monkeypatch.delenv("ROCKETMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("ROCKETMQ_SECRET_KEY", raising=False)
    server = await recorder()
    assert await asyncio.wait_for(asyncio.to_thread(cli.main, ["topicList", "-n", server.addr]), 20) == 0
    assert server.requests and all(ACCESS_KEY not in (c.ext_fields or {}) for c in server.requests)


def test_mqadmin_incomplete_credentials_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("ROCKETMQ_SECRET_KEY", raising=False)
    with pytest.raises(SystemExit) as exited:
        cli.main(["topicList", "-n", "127.0.0.1:1", "--access-key", ACCESS])
    assert exited.value.code == 2
    assert "--secret-key" in capsys.readouterr().err


def test_credentials_are_validated_and_the_secret_is_not_shown():
    with pytest.raises(ValueError, match="secret key"):
        Credentials(ACCESS, "")
    with pytest.raises(ValueError, match="access key"):
        Credentials("", SECRET)
    assert SECRET not in repr(Credentials(ACCESS, SECRET))
    assert Credentials.from_env({"ROCKETMQ_ACCESS_KEY": ACCESS}) is None
    assert Credentials.from_env({"ROCKETMQ_ACCESS_KEY": ACCESS, "ROCKETMQ_SECRET_KEY": SECRET}) == \
        Credentials(ACCESS, SECRET)


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.MSGPACK])
@pytest.mark.parametrize("token", [None, "tok-1"], ids=["no-token", "token"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_signed_send_template_verifies_and_matches_the_general_path(serialize_type, token, batch):
    """The producer's pre-computed signed header (HMAC prefix reused) decodes to fields that verify, and signs
    the same as Credentials.sign over those fields."""
    from client.wire import frame, make_signed_send_header_builder

    build = make_signed_send_header_builder(access_key=ACCESS, secret_key=SECRET, security_token=token,
                                            serialize_type=serialize_type, producer_group="pg", topic="Tópic",
                                            broker_name="broker-a", batch=batch)
    body = bytes(range(256)) * 3
    props = "UNIQ_KEY\x01AB\x02TAGS\x01✓\udcff\x02"
    cmd = decode_command(frame(serialize_type, build(3, 8, 1700000000123, 0, props, 42, 0, body), body)[4:])
    assert cmd.serialize_type == serialize_type and cmd.opaque == 42 and cmd.body == body
    assert cmd.code == (RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2)
    ext = cmd.ext_fields
    assert ext[ACCESS_KEY] == ACCESS and ext.get(SECURITY_TOKEN) == token and ext["i"].endswith("✓?\x02")
    assert signature_matches(SECRET, ext, body)
    assert Credentials(ACCESS, SECRET, token).sign_fields(ext, body)[SIGNATURE] == ext[SIGNATURE]
    assert not signature_matches(SECRET, ext, body + b"!")
