"""Shared probes for the fault-injection suite: a side client whose latency is measured while another
connection misbehaves, and the broker process's resident memory."""

from __future__ import annotations

import asyncio
import socket
import time

from protocol.codes import RequestCode

from tests.support.wire import WireClient


class LatencyProbe:
    """A second connection sending a cheap request (GET_MAX_OFFSET) every `interval` seconds in the
    background; `max_latency` is the slowest round trip seen, `failures` the requests that got no
    answer within `timeout`. Use as ``async with LatencyProbe(addr) as probe: ...`` around the hostile
    traffic, then assert on ``probe.max_latency``."""

    def __init__(self, addr: str, interval: float = 0.02, timeout: float = 30.0) -> None:
        self.addr = addr
        self.interval = interval
        self.timeout = timeout
        self.latencies: list[float] = []
        self.failures = 0
        self._client: WireClient | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False

    @property
    def max_latency(self) -> float:
        return max(self.latencies, default=0.0)

    async def __aenter__(self) -> "LatencyProbe":
        self._client = await WireClient.connect(self.addr)
        await self._one()  # connected and answered before the hostile traffic starts
        self.latencies.clear()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._task is not None and self._client is not None
        await asyncio.sleep(self.interval * 2)  # at least one probe after the hostile traffic
        # Python 3.11's wait_for can swallow a cancel that lands as its request completes: the flag ends the loop.
        self._stopping = True
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        await self._client.close()

    async def _one(self) -> None:
        assert self._client is not None
        started = time.monotonic()
        try:
            await self._client.request(RequestCode.GET_MAX_OFFSET, {"topic": "probe-topic", "queueId": "0"},
                                       timeout=self.timeout)
        except (asyncio.TimeoutError, ConnectionError):
            self.failures += 1
        self.latencies.append(time.monotonic() - started)

    async def _run(self) -> None:
        while not self._stopping:
            await self._one()
            await asyncio.sleep(self.interval)


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


# ---- raw sockets for peers that misbehave (partial frames, unread responses) ----------------------------------
def raw_connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    """A non-blocking TCP connection to 127.0.0.1:`port` (a small `rcvbuf` makes a peer that reads slowly)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


def send_some(sock: socket.socket, data: memoryview) -> int:
    """Non-blocking send; bytes taken (0 when the socket is full), -1 when the peer closed it."""
    try:
        return sock.send(data)
    except BlockingIOError:
        return 0
    except OSError:
        return -1


def peer_closed(sock: socket.socket) -> bool:
    """Whether the broker closed this connection (reads and drops whatever it sent)."""
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
