"""Blocking facade for scripts and threads: the asyncio client driven from one background event-loop thread.

    from client.sync import Producer, PullConsumer, PushConsumer
    with Producer("pg", "127.0.0.1:9876") as p:
        print(p.send(Message("TopicTest", b"hello")))

Every facade object of the process shares one daemon thread running an event loop; a blocking method submits the
coroutine to it and waits for the result, so the asyncio client's own timeouts bound every call. Listeners given to
the sync PushConsumer are plain functions and run in its consume thread pool. Do not call these from inside a running
event loop (use the asyncio classes there).
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from client import message as _message
from client.producer import Producer as AsyncProducer
from client.pull_consumer import PullConsumer as AsyncPullConsumer
from client.push_consumer import PushConsumer as AsyncPushConsumer
from client.transaction_producer import LocalTransactionState, TransactionSendResult
from client.transaction_producer import TransactionProducer as AsyncTransactionProducer

__all__ = ["Producer", "TransactionProducer", "PullConsumer", "PushConsumer", "Message", "MessageSelector",
           "ConsumeResult", "LocalTransactionState", "TransactionSendResult"]

Message = _message.Message
MessageSelector = _message.MessageSelector
ConsumeResult = _message.ConsumeResult

T = TypeVar("T")


class _LoopThread:
    """One event loop in a daemon thread, shared by every facade object."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="rocketmq-client-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking client call made from the client's own event-loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)


_shared: _LoopThread | None = None
_shared_lock = threading.Lock()


def _loop_thread() -> _LoopThread:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = _LoopThread()
            atexit.register(_shared.stop)
        return _shared


async def _build(cls, *args, **kwargs):
    return cls(*args, **kwargs)  # constructed on the loop thread, where its asyncio objects will live


async def _on_loop(fn, *args):
    return fn(*args)  # plain calls that touch asyncio objects must run on the loop thread


class _Facade:
    _async_cls: type

    def __init__(self, *args, **kwargs) -> None:
        self._runner = _loop_thread()
        self._client = self._runner.call(_build(self._async_cls, *args, **kwargs))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.call(coro)

    @property
    def client_id(self) -> str:
        return self._client.client_id

    def start(self) -> None:
        self._call(self._client.start())

    def shutdown(self) -> None:
        self._call(self._client.shutdown())

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()


async def _awaited_on_loop(send: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """``send(*args, **kwargs)`` called on the client's loop and awaited: the async producer's send is a plain
    function that runs its send hooks when called, and they belong to the loop's thread."""
    return await send(*args, **kwargs)


class Producer(_Facade):
    """Blocking client.Producer: same constructor arguments, same method names."""

    _async_cls = AsyncProducer

    def send(self, msg: _message.Message, **kwargs) -> _message.SendResult:
        return self._call(_awaited_on_loop(self._client.send, msg, **kwargs))

    def send_batch(self, msgs: Iterable[_message.Message], **kwargs) -> _message.SendResult:
        return self._call(_awaited_on_loop(self._client.send_batch, list(msgs), **kwargs))

    def send_oneway(self, msg: _message.Message, **kwargs) -> None:
        self._call(self._client.send_oneway(msg, **kwargs))

    def fetch_publish_message_queues(self, topic: str) -> list[_message.MessageQueue]:
        return self._call(self._client.fetch_publish_message_queues(topic))

    def isolated_brokers(self) -> dict:
        """Brokers unordered sends avoid right now (see client.Producer.isolated_brokers)."""
        return self._call(_on_loop(self._client.isolated_brokers))


class TransactionProducer(Producer):
    """Blocking client.TransactionProducer: the local transaction and the check listener are plain functions (run
    in the producer's thread pool), or coroutine functions (run on the facade's event-loop thread)."""

    _async_cls = AsyncTransactionProducer

    def send_in_transaction(self, msg: _message.Message, arg: Any = None, local_transaction=None,
                            **kwargs) -> TransactionSendResult:
        """Half message, local transaction, END_TRANSACTION; returns once the decision is sent."""
        return self._call(self._client.send_in_transaction(msg, arg, local_transaction, **kwargs))


class PullConsumer(_Facade):
    """Blocking client.PullConsumer."""

    _async_cls = AsyncPullConsumer

    def fetch_message_queues(self, topic: str) -> list[_message.MessageQueue]:
        return self._call(self._client.fetch_message_queues(topic))

    def pull(self, mq: _message.MessageQueue, sub_expression="*", offset: int = 0, max_nums: int = 32,
             **kwargs) -> _message.PullResult:
        return self._call(self._client.pull(mq, sub_expression, offset, max_nums, **kwargs))

    def update_offset(self, mq: _message.MessageQueue, offset: int) -> None:
        self._call(self._client.update_offset(mq, offset))

    def send_message_back(self, msg: _message.MessageExt, delay_level: int = 0, broker_name: str | None = None,
                          **kwargs) -> None:
        self._call(self._client.send_message_back(msg, delay_level, broker_name, **kwargs))

    def fetch_consume_offset(self, mq: _message.MessageQueue) -> int:
        return self._call(self._client.fetch_consume_offset(mq))

    def max_offset(self, mq: _message.MessageQueue) -> int:
        return self._call(self._client.max_offset(mq))

    def min_offset(self, mq: _message.MessageQueue) -> int:
        return self._call(self._client.min_offset(mq))

    def search_offset(self, mq: _message.MessageQueue, timestamp_ms: int, boundary: str = "LOWER") -> int:
        return self._call(self._client.search_offset(mq, timestamp_ms, boundary))


class PushConsumer(_Facade):
    """Blocking client.PushConsumer; the listener is a plain function run in the consume thread pool."""

    _async_cls = AsyncPushConsumer

    def subscribe(self, topic: str, expression="*") -> None:
        self._call(_on_loop(self._client.subscribe, topic, expression))

    def register_listener(self, listener, *, orderly: bool = False) -> None:
        self._client.register_listener(listener, orderly=orderly)

    def assigned_queues(self) -> list[_message.MessageQueue]:
        return self._client.assigned_queues()
