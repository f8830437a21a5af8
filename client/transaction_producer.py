"""TransactionProducer: RocketMQ's transactional messages (half message, local transaction, commit or rollback).

    async def transfer(msg, arg):            # the local transaction: sync or async
        await db.debit(arg)
        return LocalTransactionState.COMMIT   # ROLLBACK, or UNKNOWN to let the broker ask later

    async def check(msg):                    # the broker asks about a transaction it has no answer for
        return LocalTransactionState.COMMIT if await db.has(msg.msg_id) else LocalTransactionState.ROLLBACK

    async with TransactionProducer("pg", ns, check_listener=check) as producer:
        result = await producer.send_in_transaction(Message("Orders", b"..."), arg=42, local_transaction=transfer)

On the wire it is the reference producer exactly (transactions.md §2-§3, §7): the message is sent with TRAN_MSG=true
and PGROUP (sysFlag PREPARED), its delay level dropped; the broker keeps it invisible. On SEND_OK the local
transaction runs (an exception or None counts as UNKNOWN) and END_TRANSACTION goes one-way to the master of the broker
that took it; a stored-but-not-safe answer (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE) rolls back
without running it. The broker asks any live producer of the group about open transactions
(CHECK_TRANSACTION_STATE) on that producer's own connection, so the producer connects to every master the name
server knows and keeps heartbeating them; `check_listener(msg)` answers, and the decision goes back one-way on the
connection the check came on.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from client.consume_context import ListenerInfo
from client.errors import MQClientError
from client.message import Message, MessageExt, SendResult, SendStatus
from client.outgoing import MessageEncoder, PreparedSend
from client.producer import Producer
from protocol.bodies import ClusterInfo
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.ids import decode_offset_msg_id
from protocol.message import RecordError, decode_record

log = logging.getLogger(__name__)

__all__ = [
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
    "check_answer_fields",
    "end_transaction_fields",
    "half_message",
    "state_before_local_transaction",
]

_PREPARED_FLAG = 0x4  # MessageSysFlag.TRANSACTION_PREPARED_TYPE
_MAX_PENDING_CHECKS = 2000  # checks queued at once; more are dropped (the broker asks again next run)
_DROP_LOG_INTERVAL = 60.0
_NOT_SAFE = frozenset({SendStatus.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE})


class LocalTransactionState(enum.Enum):
    """What a local transaction or a check decided. The values are END_TRANSACTION's commitOrRollback; the
    reference's names (COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW) are canonical, COMMIT / ROLLBACK / UNKNOWN alias them."""

    COMMIT_MESSAGE = 8
    ROLLBACK_MESSAGE = 12
    UNKNOW = 0
    COMMIT = 8
    ROLLBACK = 12
    UNKNOWN = 0


class TransactionSendResult(SendResult):
    """A SendResult plus what the local transaction decided; transaction_id is the broker's (5.x) or the UNIQ_KEY."""

    __slots__ = ("local_transaction_state",)

    def __init__(self, result: SendResult, state: LocalTransactionState) -> None:
        super().__init__(result.status, result.msg_id, result.offset_msg_id, result.queue_id, result.queue_offset,
                         result.message_queue, result.transaction_id or result.msg_id, result.region_id,
                         result.trace_on)
        self.local_transaction_state = state

    def __repr__(self) -> str:
        return (f"TransactionSendResult({super().__repr__()}, transaction_id={self.transaction_id!r}, "
                f"local_transaction_state={self.local_transaction_state.name})")


LocalTransaction = Callable[[Message, Any], Any]
CheckListener = Callable[[MessageExt], Any]


# ---------------------------------------------------------------------------------------------- wire rules (pure)
def state_before_local_transaction(status: SendStatus) -> LocalTransactionState | None:
    """None when the local transaction is to run (SEND_OK); ROLLBACK for a stored-but-not-safe half message, which the
    reference rolls back without running the local transaction (transactions.md §2.4)."""
    if status is SendStatus.SEND_OK:
        return None
    if status in _NOT_SAFE:
        return LocalTransactionState.ROLLBACK_MESSAGE
    raise ValueError(f"unexpected send status {status!r}")


