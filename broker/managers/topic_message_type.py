"""Topic attributes and the 5.x topic message type (the attribute ``message.type``), as the reference keeps them.

A topic's attributes are a ``name -> value`` map persisted in topics.json (TopicConfig.attributes). They change
through UPDATE_AND_CREATE_TOPIC's ``attributes`` header field, a comma-separated list of ``+name=value`` (add or
change) and ``-name`` (remove) items, e.g. ``+message.type=FIFO`` (``mqadmin updateTopic -a +message.type=FIFO``).
A topic without ``message.type`` is a NORMAL topic, as the reference treats the topics created before it had types.

With enableTopicMessageTypeCheck (default true, as in 5.1+) a send whose message type (derived from its properties,
:func:`message_type_of`) is not its topic's is refused with the reference's text (:func:`message_type_problem`).
This module is sans-I/O: the protocol layers turn the remark into their status (remoting MESSAGE_ILLEGAL, gRPC
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE). The remoting port checks only topics whose type was set explicitly
(:func:`remoting_type_problem`): the reference broker's own port checks nothing, so 4.x producers keep working.
"""

from __future__ import annotations

from typing import Any, Mapping

MESSAGE_TYPE = "message.type"
UNSPECIFIED, NORMAL, FIFO, DELAY, TRANSACTION, MIXED = "UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"
TOPIC_MESSAGE_TYPES = frozenset({UNSPECIFIED, NORMAL, FIFO, DELAY, TRANSACTION, MIXED})
# The types a producer may send to a topic of each type (what a gRPC route advertises per queue).
ACCEPTED_TYPES: dict[str, tuple[str, ...]] = {
    NORMAL: (NORMAL,), FIFO: (FIFO,), DELAY: (DELAY,), TRANSACTION: (TRANSACTION,),
    MIXED: (NORMAL, FIFO, DELAY, TRANSACTION),
}

# The reference's topic attributes (TopicAttributes.ALL): name -> (changeable after creation, allowed values or
# None for a long). Only message.type has an effect here; the others are accepted with the values that describe
# what this broker does (a simple consume queue, deletion by age) and refused otherwise.
_ATTRIBUTES: dict[str, tuple[bool, frozenset[str] | None]] = {
    MESSAGE_TYPE: (True, TOPIC_MESSAGE_TYPES),
    "queue.type": (False, frozenset({"BatchCQ", "SimpleCQ"})),
    "cleanup.policy": (False, frozenset({"DELETE", "COMPACTION"})),
    "reserve.time": (True, None),
}
_UNIMPLEMENTED = {("queue.type", "BatchCQ"): "batch consume queues (queue.type=BatchCQ) are not supported",
                  ("cleanup.policy", "COMPACTION"): "compacted topics (cleanup.policy=COMPACTION) are not supported"}


class AttributeError_(ValueError):
    """A malformed or refused attribute change; its text is the response remark (the reference's wording)."""


def parse_attribute_changes(text: str | None) -> dict[str, str]:
    """``"+a=1,-b"`` -> ``{"+a": "1", "-b": ""}`` (the reference's AttributeParser.parseToMap)."""
    changes: dict[str, str] = {}
    if not text:
        return changes
    for item in text.split(","):
        if "=" in item:
            name, _, value = item.partition("=")
            if "+" not in name:
                raise AttributeError_(f"add/alter attribute format is wrong: {name}")
        else:
            name, value = item, ""
            if "-" not in name:
                raise AttributeError_(f"delete attribute format is wrong: {name}")
        if name in changes:
            raise AttributeError_(f"key duplication: {name}")
        changes[name] = value
    return changes


def apply_attribute_changes(current: Mapping[str, str] | None, changes: Mapping[str, str], *, create: bool,
                            allow_mixed: bool = False) -> dict[str, str]:
    """The attributes after ``changes`` (from :func:`parse_attribute_changes`) are applied to ``current``, checked
    as the reference's AttributeUtil.alterCurrentAttributes does: a new topic takes only ``+`` items; an existing
    one may add, change (changeable names only) and remove; names and values must be the reference's."""
    current = dict(current or {})
    result = dict(current)
    seen: set[str] = set()
    for item, value in changes.items():
        name = item[1:]
        if not name or "+" in name or "-" in name:
            raise AttributeError_("kv string format wrong.")
        if name in seen:
            raise AttributeError_(f"alter duplication key. key: {name}")
        seen.add(name)
        spec = _ATTRIBUTES.get(name)
        if item.startswith("+"):
            if spec is None:
                raise AttributeError_(f"unsupported key: {name}")
            if not create and not spec[0]:
                raise AttributeError_(f"attempt to update an unchangeable attribute. key: {name}")
            _verify(name, value, spec[1], allow_mixed)
            result[name] = value
        elif item.startswith("-") and not create:
            if name not in current:
                raise AttributeError_(f"attempt to delete a nonexistent key: {name}")
            if spec is None:
                raise AttributeError_(f"unsupported key: {name}")
            if not spec[0]:
                raise AttributeError_(f"attempt to update an unchangeable attribute. key: {name}")
            result.pop(name, None)
        elif create:
            raise AttributeError_(f"only add attribute is supported while creating topic. key: {name}")
        else:
            raise AttributeError_(f"wrong format key: {name}")
    return result


