"""What the console's pages show, read from the broker's own managers and store, as JSON-ready dicts.

Reads are bounded (a search returns at most `limit` messages and examines a bounded number of queue entries), so a
page never holds the event loop for long. Changes and the admin reads are the messaging core's typed admin requests
(broker/core/admin), executed by its AdminService and authorized on their ``needs()`` by the one Authorizer, as a
remoting request would be; resetting a group's offsets goes through ``reset_offsets`` (broker/console/build.py).
Every read takes the request's ``Viewer`` (broker/console/access.py): listings leave out what its account may not
see, a direct read of it answers 403 (ACL off: everything, as before).
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.acl.accounts import SUB, group_resource
from broker.console.access import ConsoleError, Viewer, outcome_value, topic_need
from broker.core.admin import (AdminService, ConsumeStatsRequest, ConsumerConnectionRequest,
                               DeleteTopicRequest, ResendDeadLetterRequest, UpdateTopicRequest)
from broker.core.outcome import Outcome, Requester
from broker.managers.consumer_manager import group_topics
from broker.managers.subscription_group import SYSTEM_GROUPS
from broker.managers.topic_config import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from broker.managers.topic_message_type import (AttributeError_, attributes_after, console_attributes,
                                                 topic_message_type)
from protocol.bodies import MessageQueue
from protocol.ids import decode_offset_msg_id
from protocol.message import MessageRecord, RecordError, decode_record, iter_records

if TYPE_CHECKING:
    from broker.view import BrokerView

__all__ = ["BrokerFacts", "ConsoleError", "ConsoleViews", "ResetOffsets", "body_views", "record_summary", "topic_kind"]

# (group, topic, timestamp ms, caller) -> (the new offset per queue, how many online consumers were told)
ResetOffsets = Callable[[str, str, int, str], Awaitable[tuple[dict[MessageQueue, int], int]]]

_CONSOLE = Requester("console", "console")  # who makes the console's reads
SEARCH_LIMIT = 64  # messages one search returns at most
SCAN_LIMIT = 20_000  # queue entries one time-range search examines at most
DLQ_LIMIT = 200
BODY_PREVIEW = 120
MAX_BODY_SHOWN = 256 * 1024
_COMPRESSED = 0x1
_SYSTEM_TOPICS = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                  "TRANS_CHECK_MAX_TIME_TOPIC", "TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT")


def topic_kind(topic: str, own_names: tuple[str, ...] = ()) -> str:
    """normal, retry, dlq or system (`own_names`: the cluster's and broker's own topics)."""
    if topic in own_names:
        return "system"
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dlq"
    if topic in _SYSTEM_TOPICS or topic.startswith("rmq_sys_") or topic.startswith("RMQ_SYS_"):
        return "system"
    return "normal"


def body_views(record: MessageRecord) -> dict[str, Any]:
    """The body as text (when it is UTF-8), pretty JSON (when it parses), hex and base64."""
    body = record.body
    if record.sys_flag & _COMPRESSED:
        try:
            body = zlib.decompressobj().decompress(body, MAX_BODY_SHOWN)
        except zlib.error:
            pass
    shown = body[:MAX_BODY_SHOWN]
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    pretty = None
    if text is not None:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    return {"size": len(record.body), "truncated": len(body) > MAX_BODY_SHOWN, "text": text, "json": pretty,
            "hex": shown.hex(" "), "base64": base64.b64encode(shown).decode("ascii")}


def record_summary(record: MessageRecord) -> dict[str, Any]:
    props = record.properties
    preview = record.body[:BODY_PREVIEW].decode("utf-8", "replace") if not record.sys_flag & _COMPRESSED \
        else "(compressed)"
    return {
        "msgId": record.msg_id,
        "offsetMsgId": record.offset_msg_id,
        "topic": record.topic,
        "queueId": record.queue_id,
        "queueOffset": record.queue_offset,
        "commitLogOffset": record.physical_offset,
        "tags": props.get("TAGS"),
        "keys": props.get("KEYS"),
        "storeTimestamp": record.store_timestamp,
        "bornTimestamp": record.born_timestamp,
        "reconsumeTimes": record.reconsume_times,
        "bodySize": len(record.body),
        "bodyPreview": preview,
    }


@dataclass(frozen=True, slots=True)
class BrokerFacts:
    """What the overview says about this broker: its identity, its runtime figures (GET_BROKER_RUNTIME_INFO's) and
    the embedded name server's routes (None without one)."""

    cluster: str
    name: str
    broker_id: int
    addr: str
    role: str
    store_path: str
    flush_disk_type: str
    runtime_info: Callable[[], dict[str, Any]]
    route_info: Any = None


class ConsoleViews:
    """The console's data, read through the broker's read-only view (broker/view.py; no second client); changes are
    the core's typed admin requests, run by ``admin`` (AdminService); ``reset_offsets`` resets a group's offsets."""

    def __init__(self, view: BrokerView, admin: AdminService, facts: BrokerFacts,
                 replication: Any = None, *, resends: Any = None, reset_offsets: ResetOffsets | None = None) -> None:
        self.store = view.store
        self.topics = view.topics
        self.groups = view.groups
        self.offsets = view.offsets
        self.consumers = view.consumers
        self.admin = admin
        self.reset_offsets = reset_offsets
        self.facts = facts
        self.replication = replication  # broker/console/replication.py's ReplicationView (None: no such page)
        self.resends = resends  # broker/managers/dlq_resends.py's DlqResendLog (None: no resend audit)
        self.own_topics = (facts.cluster, facts.name)

    # ---- helpers --------------------------------------------------------------------------------
    def _queue_ids(self, topic: str) -> range:
        config = self.topics.get(topic)
        if config is None:
            return range(0)
        return range(max(config.read_queue_nums, config.write_queue_nums))

    def stored_count(self, topic: str) -> int:
        """Messages a topic holds now (max - min offsets over its queues)."""
        store = self.store
        return sum(store.get_max_offset(topic, q) - store.get_min_offset(topic, q) for q in self._queue_ids(topic))

    def written_count(self, topic: str) -> int:
        store = self.store
        return sum(store.get_max_offset(topic, q) for q in self._queue_ids(topic))

    def _look(self, phys: int) -> MessageRecord | None:
        try:
            return self.store.look_record(phys)
        except (RecordError, ValueError):
            return None

    # ---- overview -------------------------------------------------------------------------------
    def overview(self, viewer: Viewer) -> dict[str, Any]:
        """The broker-wide figures (runtime, counts, store) only for admin accounts, as GET_BROKER_RUNTIME_INFO;
        the others see who this broker is and the cluster's brokers (what a route query tells anyone)."""
        facts = self.facts
        info = facts.runtime_info()
        brokers = []
        routes = facts.route_info
        if routes is not None:
            for cluster, names in sorted(routes.cluster_addr_table.items()):
                for name in sorted(names):
                    data = routes.broker_addr_table.get(name)
                    addrs = getattr(data, "broker_addrs", {}) if data is not None else {}
                    for broker_id, addr in sorted(addrs.items()):
                        brokers.append({"cluster": cluster, "brokerName": name, "brokerId": broker_id,
                                        "addr": addr})
        if not brokers:
            brokers.append({"cluster": facts.cluster, "brokerName": facts.name, "brokerId": facts.broker_id,
                            "addr": facts.addr})
        identity = {
            "brokerName": facts.name,
            "clusterName": facts.cluster,
            "brokerAddr": facts.addr,
            "brokerRole": facts.role,
            "version": info.get("brokerVersionDesc"),
            "bootTimestamp": info.get("bootTimestamp"),
            "uptimeSeconds": max(0, int(time.time() - (info.get("bootTimestamp") or 0) / 1000)),
            "brokers": brokers,
            "restricted": not viewer.admin,
        }
        if not viewer.admin:
            return identity
        return identity | {
            "runtime": info.get("runtime"),
            "storePath": facts.store_path,
            "flushDiskType": facts.flush_disk_type,
            "diskUsedRatio": info.get("commitLogDiskRatio"),
            "commitLogMinOffset": info.get("commitLogMinOffset"),
            "commitLogMaxOffset": info.get("commitLogMaxOffset"),
            "messagesIn": info.get("msgPutTotalTodayNow"),
            "messagesOut": info.get("msgGetTotalTodayNow"),
            "topicCount": info.get("topicCount"),
            "consumerGroupCount": info.get("consumerGroupCount"),
            "connectionCount": info.get("connectionCount"),
        }

    # ---- topics ---------------------------------------------------------------------------------
    def topic_list(self, rates: dict[str, float], viewer: Viewer) -> list[dict[str, Any]]:
        """The topics whose statistics the account may see (PUB or SUB)."""
        out = []
        every = viewer.sees_everything
        for name in sorted(self.topics.topic_names()):
            config = self.topics.get(name)
            if config is None or not (every or viewer.may_see_topic(name)):
                continue
            out.append({"topic": name, "kind": topic_kind(name, self.own_topics),
                        "readQueueNums": config.read_queue_nums, "writeQueueNums": config.write_queue_nums,
                        "perm": config.perm, "messageType": topic_message_type(config),
                        "messages": self.stored_count(name), "inPerSecond": round(rates.get(name, 0.0), 2)})
        return out

    def topic_detail(self, topic: str, viewer: Viewer) -> dict[str, Any]:
        viewer.require_topic(topic, f"reading topic {topic}")
        config = self.topics.get(topic)
        if config is None:
            raise ConsoleError(404, f"topic {topic} does not exist on this broker")
        store = self.store
        facts = self.facts
        queues = []
        for queue_id in self._queue_ids(topic):
            max_offset = store.get_max_offset(topic, queue_id)
            last = store.get_message_store_time(topic, queue_id, max_offset - 1) if max_offset > 0 else 0
            queues.append({"queueId": queue_id, "minOffset": store.get_min_offset(topic, queue_id),
                           "maxOffset": max_offset, "lastUpdateTimestamp": max(0, last)})
        groups = sorted(g for g in self._groups_of_topic(topic) if viewer.may_see_group(g))
        return {"topic": topic, "kind": topic_kind(topic, self.own_topics),
                "readQueueNums": config.read_queue_nums, "writeQueueNums": config.write_queue_nums,
                "perm": config.perm, "order": config.order, "messageType": topic_message_type(config),
                "attributes": dict(config.attributes or {}),
                "topicFilterType": config.topic_filter_type, "queues": queues, "consumerGroups": groups,
                "route": [{"brokerName": facts.name, "addr": facts.addr,
                           "readQueueNums": config.read_queue_nums, "writeQueueNums": config.write_queue_nums,
                           "perm": config.perm}]}

    def _groups_of_topic(self, topic: str) -> set[str]:
        found = set()
        for key in self.offsets.offset_table:
            key_topic, _, group = key.rpartition("@")
            if key_topic == topic:
                found.add(group)
        for group, info in self.consumers.groups.items():
            if topic in info.subscriptions:
                found.add(group)
        return found

    async def save_topic(self, fields: dict[str, Any], caller: str, viewer: Viewer) -> None:
        topic = str(fields.get("topic") or "").strip()
        values = {"readQueueNums": fields.get("readQueueNums", 4), "writeQueueNums": fields.get("writeQueueNums", 4),
                  "perm": fields.get("perm", 6)}
        for key in ("readQueueNums", "writeQueueNums", "perm"):
            try:
                values[key] = int(values[key])
            except (TypeError, ValueError):
                raise ConsoleError(400, f"{key} must be a whole number, got {values[key]!r}") from None
        order = fields.get("order") is not None and fields.get("order") in (True, "true", "on", "1")
        # messageType -> "+message.type=FIFO" when it changes the topic's type (or the raw "attributes" text)
        current = self.topics.get(topic)
        attributes = console_attributes(fields, current)
        if attributes:
            try:  # a wrong name or value is the user's mistake (the broker would answer SYSTEM_ERROR, as the reference)
                attributes_after(current, attributes, allow_mixed=True)
            except AttributeError_ as exc:
                raise ConsoleError(400, f"attributes {attributes!r}: {exc}") from None
        request = UpdateTopicRequest(topic, values["readQueueNums"], values["writeQueueNums"], values["perm"],
                                     order=order, attributes=attributes or None,
                                     requester=Requester(caller, "console"))
        viewer.require_request(request, f"saving topic {topic}")
        outcome_value(self.admin.update_topic(request))

    async def delete_topic(self, topic: str, caller: str, viewer: Viewer) -> None:
        request = DeleteTopicRequest(topic, Requester(caller, "console"))
        viewer.require_request(request, f"deleting topic {topic}")
        if self.topics.get(topic) is None:
            raise ConsoleError(404, f"topic {topic} does not exist on this broker")
        outcome_value(await self.admin.delete_topic(request))

    # ---- consumer groups ------------------------------------------------------------------------
    def _group_names(self) -> list[str]:
        names = set(self.groups.groups) | set(self.consumers.groups)
        for key in self.offsets.offset_table:
            names.add(key.rpartition("@")[2])
        return sorted(n for n in names if n)

    def consuming_groups(self) -> list[str]:
        """Groups with committed offsets or online consumers (the ones a lag means something for)."""
        names = {key.rpartition("@")[2] for key in self.offsets.offset_table} | set(self.consumers.groups)
        return sorted(n for n in names if n and n not in SYSTEM_GROUPS)

    def group_lag(self, group: str, viewer: Viewer | None = None) -> int:
        """The group's lag over its topics (those ``viewer`` may read, when given)."""
        lag = 0
        store = self.store
        for topic in self._group_topics(group, viewer):
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                continue
            for queue_id in self._queue_ids(topic):
                committed = self.offsets.query_offset(group, topic, queue_id)
                lag += max(0, store.get_max_offset(topic, queue_id) - max(0, committed))
        return lag

    def _group_topics(self, group: str, viewer: Viewer | None = None) -> set[str]:
        """The group's topics on this broker; with ``viewer``, only those it may read (a group-wide statistic needs
        SUB on each topic, as GET_CONSUME_STATS does over remoting)."""
        every = viewer is None or viewer.sees_everything
        return {t for t in group_topics(self.offsets, self.consumers, group)
                if self.topics.get(t) is not None and (every or viewer.may_read_topic(t))}

    def group_list(self, viewer: Viewer) -> list[dict[str, Any]]:
        """The groups the account may use (SUB on the group): their lag, retry and dead-letter counts."""
        out = []
        every = viewer.sees_everything
        for group in self._group_names():
            if not (every or viewer.may_see_group(group)):
                continue
            info = self.consumers.get_group(group)
            out.append({"group": group, "online": len(info.clients) if info is not None else 0,
                        "messageModel": info.message_model if info is not None else None,
                        "consumeType": info.consume_type if info is not None else None,
                        "topics": sorted(t for t in self._group_topics(group, viewer)
                                         if not t.startswith(RETRY_GROUP_TOPIC_PREFIX)),
                        "lag": self.group_lag(group, viewer),
                        "retry": self.stored_count(RETRY_GROUP_TOPIC_PREFIX + group),
                        "dlq": self.stored_count(DLQ_GROUP_TOPIC_PREFIX + group),
                        "dlqResent": self.resent_count(group),
                        "system": group in SYSTEM_GROUPS})
        return out

    async def group_detail(self, group: str, viewer: Viewer) -> dict[str, Any]:
        connection_request = ConsumerConnectionRequest(group, _CONSOLE)  # SUB on the group
        viewer.require_request(connection_request, f"reading consumer group {group}")
        if group not in self._group_names():
            raise ConsoleError(404, f"consumer group {group} is not known to this broker")
        clients: list[dict[str, Any]] = []
        subscriptions: list[dict[str, Any]] = []
        model = consume_type = None
        connected = self.admin.consumer_connection(connection_request)
        if connected.ok:  # else not online
            connection = connected.value
            clients = [{"clientId": c.client_id, "addr": c.client_addr, "language": c.language,
                        "version": c.version} for c in connection.connection_set]
            subscriptions = [{"topic": topic, "expression": getattr(sub, "sub_string", "*"),
                              "type": getattr(sub, "expression_type", "TAG")}
                             for topic, sub in sorted(connection.subscription_table.items())
                             if viewer.sees_everything or viewer.may_read_topic(topic)]
            model, consume_type = connection.message_model, connection.consume_type
        # every topic of the group, each shown only if the account may read it (a listing filters, never refuses)
        stats = outcome_value(self.admin.consume_stats(ConsumeStatsRequest(group, None, _CONSOLE)))
        queues = [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
                   "brokerOffset": w.broker_offset, "consumerOffset": w.consumer_offset, "lag": w.lag,
                   "lastTimestamp": w.last_timestamp}
                  for mq, w in sorted(stats.offset_table.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id))
                  if viewer.sees_everything or viewer.may_read_topic(mq.topic)]
        config = self.groups.find(group)
        return {"group": group, "clients": clients, "subscriptions": subscriptions, "messageModel": model,
                "consumeType": consume_type, "queues": queues,
                "lag": sum(q["lag"] for q in queues if not q["topic"].startswith(RETRY_GROUP_TOPIC_PREFIX)),
                "consumeTps": round(stats.consume_tps, 2),
                "retry": self.stored_count(RETRY_GROUP_TOPIC_PREFIX + group),
                "dlq": self.stored_count(DLQ_GROUP_TOPIC_PREFIX + group),
                "dlqResent": self.resent_count(group),
                "retryMaxTimes": config.retry_max_times if config is not None else None,
                "topics": sorted({q["topic"] for q in queues})}

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int, caller: str,
                           viewer: Viewer) -> dict[str, Any]:
        """Move `group`'s offsets on `topic` to the first message stored at or after `timestamp_ms`.

        The offsets core's reset (its committed offsets written), then online consumers are told with
        RESET_CONSUMER_CLIENT_OFFSET (they drop their queues and resume from the new offsets), as a remoting
        INVOKE_BROKER_TO_RESET_OFFSET does. An admin account, with SUB on the group and the topic (what that request
        needs)."""
        viewer.require([(group_resource(group), SUB), topic_need(topic, SUB)],
                       f"resetting the offsets of group {group} on topic {topic}", admin_only=True)
        if self.topics.get(topic) is None:
            raise ConsoleError(404, f"topic {topic} does not exist on this broker")
        if self.reset_offsets is None:
            raise ConsoleError(404, "this console cannot reset offsets")
        table, told = await self.reset_offsets(group, topic, timestamp_ms, caller)
        return {"group": group, "topic": topic, "timestamp": timestamp_ms,
                "offsets": [{"queueId": mq.queue_id, "offset": offset} for mq, offset in sorted(table.items())],
                "consumersTold": told}

    # ---- messages -------------------------------------------------------------------------------
    def by_id(self, msg_id: str, topic: str | None, viewer: Viewer) -> list[dict[str, Any]]:
        """The message(s) of an offset id or UNIQ_KEY, among the topics whose messages the account may read."""
        msg_id = msg_id.strip()
        if topic:
            viewer.require_topic_read(topic, f"searching topic {topic}")
        found: list[MessageRecord] = []
        try:
            _, _, phys = decode_offset_msg_id(msg_id)
        except ValueError:
            phys = -1
        if phys >= 0:
            record = self._look(phys)
            if record is not None and viewer.may_read_topic(record.topic):
                found.append(record)
        if not found:
            topics = [topic] if topic else [t for t in self.topics.topic_names()
                                            if topic_kind(t) != "system" and viewer.may_read_topic(t)]
            for name in topics[:2000]:
                found.extend(self._query(name, msg_id, SEARCH_LIMIT))
                if len(found) >= SEARCH_LIMIT:
                    break
        return [record_summary(r) for r in found[:SEARCH_LIMIT]]

    def _query(self, topic: str, key: str, limit: int) -> list[MessageRecord]:
        out = []
        for raw in self.store.query_message(topic, key, limit, 0, 2 ** 62).records:
            try:
                out.append(decode_record(raw))
            except (RecordError, ValueError):
                continue
        return out

    def by_key(self, topic: str, key: str, viewer: Viewer) -> list[dict[str, Any]]:
        if not topic or not key:
            raise ConsoleError(400, "a key search needs both a topic and a key")
        viewer.require_topic_read(topic, f"searching topic {topic}")
        return [record_summary(r) for r in self._query(topic, key.strip(), SEARCH_LIMIT)]

    def by_time(self, topic: str, begin_ms: int, end_ms: int, viewer: Viewer,
                limit: int = SEARCH_LIMIT) -> dict[str, Any]:
        """Messages of `topic` stored in [begin_ms, end_ms], oldest first per queue, at most `limit`."""
        viewer.require_topic_read(topic, f"searching topic {topic}")
        if self.topics.get(topic) is None:
            raise ConsoleError(404, f"topic {topic} does not exist on this broker")
        if end_ms < begin_ms:
            raise ConsoleError(400, "the end of the time range is before its beginning")
        store = self.store
        out: list[MessageRecord] = []
        examined = 0
        truncated = False
        for queue_id in self._queue_ids(topic):
            offset = store.get_offset_by_time(topic, queue_id, begin_ms)
            max_offset = store.get_max_offset(topic, queue_id)
            while offset < max_offset and examined < SCAN_LIMIT and len(out) < limit:
                result = store.get_messages(topic, queue_id, offset, min(32, limit - len(out)))
                if not result.message_count:
                    if result.next_begin_offset <= offset:
                        break
                    offset = result.next_begin_offset
                    continue
                examined += result.next_begin_offset - offset
                offset = result.next_begin_offset
                stop = False
                for record in iter_records(result.body()):
                    if record.store_timestamp > end_ms:
                        stop = True
                        break
                    if record.store_timestamp >= begin_ms:
                        out.append(record)
                if stop:
                    break
            if len(out) >= limit or examined >= SCAN_LIMIT:
                truncated = True
                break
        out.sort(key=lambda r: (r.store_timestamp, r.queue_id, r.queue_offset))
        return {"messages": [record_summary(r) for r in out], "truncated": truncated}

    def message_detail(self, commit_log_offset: int, viewer: Viewer) -> dict[str, Any]:
        """One message, if the account may read its topic (VIEW_MESSAGE_BY_ID's rule: SUB on the record's topic)."""
        record = self._look(commit_log_offset)
        if record is None:
            raise ConsoleError(404, f"no message at commit-log offset {commit_log_offset}")
        viewer.require_topic_read(record.topic, f"reading the message at commit-log offset {commit_log_offset}")
        detail = record_summary(record)
        detail.update(properties=dict(sorted(record.properties.items())), body=body_views(record),
                      sysFlag=record.sys_flag, flag=record.flag, bornHost="%s:%d" % record.born_host,
                      storeHost="%s:%d" % record.store_host, bodyCrc=record.body_crc,
                      history=self.retry_history(record, viewer))
        return detail

    def retry_history(self, record: MessageRecord, viewer: Viewer) -> list[dict[str, Any]]:
        """The copies of this message in retry, schedule and dead-letter topics (same UNIQ_KEY), oldest first;
        only copies in topics the account may read."""
        uniq = record.uniq_key
        if not uniq:
            return []
        groups = set(self._groups_of_topic(record.properties.get("RETRY_TOPIC") or record.topic))
        if record.topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            groups.add(record.topic.split("%", 2)[2])
        topics = [record.properties.get("RETRY_TOPIC") or record.topic, "SCHEDULE_TOPIC_XXXX"]
        for group in sorted(groups):
            topics += [RETRY_GROUP_TOPIC_PREFIX + group, DLQ_GROUP_TOPIC_PREFIX + group]
        seen: dict[int, MessageRecord] = {}
        for topic in topics:
            if not viewer.may_read_topic(topic):
                continue
            for copy in self._query(topic, uniq, 32):
                seen[copy.physical_offset] = copy
        history = []
        for copy in sorted(seen.values(), key=lambda r: (r.store_timestamp, r.physical_offset)):
            kind = topic_kind(copy.topic)
            if copy.topic == "SCHEDULE_TOPIC_XXXX":
                kind = "delayed"
            history.append({"topic": copy.topic, "kind": kind, "storeTimestamp": copy.store_timestamp,
                            "reconsumeTimes": copy.reconsume_times, "commitLogOffset": copy.physical_offset,
                            "delayLevel": copy.properties.get("DELAY"),
                            "realTopic": copy.properties.get("REAL_TOPIC")})
        return history

    # ---- dead letters ---------------------------------------------------------------------------
    def dead_letters(self, group: str, viewer: Viewer, limit: int = DLQ_LIMIT) -> dict[str, Any]:
        """The group's dead letters: SUB on the group and on its %DLQ% topic (what pulling them needs)."""
        topic = DLQ_GROUP_TOPIC_PREFIX + group
        viewer.require([(group_resource(group), SUB), topic_need(topic, SUB)],
                       f"reading the dead letters of group {group}")
        store = self.store
        out: list[MessageRecord] = []
        total = self.stored_count(topic)
        for queue_id in self._queue_ids(topic):
            offset = store.get_min_offset(topic, queue_id)
            max_offset = store.get_max_offset(topic, queue_id)
            for _ in range(limit):
                if offset >= max_offset or len(out) >= limit:
                    break
                result = store.get_messages(topic, queue_id, offset, min(32, limit - len(out)))
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
                out.extend(iter_records(result.body()))
        letters = []
        audit = self.resends.of_group(group) if self.resends is not None else {}
        for record in out:
            summary = record_summary(record)
            summary["originalTopic"] = record.properties.get("RETRY_TOPIC")
            summary["lastResent"] = audit.get(record.physical_offset)
            letters.append(summary)
        return {"group": group, "topic": topic, "total": total, "messages": letters,
                "truncated": total > len(letters), "resent": self.resent_count(group, audit),
                "awaiting": max(0, total - self.resent_count(group, audit))}

    def resent_count(self, group: str, audit: dict[int, Any] | None = None) -> int:
        """Dead letters of `group` still stored that were resent at least once."""
        if self.resends is None:
            return 0
        audit = self.resends.of_group(group) if audit is None else audit
        if not audit:
            return 0
        oldest = self.store.commit_log_min_offset  # letters in deleted commit-log files are gone
        return sum(1 for offset in audit if offset >= oldest)

    def already_resent(self, group: str, offsets: list[int]) -> list[dict[str, Any]]:
        """The audit entries of those `offsets` that were resent before (resending again needs confirming)."""
        if self.resends is None:
            return []
        return [entry for entry in (self.resends.last(group, o) for o in offsets) if entry is not None]

    async def resend(self, group: str, offsets: list[int], caller: str, viewer: Viewer, *, force: bool = False
                     ) -> list[dict[str, Any]]:
        """Resend dead letters to `group` (through its retry topic: only this group consumes them again); a letter
        resent before only with `force` (the broker refuses it otherwise)."""
        results = []
        requester = Requester(caller, "console")
        viewer.require_request(ResendDeadLetterRequest(group, requester=requester),
                               f"resending the dead letters of group {group}")
        for offset in offsets:
            request = ResendDeadLetterRequest(group, offset, force=force, requester=requester)
            outcome = self.admin.resend_dead_letter(request)
            if type(outcome) is not Outcome:
                outcome = await outcome
            try:
                fields = outcome_value(outcome)
                results.append({"commitLogOffset": offset, "ok": True, "topic": fields.get("topic"),
                                "msgId": fields.get("uniqKey") or fields.get("msgId")})
            except ConsoleError as exc:
                results.append({"commitLogOffset": offset, "ok": False, "error": exc.message})
        return results

    def all_dead_letter_offsets(self, group: str, viewer: Viewer) -> list[int]:
        return [m["commitLogOffset"] for m in self.dead_letters(group, viewer, limit=10_000)["messages"]]

