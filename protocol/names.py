"""Legal topic names and queue ids, checked where a name arrives (requests) and where it is read back (the store).

Two rules. A topic a request names (``topic_problem``) is 1..127 characters of ``[%|a-zA-Z0-9_-]`` (255 for
``%RETRY%``/``%DLQ%`` topics), the reference client's and broker's rule for new topics. A record read back from the
log (recovery, a slave applying its master's stream; ``record_names_problem``) only has to be a safe directory
name: the store turns its topic and queue id into ``consumequeue/<topic>/<queueId>``, and a record's topic bytes are
not covered by its CRC, so ``../x``, ``a/b`` or a control character must never become a path or a queue — but a
name a reference broker may have stored (a 5.x retry topic with ``+``, a topic longer than 127 in the V2 record
format) is data, not damage. A leaf module (no imports from the project) so the protocol, store and managers floors
can all use it.
"""

from __future__ import annotations

import re

__all__ = ["TOPIC_MAX_LENGTH", "RETRY_DLQ_TOPIC_MAX_LENGTH", "RETRY_GROUP_TOPIC_PREFIX", "DLQ_GROUP_TOPIC_PREFIX",
           "MAX_QUEUE_ID", "RECORD_TOPIC_MAX_BYTES", "topic_problem", "queue_id_problem", "record_names_problem"]

TOPIC_MAX_LENGTH = 127
RETRY_DLQ_TOPIC_MAX_LENGTH = 255
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
# Queue ids a record may carry: topics have at most 1024 queues (UPDATE_AND_CREATE_TOPIC's bound), delay levels and
# POP revive queues fewer; the margin keeps hand-made topics working while a garbage id (negative, or millions of
# directories) is refused.
MAX_QUEUE_ID = 65535

_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")  # used with fullmatch: "$" would let a trailing newline through
_UNSAFE_PATH_BYTES = re.compile(rb"[\x00-\x1f\x7f/\\]")  # separators and control characters
# A directory name holds at most 255 bytes (NAME_MAX); a longer topic can be no queue directory.
RECORD_TOPIC_MAX_BYTES = 255
_RETRY_DLQ_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
_KNOWN_GOOD_MAX = 8192
_known_good: set[bytes] = set()  # raw topics already found legal: a record check is a set lookup


def topic_problem(topic: str | None) -> str | None:
    """None when ``topic`` is a legal name, else the reason (used as a response remark)."""
    if not topic:
        return "The specified topic is blank."
    limit = RETRY_DLQ_TOPIC_MAX_LENGTH if topic.startswith(_RETRY_DLQ_PREFIXES) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        return f"The specified topic is longer than topic max length {limit}."
    if not _TOPIC_CHARS.fullmatch(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


def queue_id_problem(queue_id: int) -> str | None:
    """None when a record may carry ``queue_id``, else the reason."""
    if 0 <= queue_id <= MAX_QUEUE_ID:
        return None
    return f"queue id {queue_id} is outside 0..{MAX_QUEUE_ID}"


def record_names_problem(raw_topic: bytes | bytearray | memoryview, queue_id: int) -> str | None:
    """None when a commit-log record's topic bytes and queue id are safe to become a directory and a queue, else
    the reason (names the bytes).

    Per record on recovery and replication: a topic seen legal before costs one set lookup."""
    raw = bytes(raw_topic)
    if raw in _known_good:
        return queue_id_problem(queue_id)
    shown = raw if len(raw) <= 80 else raw[:80] + b"..."
    if not raw:
        return "blank topic"
    if len(raw) > RECORD_TOPIC_MAX_BYTES:
        return f"topic of {len(raw)} bytes, longer than a directory name may be ({RECORD_TOPIC_MAX_BYTES}) ({shown!r})"
    if raw in (b".", b"..") or _UNSAFE_PATH_BYTES.search(raw):
        return f"illegal topic name {shown!r} (a path separator, control character or dot name)"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"illegal topic name {shown!r} (not UTF-8)"
    if len(_known_good) >= _KNOWN_GOOD_MAX:
        _known_good.clear()
    _known_good.add(raw)
    return queue_id_problem(queue_id)
