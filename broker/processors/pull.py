"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) over remoting: wire <-> the core's PullRequest / Outcome.

Where a remoting pull goes: the RemotingServer's request guard authorizes it (broker/acl: the same needs as
``PullRequest.needs``), :meth:`PullProcessor.pull_message` decodes the header into a
:class:`~broker.core.consume.PullRequest`, the core (:class:`~broker.core.consume.Puller`) executes it, and
:meth:`PullProcessor.process` — the one place a remoting pull is answered, held ones included — encodes the outcome.
A pull that found nothing and may wait is held on the broker's one new-message notification
(broker/core/arrivals.py) and answered later with its original opaque.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from broker.core.arrivals import WAKE_SHUTDOWN, Arrivals
from broker.core.consume import Puller, PullRequest, PullResult
from broker.core.outcome import Outcome
from protocol.codes import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    RequestCode,
    ResponseCode,
)
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader
from protocol.requests import read_request

log = logging.getLogger(__name__)

# refusals with NO_PERMISSION say what forbids the pull (the reference's forbiddenType)
_FORBIDDEN_TYPES = {"broker": "1", "group": "2", "topic": "3"}


def pull_request(header: PullMessageRequestHeader, remote_addr: str, first: bool = True) -> PullRequest:
    """The typed request a PULL_MESSAGE header states."""
    flags = header.sys_flag or 0
    return PullRequest(
        group=header.consumer_group, topic=header.topic, queue_id=header.queue_id, queue_offset=header.queue_offset,
        max_nums=header.max_msg_nums or 32,
        subscription=(header.expression_type, header.subscription) if flags & PULL_FLAG_SUBSCRIPTION else None,
        sub_version=header.sub_version or 0,
        commit_offset=header.commit_offset if first and flags & PULL_FLAG_COMMIT_OFFSET else None,
        suspend_ms=(header.suspend_timeout_millis or 0) if first and flags & PULL_FLAG_SUSPEND else None,
        requester=remote_addr)


def pull_response(cmd: RemotingCommand, outcome: Outcome[PullResult]) -> RemotingCommand:
    """The remoting answer of a pull outcome."""
    result = outcome.value
    if result is None:
        forbidden = _FORBIDDEN_TYPES.get(outcome.reason) if outcome.code == ResponseCode.NO_PERMISSION else None
        return cmd.make_response(outcome.code, outcome.remark, {"forbiddenType": forbidden} if forbidden else None)
    ext = {
        "suggestWhichBrokerId": str(result.suggest_broker_id),
        "nextBeginOffset": str(result.next_begin_offset),
        "minOffset": str(result.min_offset),
        "maxOffset": str(result.max_offset),
    }
    if result.topic_sys_flag is not None:
        ext["topicSysFlag"] = str(result.topic_sys_flag)
        ext["groupSysFlag"] = str(result.group_sys_flag)
    return cmd.make_response(outcome.code, outcome.remark, ext,
                             result.body if outcome.code == ResponseCode.SUCCESS else b"")


# Metrics hook: told once per executed pull (not per message, not when held):
# (channel, request, header, response, seconds taken).
PullObserver = Callable[[Any, RemotingCommand, PullMessageRequestHeader, RemotingCommand, float], None]


