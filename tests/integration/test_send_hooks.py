"""Producer send hooks (client/send_hooks.py, the reference client's SendMessageHook) against a real broker: called
before and after every send, send_async and send_batch, with the result and the master that stored it, or the error;
a hook that raises never fails the send."""

from __future__ import annotations

import asyncio

import pytest

from client import Message, MessageValidationError, Producer, SendStatus


class Recorder:
    def __init__(self) -> None:
        self.before: list = []
        self.after: list = []

    def send_before(self, context) -> None:
        self.before.append((context.batch, [m.body for m in context.messages]))

    def send_after(self, context) -> None:
        self.after.append(context)


class Broken:
    def send_before(self, context) -> None:
        raise RuntimeError("hook bug")

    def send_after(self, context) -> None:
        raise RuntimeError("hook bug")


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


async def test_hooks_see_every_kind_of_send_and_a_broken_hook_fails_none(broker):
    recorder = Recorder()
    async with Producer("hooked-pg", broker.namesrv_addr) as producer:
        producer.register_send_hook(Broken())  # registered first: the next hook still runs
        producer.register_send_hook(recorder)
        one = await producer.send(Message("HookedTopic", b"one"))
        both = await producer.send_batch([Message("HookedTopic", b"a"), Message("HookedTopic", b"b")])
        later = await asyncio.wait_for(producer.send_async(Message("HookedTopic", b"later")), 10)
        with pytest.raises(MessageValidationError):
            await producer.send(Message("HookedTopic", b""))  # an empty body is refused before anything is sent
    assert one.status is both.status is later.status is SendStatus.SEND_OK
    assert recorder.before == [(False, [b"one"]), (True, [b"a", b"b"]), (False, [b"later"]), (False, [b""])]
    sent, batch, async_sent, refused = recorder.after
    assert sent.result is one and batch.result is both and async_sent.result is later
    assert sent.broker_addr == batch.broker_addr == async_sent.broker_addr == broker.addr  # the master that stored it
    assert sent.error is None and isinstance(refused.error, MessageValidationError) and refused.result is None
    assert sent.group == "hooked-pg" and sent.began_ms > 0