def end_transaction_fields(group: str, result: SendResult, state: LocalTransactionState) -> dict[str, Any]:
    """END_TRANSACTION header after a send (transactions.md §3.1): the half record named by the send answer.

    ValueError when the answer has no offset msgId to take the commit-log offset from."""
    commit_log_offset = decode_offset_msg_id(result.offset_msg_id or "")[2]
    fields: dict[str, Any] = {
        "producerGroup": group,
        "tranStateTableOffset": result.queue_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": state.value,
        "fromTransactionCheck": False,
        "msgId": result.msg_id,
        "bname": result.message_queue.broker_name,
    }
    if result.transaction_id:  # 5.x brokers answer one; 4.x ones do not
        fields["transactionId"] = result.transaction_id
    return fields


def check_answer_fields(group: str, check: dict[str, Any], msg_id: str,
                        state: LocalTransactionState) -> dict[str, Any]:
    """END_TRANSACTION header answering a CHECK_TRANSACTION_STATE (transactions.md §7): the offsets and the
    transactionId are the check's own (they name the checked copy), msgId is the message's UNIQ_KEY.

    ValueError when the check lacks an offset (the broker could not resolve the answer anyway)."""
    try:
        table_offset = int(check["tranStateTableOffset"])
        commit_log_offset = int(check["commitLogOffset"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("check request without a numeric tranStateTableOffset / commitLogOffset") from None
    fields: dict[str, Any] = {
        "producerGroup": group,
        "tranStateTableOffset": table_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": state.value,
        "fromTransactionCheck": True,
        "msgId": msg_id,
    }
    if check.get("transactionId"):
        fields["transactionId"] = check["transactionId"]
    if check.get("bname"):
        fields["bname"] = check["bname"]
    return fields


def half_message(encoder: MessageEncoder, msg: Message, group: str) -> PreparedSend:
    """msg encoded as the reference's half send (transactions.md §2.1): no DELAY, TRAN_MSG=true and PGROUP added
    as internal properties (not user ones: those names are reserved), sysFlag PREPARED."""
    prepared = encoder.prepare(msg, 0)  # 0: no DELAY property
    prepared.props += f"TRAN_MSG\x01true\x02PGROUP\x01{group}\x02"
    prepared.sys_flag |= _PREPARED_FLAG
    return prepared


def exception_remark(where: str, exc: BaseException) -> str:
    """END_TRANSACTION's remark for a callable that raised (the Java client's wording, Python's description)."""
    return f"{where} exception: {type(exc).__name__}: {exc}"[:512]


# ---------------------------------------------------------------------------------------------- the producer
class TransactionProducer(Producer):
    """A Producer that can also send in a transaction; every other send method works as on Producer.

    local_transaction(msg, arg) -> LocalTransactionState: the default local transaction of send_in_transaction.
    check_listener(msg_ext) -> LocalTransactionState: answers the broker's checks, at most check_thread_pool_max at
    a time. Either may be a plain function (run in `executor`, by default a pool of the producer's own) or an
    `async def` (run on the loop). transaction_listener: an object with execute_local_transaction(msg, arg) and
    check_local_transaction(msg_ext), the reference's TransactionListener, instead of the two callables."""

    def __init__(self, group: str, namesrv_addr: str = "127.0.0.1:9876", *,
                 check_listener: CheckListener | None = None, local_transaction: LocalTransaction | None = None,
                 transaction_listener: Any = None, check_thread_pool_max: int = 4, executor: Executor | None = None,
                 **kwargs: Any) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        if transaction_listener is not None:
            local_transaction = local_transaction or getattr(transaction_listener, "execute_local_transaction", None)
            check_listener = check_listener or getattr(transaction_listener, "check_local_transaction", None)
            if local_transaction is None and check_listener is None:
                raise TypeError("transaction_listener needs execute_local_transaction(msg, arg) and/or "
                                "check_local_transaction(msg)")
        for name, fn in (("check_listener", check_listener), ("local_transaction", local_transaction)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        if not isinstance(check_thread_pool_max, int) or check_thread_pool_max < 1:
            raise ValueError(f"check_thread_pool_max must be a positive int, got {check_thread_pool_max!r}")
        self.check_listener = check_listener
        self.local_transaction = local_transaction
        self.check_thread_pool_max = check_thread_pool_max
        self._executor = executor
        self._own_pool: ThreadPoolExecutor | None = None
        self._check_slots: asyncio.Semaphore | None = None
        self._checks: set[asyncio.Task] = set()
        self._discovery: asyncio.Task | None = None
        self._instance.brokers.request_handler = self._on_broker_request
        self._warned_no_listener = False
        self._warned_delay = False
        self._dropped_checks = 0
        self._drop_logged_at = -_DROP_LOG_INTERVAL
        self._callables: dict[Callable, ListenerInfo] = {}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start, then connect to (and so register the group with) every master, so checks can reach this
        instance before it has sent anything."""
        if self._started:
            return
        await super().start()
        self._check_slots = asyncio.Semaphore(self.check_thread_pool_max)
        await self._connect_all_masters()
        self._discovery = asyncio.get_running_loop().create_task(self._keep_connected(),
                                                                 name=f"tx-producer-{self.group}-brokers")

    async def shutdown(self) -> None:
        tasks = [t for t in (self._discovery, *self._checks) if t is not None]
        self._discovery = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await super().shutdown()
        if self._own_pool is not None:
            self._own_pool.shutdown(wait=False, cancel_futures=True)
            self._own_pool = None

    async def _connect_all_masters(self) -> None:
        """Learn every broker from the name server (GET_BROKER_CLUSTER_INFO) and open a connection to each master;
        opening one sends the heartbeat naming this producer group, and the periodic heartbeat keeps it alive.
        Best effort: a failure is retried at the next route refresh."""
        instance = self._instance
        try:
            reply = await instance.namesrv.invoke(
                lambda: RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, ext_fields={}))
            if reply.code != ResponseCode.SUCCESS or not reply.body:
                raise MQClientError(f"cluster info answered {reply.code} {reply.remark or ''}".strip())
            info = ClusterInfo.decode(reply.body)
        except Exception as exc:
            log.debug("producer group %s could not list brokers: %s", self.group, exc)
            return
        masters = []
        for name, data in info.broker_addr_table.items():
            master = data.broker_addrs.get(0)
            if master:
                instance.broker_addrs.setdefault(name, {})[0] = master  # fresh: follows a master that moved
                masters.append(master)
        brokers = instance.brokers
        connecting = [brokers.connection(addr) for addr in masters if brokers.connected(addr) is None]
        for outcome in await asyncio.gather(*connecting, return_exceptions=True):
            if isinstance(outcome, BaseException):
                log.debug("producer group %s could not connect to a broker: %s", self.group, outcome)

    async def _keep_connected(self) -> None:
        while True:
            await asyncio.sleep(self._instance.route_refresh_interval)
            await self._connect_all_masters()

    # ------------------------------------------------------------------ sending
    async def send_in_transaction(self, msg: Message, arg: Any = None,
                                  local_transaction: LocalTransaction | None = None, *,
                                  timeout: float | None = None) -> TransactionSendResult:
        """Send msg as a half message, run the local transaction, then commit or roll it back.

        Raises MQBrokerError (and runs nothing) when the broker refuses the half message."""
        if not self._started:
            raise MQClientError("producer is not started; call await producer.start() or use 'async with'")
        if not isinstance(msg, Message):
            raise MQClientError(f"send_in_transaction takes one Message, got {type(msg).__name__} (batches cannot "
                                "be transactional)")
        run = local_transaction or self.local_transaction
        if run is None:
            raise MQClientError("no local transaction: pass local_transaction= here or to TransactionProducer(...)")
        if msg.delay_level and not self._warned_delay:
            self._warned_delay = True
            log.warning("producer group %s: the delay level of transactional messages is dropped, as the reference "
                        "does (said once)", self.group)
        prepared = half_message(self._encoder, msg, self.group)
        result = await self._send_with_retries(prepared, self.send_timeout if timeout is None else timeout)
        remark = None
        state = state_before_local_transaction(result.status)
        if state is None:
            state, remark = await self._decide(run, (msg, arg), "executeLocalTransactionBranch", result.msg_id)
        try:
            fields = end_transaction_fields(self.group, result, state)
            broker = result.message_queue.broker_name
            addr = self._instance.master_addr(broker) or await self._instance.find_master_addr(broker, msg.topic)
            cmd = RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=fields, remark=remark)
            await self._instance.brokers.invoke_oneway(addr, cmd)
        except Exception as exc:  # the broker will check it back: the decision is not lost for good
            log.warning("END_TRANSACTION for %s failed (%s); the broker will ask group %s later", result.msg_id, exc,
                        self.group)
        return TransactionSendResult(result, state)

    async def _decide(self, fn: Callable, args: tuple, where: str,
                      msg_id: str) -> tuple[LocalTransactionState, str | None]:
        """Run a local transaction or a check listener; an exception (logged once, its description becomes the
        END_TRANSACTION remark) or anything but a LocalTransactionState is UNKNOWN."""
        info = self._callables.get(fn)
        if info is None:
            if len(self._callables) > 256:  # per-call lambdas: do not grow without bound
                self._callables.clear()
            info = self._callables[fn] = ListenerInfo(fn)  # examined once: inspect is slow per call
        try:
            if info.is_async:
                state = await fn(*args)
            else:
                state = await asyncio.get_running_loop().run_in_executor(self._pool(), fn, *args)
                if asyncio.iscoroutine(state):
                    state = await state
        except Exception as exc:
            remark = exception_remark(where, exc)
            log.warning("%s of producer group %s for %s raised; the transaction stays UNKNOWN (the broker will ask "
                        "again): %s", info.name, self.group, msg_id, remark)
            return LocalTransactionState.UNKNOW, remark
        if not isinstance(state, LocalTransactionState):
            if state is None:
                info.warn_none_once(self.group, "UNKNOWN")
            else:
                log.warning("%s of producer group %s returned %r, not a LocalTransactionState; UNKNOWN", info.name,
                            self.group, state)
            return LocalTransactionState.UNKNOW, None
        return state, None

    def _pool(self) -> Executor:
        if self._executor is not None:
            return self._executor
        if self._own_pool is None:  # room for every concurrent check plus local transactions beside them
            self._own_pool = ThreadPoolExecutor(self.check_thread_pool_max + 4, thread_name_prefix=f"tx-{self.group}")
        return self._own_pool

    # ------------------------------------------------------------------ checks
    def _on_broker_request(self, conn, cmd: RemotingCommand) -> None:
        """Broker -> client requests: CHECK_TRANSACTION_STATE starts a task answering it; others go unanswered."""
        if cmd.code != RequestCode.CHECK_TRANSACTION_STATE or not self._started:
            return
        if len(self._checks) >= _MAX_PENDING_CHECKS:
            self._dropped_checks += 1
            now = time.monotonic()
            if now - self._drop_logged_at >= _DROP_LOG_INTERVAL:
                log.warning("producer group %s: %d transaction checks pending, %d dropped so far (the broker asks "
                            "again at its next run)", self.group, len(self._checks), self._dropped_checks)
                self._drop_logged_at = now
            return
        task = asyncio.get_running_loop().create_task(self._answer_check(conn, cmd))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)  # one-way: the check itself is never answered

    async def _answer_check(self, conn, cmd: RemotingCommand) -> None:
        header = cmd.ext_fields or {}
        try:
            msg = MessageExt(decode_record(cmd.body or b""), header.get("brokerName") or header.get("bname"))
            group = msg.properties.get("PGROUP")
        except (RecordError, ValueError) as exc:
            log.warning("unreadable transaction check from %s: %s", conn.addr, exc)
            return
        if group != self.group:
            log.debug("transaction check for group %s ignored by %s", group, self.group)
            return
        if self.check_listener is None:
            if not self._warned_no_listener:
                self._warned_no_listener = True
                log.warning("producer group %s was asked about transaction %s but has no check_listener; open "
                            "transactions will be given up after transactionCheckMax checks", self.group, msg.msg_id)
            return
        assert self._check_slots is not None
        async with self._check_slots:
            state, remark = await self._decide(self.check_listener, (msg,), "checkLocalTransactionState", msg.msg_id)
        try:
            fields = check_answer_fields(self.group, header, msg.msg_id, state)
            conn.oneway(RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=fields, remark=remark))
        except Exception as exc:
            log.warning("answering the transaction check of %s failed: %s", msg.msg_id, exc)
