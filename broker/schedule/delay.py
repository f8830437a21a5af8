"""Moving delayed messages into SCHEDULE_TOPIC_XXXX and back out (reference §4.3.2 step 6, §5.6).

A message whose ``DELAY`` property is a positive level (and which is not a prepared or rolled-back
transaction half) is stored in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with its destination kept in
``REAL_TOPIC`` / ``REAL_QID``. Levels above the configured maximum are clamped (and ``DELAY`` rewritten
to the clamped level, as the reference broker does). The store computes the consume-queue tagsCode of
such records as their delivery time. ``restore_from_schedule`` builds the copy the schedule service
writes back to the real topic when that time has come.
"""

from __future__ import annotations

from broker.store.types import MessageToStore
from protocol.hashing import tags_code
from protocol.ids import pack_host
from protocol.message import MessageRecord
from protocol.properties import encode_properties

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
PROP_DELAY = "DELAY"
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_TAGS = "TAGS"
PROP_KEYS = "KEYS"
PROP_UNIQ_KEY = "UNIQ_KEY"
# Removed from a delivered copy: the delay must not apply twice (5.x timer keys too).
DELAY_PROPERTIES = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")

_TRANSACTION_MASK = 0xC
_NOT_DELAYABLE = (0x4, 0xC)  # prepared / rollback halves are never scheduled


def delay_level_of(properties: dict[str, str]) -> int:
    """The ``DELAY`` level of a message (0 when absent or not a number)."""
    raw = properties.get(PROP_DELAY)
    if raw is None:
        return 0
    try:
        return int(raw.strip())
    except ValueError:
        return 0


def clamp_level(level: int, max_level: int) -> int:
    """Levels above the maximum use the maximum."""
    return max_level if level > max_level else level


def to_schedule_topic(message: MessageToStore, properties: dict[str, str], max_level: int) -> bool:
    """Redirect ``message`` (in place) to the schedule topic when it carries a positive delay level.

    ``properties`` must be the decoded form of ``message.properties``; it is updated alongside.
    Returns True when the message was redirected.
    """
    level = delay_level_of(properties)
    if level <= 0 or max_level <= 0 or (message.sys_flag & _TRANSACTION_MASK) in _NOT_DELAYABLE:
        return False
    clamped = clamp_level(level, max_level)
    if clamped != level:
        properties[PROP_DELAY] = str(clamped)
    properties[PROP_REAL_TOPIC] = message.topic
    properties[PROP_REAL_QID] = str(message.queue_id)
    message.properties = encode_properties(properties)
    if getattr(message, "properties_bytes", None) is not None:  # the re-encoded text is what must be stored
        message.properties_bytes = None
    message.topic = SCHEDULE_TOPIC
    message.queue_id = clamped - 1
    return True


def restore_from_schedule(record: MessageRecord) -> MessageToStore | None:
    """The message to write to the real topic for a due schedule record (None if it names no real topic).

    Same body, flag, sysFlag, bornTimestamp, bornHost and reconsumeTimes; ``DELAY``/``TIMER_*`` removed;
    tagsCode recomputed from ``TAGS``. REAL_TOPIC/REAL_QID stay, as on the reference broker.
    """
    properties = dict(record.properties)
    topic = properties.get(PROP_REAL_TOPIC)
    if not topic:
        return None
    try:
        queue_id = int(properties.get(PROP_REAL_QID, "0"))
    except ValueError:
        queue_id = 0
    for key in DELAY_PROPERTIES:
        properties.pop(key, None)
    born_ip, born_port = record.born_host
    return MessageToStore(
        topic=topic,
        queue_id=max(0, queue_id),
        flag=record.flag,
        sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp,
        born_host=pack_host(born_ip, born_port),
        reconsume_times=record.reconsume_times,
        body=bytes(record.body),
        properties=encode_properties(properties),
        tags_code=tags_code(properties.get(PROP_TAGS)),
        keys=properties.get(PROP_KEYS),
        uniq_key=properties.get(PROP_UNIQ_KEY),
    )
