"""A request run through the broker's own remoting handler, in process: the web console's offset reset
(INVOKE_BROKER_TO_RESET_OFFSET), the one console action not yet a typed request of the messaging core.

The console's other actions call the core's AdminService (broker/core/admin) directly, and gRPC sends go through the
core's SendService: neither builds a RemotingCommand. Here the request is the very one `mqadmin` would send, handed
to the same handler from the broker's dispatch table: the same checks, the same persistence before the answer, the
same log line. Only the network hop is missing."""

from __future__ import annotations

import inspect
import itertools
from typing import Any

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder

_opaque = itertools.count(1)


class ConsoleChannel:
    """What a request handler sees of an in-process caller: its address (the operator's, the gRPC peer's)."""

    def __init__(self, remote_addr: str) -> None:
        self.remote_addr = remote_addr
        host, _, port = remote_addr.rpartition(":")
        self.remote_host = host or remote_addr
        self.remote_port = int(port) if port.isdigit() else 0
        self.attrs: dict[str, Any] = {}
        self.closed = False


class AdminCallError(Exception):
    """The handler refused the request: its response code and remark, as mqadmin would print them."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


async def call_handler(dispatch_table: dict[int, Any], code: int, fields: dict[str, Any] | None = None,
                       body: bytes = b"", *, caller: str = "console") -> RemotingCommand:
    """Run request `code` through the broker's handler and return its response; AdminCallError unless SUCCESS."""
    handler = dispatch_table.get(int(code))
    if handler is None:
        raise AdminCallError(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {code} not supported")
    cmd = RemotingCommand.request(int(code), {k: str(v) for k, v in (fields or {}).items()}, body,
                                  opaque=next(_opaque))
    result = handler(ConsoleChannel(caller), cmd)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, (bytes, bytearray)):  # a pre-encoded frame
        decoded = FrameDecoder().feed(bytes(result))
        result = decoded[0] if decoded else None
    if result is None:
        raise AdminCallError(ResponseCode.SYSTEM_ERROR, f"request code {code} gave no answer")
    if result.code != ResponseCode.SUCCESS:
        raise AdminCallError(result.code, result.remark or f"request code {code} failed with code {result.code}")
    return result
