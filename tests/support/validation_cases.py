"""Bad values for every integer header field of every request the broker serves, and what must come back.

Shared by tests/faults/test_validation_headers.py (asserts) and bench/reliability_validation.py (prints the
table). Each case is (request code, base extFields, body, field under test, value); `run_int_cases` fires them
at a broker and returns one `Outcome` per case.

Expectations:
* a value outside the field's Java type (int32 / int64) -> INVALID_PARAMETER naming the field;
* a value that is not an integer at all -> INVALID_PARAMETER naming the field;
* an extreme value inside the type -> any answer but SYSTEM_ERROR, except the reference broker's own
  SYSTEM_ERROR answers listed in REFERENCE_SYSTEM_ERRORS (a message looked up by a commit-log offset that holds
  none);
* never a traceback in the broker's log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from protocol.codes import RequestCode as R
from protocol.codes import ResponseCode as C
from protocol.message import BatchEntry, encode_batch_body

from tests.support.wire import WireClient, pull_fields, send_v1_fields, send_v2_fields

TOPIC = "ValidationTopic"
GROUP = "validationGroup"
PULL_SUB_COMMIT = 0x4 | 0x1

OVERFLOW_INT32 = ["2147483648", "-2147483649", "9223372036854775807", "1e18"]
OVERFLOW_INT64 = ["9223372036854775808", "-9223372036854775809", str(2**70), str(-(2**70)), "1e300"]
NOT_A_NUMBER = ["abc", "1e400", "nan", "12abc", "0x10"]
IN_RANGE_INT32 = ["-1", "0", "2147483647", "-2147483648"]
IN_RANGE_INT64 = ["-1", "0", "9223372036854775807", "-9223372036854775808"]

# (request code, remark fragment): the reference broker answers these with SYSTEM_ERROR too.
REFERENCE_SYSTEM_ERRORS = [
    (R.VIEW_MESSAGE_BY_ID, "can not find message by the offset"),
    (R.CONSUMER_SEND_MSG_BACK, "look message by offset failed"),
]


def request_table() -> dict[int, tuple[dict[str, str], bytes, dict[str, str]]]:
    """request code -> (valid base extFields, body, {integer field: 'int32' | 'int64'})."""
    now = str(int(time.time() * 1000))
    batch = encode_batch_body([BatchEntry(0, b"b1", "UNIQ_KEY\x01batch-1\x02")])
    send_v2 = send_v2_fields(TOPIC, 0)
    return {
        R.SEND_MESSAGE: (send_v1_fields(TOPIC, 0, "UNIQ_KEY\x01v1\x02"), b"hello", {
            "defaultTopicQueueNums": "int32", "queueId": "int32", "sysFlag": "int32", "bornTimestamp": "int64",
            "flag": "int32", "reconsumeTimes": "int32", "maxReconsumeTimes": "int32"}),
        R.SEND_MESSAGE_V2: (send_v2, b"hello", {
            "d": "int32", "e": "int32", "f": "int32", "g": "int64", "h": "int32", "j": "int32", "l": "int32"}),
        R.SEND_BATCH_MESSAGE: ({**send_v2, "m": "true"}, batch, {
            "d": "int32", "e": "int32", "f": "int32", "g": "int64", "j": "int32"}),
        R.PULL_MESSAGE: ({**pull_fields(TOPIC, GROUP, 0, 0, sys_flag=PULL_SUB_COMMIT), "suspendTimeoutMillis": "100"},
                         b"", {
            "queueId": "int32", "queueOffset": "int64", "maxMsgNums": "int32", "sysFlag": "int32",
            "commitOffset": "int64", "suspendTimeoutMillis": "int64", "subVersion": "int64", "maxMsgBytes": "int32",
            "requestSource": "int32"}),
        R.QUERY_MESSAGE: ({"topic": TOPIC, "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": now},
                          b"", {"maxNum": "int32", "beginTimestamp": "int64", "endTimestamp": "int64"}),
        R.QUERY_CONSUMER_OFFSET: ({"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}, b"",
                                  {"queueId": "int32"}),
        R.UPDATE_CONSUMER_OFFSET: ({"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "0"}, b"",
                                   {"queueId": "int32", "commitOffset": "int64"}),
        R.SEARCH_OFFSET_BY_TIMESTAMP: ({"topic": TOPIC, "queueId": "0", "timestamp": now}, b"",
                                       {"queueId": "int32", "timestamp": "int64"}),
        R.GET_MAX_OFFSET: ({"topic": TOPIC, "queueId": "0"}, b"", {"queueId": "int32"}),
        R.GET_MIN_OFFSET: ({"topic": TOPIC, "queueId": "0"}, b"", {"queueId": "int32"}),
        R.GET_EARLIEST_MSG_STORETIME: ({"topic": TOPIC, "queueId": "0"}, b"", {"queueId": "int32"}),
        R.VIEW_MESSAGE_BY_ID: ({"offset": "0"}, b"", {"offset": "int64"}),
        R.CONSUMER_SEND_MSG_BACK: ({"offset": "0", "group": GROUP, "delayLevel": "1", "maxReconsumeTimes": "16"}, b"",
                                   {"offset": "int64", "delayLevel": "int32", "maxReconsumeTimes": "int32"}),
        R.UPDATE_AND_CREATE_TOPIC: ({"topic": TOPIC + "2", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
                                     "topicSysFlag": "0"}, b"",
                                    {"readQueueNums": "int32", "writeQueueNums": "int32", "perm": "int32",
                                     "topicSysFlag": "int32"}),
        R.RESEND_DLQ_MESSAGE: ({"group": GROUP, "offset": "0", "queueId": "0"}, b"",
                               {"offset": "int64", "queueId": "int32"}),
    }


@dataclass
class Outcome:
    code: int
    field: str
    value: str
    kind: str  # "overflow" | "not-a-number" | "in-range"
    response_code: int | None
    remark: str

    @property
    def ok(self) -> bool:
        """Does the answer meet the expectation of the module docstring?"""
        if self.response_code is None:
            return False
        if self.kind in ("overflow", "not-a-number"):
            names_field = f"'{self.field}" in self.remark or f"({self.field})" in self.remark
            return self.response_code == C.INVALID_PARAMETER and names_field
        if self.response_code != C.SYSTEM_ERROR:
            return True
        return any(self.code == code and fragment in self.remark for code, fragment in REFERENCE_SYSTEM_ERRORS)


def cases_for(code: int) -> list[tuple[str, str, str]]:
    """(field, value, kind) for every integer field of `code`'s header."""
    _, _, fields = request_table()[code]
    out = []
    for field, java in fields.items():
        overflow = OVERFLOW_INT32 if java == "int32" else OVERFLOW_INT64
        in_range = IN_RANGE_INT32 if java == "int32" else IN_RANGE_INT64
        out += [(field, v, "overflow") for v in overflow]
        out += [(field, v, "not-a-number") for v in NOT_A_NUMBER]
        out += [(field, v, "in-range") for v in in_range]
    return out


