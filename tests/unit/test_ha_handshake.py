"""The HA link's authentication handshake (protocol/ha.py) and the record name check (protocol/names.py), sans-I/O:
replays, reflections, wrong secrets and non-admin accounts fail; the real pair completes in any chunking."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, ConfigError
from protocol.ha import (
    HANDSHAKE_MAGIC,
    HandshakeError,
    MasterHandshake,
    ReportReader,
    SlaveHandshake,
    encode_report,
    looks_like_handshake,
)
from protocol.names import record_names_problem, topic_problem

ACCOUNTS = {"ha_admin01": ("secret-one", True), "app_key01": ("app-secret", False)}


def admin_secret(key: str) -> str | None:
    secret, admin = ACCOUNTS.get(key, (None, False))
    return secret if admin else None


def run(master: MasterHandshake, slave: SlaveHandshake, chunk: int = 1 << 20, after: bytes = b"") -> bytes:
    """Deliver everything both ways in chunks of `chunk` bytes, as a connection would (once the master is done the
    bytes go to the replication, not the handshake); returns what the replication gets."""
    def deliver(data: bytes, to) -> bytes:
        for i in range(0, len(data), chunk):
            if to.done:
                return data[i:]
            to.feed(data[i:i + chunk])
        return b""
    deliver(slave.hello(), master)
    deliver(master.outbound(), slave)
    leftover = deliver(slave.outbound() + after, master)
    deliver(master.outbound(), slave)
    return master.rest + leftover


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_the_real_pair_authenticates_whatever_the_chunking(chunk):
    master, slave = MasterHandshake(admin_secret), SlaveHandshake("ha_admin01", "secret-one")
    first = run(master, slave, chunk, after=encode_report(42))
    assert master.done and slave.done and master.access_key == "ha_admin01"
    assert ReportReader().feed_all(first) == [42]  # the first report right after the PROOF is kept


@pytest.mark.parametrize("key, secret, reason", [
    ("ha_admin01", "wrong-secret", "could not prove"),  # the slave checks the master's proof first
    ("app_key01", "app-secret", "no admin account"),
    ("nobody123", "whatever1", "no admin account"),
])
def test_wrong_secret_non_admin_and_unknown_accounts_fail(key, secret, reason):
    master, slave = MasterHandshake(admin_secret), SlaveHandshake(key, secret)
    with pytest.raises(HandshakeError, match=reason):
        run(master, slave)
    assert not master.done


def test_a_fake_slave_without_the_secret_is_refused_and_gets_no_log():
    master = MasterHandshake(admin_secret)
    slave = SlaveHandshake("ha_admin01", "secret-one")
    master.feed(slave.hello())
    master.outbound()
    forged = HANDSHAKE_MAGIC + bytes([3, 0, 32]) + bytes(32)
    with pytest.raises(HandshakeError, match="wrong proof"):
        master.feed(forged + encode_report(1 << 30))
    assert not master.done and master.outbound()[4] == 5  # a REFUSE, nothing else


def test_a_replayed_proof_fails_against_a_fresh_master_nonce():
    first, slave = MasterHandshake(admin_secret), SlaveHandshake("ha_admin01", "secret-one", nonce=b"s" * 32)
    first.feed(slave.hello())
    slave.feed(first.outbound())
    recorded_hello, recorded_proof = slave.hello(), slave.outbound()
    second = MasterHandshake(admin_secret)  # an eavesdropper replays the recorded HELLO and PROOF
    second.feed(recorded_hello)
    with pytest.raises(HandshakeError, match="wrong proof"):
        second.feed(recorded_proof)


def test_a_reflected_challenge_is_no_proof():
    """A fake master cannot use the real master's proof (role "master") as a slave proof, nor the reverse."""
    master = MasterHandshake(admin_secret)
    slave = SlaveHandshake("ha_admin01", "secret-one")
    master.feed(slave.hello())
    challenge = master.outbound()
    master_proof = challenge[7 + 32:]
    with pytest.raises(HandshakeError, match="wrong proof"):
        master.feed(HANDSHAKE_MAGIC + bytes([3, 0, 32]) + master_proof)
    echo = SlaveHandshake("ha_admin01", "secret-one", nonce=b"n" * 32)
    hello = echo.hello()
    nonce_s = hello[8:8 + 32]
    with pytest.raises(HandshakeError, match="nonce equals"):  # the slave's own nonce sent back as the master's
        echo.feed(HANDSHAKE_MAGIC + bytes([2, 0, 64]) + nonce_s + bytes(32))


def test_a_plain_report_is_told_apart_and_refused_under_acl():
    assert looks_like_handshake(SlaveHandshake("ha_admin01", "x" * 8).hello())
    assert not looks_like_handshake(encode_report(0)) and not looks_like_handshake(encode_report(1 << 40))
    master = MasterHandshake(admin_secret)
    with pytest.raises(HandshakeError, match="did not send a handshake"):
        master.feed(encode_report(0))
    assert b"authentication required" in master.outbound()


def test_oversized_or_unknown_messages_are_refused():
    master = MasterHandshake(admin_secret)
    with pytest.raises(HandshakeError, match="bad handshake message"):
        master.feed(HANDSHAKE_MAGIC + bytes([1]) + (4000).to_bytes(2, "big"))
    with pytest.raises(HandshakeError, match="bad handshake message"):
        MasterHandshake(admin_secret).feed(HANDSHAKE_MAGIC + bytes([9, 0, 0]))


@pytest.mark.parametrize("raw, queue_id, fragment", [
    (b"../x", 0, "illegal topic name"),
    (b"a/b", 0, "illegal topic name"),
    (b"", 0, "blank"),
    (b"T" * 256, 0, "longer than a directory name"),
    (b"..", 0, "illegal topic name"),
    (b"a\\b", 0, "illegal topic name"),
    (b"Orders\n", 0, "illegal topic name"),
    (b"\xff\xfe", 0, "not UTF-8"),
    (b"Orders", -1, "queue id -1"),
    (b"Orders", 70000, "queue id 70000"),
])
def test_record_names_that_could_be_no_queue_are_refused(raw, queue_id, fragment):
    assert fragment in record_names_problem(raw, queue_id)


def test_legal_record_names_pass_and_match_the_request_rule():
    for topic in ("Orders", "%RETRY%group-1", "%DLQ%" + "g" * 250, "rmq_sys_wheel_timer", "a|b"):
        assert record_names_problem(topic.encode(), 3) is None
        assert record_names_problem(topic.encode(), 3) is None  # cached
        assert topic_problem(topic) is None
    assert topic_problem("../x") is not None
    # names a reference broker may have stored are data when read back, though no new topic may take them
    for stored in ("L" * 130, "%RETRY%group+Orders", "%LMQ%shop.orders"):
        assert record_names_problem(stored.encode(), 0) is None and topic_problem(stored) is not None


def test_a_slave_under_acl_needs_credentials_and_the_cap_is_checked():
    with pytest.raises(ConfigError) as err:
        BrokerConfig(broker_role="SLAVE", broker_id=1, acl_enable=True)
    assert err.value.key == "accessKey"
    BrokerConfig(broker_role="SLAVE", broker_id=1, acl_enable=True, access_key="ha_admin01", secret_key="secret-1")
    with pytest.raises(ConfigError) as err:
        BrokerConfig(ha_max_connections=0)
    assert err.value.key == "haMaxConnections"
