"""RemotingCommand and its three header serializations (JSON, ROCKETMQ binary, msgpack).

Frame layout (reference §1.2): int32 length (bytes that follow), int32 type word
(serialize type << 24 | header length), header, body.  `decode_command` takes the payload *after*
the length field; `encode_command` produces a whole frame including the length field.

Encoding is strict (Java peers parse what we write); decoding is liberal (clients in the wild send
numbers where strings are expected, omit keys, use language names or numbers).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _json_str  # C escaper, keeps non-ASCII raw
from typing import Mapping

import msgpack

from protocol.codes import BROKER_VERSION, RPC_ONEWAY, RPC_TYPE_RESPONSE, LanguageCode, SerializeType

__all__ = [
    "ProtocolError",
    "RemotingCommand",
    "encode_command",
    "encode_head",
    "ResponseTemplate",
    "encode_header",
    "decode_command",
    "decode_header",
    "MAX_HEADER_LENGTH",
    "wire_str",
]

JSON = SerializeType.JSON.value
ROCKETMQ = SerializeType.ROCKETMQ.value
MSGPACK = SerializeType.MSGPACK.value

MAX_HEADER_LENGTH = 0xFFFFFF  # 24 bits in the type word

_LANG_NAME_BY_CODE: dict[int, str] = {m.value: m.name for m in LanguageCode}
_LANG_CODE_BY_NAME: dict[str, int] = {m.name: m.value for m in LanguageCode}
_SERIALIZE_NAME = {JSON: "JSON", ROCKETMQ: "ROCKETMQ", MSGPACK: "MSGPACK"}

_PREFIX = struct.Struct(">iI")  # frame length, type word
_TYPE_WORD = struct.Struct(">I")
_BIN_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_BIN_FIXED_SIZE = _BIN_FIXED.size  # 17


class ProtocolError(Exception):
    """Malformed frame or header: the connection that produced it must be closed."""


@dataclass(slots=True, repr=False)
class RemotingCommand:
    """One request or response. ext_fields values are kept as decoded; encoders stringify them."""

    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "PYTHON"
    version: int = BROKER_VERSION
    remark: str | None = None
    ext_fields: dict[str, object] | None = None
    body: bytes = b""
    serialize_type: int = JSON
    # The request read into its typed form (a header class, or a body for body-only requests), set once by
    # protocol.requests.read_request: the authorizer and the handler use this same object.
    header: object = field(default=None, compare=False, repr=False)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        opaque: int,
        oneway: bool = False,
        serialize_type: int = JSON,
    ) -> "RemotingCommand":
        return cls(
            code,
            opaque,
            RPC_ONEWAY if oneway else 0,
            "PYTHON",
            BROKER_VERSION,
            None,
            dict(ext_fields) if ext_fields is not None else None,
            body,
            serialize_type,
        )

    def make_response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: Mapping[str, object] | None = None,
        body: bytes = b"",
    ) -> "RemotingCommand":
        """Reply to this request: same opaque and serialization type, response flag only (Java does not copy flags)."""
        return RemotingCommand(
            code,
            self.opaque,
            RPC_TYPE_RESPONSE,
            "JAVA",
            BROKER_VERSION,
            remark,
            ext_fields if ext_fields is None or type(ext_fields) is dict else dict(ext_fields),
            body,
            self.serialize_type,
        )

    def __repr__(self) -> str:
        kind = "response" if self.flag & RPC_TYPE_RESPONSE else ("oneway" if self.flag & RPC_ONEWAY else "request")
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"lang={self.language} version={self.version} remark={self.remark!r} "
            f"ext={self.ext_fields!r} body={len(self.body)}B type={_SERIALIZE_NAME.get(self.serialize_type, self.serialize_type)})"
        )


# ----------------------------------------------------------------------------------------------
# encoding


def wire_str(value: object) -> str:
    """Java's String.valueOf for ext field values: booleans lower-case, numbers decimal."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))  # IntEnum -> digits
    return str(value)


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # lone surrogates from a liberal decode: Java writes '?'
        return text.encode("utf-8", "replace")


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    parts = ['{"code":%d' % cmd.code]
    ext = cmd.ext_fields
    if ext is not None:
        items = []
        append = items.append
        for key, value in ext.items():
            if value is None:
                continue
            if type(value) is not str:
                value = wire_str(value)
            append(_json_str(key) + ":" + _json_str(value))
        parts.append(',"extFields":{' + ",".join(items) + "}")
    language = cmd.language
    if type(language) is not str:
        language = _LANG_NAME_BY_CODE.get(language, "OTHER")
    parts.append(',"flag":%d,"language":%s,"opaque":%d' % (cmd.flag, _json_str(language), cmd.opaque))
    if cmd.remark is not None:
        parts.append(',"remark":' + _json_str(cmd.remark))
    parts.append(',"serializeTypeCurrentRPC":"JSON","version":%d}' % cmd.version)
    return _utf8("".join(parts))


