"""Pre-encoded SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE frames for the producer hot path.

A send header differs between messages only in queueId, sysFlag, bornTimestamp, flag, properties, reconsumeTimes and
opaque. Everything else (group, topic, default topic, broker name, the fixed keys) is encoded once per (topic, broker,
serialization) into byte/str pieces, and a send is a handful of concatenations. The output is byte-compatible with
what protocol.command.decode_command accepts: JSON with every extField a string (what stock brokers expect), or the
msgpack map form (native ints) for brokers of this project.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from json.encoder import encode_basestring as _json_str

import msgpack

from protocol.codes import BROKER_VERSION, RequestCode, SerializeType

_PREFIX = struct.Struct(">iI")
_pack_prefix = _PREFIX.pack

HeaderBuilder = Callable[[int, int, int, int, str, int, int], bytes]
"""(queue_id, sys_flag, born_timestamp, flag, properties, opaque, rpc_flag) -> header bytes."""


def make_send_header_builder(
    *,
    serialize_type: int,
    producer_group: str,
    topic: str,
    broker_name: str,
    default_topic: str = "TBW102",
    default_topic_queue_nums: int = 4,
    batch: bool = False,
    language: str = "PYTHON",
    version: int = BROKER_VERSION,
) -> HeaderBuilder:
    """Return a fast header encoder for sends of one topic to one broker."""
    code = int(RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2)
    if serialize_type == SerializeType.MSGPACK:
        return _msgpack_builder(code, producer_group, topic, broker_name, default_topic, default_topic_queue_nums,
                                batch, language, version)
    if serialize_type == SerializeType.JSON:
        return _json_builder(code, producer_group, topic, broker_name, default_topic, default_topic_queue_nums,
                             batch, language, version)
    raise ValueError(f"no fast send header for serialize type {serialize_type}")


def _json_builder(code, group, topic, broker_name, default_topic, queue_nums, batch, language, version):
    head = (
        f'{{"code":{code},"extFields":{{"a":{_json_str(group)},"b":{_json_str(topic)},'
        f'"c":{_json_str(default_topic)},"d":"{queue_nums}","e":"'
    )
    tail_ext = (
        f',"j":"0","k":"false","m":"{"true" if batch else "false"}","n":{_json_str(broker_name)}}},'
        f'"flag":'
    )
    lang = f',"language":{_json_str(language)},"opaque":'
    end = f',"serializeTypeCurrentRPC":"JSON","version":{version}}}'
    ascii_only = (head + tail_ext + lang).isascii()

    def build(queue_id: int, sys_flag: int, born_ts: int, flag: int, props: str, opaque: int, rpc_flag: int) -> bytes:
        text = (
            f'{head}{queue_id}","f":"{sys_flag}","g":"{born_ts}","h":"{flag}","i":{_json_str(props)}'
            f"{tail_ext}{rpc_flag}{lang}{opaque}{end}"
        )
        return text.encode() if ascii_only or text.isascii() else text.encode("utf-8", "replace")

    return build


def _msgpack_builder(code, group, topic, broker_name, default_topic, queue_nums, batch, language, version):
    pk = msgpack.Packer(use_bin_type=True).pack
    # 7-entry top-level map: code, extFields, flag, language, opaque, serializeTypeCurrentRPC, version
    head = b"".join(
        (
            b"\x87", pk("code"), pk(code), pk("extFields"),
            b"\x8d",  # 13 ext entries: a b c d e f g h i j k m n
            pk("a"), pk(group), pk("b"), pk(topic), pk("c"), pk(default_topic), pk("d"), pk(queue_nums),
            pk("e"),
        )
    )
    key_f, key_g, key_h, key_i = pk("f"), pk("g"), pk("h"), pk("i")
    middle = b"".join(
        (pk("j"), pk(0), pk("k"), pk(False), pk("m"), pk(batch), pk("n"), pk(broker_name), pk("flag"))
    )
    lang = b"".join((pk("language"), pk(language), pk("opaque")))
    end = b"".join((pk("serializeTypeCurrentRPC"), pk("MSGPACK"), pk("version"), pk(version)))
    packer = msgpack.Packer(use_bin_type=True, unicode_errors="replace")
    pack = packer.pack

    def build(queue_id: int, sys_flag: int, born_ts: int, flag: int, props: str, opaque: int, rpc_flag: int) -> bytes:
        return b"".join(
            (
                head, pack(queue_id), key_f, pack(sys_flag), key_g, pack(born_ts), key_h, pack(flag),
                key_i, pack(props), middle, pack(rpc_flag), lang, pack(opaque), end,
            )
        )

    return build


def send_ext_fields(
    *,
    producer_group: str,
    topic: str,
    broker_name: str,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str,
    default_topic: str = "TBW102",
    default_topic_queue_nums: int = 4,
    batch: bool = False,
) -> dict[str, str]:
    """The extFields the header builders write, as a dict (the signed send path builds a RemotingCommand)."""
    return {
        "a": producer_group, "b": topic, "c": default_topic, "d": str(default_topic_queue_nums), "e": str(queue_id),
        "f": str(sys_flag), "g": str(born_timestamp), "h": str(flag), "i": properties, "j": "0", "k": "false",
        "m": "true" if batch else "false", "n": broker_name,
    }


def frame(serialize_type: int, header: bytes, body: bytes) -> bytes:
    """Length prefix + type word + header + body."""
    header_length = len(header)
    return b"".join(
        (_pack_prefix(4 + header_length + len(body), (serialize_type << 24) | header_length), header, body)
    )
