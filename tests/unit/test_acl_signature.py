"""The plain-ACL signature matches the reference's worked examples (acl-and-tls.md §3.4)."""

from __future__ import annotations

from protocol.acl_signature import sign, signature_matches, signed_content


def test_heartbeat_example():
    assert sign("12345678", {"AccessKey": "rocketmq2"}, b'{"clientID":"c1"}') == "QR9hAD56dIUZLomQ+TNsim3F/8M="


def test_send_example_with_strings_or_json_types():
    as_strings = {"AccessKey": "rocketmq2", "OnsChannel": "ALIYUN", "a": "PG", "b": "TopicA", "c": "TBW102",
                  "d": "4", "e": "0", "f": "0", "g": "1700000000000", "h": "0", "i": "TAGS\u0001TagA\u0002",
                  "j": "0", "k": "false", "m": "false"}
    typed = dict(as_strings, d=4, e=0, f=0, g=1700000000000, h=0, j=0, k=False, m=False)
    for fields in (as_strings, typed):
        assert sign("12345678", fields, b"hello") == "/Vz1RfRVvER+skfuHIZADpNMl8E="


def test_security_token_is_signed_and_signature_left_out():
    fields = {"AccessKey": "rocketmq2", "SecurityToken": "tok", "topic": "TopicA"}
    assert sign("12345678", fields) == "6qzUBBxpGi/W/wHdgWOeuLycNCs="
    signed = dict(fields, Signature="6qzUBBxpGi/W/wHdgWOeuLycNCs=")
    assert signed_content(signed, None) == b"rocketmq2tokTopicA"
    assert signature_matches("12345678", signed)
    assert not signature_matches("other", signed)
    assert not signature_matches("12345678", dict(signed, topic="TopicB"))


def test_keys_sort_by_utf16_code_units():
    # U+FF5E sorts after U+1F600 by code point but before it in UTF-16 (a surrogate pair starts with 0xD83D).
    assert signed_content({"\uff5e": "x", "\U0001f600": "y"}, None) == "yx".encode()