class PullProcessor:
    """Translates remoting pulls for the core's Puller; SQL-filtered pulls are taken one per loop turn."""

    def __init__(self, puller: Puller, arrivals: Arrivals, observer: PullObserver | None = None) -> None:
        self.puller = puller
        self.observer = observer
        self.arrivals = arrivals
        self.hold_service = arrivals  # `hold_service.held_count`: the pulls held now (metrics, runtime info)
        # Record-filtered (SQL92) pulls waiting for their turn; see _defer.
        self._deferred: deque[tuple[Any, RemotingCommand, PullMessageRequestHeader]] = deque()
        self._drain_scheduled = False

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.PULL_MESSAGE: self.pull_message,
            RequestCode.LITE_PULL_MESSAGE: self.pull_message,
        }

    # ---- request handling ----------------------------------------------------------------------
    def pull_message(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        header = read_request(cmd)
        if self.puller.reads_records(pull_request(header, "")) and self._defer(channel, cmd, header):
            return None
        return self.process(channel, cmd, header, allow_suspend=True)

    def process(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader,
                allow_suspend: bool) -> RemotingCommand | None:
        """One pull run, answered here; None when it was held (answered by a later run of this method). Tells the
        observer (metrics) of every answered run."""
        observer = self.observer
        if observer is None:
            return self._process(channel, cmd, header, allow_suspend)
        started = time.perf_counter()
        response = self._process(channel, cmd, header, allow_suspend)
        if response is not None:
            observer(channel, cmd, header, response, time.perf_counter() - started)
        return response

    def _process(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader,
                 allow_suspend: bool) -> RemotingCommand | None:
        request = pull_request(header, getattr(channel, "remote_addr", "?"), first=allow_suspend)
        outcome = self.puller.pull(request, first=allow_suspend)
        if outcome.code == ResponseCode.PULL_NOT_FOUND and allow_suspend:
            held = self.puller.hold(request, lambda reason: self._wake(channel, cmd, header, request, reason))
            if held is not None:
                if held.active:
                    channel.add_close_listener(lambda _ch: self.arrivals.cancel(held))
                return None
        return pull_response(cmd, outcome)

    # ---- record-filtered pulls: one per loop turn --------------------------------------------------
    def _defer(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader) -> bool:
        """Queue a pull whose filter reads commit-log records (SQL92); False when there is no running loop.

        Such a pull costs milliseconds of CPU (every examined record's properties are evaluated). The server
        answers all requests that arrived in one read before flushing, so a burst of them answered inline would
        hold every response (and every other request) back until the whole burst is evaluated, and the client
        would sit idle meanwhile. Taking them one per loop turn flushes each answer as soon as it is ready, lets
        other requests in between, and keeps the consumer busy decoding while the broker evaluates the next one.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._deferred.append((channel, cmd, header))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            loop.call_soon(self._drain_one, loop)
        return True

    def _drain_one(self, loop: asyncio.AbstractEventLoop) -> None:
        queue = self._deferred
        while queue:
            if self._answer_deferred(*queue.popleft(), allow_suspend=True):
                break  # one pull per turn; its flush is queued before our next turn
        if queue:
            loop.call_soon(self._drain_one, loop)
        else:
            self._drain_scheduled = False

    def _answer_deferred(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader,
                         allow_suspend: bool) -> bool:
        """Run a deferred pull and send its answer; False (nothing done) when the client is gone."""
        if getattr(channel, "closed", False):
            return False
        try:
            response = self.process(channel, cmd, header, allow_suspend=allow_suspend)
        except Exception as exc:  # the request must still get an answer
            log.exception("a deferred pull failed")
            response = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is not None:
            channel.send_response(response)
        return True

    # ---- long polling ------------------------------------------------------------------------------
    def _wake(self, channel: Any, cmd: RemotingCommand, header: PullMessageRequestHeader, request: PullRequest,
              reason: str) -> None:
        """A held pull's turn: run it again (never held twice), or at shutdown answer "not found" at once."""
        if getattr(channel, "closed", False):
            return
        if reason == WAKE_SHUTDOWN:
            response = pull_response(cmd, self.puller.not_found_now(request))
        else:
            try:
                response = self.process(channel, cmd, header, allow_suspend=False)
            except Exception as exc:  # the original request must still get an answer
                log.exception("re-executing a held pull failed")
                response = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is not None:
            channel.send_response(response)

    def release_all(self) -> None:
        """Shutdown: answer the pulls still waiting for their turn (without holding them), then every held request
        (pulls and POP receives: the one notification releases them all)."""
        deferred = self._deferred
        while deferred:
            self._answer_deferred(*deferred.popleft(), allow_suspend=False)
        self.arrivals.release_all()
