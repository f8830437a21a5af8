"""Pre-encoded SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE frames for the producer hot path.

A send header differs between messages only in queueId, sysFlag, bornTimestamp, flag, properties, reconsumeTimes and
opaque. Everything else (group, topic, default topic, broker name, the fixed keys) is encoded once per (topic, broker,
serialization) into byte/str pieces, and a send is a handful of concatenations. The output is byte-compatible with
what protocol.command.decode_command accepts: JSON with every extField a string (what stock brokers expect), or the
msgpack map form (native ints) for brokers of this project.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from base64 import b64encode
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


SignedHeaderBuilder = Callable[[int, int, int, int, str, int, int, bytes], bytes]
"""(queue_id, sys_flag, born_timestamp, flag, properties, opaque, rpc_flag, body) -> signed header bytes."""


def make_signed_send_header_builder(
    *,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
    serialize_type: int,
    producer_group: str,
    topic: str,
    broker_name: str,
    default_topic: str = "TBW102",
    default_topic_queue_nums: int = 4,
    batch: bool = False,
    language: str = "PYTHON",
    version: int = BROKER_VERSION,
) -> SignedHeaderBuilder:
    """A fast header encoder for plain-ACL signed sends of one topic to one broker.

    The recipe is protocol.acl_signature's (values in Java key order, then the body, HMAC-SHA1, Base64); the keys
    sort as AccessKey, SecurityToken, a, b, ... n, so the HMAC state over the fixed leading values is computed once
    and each send only hashes its own values, the fixed tail and the body.
    """
    code = int(RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2)
    batch_text = "true" if batch else "false"
    leading = f"{access_key}{security_token or ''}{producer_group}{topic}{default_topic}{default_topic_queue_nums}"
    prefix_mac = hmac.new(secret_key.encode("utf-8"), leading.encode("utf-8", "replace"), hashlib.sha1)
    trailing = f"0false{batch_text}{broker_name}".encode("utf-8", "replace")
    acl_entries = [("AccessKey", access_key)] + ([("SecurityToken", security_token)] if security_token else [])

    def signature(queue_id: int, sys_flag: int, born_ts: int, flag: int, props: str, body: bytes) -> str:
        mac = prefix_mac.copy()
        mac.update(f"{queue_id}{sys_flag}{born_ts}{flag}{props}".encode("utf-8", "replace"))
        mac.update(trailing)
        mac.update(body)
        return b64encode(mac.digest()).decode("ascii")

    if serialize_type == SerializeType.JSON:
        acl = "".join(f"{_json_str(k)}:{_json_str(v)}," for k, v in acl_entries)
        head = (
            f'{{"code":{code},"extFields":{{{acl}"a":{_json_str(producer_group)},"b":{_json_str(topic)},'
            f'"c":{_json_str(default_topic)},"d":"{default_topic_queue_nums}","e":"'
        )
        tail_ext = f',"j":"0","k":"false","m":"{batch_text}","n":{_json_str(broker_name)},"Signature":"'
        lang = '"},"flag":'
        rest = f',"language":{_json_str(language)},"opaque":'
        end = f',"serializeTypeCurrentRPC":"JSON","version":{version}}}'

        def build_json(queue_id: int, sys_flag: int, born_ts: int, flag: int, props: str, opaque: int,
                       rpc_flag: int, body: bytes) -> bytes:
            sig = signature(queue_id, sys_flag, born_ts, flag, props, body)
            text = (
                f'{head}{queue_id}","f":"{sys_flag}","g":"{born_ts}","h":"{flag}","i":{_json_str(props)}'
                f"{tail_ext}{sig}{lang}{rpc_flag}{rest}{opaque}{end}"
            )
            return text.encode("utf-8", "replace")

        return build_json
    if serialize_type != SerializeType.MSGPACK:
        raise ValueError(f"no fast send header for serialize type {serialize_type}")
    pk = msgpack.Packer(use_bin_type=True).pack
    entries = 14 + len(acl_entries)  # a..n (13) + the ACL fields + Signature
    map_header = bytes([0x80 | entries]) if entries < 16 else b"\xde" + entries.to_bytes(2, "big")
    head = b"".join(
        (b"\x87", pk("code"), pk(code), pk("extFields"), map_header,
         *(pk(k) + pk(v) for k, v in acl_entries),
         pk("a"), pk(producer_group), pk("b"), pk(topic), pk("c"), pk(default_topic), pk("d"),
         pk(default_topic_queue_nums), pk("e"))
    )
    key_f, key_g, key_h, key_i = pk("f"), pk("g"), pk("h"), pk("i")
    middle = b"".join((pk("j"), pk(0), pk("k"), pk(False), pk("m"), pk(batch), pk("n"), pk(broker_name),
                       pk("Signature")))
    key_flag = pk("flag")
    lang = b"".join((pk("language"), pk(language), pk("opaque")))
    end = b"".join((pk("serializeTypeCurrentRPC"), pk("MSGPACK"), pk("version"), pk(version)))
    pack = msgpack.Packer(use_bin_type=True, unicode_errors="replace").pack

    def build_msgpack(queue_id: int, sys_flag: int, born_ts: int, flag: int, props: str, opaque: int,
                      rpc_flag: int, body: bytes) -> bytes:
        sig = signature(queue_id, sys_flag, born_ts, flag, props, body)
        return b"".join(
            (head, pack(queue_id), key_f, pack(sys_flag), key_g, pack(born_ts), key_h, pack(flag), key_i,
             pack(props), middle, pack(sig), key_flag, pack(rpc_flag), lang, pack(opaque), end)
        )

    return build_msgpack


def frame(serialize_type: int, header: bytes, body: bytes) -> bytes:
    """Length prefix + type word + header + body."""
    header_length = len(header)
    return b"".join(
        (_pack_prefix(4 + header_length + len(body), (serialize_type << 24) | header_length), header, body)
    )
