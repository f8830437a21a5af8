"""Wire helpers for transactional sends (half message, END_TRANSACTION fields), shared by the broker transaction tests
and the Spark transaction test; no conftest import, so any test directory can use them."""

from __future__ import annotations

import itertools

from protocol.codes import RequestCode as RC
from protocol.ids import decode_offset_msg_id

from tests.support.wire import WireClient, props, send_v2_fields

GROUP = "tx-pg"
_ids = itertools.count(1)


class Half:
    """A half message as the producer knows it from the send answer."""

    def __init__(self, resp, uniq: str, topic: str, body: bytes) -> None:
        assert resp.code == 0, resp.remark
        self.uniq = uniq
        self.topic = topic
        self.body = body
        self.queue_id = int(resp.ext_fields["queueId"])
        self.table_offset = int(resp.ext_fields["queueOffset"])
        self.commit_log_offset = decode_offset_msg_id(resp.ext_fields["msgId"])[2]


async def half_send(client: WireClient, topic: str, body: bytes, *, group: str = GROUP, queue_id: int = 1,
                    **extra: str) -> Half:
    uniq = f"7F000001000000000000TX{next(_ids):010d}"
    text = props(TRAN_MSG="true", PGROUP=group, TAGS="TagA", KEYS="order-1", UNIQ_KEY=uniq, WAIT="true",
                 color="blue", **extra)
    resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(topic, queue_id, text, group=group, sys_flag=4),
                                body)
    return Half(resp, uniq, topic, body)


def end_fields(half: Half, decision: int, *, group: str = GROUP, from_check: bool = False,
               table_offset: int | None = None, commit_log_offset: int | None = None) -> dict[str, str]:
    return {"producerGroup": group, "tranStateTableOffset": str(half.table_offset if table_offset is None
                                                                 else table_offset),
            "commitLogOffset": str(half.commit_log_offset if commit_log_offset is None else commit_log_offset),
            "commitOrRollback": str(decision), "fromTransactionCheck": "true" if from_check else "false",
            "msgId": half.uniq}
