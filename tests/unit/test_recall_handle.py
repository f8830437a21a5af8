"""Recall handles (protocol/recall.py): the reference's version-1 text, which Java clients decode to route a recall,
with this broker's sixth field; an earlier release's handles; text no broker gave out."""

from __future__ import annotations

import base64

import pytest

from protocol.recall import RecallHandle, build_recall_handle, parse_recall_handle


def test_a_handle_is_the_references_v1_text_with_the_record_offset_appended():
    text = build_recall_handle("Timed", "broker-a", 1_700_000_000_123, "MSGID", "0A00000100002A9F0000000000000042")
    raw = base64.urlsafe_b64decode(text).decode()  # what Java's Base64.getUrlDecoder() reads
    assert raw.split(" ")[:5] == ["v1", "Timed", "broker-a", "1700000000123", "MSGID"]  # the reference's fields
    assert parse_recall_handle(text) == RecallHandle("Timed", "broker-a", 1_700_000_000_123, "MSGID",
                                                     "0A00000100002A9F0000000000000042")


def test_a_five_field_handle_and_an_earlier_releases_handle_parse():
    five = base64.urlsafe_b64encode(b"v1 T b 12 ID").decode().rstrip("=")  # padding left off: still read
    assert parse_recall_handle(five) == RecallHandle("T", "b", 12, "ID", "")
    assert parse_recall_handle("0A00000100002A9F0000000000000042 ID") == \
        RecallHandle("", "", 0, "ID", "0A00000100002A9F0000000000000042")


@pytest.mark.parametrize("text", ["", "x", "not-base64!", base64.urlsafe_b64encode(b"v2 T b 1 ID").decode(),
                                  base64.urlsafe_b64encode(b"v1 T b").decode(), " ID", "OFF ",
                                  base64.urlsafe_b64encode(b"\xff\xfe").decode()])
def test_text_no_broker_gave_out_is_refused_with_one_message(text):
    with pytest.raises(ValueError, match="recall handle is invalid"):
        parse_recall_handle(text)
