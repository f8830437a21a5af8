"""Where a retried message goes (reference §4.3 step 4 and §4.8): the one rule shared by a send to ``%RETRY%<group>``
(broker/core/send.py) and CONSUMER_SEND_MSG_BACK (broker/core/send_back.py) — past the group's reconsume limit, to
the group's dead-letter topic ``%DLQ%<group>``, queue 0, without delay."""

from __future__ import annotations

from typing import Any

from broker.core.outcome import Outcome
from broker.core.send_types import DEFAULT_MAX_RECONSUME_TIMES
from broker.managers.topic_config import DLQ_GROUP_TOPIC_PREFIX, TopicConfig
from protocol.codes import ResponseCode

__all__ = ["DEFAULT_MAX_RECONSUME_TIMES", "FIRST_RETRY_DELAY_LEVEL", "dead_letter_topic", "reconsume_limit"]

FIRST_RETRY_DELAY_LEVEL = 3  # a send-back's delayLevel 0 -> 3 + reconsumeTimes (10 s, 30 s, 1 min, ...)


def reconsume_limit(asked: int | None, group_config: Any) -> int:
    """How many times a message of the group may be consumed again: the client's limit when it gave one, else the
    group's retryMaxTimes, else 16. A message whose new reconsume count exceeds it is dead."""
    limit = asked if asked is not None else group_config.retry_max_times
    return DEFAULT_MAX_RECONSUME_TIMES if limit is None or limit < 0 else limit


def dead_letter_topic(topics: Any, group: str) -> tuple[TopicConfig | None, Outcome | None]:
    """The group's dead-letter topic, created on first use (one queue): (its config, None) or (None, the refusal)."""
    config = topics.create_dlq_topic(group)
    if config is None:
        return None, Outcome.refused(ResponseCode.SYSTEM_ERROR, f"topic[{DLQ_GROUP_TOPIC_PREFIX}{group}] not exist")
    return config, None
