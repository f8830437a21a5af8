"""Topic names the broker derives from a consumer group, checked when the group is first used (issue 27).

A consumer group gets a retry topic ``%RETRY%<group>`` and a dead-letter topic ``%DLQ%<group>``; a POP consumer of
a topic also gets ``%RETRY%<group>_<topic>``. Each must be a legal topic name, at most 255 characters, though a group
name may have 255 characters itself and a topic 127. A group whose derived name is too long used to be accepted and
to fail later, where no client hears of it: a 240-character group receiving over POP made lapsed deliveries never come
back and logged an ERROR every half second, forever. So the requests that first use a group (heartbeat, pull,
send-back, subscription-group creation, POP receive) refuse it with one clear error naming the derived name.
"""

from __future__ import annotations

from broker.managers.topic_config import (RETRY_DLQ_TOPIC_MAX_LENGTH, RETRY_GROUP_TOPIC_PREFIX, dlq_topic, retry_topic,
                                          validate_group)

# %RETRY% is the longer prefix: %RETRY%<group> fits exactly when the group has at most 248 characters.
CONSUMER_GROUP_MAX_LENGTH = RETRY_DLQ_TOPIC_MAX_LENGTH - len(RETRY_GROUP_TOPIC_PREFIX)
# %RETRY%<group>_<topic>: group and topic together at most 247 characters
POP_GROUP_AND_TOPIC_MAX_LENGTH = RETRY_DLQ_TOPIC_MAX_LENGTH - len(RETRY_GROUP_TOPIC_PREFIX) - 1


def pop_retry_topic(group: str, topic: str) -> str:
    """Where lapsed POP deliveries of `topic` for `group` wait to be delivered again (the reference's v1 name)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def _shown(name: str) -> str:
    return name if len(name) <= 80 else f"{name[:40]}...{name[-20:]}"


def consumer_group_problem(group: str | None) -> str | None:
    """None when `group` is a legal consumer group whose retry and dead-letter topics are legal topic names, else the
    reason (an error remark)."""
    problem = validate_group(group)
    if problem is not None:
        return problem
    assert group is not None  # validate_group refuses None
    if len(group) <= CONSUMER_GROUP_MAX_LENGTH:
        return None
    retry, dlq = retry_topic(group), dlq_topic(group)
    return (f"the consumer group has {len(group)} characters: its retry topic {_shown(retry)} would have {len(retry)}, "
            f"more than the topic max length {RETRY_DLQ_TOPIC_MAX_LENGTH} (its dead-letter topic {len(dlq)}); a "
            f"consumer group may have at most {CONSUMER_GROUP_MAX_LENGTH} characters")


def pop_names_problem(group: str, topic: str) -> str | None:
    """None when `group` may POP from `topic`: its consumer-group names are legal and so is the POP retry topic."""
    problem = consumer_group_problem(group)
    if problem is not None:
        return problem
    derived = pop_retry_topic(group, topic)
    if len(derived) <= RETRY_DLQ_TOPIC_MAX_LENGTH:
        return None
    return (f"group and topic are too long together for POP consumption: the POP retry topic {_shown(derived)} would "
            f"have {len(derived)} characters, more than the topic max length {RETRY_DLQ_TOPIC_MAX_LENGTH}; the group "
            f"({len(group)}) and the topic ({len(topic)}) may have at most {POP_GROUP_AND_TOPIC_MAX_LENGTH} characters "
            f"together")
