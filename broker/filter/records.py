"""Reading just the properties of a raw commit-log record (reference §6.3), for broker-side filters.

A SQL92 filter needs the property map of each candidate record; decoding the whole record (body,
hosts, topic) would be wasted work on the pull path, so this walks the fixed layout to the
properties field and decodes only that.
"""

from __future__ import annotations

import struct

from protocol.message import BORNHOST_V6_FLAG, MAGIC_V2, STOREHOST_V6_FLAG
from protocol.properties import decode_properties

_MAGIC_AND_FLAG = struct.Struct(">i28xi")  # MAGIC at 4, SYSFLAG at 36
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_HOSTS_START = 48  # BORNHOST follows TOTALSIZE..BORNTIMESTAMP


def record_properties(record) -> dict[str, str]:
    """The decoded property map of the record at the start of ``record`` (bytes or memoryview).

    Raises ValueError / struct.error on a malformed record (callers treat that as "no match").
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
        return {}
    pos += 2
    raw = record[pos:pos + length]
    if len(raw) != length:
        raise ValueError("truncated properties")
    return decode_properties(str(raw, "utf-8", "replace"))
