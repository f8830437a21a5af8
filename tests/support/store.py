"""Shared helpers for the store tests (small files so rolling, BLANK markers and rollover happen)."""

from __future__ import annotations

from protocol.hashing import tags_code
from protocol.ids import pack_host
from protocol.properties import encode_properties

from broker.store import MessageStore, MessageToStore, StoreConfig

STORE_HOST = pack_host("192.168.0.20", 10911)
BORN_HOST = pack_host("192.168.0.10", 54321)
CL_SIZE = 64 * 1024
CQ_UNITS = 200


class FakeClock:
    """Injectable store clock (ms)."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def small_config(root, **overrides) -> StoreConfig:
    values = dict(root_dir=str(root), mapped_file_size_commit_log=CL_SIZE,
                  mapped_file_size_consume_queue=CQ_UNITS * 20, max_hash_slot_num=64, max_index_num=400,
                  store_host=STORE_HOST)
    values.update(overrides)
    return StoreConfig(**values)


def open_store(root, clock=None, **overrides) -> MessageStore:
    store = MessageStore(small_config(root, **overrides), clock_ms=clock)
    store.load()
    return store


def make_msg(i: int = 0, topic: str = "TopicTest", queue_id: int = 0, body: bytes | None = None,
             tag: str | None = "TagA", keys: str | None = None, uniq: str | None = None, sys_flag: int = 0,
             extra: dict | None = None, born_host: bytes = BORN_HOST) -> MessageToStore:
    if uniq is None:
        uniq = "C0A8000A303918B4AAC20BEBC2%06X" % i
    props = {}
    if tag:
        props["TAGS"] = tag
    if keys:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = uniq
    if extra:
        props.update(extra)
    return MessageToStore(
        topic=topic, queue_id=queue_id, flag=0, sys_flag=sys_flag, born_timestamp=1_700_000_000_000,
        born_host=born_host, reconsume_times=0, body=body if body is not None else b"body-%d" % i,
        properties=encode_properties(props), tags_code=tags_code(tag), keys=keys, uniq_key=uniq or None)