_packer = msgpack.Packer(use_bin_type=True, autoreset=True)


def _encode_msgpack_header(cmd: RemotingCommand) -> bytes:
    language = cmd.language
    if type(language) is not str:
        language = _LANG_NAME_BY_CODE.get(language, "OTHER")
    header = {"code": cmd.code}
    if cmd.ext_fields is not None:
        header["extFields"] = cmd.ext_fields
    header["flag"] = cmd.flag
    header["language"] = language
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "MSGPACK"
    header["version"] = cmd.version
    try:
        return _packer.pack(header)
    except (TypeError, ValueError, OverflowError):
        # Something msgpack cannot carry natively (e.g. a custom object): fall back to strings.
        header["extFields"] = {k: wire_str(v) for k, v in cmd.ext_fields.items() if v is not None}
        return _packer.pack(header)


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    code = cmd.code
    if not -32768 <= code <= 32767:
        raise ValueError(f"request/response code {code} cannot be carried by the ROCKETMQ binary header")
    version = cmd.version
    if not -32768 <= version <= 32767:
        raise ValueError(f"version {version} does not fit the ROCKETMQ binary header")
    language = cmd.language
    lang_byte = _LANG_CODE_BY_NAME.get(language, 7) if type(language) is str else int(language)
    remark = _utf8(cmd.remark) if cmd.remark else b""
    entries = []
    ext = cmd.ext_fields
    if ext:
        pack16 = _I16.pack
        pack32 = _I32.pack
        for key, value in ext.items():
            if key is None or value is None:
                continue
            kb = _utf8(key)
            if len(kb) > 32767:
                raise ValueError(f"ext field key too long for the binary header: {key[:40]!r}")
            vb = _utf8(value if type(value) is str else wire_str(value))
            entries.append(pack16(len(kb)) + kb + pack32(len(vb)) + vb)
    ext_blob = b"".join(entries)
    return b"".join(
        (
            _BIN_FIXED.pack(code, lang_byte, version, cmd.opaque, cmd.flag, len(remark)),
            remark,
            _I32.pack(len(ext_blob)),
            ext_blob,
        )
    )


def encode_header(cmd: RemotingCommand) -> bytes:
    """Serialize only the header, in cmd.serialize_type."""
    st = cmd.serialize_type
    if st == JSON:
        return _encode_json_header(cmd)
    if st == MSGPACK:
        return _encode_msgpack_header(cmd)
    if st == ROCKETMQ:
        return _encode_binary_header(cmd)
    raise ValueError(f"unknown serialize type {st}")


def encode_head(cmd: RemotingCommand, body_length: int | None = None) -> bytes:
    """Length field + type word + header; the caller writes the body itself (e.g. transport.writelines)."""
    header = encode_header(cmd)
    header_length = len(header)
    if header_length > MAX_HEADER_LENGTH:
        raise ValueError(f"header of {header_length} bytes exceeds the 24-bit header length field")
    if body_length is None:
        body_length = len(cmd.body)
    return _PREFIX.pack(4 + header_length + body_length, (cmd.serialize_type << 24) | header_length) + header


def encode_command(cmd: RemotingCommand) -> bytes:
    """A complete frame, including the 4-byte length prefix."""
    header = encode_header(cmd)
    header_length = len(header)
    if header_length > MAX_HEADER_LENGTH:
        raise ValueError(f"header of {header_length} bytes exceeds the 24-bit header length field")
    body = cmd.body
    prefix = _PREFIX.pack(4 + header_length + len(body), (cmd.serialize_type << 24) | header_length)
    if body:
        return b"".join((prefix, header, body))
    return prefix + header


