"""The broker with its single-send handlers replaced by a prebuilt SUCCESS answer: a measuring device, not a broker.

    python bench/fixed_answer_broker.py -c broker.conf      # same arguments as `python -m broker`

Everything else is the real broker (the remoting server, framing, dispatch, the name server the client asks for
routes). SEND_MESSAGE / SEND_MESSAGE_V2 are answered with a SUCCESS frame that echoes the request's opaque and
counts queue offsets, without decoding the send header or storing anything. What a single send costs against this
process is the floor of a Python round trip on the machine: the event loop, the kernel's loopback TCP and the
client; the real broker's cost above it is what its send handling (header, checks, store, answer) adds. Used by
bench/latency_floor.py.
"""

from __future__ import annotations

import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.__main__ import main  # noqa: E402
from broker.processors.send import SendProcessor  # noqa: E402
from protocol.codes import RequestCode, ResponseCode  # noqa: E402
from protocol.command import RemotingCommand, ResponseTemplate  # noqa: E402

_MSG_ID = "7F00000100002A9F0000000000000000"  # a well-formed offset message id (never looked up)
_templates: dict[int, ResponseTemplate] = {}
_offsets = itertools.count()


def _fixed_answer(_channel: object, cmd: RemotingCommand) -> bytes:
    template = _templates.get(cmd.serialize_type)
    if template is None:
        template = _templates[cmd.serialize_type] = ResponseTemplate(
            cmd.serialize_type, ResponseCode.SUCCESS,
            [("msgId", None), ("queueId", None), ("queueOffset", None), ("MSG_REGION", "DefaultRegion"),
             ("TRACE_ON", "true")])
    return template.encode(cmd.opaque, _MSG_ID, "0", str(next(_offsets)))


def _handlers(self: SendProcessor) -> dict[int, object]:
    return {RequestCode.SEND_MESSAGE: _fixed_answer, RequestCode.SEND_MESSAGE_V2: _fixed_answer,
            RequestCode.SEND_BATCH_MESSAGE: self.send_batch_message}


SendProcessor.handlers = _handlers  # type: ignore[method-assign]
SendProcessor.run_handlers = lambda self: {}  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
