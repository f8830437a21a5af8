"""RemotingCommand encoding/decoding for JSON, ROCKETMQ binary and msgpack headers."""

from __future__ import annotations

import json
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codes import BROKER_VERSION, LanguageCode, RequestCode, ResponseCode, SerializeType
from protocol.command import (
    ProtocolError,
    RemotingCommand,
    decode_command,
    decode_header,
    encode_command,
    encode_head,
    encode_header,
)


def _roundtrip(cmd: RemotingCommand) -> RemotingCommand:
    frame = encode_command(cmd)
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    return decode_command(frame[4:])


def _json_payload(header: dict | str, body: bytes = b"") -> bytes:
    raw = (header if isinstance(header, str) else json.dumps(header)).encode()
    return struct.pack(">I", len(raw)) + raw + body


def _msgpack_payload(header: object, body: bytes = b"") -> bytes:
    raw = msgpack.packb(header)
    return struct.pack(">I", (2 << 24) | len(raw)) + raw + body


# ---------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("stype", [0, 1, 2])
def test_roundtrip_full_command(stype):
    cmd = RemotingCommand(
        code=310,
        opaque=-5,
        flag=2,
        language="JAVA",
        version=479,
        remark="héllo \x01 \"quoted\" \\ 世界",
        ext_fields={"a": "pg1", "i": "TAGS\x01TagA\x02", "ü": "ß"},
        body=b"\x00\x01binary\xff",
        serialize_type=stype,
    )
    assert _roundtrip(cmd) == cmd


@pytest.mark.parametrize("stype", [0, 1, 2])
def test_roundtrip_minimal(stype):
    cmd = RemotingCommand(0, serialize_type=stype)
    back = _roundtrip(cmd)
    assert back == cmd
    assert back.ext_fields is None and back.remark is None and back.body == b""


@pytest.mark.parametrize("stype", [0, 1])
def test_ext_values_are_written_as_strings(stype):
    cmd = RemotingCommand(11, ext_fields={"queueId": 3, "unitMode": False, "k": True, "x": None, "f": 1.5}, serialize_type=stype)
    assert _roundtrip(cmd).ext_fields == {"queueId": "3", "unitMode": "false", "k": "true", "f": "1.5"}


def test_msgpack_keeps_native_ext_values():
    cmd = RemotingCommand(11, ext_fields={"queueId": 3, "unitMode": False, "s": "x"}, serialize_type=2)
    assert _roundtrip(cmd).ext_fields == {"queueId": 3, "unitMode": False, "s": "x"}


def test_intenum_codes_encode_as_numbers():
    cmd = RemotingCommand(RequestCode.HEART_BEAT, ext_fields={"code": ResponseCode.SYSTEM_ERROR})
    header = json.loads(encode_header(cmd))
    assert header["code"] == 34 and header["extFields"] == {"code": "1"}


_text = st.text(min_size=1, max_size=30)
_ext = st.none() | st.dictionaries(_text, _text, max_size=8)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([0, 1, 2]),
    st.integers(-32768, 32767),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 3),
    st.sampled_from([m.name for m in LanguageCode]),
    st.integers(-32768, 32767),
    st.none() | _text,
    _ext,
    st.binary(max_size=200),
)
def test_roundtrip_property(stype, code, opaque, flag, language, version, remark, ext, body):
    cmd = RemotingCommand(code, opaque, flag, language, version, remark, ext, body, stype)
    back = _roundtrip(cmd)
    if stype == 1 and ext == {}:
        assert back.ext_fields is None  # binary: extFields length 0 means "no extFields"
        back.ext_fields = {}
    assert back == cmd


# ---------------------------------------------------------------------------------------------
# JSON header details


def test_json_header_is_compact_sorted_and_omits_null():
    cmd = RemotingCommand(34, opaque=1, language="JAVA", version=479, ext_fields={})
    assert encode_header(cmd) == (
        b'{"code":34,"extFields":{},"flag":0,"language":"JAVA","opaque":1,'
        b'"serializeTypeCurrentRPC":"JSON","version":479}'
    )
    no_ext = encode_header(RemotingCommand(0, opaque=1, flag=1, language="JAVA"))
    assert b"extFields" not in no_ext and b"remark" not in no_ext


def test_json_escapes_control_chars_and_keeps_utf8_raw():
    cmd = RemotingCommand(10, remark="ü", ext_fields={"i": "A\x01B\x02"})
    header = encode_header(cmd)
    assert b'"i":"A\\u0001B\\u0002"' in header
    assert "ü".encode() in header
    assert json.loads(header)["extFields"]["i"] == "A\x01B\x02"


