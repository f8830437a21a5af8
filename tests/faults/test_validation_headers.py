"""Header integers a Java type cannot hold, or that are no integers at all, get INVALID_PARAMETER naming the field;
extreme in-range values get a real answer; the broker never logs a traceback for any of them (issue 11)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import headers as H
from protocol.codes import RequestCode as R

from tests.support.wire import WireClient

from tests.support.validation_cases import cases_for, prepare, request_table, run_int_cases

CODES = sorted(request_table(), key=int)


@pytest.fixture(scope="module")
def prepared(shared_broker):
    import asyncio

    async def setup() -> None:
        async with await WireClient.connect(shared_broker.addr) as client:
            await prepare(client)

    asyncio.run(setup())
    return shared_broker


@pytest.mark.parametrize("code", CODES, ids=lambda c: R(c).name)
async def test_every_integer_field_refuses_what_its_java_type_cannot_hold(prepared, code):
    log_before = len(prepared.output)
    async with await WireClient.connect(prepared.addr) as client:
        outcomes = await run_int_cases(client, code)
        # the connection survived every case and the broker still answers normally
        alive = await client.request(R.GET_MAX_OFFSET, {"topic": "ValidationTopic", "queueId": "0"})
        assert alive.code == 0
    assert len(outcomes) == len(cases_for(code))
    bad = [(o.field, o.value, o.kind, o.response_code, o.remark[:120]) for o in outcomes if not o.ok]
    assert not bad, f"{R(code).name}: unexpected answers {bad}"
    overflow = [o for o in outcomes if o.kind == "overflow"]
    assert all("does not fit a Java" in o.remark for o in overflow)
    new_log = "".join(prepared.output[log_before:])
    assert "Traceback" not in new_log and "struct.error" not in new_log, new_log[-2000:]


# ---- the generated decoders, property-based: any integer either decodes unchanged or is refused by name ----
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.integers(), st.integers(min_value=-(2**80), max_value=2**80)),
       as_text=st.booleans())
def test_decoder_accepts_exactly_the_java_range(value, as_text):
    raw = str(value) if as_text else value
    ext = {"consumerGroup": "g", "topic": "t", "queueId": raw, "queueOffset": raw, "maxMsgNums": "1",
           "sysFlag": "0"}
    fits32 = _INT32[0] <= value <= _INT32[1]
    fits64 = _INT64[0] <= value <= _INT64[1]
    if fits32:
        header = H.PullMessageRequestHeader.decode(ext)
        assert header.queue_id == value and header.queue_offset == value
    else:
        with pytest.raises(H.HeaderError, match="'queueId'.*Java int$"):
            H.PullMessageRequestHeader.decode(ext)
        ext["queueId"] = "0"
        if fits64:
            assert H.PullMessageRequestHeader.decode(ext).queue_offset == value
        else:
            with pytest.raises(H.HeaderError, match="'queueOffset'.*Java long$"):
                H.PullMessageRequestHeader.decode(ext)