def attributes_after(old_config: Any, text: str | None, *, allow_mixed: bool = False) -> dict[str, str] | None:
    """UPDATE_AND_CREATE_TOPIC's resulting attributes: the ``attributes`` header text applied to the existing
    topic's (``old_config`` None: a new topic). None when there are none and there were none (topics.json keeps
    its shape for topics without attributes). Raises AttributeError_ with the reference's remark."""
    old = getattr(old_config, "attributes", None)
    changes = parse_attribute_changes(text)
    if not changes:
        return dict(old) if old is not None else None
    return apply_attribute_changes(old, changes, create=old_config is None, allow_mixed=allow_mixed)


def console_attributes(fields: Mapping[str, Any], current: Any) -> str | None:
    """The ``attributes`` text of a console topic save: its raw ``attributes`` if given, else ``+message.type=X``
    when the chosen ``messageType`` is not what the topic is already (NORMAL for a new topic), so saving queue
    counts leaves an untyped topic untyped."""
    raw = fields.get("attributes")
    if isinstance(raw, str) and raw.strip():
        return raw.strip()
    chosen = fields.get("messageType")
    if not chosen:
        return None
    chosen = str(chosen).strip().upper()
    return None if chosen == topic_message_type(current) else f"+{MESSAGE_TYPE}={chosen}"


def _verify(name: str, value: str, allowed: frozenset[str] | None, allow_mixed: bool) -> None:
    if allowed is None:  # reserve.time: a long; kept only by a tiered store, which this broker does not have
        raise AttributeError_("Update topic reserveTime not supported")
    if value not in allowed:
        raise AttributeError_("value is not in set: [" + ", ".join(sorted(allowed)) + "]")
    if name == MESSAGE_TYPE and value == MIXED and not allow_mixed:
        raise AttributeError_("MIXED message type is not supported.")
    refusal = _UNIMPLEMENTED.get((name, value))
    if refusal is not None:
        raise AttributeError_(refusal)


def topic_message_type(topic_config: Any) -> str:
    """The topic's message type; NORMAL when it has none (topics created before types existed)."""
    attributes = getattr(topic_config, "attributes", None)
    value = attributes.get(MESSAGE_TYPE) if attributes else None
    return value if value in TOPIC_MESSAGE_TYPES else NORMAL


def accepted_types(topic_config: Any) -> tuple[str, ...]:
    """The message types a producer may send to the topic (UNSPECIFIED for an UNSPECIFIED topic, as the reference)."""
    return ACCEPTED_TYPES.get(topic_message_type(topic_config), (UNSPECIFIED,))


def message_type_of(properties: Mapping[str, str]) -> str:
    """A message's type from its stored properties (the reference's TopicMessageType.parseFromMessageProperty)."""
    if properties.get("TRAN_MSG") == "true":
        return TRANSACTION
    get = properties.get
    if get("DELAY") is not None or get("TIMER_DELIVER_MS") is not None or get("TIMER_DELAY_SEC") is not None \
            or get("TIMER_DELAY_MS") is not None:
        return DELAY
    if get("__SHARDINGKEY") is not None:
        return FIFO
    return NORMAL


def needs_type_check(topic: str, properties: Mapping[str, str]) -> bool:
    """Retry and DLQ topics, and messages forwarded between brokers (TRANSFER_FLAG), are never checked."""
    return not topic.startswith(("%RETRY%", "%DLQ%")) and "TRANSFER_FLAG" not in properties


def message_type_problem(topic_config: Any, message_type: str) -> str | None:
    """None when a message of ``message_type`` may be sent to the topic; else the reference's remark."""
    expected = topic_message_type(topic_config)
    if message_type != UNSPECIFIED and (message_type == expected or expected == MIXED):
        return None
    return (f"TopicMessageType validate failed, the expected type is {expected}, "
            f"but actual type is {message_type}")


def send_type_problem(enabled: bool, topic_config: Any, properties: Mapping[str, str]) -> str | None:
    """The whole send-side check in one call: None when the check is off, the topic is unknown (auto-creation
    decides), a retry/DLQ topic, a forwarded message, or the types agree; else the remark."""
    if not enabled or topic_config is None:
        return None
    topic = getattr(topic_config, "topic_name", "")
    if not needs_type_check(topic, properties):
        return None
    return message_type_problem(topic_config, message_type_of(properties))


def remoting_type_problem(enabled: bool, topic_config: Any, properties: Mapping[str, str]) -> str | None:
    """The check on the remoting port: as :func:`send_type_problem`, for topics whose type was set explicitly.
    The reference broker's own port checks nothing (only its proxy does), so topics without a type keep taking
    what 4.x producers send them (transactions, delay levels, selected queues) as before types existed."""
    attributes = getattr(topic_config, "attributes", None)
    if not attributes or MESSAGE_TYPE not in attributes:
        return None
    return send_type_problem(enabled, topic_config, properties)


__all__ = ["MESSAGE_TYPE", "UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED", "TOPIC_MESSAGE_TYPES",
           "AttributeError_", "attributes_after", "console_attributes", "parse_attribute_changes", "apply_attribute_changes", "topic_message_type",
           "accepted_types", "message_type_of", "needs_type_check", "message_type_problem", "send_type_problem",
           "remoting_type_problem"]