def test_json_decoding_defaults_for_missing_keys():
    cmd = decode_command(_json_payload("{}", b"body"))
    assert (cmd.code, cmd.flag, cmd.language, cmd.version, cmd.opaque) == (0, 0, "JAVA", 0, 0)
    assert cmd.ext_fields is None and cmd.remark is None and cmd.body == b"body"


def test_json_decoding_is_liberal():
    cmd = decode_command(
        _json_payload(
            {
                "code": "310",
                "flag": "2",
                "language": 9,
                "opaque": 7.0,
                "version": "333",
                "remark": 12,
                "extFields": {"queueId": 0, "unitMode": False, "x": None, "f": 1.5},
                "unknownKey": [1, 2],
                "serializeTypeCurrentRPC": "JSON",
            }
        )
    )
    assert (cmd.code, cmd.flag, cmd.language, cmd.opaque, cmd.version, cmd.remark) == (310, 2, "GO", 7, 333, "12")
    assert cmd.is_oneway
    assert cmd.ext_fields == {"queueId": 0, "unitMode": False, "x": None, "f": 1.5}


@pytest.mark.parametrize("ext", [None, "null"])
def test_json_null_ext_fields(ext):
    header = '{"code":34,"opaque":3}' if ext is None else '{"code":34,"opaque":3,"extFields":null}'
    assert decode_command(_json_payload(header)).ext_fields is None


def test_json_language_name_and_unknown_number():
    assert decode_command(_json_payload({"language": "CPP"})).language == "CPP"
    assert decode_command(_json_payload({"language": 99})).language == "OTHER"
    assert decode_command(_json_payload({"language": "3"})).language == "PYTHON"


def test_json_non_ascii_and_escapes_decode():
    cmd = decode_command(_json_payload('{"code":1,"remark":"\\u4e16\\u0001","extFields":{"k":"v\\n"}}'))
    assert cmd.remark == "世\x01" and cmd.ext_fields == {"k": "v\n"}


@pytest.mark.parametrize(
    "header",
    ['{"code":"x"}', '{"opaque":"1.5x"}', '{"extFields":"str"}', "[]", "nope", '{"code":1e999}'],
)
def test_json_malformed_raises_protocol_error(header):
    with pytest.raises(ProtocolError):
        decode_command(_json_payload(header))


# ---------------------------------------------------------------------------------------------
# ROCKETMQ binary header details (§1.6)


def test_binary_layout_exact():
    cmd = RemotingCommand(
        310, opaque=2, flag=0, language="JAVA", version=479, remark="ok", ext_fields={"a": "pg1"}, serialize_type=1
    )
    header = encode_header(cmd)
    expected = (
        struct.pack(">hbhiii", 310, 0, 479, 2, 0, 2)
        + b"ok"
        + struct.pack(">i", 2 + 1 + 4 + 3)
        + struct.pack(">h", 1)
        + b"a"
        + struct.pack(">i", 3)
        + b"pg1"
    )
    assert header == expected
    frame = encode_command(cmd)
    assert frame[4] == 1 and int.from_bytes(frame[5:8], "big") == len(header)


def test_binary_minimum_header_is_21_bytes():
    header = encode_header(RemotingCommand(0, serialize_type=1))
    assert len(header) == 21


def test_binary_language_byte_and_signed_fields():
    cmd = RemotingCommand(-1, opaque=-(2**31), flag=1, language="CPP", version=-2, serialize_type=1)
    header = encode_header(cmd)
    assert header[2] == 1  # CPP
    assert _roundtrip(cmd) == cmd


def test_binary_zero_length_strings_decode_as_none():
    cmd = RemotingCommand(1, remark="", ext_fields={"empty": "", "k": "v"}, serialize_type=1)
    back = _roundtrip(cmd)
    assert back.remark is None
    assert back.ext_fields == {"empty": None, "k": "v"}


def test_binary_unknown_language_byte_is_other():
    header = struct.pack(">hbhiii", 1, 42, 0, 0, 0, 0) + struct.pack(">i", 0)
    assert decode_header(1, header).language == "OTHER"


def test_binary_code_out_of_range_cannot_be_encoded():
    with pytest.raises(ValueError):
        encode_command(RemotingCommand(200050, serialize_type=1))


