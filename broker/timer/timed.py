"""Moving timed messages into ``rmq_sys_wheel_timer`` and back out (reference: remoting-and-store.md §5.6).

A message carrying ``TIMER_DELIVER_MS`` (epoch ms), ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (from now) whose time
is still ahead is stored in topic ``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC`` / ``REAL_QID`` and
``TIMER_OUT_MS`` (its delivery time). The timer service writes the copy back to the real topic when that time has
come: same body, flags, born time and host, ``TIMER_DELIVER_MS`` kept (5.x consumers show it), the relative keys and
``TIMER_OUT_MS`` removed so the delay never applies twice.
"""

from __future__ import annotations

from broker.managers.topic_config import TIMER_TOPIC
from broker.store.types import MessageToStore
from protocol.hashing import tags_code
from protocol.ids import pack_host
from protocol.message import MessageRecord
from protocol.properties import encode_properties

PROP_DELIVER_MS = "TIMER_DELIVER_MS"
PROP_DELAY_SEC = "TIMER_DELAY_SEC"
PROP_DELAY_MS = "TIMER_DELAY_MS"
PROP_OUT_MS = "TIMER_OUT_MS"
TIMER_PROPERTIES = (PROP_DELIVER_MS, PROP_DELAY_SEC, PROP_DELAY_MS)
__all__ = ["TIMER_TOPIC", "TIMER_PROPERTIES", "timer_deliver_ms", "to_timer_topic", "restore_from_timer", "deliver_ms_of"]


class TimerPropertyError(ValueError):
    """A timer property that is not a whole number."""


def timer_deliver_ms(properties: dict[str, str], now_ms: int) -> int | None:
    """When a message asks to be delivered (epoch ms), or None when it carries no timer property."""
    for name, scale, relative in ((PROP_DELIVER_MS, 1, False), (PROP_DELAY_MS, 1, True), (PROP_DELAY_SEC, 1000, True)):
        raw = properties.get(name)
        if raw is None:
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            raise TimerPropertyError(f"{name} must be a whole number, got {raw[:40]!r}") from None
        return now_ms + value * scale if relative else value
    return None


def to_timer_topic(message: MessageToStore, properties: dict[str, str], deliver_ms: int) -> None:
    """Redirect `message` (in place) to the timer topic; `properties` is its decoded form, updated alongside."""
    properties["REAL_TOPIC"] = message.topic
    properties["REAL_QID"] = str(message.queue_id)
    properties[PROP_OUT_MS] = str(deliver_ms)
    properties[PROP_DELIVER_MS] = str(deliver_ms)
    properties.pop(PROP_DELAY_SEC, None)
    properties.pop(PROP_DELAY_MS, None)
    message.properties = encode_properties(properties)
    if getattr(message, "properties_bytes", None) is not None:
        message.properties_bytes = None
    message.topic = TIMER_TOPIC
    message.queue_id = 0


def restore_from_timer(record: MessageRecord) -> MessageToStore | None:
    """The message to write to the real topic for a due timer record (None if it names no real topic)."""
    properties = dict(record.properties)
    topic = properties.get("REAL_TOPIC")
    if not topic:
        return None
    try:
        queue_id = max(0, int(properties.get("REAL_QID", "0")))
    except ValueError:
        queue_id = 0
    for name in (PROP_OUT_MS, PROP_DELAY_SEC, PROP_DELAY_MS):
        properties.pop(name, None)
    born_ip, born_port = record.born_host
    return MessageToStore(
        topic=topic,
        queue_id=queue_id,
        flag=record.flag,
        sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp,
        born_host=pack_host(born_ip, born_port),
        reconsume_times=record.reconsume_times,
        body=bytes(record.body),
        properties=encode_properties(properties),
        tags_code=tags_code(properties.get("TAGS")),
        keys=properties.get("KEYS"),
        uniq_key=properties.get("UNIQ_KEY"),
    )


def deliver_ms_of(record: MessageRecord) -> int:
    """A timer record's delivery time (0 = now, for a record without a readable one)."""
    try:
        return int(record.properties.get(PROP_OUT_MS) or record.properties.get(PROP_DELIVER_MS) or 0)
    except ValueError:
        return 0
