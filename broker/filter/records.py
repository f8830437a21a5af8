"""Reading just the properties of a raw commit-log record (reference §6.3), for broker-side filters.

A SQL92 filter needs the property map of each candidate record; decoding the whole record (body,
hosts, topic) would be wasted work on the pull path, so this walks the fixed layout to the
properties field and decodes only that.

`record_matcher` goes further for a selector: it reads only the properties the selector names, straight
from the record's bytes (no copy), and remembers the decision per combination of those values (property
values repeat a lot: tags, small enums), so most records cost a header read, one regex match and a dict
lookup.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from protocol.message import BORNHOST_V6_FLAG, MAGIC_V1, MAGIC_V2, STOREHOST_V6_FLAG
from protocol.properties import decode_properties

_MAGIC_AND_FLAG = struct.Struct(">i28xi")  # MAGIC at 4, SYSFLAG at 36
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_HOSTS_START = 48  # BORNHOST follows TOTALSIZE..BORNTIMESTAMP
# MAGIC at 4, SYSFLAG at 36 and BODYLEN at 84: where BODYLEN is when both hosts are IPv4 (the usual layout).
_V4_HEAD = struct.Struct(">4xi28xi44xi")
_V4_BODY = 88
_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG

#: Decisions remembered per selector (combinations of the values it reads); cleared when full.
DECISION_CACHE_ENTRIES = 4096
#: Records whose properties field is longer than this are evaluated without touching the cache.
DECISION_CACHE_MAX_PROPERTIES = 1024
#: Selectors naming more properties than this are evaluated on the fully decoded property map.
MAX_WALKED_NAMES = 32
#: ... and so are selectors whose names add up to more characters than this: compiling the walker regex costs
#: about a microsecond per character (a 64 KB property name would hold the event loop for ~75 ms).
MAX_WALKED_NAME_CHARS = 2048


def properties_bytes(record) -> bytes:
    """The raw properties field of the record at the start of ``record`` (bytes or memoryview); b"" when empty.

    Raises ValueError / struct.error / IndexError on a malformed record (callers treat that as "no match").
    """
    magic, sys_flag = _MAGIC_AND_FLAG.unpack_from(record, 4)
    pos = _HOSTS_START + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8
    pos += (20 if sys_flag & STOREHOST_V6_FLAG else 8) + 12  # STOREHOST, RECONSUMETIMES, PREPARED offset
    pos += 4 + _INT.unpack_from(record, pos)[0]  # BODYLEN + BODY
    if magic == MAGIC_V2:
        pos += 2 + _SHORT.unpack_from(record, pos)[0]
    else:
        pos += 1 + record[pos]
    length = _SHORT.unpack_from(record, pos)[0]
    if length <= 0:
        return b""
    pos += 2
    raw = bytes(record[pos:pos + length])
    if len(raw) != length:
        raise ValueError("truncated properties")
    return raw


def record_properties(record) -> dict[str, str]:
    """The decoded property map of the record at the start of ``record`` (bytes or memoryview).

    Raises ValueError / struct.error on a malformed record (callers treat that as "no match").
    """
    raw = properties_bytes(record)
    return decode_properties(str(raw, "utf-8", "replace")) if raw else {}


def properties_walker(names: Iterable[str]) -> re.Pattern[bytes]:
    """A pattern that, matched at the start of a properties field, walks every segment and leaves in group i the
    value of the last ``names[i]\x01value`` segment whose value is not empty (None when there is none): exactly
    the value Java's decoding keeps for that key. (A group inside a repetition keeps its last capture; a segment
    with an empty value, an empty name or no \x01 falls to the catch-all branch and changes nothing.)
    Possessive quantifiers would be faster but make CPython 3.11's re raise "The span of capturing group is
    wrong" here."""
    branches = [re.escape(name.encode("utf-8")) + rb"\x01([^\x02]+)\x02?" for name in names]
    branches.append(rb"[^\x02]*\x02")
    return re.compile(rb"(?:" + b"|".join(branches) + rb")*")


def record_matcher(names: Iterable[str] | None, evaluate: Callable[[Mapping[str, str]], bool],
                   cache_entries: int = DECISION_CACHE_ENTRIES) -> Callable[[Any], bool]:
    """``match(record) -> bool``: ``evaluate`` applied to the record's properties, reading only ``names``.

    ``evaluate`` must look up no property outside ``names``, never raise, and depend on nothing but the
    properties (a compiled selector's decision). The answer equals ``evaluate(record_properties(record))``,
    and a malformed record does not match.

    The values are found on the raw bytes, in place (no copy of the record): \x01 and \x02 are ASCII, and
    decoding UTF-8 with replacement never merges an ASCII byte into a replaced sequence, so a byte-level value
    decodes to the same text as the corresponding piece of the decoded string. The decision is remembered per
    tuple of raw values. Names unknown (None), more than MAX_WALKED_NAMES of them or longer than
    MAX_WALKED_NAME_CHARS together: the whole property map is decoded instead (a regex alternative per name would
    make every record slow, and a huge regex slow to compile).
    """
    names = None if names is None else tuple(dict.fromkeys(names))
    if names is None or len(names) > MAX_WALKED_NAMES or sum(map(len, names)) > MAX_WALKED_NAME_CHARS:
        def decode_all(record) -> bool:
            try:
                properties = record_properties(record)
            except Exception:
                return False
            return evaluate(properties)

        return decode_all
    walk = properties_walker(names).match
    decisions: dict[tuple[bytes | None, ...], bool] = {}
    get = decisions.get
    unpack = _V4_HEAD.unpack_from
    max_cached = DECISION_CACHE_MAX_PROPERTIES

    def match(record) -> bool:
        try:
            # where properties_bytes(record) would read, with one header read for the usual layout
            # (V1 magic, IPv4 hosts)
            magic, sys_flag, body_len = unpack(record)
            if sys_flag & _V6_FLAGS or magic != MAGIC_V1 or body_len < 0:
                record = properties_bytes(record)
                start, end = 0, len(record)
            else:
                start = _V4_BODY + 1 + body_len + record[_V4_BODY + body_len]  # past BODY, TOPICLEN, TOPIC
                length = (record[start] << 8) | record[start + 1]
                start += 2
                end = start if length & 0x8000 else start + length  # a signed length <= 0: no properties
                if end > len(record):
                    return False  # truncated
        except Exception:  # malformed record: not delivered
            return False
        key = walk(record, start, end).groups()
        decision = get(key)
        if decision is None:
            decision = evaluate({name: str(value, "utf-8", "replace")
                                 for name, value in zip(names, key) if value is not None})
            if end - start <= max_cached:
                if len(decisions) >= cache_entries:
                    decisions.clear()
                decisions[key] = decision
        return decision

    return match