class ResponseTemplate:
    """Pre-encoded frames for responses that differ only in the opaque and some extField values.

    Hot paths (a send's answer) answer thousands of requests a second with the same code, the same fixed extFields
    and a few variable ones. The header is encoded once, cut around the variable parts, and each answer is a splice.
    The bytes equal ``encode_command(request.make_response(code, None, ext))`` for the same extFields in the same
    order (JSON and MSGPACK; other types fall back to that call). Variable values must be str.
    """

    __slots__ = ("serialize_type", "code", "_fixed", "encode")

    def __init__(self, serialize_type: int, code: int, ext_items: list[tuple[str, str | None]]) -> None:
        """``ext_items``: (key, value) in wire order; a None value marks a variable filled in by ``encode``.

        ``encode(opaque, *variable_values) -> bytes`` returns the whole frame (length prefix included)."""
        self.serialize_type = serialize_type
        self.code = code
        self._fixed = ext_items
        pieces = self._cut(serialize_type, code, ext_items)
        self.encode = self._general_encode if pieces is None else self._splicer(serialize_type, pieces)

    @staticmethod
    def _cut(serialize_type: int, code: int, ext_items: list[tuple[str, str | None]]) -> list[bytes] | None:
        """The header bytes around the variable values and the opaque, or None if it cannot be cut safely."""
        marker = "\x00\x7fVAR\x7f\x00"
        probe = RemotingCommand(code, -1, RPC_TYPE_RESPONSE, "JAVA", BROKER_VERSION, None,
                                {key: marker if value is None else value for key, value in ext_items},
                                b"", serialize_type)
        if serialize_type == JSON:
            header = _encode_json_header(probe)
            quoted = _json_str(marker).encode()
            opaque_key, opaque_probe = b'"opaque":', b"-1,"
        elif serialize_type == MSGPACK:
            header = _encode_msgpack_header(probe)
            quoted = _packer.pack(marker)
            opaque_key, opaque_probe = _packer.pack("opaque"), _packer.pack(-1)
        else:
            return None
        pieces = header.split(quoted)
        last = pieces[-1]
        variables = sum(1 for _key, value in ext_items if value is None)
        if len(pieces) != variables + 1 or last.count(opaque_key + opaque_probe) != 1:
            return None  # a fixed value collides with the markers: use the general encoder
        before, after = last.split(opaque_key + opaque_probe)
        if serialize_type == JSON:
            after = b"," + after  # the probe's "-1," lost its comma
        return pieces[:-1] + [before + opaque_key, after]

    @staticmethod
    def _splicer(serialize_type: int, pieces: list[bytes]):
        """A generated function joining the pieces with the encoded values (no loop per answer)."""
        count = len(pieces) - 2
        args = "".join(f", v{i}" for i in range(count))
        if serialize_type == JSON:
            value = "_json_str(v{}).encode('utf-8', 'replace')"
            opaque = "b'%d' % opaque"
        else:
            value = "_pack(v{})"
            opaque = "_pack(opaque)"
        parts = "".join(f"p{i}, {value.format(i)}, " for i in range(count))
        src = (f"def encode(opaque{args}):\n"
               f"    header = b''.join(({parts}p{count}, {opaque}, p{count + 1}))\n"
               f"    return _pack_prefix(4 + len(header), {serialize_type << 24} | len(header)) + header\n")
        namespace = {f"p{i}": piece for i, piece in enumerate(pieces)}
        namespace.update(_json_str=_json_str, _pack=_packer.pack, _pack_prefix=_PREFIX.pack)
        exec(src, namespace)  # noqa: S102 - generated from fixed text and the template's own pieces
        return namespace["encode"]

    def _general_encode(self, opaque: int, *values: str) -> bytes:
        ext = {}
        variables = iter(values)
        for key, value in self._fixed:
            ext[key] = next(variables) if value is None else value
        return encode_command(RemotingCommand(self.code, opaque, RPC_TYPE_RESPONSE, "JAVA", BROKER_VERSION, None,
                                              ext, b"", self.serialize_type))


# ----------------------------------------------------------------------------------------------
# decoding


def _coerce_int(value: object, name: str) -> int:
    if type(value) is bool:
        return int(value)
    if isinstance(value, int):
        return int(value)
    try:
        if isinstance(value, str):
            return int(value.strip())
        if isinstance(value, float) and value.is_integer():
            return int(value)
    except (ValueError, OverflowError):
        pass
    raise ProtocolError(f"header field {name!r} is not an integer: {str(value)[:40]!r}")


def _language_name(value: object) -> str:
    if isinstance(value, int):
        return _LANG_NAME_BY_CODE.get(int(value), "OTHER")
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.lstrip("-").isdigit():
            return _LANG_NAME_BY_CODE.get(int(stripped), "OTHER")
        return stripped
    return "OTHER"


