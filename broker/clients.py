"""The broker's side of its clients' sessions: telling a consumer group that its members or subscriptions changed
(NOTIFY_CONSUMER_IDS_CHANGED, so its members rebalance) or that its offsets were reset (RESET_CONSUMER_CLIENT_OFFSET),
and dropping clients whose heartbeats stopped."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from protocol.admin_bodies import ResetOffsetBody
from protocol.bodies import MessageQueue
from protocol.codes import RequestCode
from protocol.command import RemotingCommand

log = logging.getLogger("broker.broker")  # the broker's own logger: these lines read as before

__all__ = ["ClientHousekeeping", "HOUSEKEEPING_INTERVAL_S", "notify_group_changed", "tell_offset_reset"]

HOUSEKEEPING_INTERVAL_S = 10.0


def notify_group_changed(consumers: Any, group: str, channels: list[Any]) -> None:
    """One-way NOTIFY_CONSUMER_IDS_CHANGED (40) to every channel of `group` (``consumers``: the ConsumerManager, for
    the member list logged)."""
    info = consumers.get_group(group)
    members = sorted(info.client_ids()) if info is not None else []
    log.info("consumer group %s changed (members or subscriptions): %d client(s) %s; notifying for rebalance",
             group, len(members), ", ".join(members))
    for channel in channels:
        request = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                          {"consumerGroup": group}, opaque=0, oneway=True)
        try:
            channel.send_oneway(request)
        except Exception:
            log.warning("notifying %s of group %s change failed", getattr(channel, "remote_addr", channel), group)


def tell_offset_reset(consumers: Any, broker_name: str, result: Any) -> tuple[dict[MessageQueue, int], bytes, int]:
    """A reset of the offsets core (broker/core/offsets.py ResetResult) told to each online consumer of its group as
    one-way RESET_CONSUMER_CLIENT_OFFSET (it drops the queues and resumes there), whoever asked for the reset (a
    remoting admin, the web console): its table, the table as a ResetOffsetBody, how many consumers were sent it."""
    table = {MessageQueue(result.topic, broker_name, queue_id): offset for queue_id, offset in result.offsets.items()}
    body = ResetOffsetBody(table).encode()
    info = consumers.get_group(result.group)
    told = 0
    if info is not None:
        fields = {"topic": result.topic, "group": result.group, "timestamp": str(result.timestamp),
                  "isForce": "true" if result.force else "false"}
        for channel in info.channels():
            notice = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, dict(fields), body, opaque=0)
            if channel.send_oneway(notice):
                told += 1
    return table, body, told


class ClientHousekeeping:
    """Drops clients whose heartbeats stopped: ``consumers`` / ``producers`` are the client registries
    (ConsumerManager, ProducerManager), ``heartbeat_timeout_ms`` channelExpiredTimeout."""

    def __init__(self, consumers: Any, producers: Any, heartbeat_timeout_ms: int) -> None:
        self.consumers = consumers
        self.producers = producers
        self.heartbeat_timeout_ms = heartbeat_timeout_ms

    async def run(self) -> None:
        """Periodically drop clients without a heartbeat (channelExpiredTimeout). Runs every 10 s, or more often for
        short timeouts. (Idle connections are closed by each RemotingServer's own sweep.)"""
        interval = min(HOUSEKEEPING_INTERVAL_S, self.heartbeat_timeout_ms / 4000)
        while True:
            await asyncio.sleep(max(0.05, interval))
            try:
                self.expire(self.heartbeat_timeout_ms)
            except Exception:
                log.exception("client housekeeping failed")

    def expire(self, heartbeat_timeout_ms: int) -> None:
        """One pass (closing a channel triggers its close listeners: registrations go, remaining group members get
        NOTIFY_CONSUMER_IDS_CHANGED)."""
        expired = self.consumers.scan_not_active(heartbeat_timeout_ms)
        expired += self.producers.scan_not_active(heartbeat_timeout_ms)
        for client in expired:
            channel = client.channel
            if channel is not None and not getattr(channel, "closed", True):
                channel.close()
