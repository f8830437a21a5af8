"""Store configuration and the value types of the MessageStore API."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field

from protocol.hashing import tags_code
from protocol.ids import offset_msg_ids, pack_host
from protocol.message import MessageRecord
from protocol.properties import encode_properties

from .delay_levels import parse_delay_levels


@dataclass
class StoreConfig:
    """MessageStoreConfig subset (names follow broker.conf, snake_case)."""

    root_dir: str
    commit_log_dir: str | None = None  # default <root>/commitlog
    replica: bool = False  # a slave: only append_replicated writes the log
    mapped_file_size_commit_log: int = 1073741824
    warm_mapped_file_enable: bool = False  # commit-log files get all their disk blocks at creation
    mapped_file_size_consume_queue: int = 6_000_000
    flush_disk_type: str = "ASYNC_FLUSH"  # or SYNC_FLUSH (group commit)
    flush_interval_commit_log_ms: int = 500
    flush_interval_consume_queue_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    file_reserved_time_hours: float = 72
    delete_when: str = "04"  # ';'-separated hours of the day
    disk_max_used_space_ratio: int = 75  # above: delete expired files at once (not only at delete_when)
    disk_space_clean_forcibly_ratio: int = 85  # above: delete oldest files even if not expired
    disk_space_warning_level_ratio: int = 90  # above: refuse puts (DISK_FULL)
    disk_check_interval_ms: int = 1000
    clean_resource_interval_ms: int = 10000
    delete_files_batch_max: int = 10
    max_message_size: int = 4194304
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    store_host: bytes = field(default=b"\x7f\x00\x00\x01\x00\x00\x2a\x9f")  # packed ip + port

    @property
    def commit_log_path(self) -> str:
        return self.commit_log_dir or os.path.join(self.root_dir, "commitlog")

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type.upper() == "SYNC_FLUSH"

    def delete_hours(self) -> set[int]:
        hours = set()
        for part in str(self.delete_when).split(";"):
            part = part.strip()
            if part.isdigit():
                hours.add(int(part))
        return hours

    def delay_levels_ms(self) -> list[int]:
        """Delay per level (index 0 = level 1) in milliseconds; units ms/s/m/h/d as in broker.conf."""
        return parse_delay_levels(self.message_delay_level)


@dataclass(slots=True)
class MessageToStore:
    """One message as the broker hands it to the store."""

    topic: str
    queue_id: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    reconsume_times: int
    body: bytes
    properties: str  # encoded (§5.1); ignored when properties_bytes is set
    tags_code: int
    keys: str | None = None  # the KEYS property value (space separated)
    uniq_key: str | None = None
    prepared_transaction_offset: int = 0
    # The same properties already as the UTF-8 bytes to store (the batch path keeps what the producer sent).
    properties_bytes: bytes | None = None

    def properties_text(self) -> str:
        """The encoded properties as text, whichever form the message carries."""
        raw = self.properties_bytes
        return self.properties if raw is None else raw.decode("utf-8", "replace")


def message_from_record(record: MessageRecord, topic: str, queue_id: int, properties: dict[str, str],
                        reconsume_times: int, sys_flag: int | None = None,
                        prepared_transaction_offset: int = 0) -> MessageToStore:
    """A stored record written again elsewhere (retry, dead letter, resend, transaction commit): same body, flag,
    born time and host; the given topic, queue and properties (tagsCode recomputed from their TAGS)."""
    born_ip, born_port = record.born_host
    return MessageToStore(
        topic=topic,
        queue_id=queue_id,
        flag=record.flag,
        sys_flag=record.sys_flag if sys_flag is None else sys_flag,
        born_timestamp=record.born_timestamp,
        born_host=pack_host(born_ip, born_port),
        reconsume_times=reconsume_times,
        body=bytes(record.body),
        properties=encode_properties(properties),
        tags_code=tags_code(properties.get("TAGS")),
        keys=properties.get("KEYS"),
        uniq_key=properties.get("UNIQ_KEY"),
        prepared_transaction_offset=prepared_transaction_offset,
    )


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # stored on a SYNC_MASTER, no slave acknowledged it in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # stored on a SYNC_MASTER without a usable slave
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    DISK_FULL = "DISK_FULL"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


_STORED = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                     PutStatus.SLAVE_NOT_AVAILABLE})


@dataclass(slots=True, repr=False, eq=False)
class PutResult:
    """Outcome of a put. ``msg_ids`` (offset message ids) are formatted lazily."""

    status: PutStatus
    physical_offset: int = -1
    queue_offset: int = -1
    count: int = 0
    wrote_bytes: int = 0
    store_timestamp: int = 0
    remark: str | None = None
    physical_offsets: list[int] = field(default_factory=list)
    store_host: bytes = b""
    _msg_ids: list[str] | None = field(default=None, init=False)

    @property
    def ok(self) -> bool:
        """Stored (PUT_OK, or a flush/replication timeout: the data is in the store either way)."""
        return self.status in _STORED

    @property
    def msg_ids(self) -> list[str]:
        if self._msg_ids is None:
            self._msg_ids = offset_msg_ids(self.store_host, self.physical_offsets)
        return self._msg_ids

    def __repr__(self) -> str:
        return ("PutResult(status=%s, physical_offset=%d, queue_offset=%d, count=%d, wrote_bytes=%d, remark=%r)"
                % (self.status.name, self.physical_offset, self.queue_offset, self.count, self.wrote_bytes,
                   self.remark))


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True, repr=False, eq=False)
class GetResult:
    """Outcome of a pull: raw commit-log records in ``buffers`` (contiguous runs as single views)."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list = field(default_factory=list)
    message_count: int = 0
    buffer_total_size: int = 0

    def body(self) -> bytes:
        """All records concatenated (a copy; for tests and small responses)."""
        return b"".join(self.buffers)

    def __repr__(self) -> str:
        return ("GetResult(status=%s, next_begin_offset=%d, min_offset=%d, max_offset=%d, message_count=%d, "
                "bytes=%d)" % (self.status.name, self.next_begin_offset, self.min_offset, self.max_offset,
                               self.message_count, self.buffer_total_size))


@dataclass(slots=True)
class QueryResult:
    records: list[bytes]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


class IllegalRecordError(ValueError):
    """A commit-log record read back (a master's stream) whose topic or queue id cannot be a queue of this store."""