async def prepare(client: WireClient) -> None:
    """The topic, one message in it, and the group's DLQ, so every request reaches its real checks."""
    for topic in (TOPIC, "%DLQ%" + GROUP):
        created = await client.request(R.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": "4",
                                                                   "writeQueueNums": "4", "perm": "6"})
        assert created.code == C.SUCCESS, created.remark
    sent = await client.request(R.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0), b"seed")
    assert sent.code == C.SUCCESS, sent.remark


async def run_int_cases(client: WireClient, code: int) -> list[Outcome]:
    base, body, _ = request_table()[code]
    outcomes = []
    for field, value, kind in cases_for(code):
        ext = dict(base)
        ext[field] = value
        try:
            response = await client.request(code, ext, body, timeout=10)
            outcomes.append(Outcome(code, field, value, kind, response.code, response.remark or ""))
        except Exception as exc:  # no answer at all is a failure the caller reports
            outcomes.append(Outcome(code, field, value, kind, None, f"no answer: {exc!r}"))
    return outcomes


async def wait_for_log(broker, text: str, timeout: float = 5.0) -> bool:
    """True once `text` shows up in the broker's output (read by a thread, so it may lag the response)."""
    import asyncio

    deadline = time.monotonic() + timeout
    while text not in broker.log_text():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True