def _command_from_map(header: object, serialize_type: int, body: bytes) -> RemotingCommand:
    if type(header) is not dict:
        raise ProtocolError("header is not an object")
    get = header.get
    code = get("code", 0)
    if type(code) is not int:
        code = 0 if code is None else _coerce_int(code, "code")
    opaque = get("opaque", 0)
    if type(opaque) is not int:
        opaque = 0 if opaque is None else _coerce_int(opaque, "opaque")
    flag = get("flag", 0)
    if type(flag) is not int:
        flag = 0 if flag is None else _coerce_int(flag, "flag")
    version = get("version", 0)
    if type(version) is not int:
        version = 0 if version is None else _coerce_int(version, "version")
    language = get("language", "JAVA")
    if type(language) is not str or language not in _LANG_CODE_BY_NAME:
        language = "JAVA" if language is None else _language_name(language)
    remark = get("remark")
    if remark is not None and type(remark) is not str:
        remark = str(remark)
    ext = get("extFields")
    if ext is not None and type(ext) is not dict:
        raise ProtocolError("extFields is not an object")
    return RemotingCommand(code, opaque, flag, language, version, remark, ext, body, serialize_type)


def _decode_binary_header(data: bytes, body: bytes) -> RemotingCommand:
    size = len(data)
    if size < _BIN_FIXED_SIZE + 4:
        raise ProtocolError(f"binary header too short ({size} bytes)")
    code, lang_byte, version, opaque, flag, remark_len = _BIN_FIXED.unpack_from(data, 0)
    pos = _BIN_FIXED_SIZE
    remark = None
    if remark_len:
        if remark_len < 0 or pos + remark_len + 4 > size:
            raise ProtocolError(f"binary header remark length {remark_len} exceeds the header")
        remark = data[pos : pos + remark_len].decode()
        pos += remark_len
    (ext_len,) = _I32.unpack_from(data, pos)
    pos += 4
    ext = None
    if ext_len:
        end = pos + ext_len
        if ext_len < 0 or end > size:
            raise ProtocolError(f"binary header extFields length {ext_len} exceeds the header")
        ext = {}
        unpack16 = _I16.unpack_from
        unpack32 = _I32.unpack_from
        while pos < end:
            if pos + 2 > end:
                raise ProtocolError("binary header ext entry overruns extFields")
            (key_len,) = unpack16(data, pos)
            pos += 2
            if key_len < 0 or pos + key_len + 4 > end:
                raise ProtocolError(f"binary header ext key length {key_len} overruns extFields")
            key = data[pos : pos + key_len].decode() if key_len else None
            pos += key_len
            (value_len,) = unpack32(data, pos)
            pos += 4
            if value_len < 0 or pos + value_len > end:
                raise ProtocolError(f"binary header ext value length {value_len} overruns extFields")
            value = data[pos : pos + value_len].decode() if value_len else None
            pos += value_len
            if key is not None:
                ext[key] = value
    language = _LANG_NAME_BY_CODE.get(lang_byte, "OTHER")
    return RemotingCommand(code, opaque, flag, language, version, remark, ext, body, ROCKETMQ)


def decode_header(serialize_type: int, header: bytes | memoryview, body: bytes = b"") -> RemotingCommand:
    """Decode one header of the given serialization type; any malformation raises ProtocolError."""
    try:
        if serialize_type == JSON:
            return _command_from_map(json.loads(str(header, "utf-8")), JSON, body)
        if serialize_type == MSGPACK:
            return _command_from_map(msgpack.unpackb(header, raw=False), MSGPACK, body)
        if serialize_type == ROCKETMQ:
            return _decode_binary_header(bytes(header), body)
    except ProtocolError:
        raise
    except Exception as exc:  # bad UTF-8, bad JSON, bad msgpack, recursion depth ...
        raise ProtocolError(f"undecodable {_SERIALIZE_NAME[serialize_type]} header: {exc}") from None
    raise ProtocolError(f"unknown serialize type {serialize_type}")


def decode_command(frame_payload: bytes | bytearray | memoryview,
                   max_header_length: int = MAX_HEADER_LENGTH) -> RemotingCommand:
    """Decode the bytes that follow a frame's length field (type word, header, body). A header longer than
    ``max_header_length`` is refused before it is parsed."""
    total = len(frame_payload)
    if total < 4:
        raise ProtocolError(f"frame of {total} bytes has no type word")
    (type_word,) = _TYPE_WORD.unpack_from(frame_payload, 0)
    serialize_type = type_word >> 24
    header_length = type_word & 0xFFFFFF
    if header_length > total - 4:
        raise ProtocolError(f"header length {header_length} exceeds frame length {total}")
    if header_length > max_header_length:
        raise ProtocolError(f"header of {header_length} bytes exceeds the maximum {max_header_length}")
    if serialize_type > MSGPACK:
        raise ProtocolError(f"unknown serialize type {serialize_type}")
    header_end = 4 + header_length
    body = bytes(frame_payload[header_end:]) if header_end < total else b""
    view = frame_payload if type(frame_payload) is memoryview else memoryview(frame_payload)
    return decode_header(serialize_type, view[4:header_end], body)
