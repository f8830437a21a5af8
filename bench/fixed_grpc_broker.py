"""The broker with gRPC handlers replaced by bench/grpc_core.py's fixed replies: a measuring device, not a broker.

    FIXED=send,receive,ack python bench/fixed_grpc_broker.py -c broker.conf   # same arguments as `python -m broker`

Everything else is the real broker process (its event loop, remoting server, store, threads, caches). FIXED names
the MessagingService methods answered with the floor's prebuilt replies (default: all three): SendMessage,
ReceiveMessage, AckMessage. Against the bare floor process this shows what the broker's environment costs per call;
against the real broker, what its handlers cost. `bench/grpc_threads.py --fixed` runs it. A fixed ReceiveMessage
hands out receipt handles the real AckMessage refuses: fix receive and ack together.
"""

from __future__ import annotations

import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(BENCH), BENCH]

from broker.__main__ import main  # noqa: E402
from broker.grpc.service import MessagingService  # noqa: E402
from grpc_core import fixed_servicer  # noqa: E402

_METHODS = {"send": "SendMessage", "receive": "ReceiveMessage", "ack": "AckMessage"}

_fixed = fixed_servicer()
for _name in filter(None, os.environ.get("FIXED", "send,receive,ack").split(",")):
    if _name not in _METHODS:
        raise SystemExit(f"FIXED: unknown method {_name!r} (known: {', '.join(_METHODS)})")
    setattr(MessagingService, _METHODS[_name], getattr(_fixed, _METHODS[_name]))

if __name__ == "__main__":
    sys.exit(main())