@pytest.mark.parametrize(
    "header",
    [
        struct.pack(">hbhiii", 1, 0, 0, 0, 0, 100) + b"xx" + struct.pack(">i", 0),  # remark overruns
        struct.pack(">hbhiii", 1, 0, 0, 0, 0, -1) + struct.pack(">i", 0),  # negative remark length
        struct.pack(">hbhiii", 1, 0, 0, 0, 0, 0) + struct.pack(">i", 50),  # ext length overruns
        struct.pack(">hbhiii", 1, 0, 0, 0, 0, 0) + struct.pack(">i", -3),  # negative ext length
        struct.pack(">hbhiii", 1, 0, 0, 0, 0, 0) + struct.pack(">i", 3) + b"\x00\x01a",  # entry cut short
        struct.pack(">hbhiii", 1, 0, 0, 0, 0, 0)
        + struct.pack(">i", 8)
        + struct.pack(">h", 1)
        + b"a"
        + struct.pack(">i", 9)
        + b"v",  # value overruns extFields
        struct.pack(">hbhiii", 1, 0, 0, 0, 0, 0)
        + struct.pack(">i", 7)
        + struct.pack(">h", -1)
        + b"\x00\x00\x00\x00\x00",  # negative key length
        struct.pack(">hbhiii", 1, 0, 0, 0, 0, 2) + b"\xff\xfe" + struct.pack(">i", 0),  # bad UTF-8
        b"\x00" * 20,  # too short
    ],
)
def test_binary_malformed_raises_protocol_error(header):
    with pytest.raises(ProtocolError):
        decode_header(1, header)


# ---------------------------------------------------------------------------------------------
# msgpack header


def test_msgpack_header_is_a_map_with_json_keys():
    cmd = RemotingCommand(34, opaque=1, remark="r", ext_fields={"a": 1}, serialize_type=2)
    header = msgpack.unpackb(encode_header(cmd))
    assert header["code"] == 34 and header["opaque"] == 1 and header["remark"] == "r"
    assert header["extFields"] == {"a": 1} and header["language"] == "PYTHON"
    assert header["flag"] == 0 and header["version"] == BROKER_VERSION


def test_msgpack_decoding_is_liberal():
    cmd = decode_command(_msgpack_payload({"code": "11", "language": 0, "extFields": {"queueId": 1}}, b"b"))
    assert (cmd.code, cmd.language, cmd.flag, cmd.version, cmd.opaque) == (11, "JAVA", 0, 0, 0)
    assert cmd.ext_fields == {"queueId": 1} and cmd.body == b"b"
    assert cmd.serialize_type == SerializeType.MSGPACK


@pytest.mark.parametrize("header", [[1, 2], {"extFields": [1]}, {"code": "zz"}])
def test_msgpack_malformed(header):
    with pytest.raises(ProtocolError):
        decode_command(_msgpack_payload(header))


def test_msgpack_trailing_garbage_is_error():
    raw = msgpack.packb({"code": 1}) + b"\x01"
    with pytest.raises(ProtocolError):
        decode_command(struct.pack(">I", (2 << 24) | len(raw)) + raw)


# ---------------------------------------------------------------------------------------------
# requests and responses


def test_request_and_make_response():
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}, opaque=42, serialize_type=2)
    assert req.flag == 0 and not req.is_response and not req.is_oneway
    assert req.language == "PYTHON" and req.version == BROKER_VERSION
    oneway = RemotingCommand.request(15, opaque=1, oneway=True)
    assert oneway.flag == 2 and oneway.is_oneway
    resp = req.make_response(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", {"nextBeginOffset": "3"}, b"")
    assert resp.is_response and resp.flag == 1
    assert resp.opaque == 42 and resp.serialize_type == 2
    assert resp.version == BROKER_VERSION and resp.language == "JAVA"
    assert resp.remark == "OFFSET_OVERFLOW_ONE" and resp.ext_fields == {"nextBeginOffset": "3"}
    assert oneway.make_response(0).flag == 1  # flags are not copied


@pytest.mark.parametrize("stype", [0, 1, 2])
def test_response_keeps_request_serialize_type(stype):
    req = decode_command(encode_command(RemotingCommand.request(34, opaque=8, serialize_type=stype))[4:])
    assert req.make_response(0).serialize_type == stype


def test_encode_head_for_scatter_writes():
    cmd = RemotingCommand(0, opaque=1, flag=1, body=b"0123456789")
    head = encode_head(cmd)
    assert head + cmd.body == encode_command(cmd)
    parts = [b"01234", memoryview(b"56789")]
    head2 = encode_head(RemotingCommand(0, opaque=1, flag=1), body_length=10)
    assert head2 + b"".join(parts) == encode_command(cmd)


def test_repr_does_not_dump_body():
    text = repr(RemotingCommand(0, body=b"x" * 10000))
    assert len(text) < 300 and "10000B" in text


def test_decode_command_rejects_short_and_overlong():
    with pytest.raises(ProtocolError):
        decode_command(b"\x00\x00")
    with pytest.raises(ProtocolError):
        decode_command(struct.pack(">I", 10) + b"{}")
