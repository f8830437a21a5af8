"""TransactionProducer: RocketMQ's transactional messages (half message, local transaction, commit or rollback).

    async def transfer(msg, arg):            # the local transaction: sync or async
        await db.debit(arg)
        return LocalTransactionState.COMMIT   # ROLLBACK, or UNKNOWN to let the broker ask later

    async def check(msg):                    # the broker asks about a transaction it has no answer for
        return LocalTransactionState.COMMIT if await db.has(msg.msg_id) else LocalTransactionState.ROLLBACK

    async with TransactionProducer("pg", ns, check_listener=check) as producer:
        result = await producer.send_in_transaction(Message("Orders", b"..."), arg=42, local_transaction=transfer)

On the wire it is the reference producer exactly (transactions.md §2-§3, §7): the message is sent with TRAN_MSG=true
and PGROUP (sysFlag PREPARED); the broker keeps it invisible. On SEND_OK the local transaction runs (an exception or
None counts as UNKNOWN) and END_TRANSACTION goes one-way to the broker that took it; a stored-but-not-safe answer
(FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE) rolls back without running it. The broker asks any live
producer of the group about open transactions (CHECK_TRANSACTION_STATE): `check_listener(msg)` answers, and the
decision goes back one-way on the connection the check came on.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from client.consume_context import ListenerInfo
from client.errors import MQClientError
from client.message import Message, MessageExt, SendResult, SendStatus
from client.producer import Producer
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.ids import decode_offset_msg_id
from protocol.message import RecordError, decode_record

log = logging.getLogger(__name__)

__all__ = ["LocalTransactionState", "TransactionProducer", "TransactionSendResult"]

_PREPARED_FLAG = 0x4
_MAX_PENDING_CHECKS = 2000  # checks answered at once; more are dropped (the broker asks again next run)


class LocalTransactionState(enum.Enum):
    """What a local transaction or a check decided (the reference's names; COMMIT / ROLLBACK / UNKNOWN alias them)."""

    COMMIT_MESSAGE = 8
    ROLLBACK_MESSAGE = 12
    UNKNOW = 0
    COMMIT = 8
    ROLLBACK = 12
    UNKNOWN = 0


class TransactionSendResult(SendResult):
    """A SendResult plus what the local transaction decided."""

    __slots__ = ("local_transaction_state",)

    def __init__(self, result: SendResult, state: LocalTransactionState) -> None:
        super().__init__(result.status, result.msg_id, result.offset_msg_id, result.queue_id, result.queue_offset,
                         result.message_queue, result.transaction_id or result.msg_id)
        self.local_transaction_state = state

    def __repr__(self) -> str:
        return f"TransactionSendResult({super().__repr__()}, local_transaction_state={self.local_transaction_state.name})"


LocalTransaction = Callable[[Message, Any], Any]
CheckListener = Callable[[MessageExt], Any]


class TransactionProducer(Producer):
    """A Producer that can also send in a transaction; every other send method works as on Producer.

    check_listener(msg_ext) -> LocalTransactionState answers the broker's checks (sync functions run in a thread
    pool of check_thread_pool_max threads, `async def` on the loop). local_transaction(msg, arg) is the default local
    transaction of send_in_transaction."""

    def __init__(self, group: str, namesrv_addr: str = "127.0.0.1:9876", *,
                 check_listener: CheckListener | None = None, local_transaction: LocalTransaction | None = None,
                 check_thread_pool_max: int = 4, **kwargs: Any) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        self.check_listener = check_listener
        self.local_transaction = local_transaction
        self.check_thread_pool_max = max(1, check_thread_pool_max)
        self._pool: ThreadPoolExecutor | None = None
        self._checks: set[asyncio.Task] = set()
        self._instance.brokers.request_handler = self._on_broker_request
        self._warned_no_listener = False
        self._callables: dict[Callable, ListenerInfo] = {}

    async def shutdown(self) -> None:
        for task in list(self._checks):
            task.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        await super().shutdown()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # ------------------------------------------------------------------ sending
    async def send_in_transaction(self, msg: Message, arg: Any = None, *,
                                  local_transaction: LocalTransaction | None = None,
                                  timeout: float | None = None) -> TransactionSendResult:
        """Send msg as a half message, run the local transaction, then commit or roll it back."""
        if not self._started:
            raise MQClientError("producer is not started; call await producer.start() or use 'async with'")
        if not isinstance(msg, Message):
            raise MQClientError("send_in_transaction takes one Message (batches cannot be transactional)")
        run = local_transaction or self.local_transaction
        if run is None:
            raise MQClientError("no local transaction: pass local_transaction= here or to TransactionProducer(...)")
        if msg.delay_level:
            log.warning("delay_level %d of a transactional message is ignored (as the reference does)",
                        msg.delay_level)
        prepared = self._encoder.prepare(msg, 0)
        prepared.props += f"TRAN_MSG\x01true\x02PGROUP\x01{self.group}\x02"
        prepared.sys_flag |= _PREPARED_FLAG
        result = await self._send_with_retries(prepared, self.send_timeout if timeout is None else timeout)
        remark = None
        if result.status is SendStatus.SEND_OK:
            state, remark = await self._decide(run, (msg, arg), "local transaction")
        else:  # stored but not safe: the reference rolls back without running the local transaction
            state = LocalTransactionState.ROLLBACK_MESSAGE
        try:
            await self._end_transaction(result, state, remark)
        except Exception as exc:  # the broker will check it back: the decision is not lost for good
            log.warning("END_TRANSACTION for %s failed (%s); the broker will ask this group later", result.msg_id, exc)
        return TransactionSendResult(result, state)

    async def _decide(self, fn: Callable, args: tuple, what: str) -> tuple[LocalTransactionState, str | None]:
        """Run a local transaction or a check; an exception or anything but a LocalTransactionState is UNKNOWN."""
        info = self._callables.get(fn)
        if info is None:
            if len(self._callables) > 256:
                self._callables.clear()
            info = self._callables[fn] = ListenerInfo(fn)  # examined once: inspect is slow per call
        try:
            if info.is_async:
                state = await fn(*args)
            else:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.check_thread_pool_max, thread_name_prefix=f"tx-{self.group}")
                state = await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
                if asyncio.iscoroutine(state):
                    state = await state
        except Exception as exc:
            log.warning("%s %s of producer group %s raised %r; the transaction stays UNKNOWN (the broker will ask "
                        "again)", what, info.name, self.group, exc)
            return LocalTransactionState.UNKNOW, repr(exc)
        if not isinstance(state, LocalTransactionState):
            log.warning("%s %s of producer group %s returned %r, not a LocalTransactionState; UNKNOWN", what,
                        info.name, self.group, state)
            return LocalTransactionState.UNKNOW, None
        return state, None

    async def _end_transaction(self, result: SendResult, state: LocalTransactionState, remark: str | None) -> None:
        commit_log_offset = decode_offset_msg_id(result.offset_msg_id or "")[2]
        broker = result.message_queue.broker_name
        ext = {
            "producerGroup": self.group,
            "tranStateTableOffset": result.queue_offset,
            "commitLogOffset": commit_log_offset,
            "commitOrRollback": state.value,
            "fromTransactionCheck": False,
            "msgId": result.msg_id,
            "bname": broker,
        }
        if result.transaction_id:
            ext["transactionId"] = result.transaction_id
        addr = self._instance.master_addr(broker) or await self._instance.find_master_addr(broker)
        cmd = RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=ext, remark=remark)
        await self._instance.brokers.invoke_oneway(addr, cmd)

    # ------------------------------------------------------------------ checks
    def _on_broker_request(self, conn, cmd: RemotingCommand):
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            if len(self._checks) >= _MAX_PENDING_CHECKS:
                log.warning("%d transaction checks already running; dropping one (the broker asks again)",
                            len(self._checks))
                return None
            task = asyncio.get_running_loop().create_task(self._answer_check(conn, cmd))
            self._checks.add(task)
            task.add_done_callback(self._checks.discard)
        return None  # one-way: never answered

    async def _answer_check(self, conn, cmd: RemotingCommand) -> None:
        header = cmd.ext_fields or {}
        try:
            record = decode_record(cmd.body)
        except (RecordError, ValueError) as exc:
            log.warning("unreadable transaction check from %s: %s", conn.addr, exc)
            return
        msg = MessageExt(record, header.get("brokerName") or header.get("bname"))
        if msg.properties.get("PGROUP") != self.group:
            log.debug("transaction check for group %s ignored by %s", msg.properties.get("PGROUP"), self.group)
            return
        if self.check_listener is None:
            if not self._warned_no_listener:
                self._warned_no_listener = True
                log.warning("producer group %s was asked about transaction %s but has no check_listener; open "
                            "transactions will be given up after transactionCheckMax checks", self.group, msg.msg_id)
            return
        state, remark = await self._decide(self.check_listener, (msg,), "check listener")
        ext = {
            "producerGroup": self.group,
            "tranStateTableOffset": header.get("tranStateTableOffset"),
            "commitLogOffset": header.get("commitLogOffset"),
            "commitOrRollback": state.value,
            "fromTransactionCheck": True,
            "msgId": msg.msg_id,
        }
        if header.get("transactionId"):
            ext["transactionId"] = header["transactionId"]
        if header.get("bname"):
            ext["bname"] = header["bname"]
        try:
            conn.oneway(RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=ext, remark=remark))
        except Exception as exc:
            log.warning("answering the transaction check of %s failed: %s", msg.msg_id, exc)
