"""broker/core/send_limits.py: the per-client topic-creation bucket, the properties check, and their conf keys
(issue 27). The broker-level behaviour is tested with real brokers in tests/faults/test_flood_*.py."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, ConfigError, load_broker_config
from broker.core.send_limits import SendLimits, TopicCreationBuckets, client_address


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def spend_all(buckets: TopicCreationBuckets, key: str) -> int:
    spent = 0
    while buckets.available(key):
        buckets.spend(key)
        spent += 1
    return spent


def test_a_burst_then_the_rate_per_client():
    clock = Clock()
    buckets = TopicCreationBuckets(per_second=2, burst=5, clock=clock)
    assert spend_all(buckets, "10.0.0.1") == 5
    assert not buckets.available("10.0.0.1")
    assert buckets.available("10.0.0.2")  # another address has its own bucket
    clock.now += 1.0
    assert spend_all(buckets, "10.0.0.1") == 2
    clock.now += 3600
    assert spend_all(buckets, "10.0.0.1") == 5  # refills up to the burst, no further


def test_the_table_forgets_full_buckets_and_then_shares_one():
    clock = Clock()
    buckets = TopicCreationBuckets(per_second=1, burst=2, clock=clock, max_clients=3)
    for host in ("a", "b", "c"):
        buckets.spend(host)
    assert len(buckets._buckets) == 3
    # the table is full of spending clients: a new address shares the overflow bucket (never unlimited)
    assert spend_all(buckets, "d") == 2 and not buckets.available("e")
    clock.now += 10  # every bucket filled up again: forgotten, and new addresses get their own
    assert buckets.available("f") and "f" in buckets._buckets and "a" not in buckets._buckets


def test_client_address_spellings():
    class Channel:
        def __init__(self, host):
            self.remote_host = host

    assert client_address(Channel("[::1]")) == "::1"
    assert client_address(Channel("::ffff:10.1.2.3")) == "10.1.2.3"
    assert client_address(Channel("10.1.2.3")) == "10.1.2.3"


def limits(**keys) -> SendLimits:
    return SendLimits(BrokerConfig(store_path_root_dir="/nonexistent-store", **keys))


def props(count: int, value: str = "v") -> str:
    return "".join(f"k{i}\x01{value}\x02" for i in range(count))


def test_properties_count_and_bytes():
    check = limits(max_message_properties_count=16, max_message_properties_bytes=1024)
    assert check.properties_refusal(props(16)) is None
    assert check.properties_refusal(None) is None and check.properties_refusal("") is None
    remark = check.properties_refusal(props(17))
    assert "17 properties" in remark and "maxMessagePropertiesCount=16" in remark
    assert "maxMessagePropertiesCount" in check.properties_refusal(props(16) + "x\x01y")  # no final separator
    assert "maxMessagePropertiesCount" in check.properties_refusal("a\x02" * 40)  # malformed entries count too
    big = check.properties_refusal(props(2, "v" * 600))
    assert "bytes" in big and "maxMessagePropertiesBytes=1024" in big
    assert check.properties_refusal(props(1, "é" * 400)) is None  # 800 bytes
    assert "maxMessagePropertiesBytes" in check.properties_refusal(props(1, "é" * 600))  # 1,200 bytes, 600 chars
    raw = props(17).encode()
    assert "batch message 3 has 17 properties" in check.raw_properties_refusal(raw, "batch message 3")
    assert check.raw_properties_refusal(props(16).encode(), "x") is None
    # callers skip strings no longer than check_from: none of those can break a limit
    assert check.check_from == 16


def test_defaults_stay_well_above_real_use():
    check = limits()
    assert (check.rate, check.burst, check.max_count, check.max_bytes) == (10, 50, 256, 32767)
    assert check.properties_refusal(props(200, "x" * 100)) is None


@pytest.mark.parametrize("text, key", [
    ("autoCreateTopicRatePerClient=-1\n", "autoCreateTopicRatePerClient"),
    ("autoCreateTopicBurstPerClient=0\n", "autoCreateTopicBurstPerClient"),
    ("maxMessagePropertiesCount=4\n", "maxMessagePropertiesCount"),
    ("maxMessagePropertiesBytes=40000\n", "maxMessagePropertiesBytes"),
    ("maxMessagePropertiesBytes=ten\n", "maxMessagePropertiesBytes"),
])
def test_bad_values_stop_start_up_naming_the_key(tmp_path, text, key):
    path = tmp_path / "broker.conf"
    path.write_text(f"storePathRootDir={tmp_path}/store\n" + text)
    with pytest.raises(ConfigError) as info:
        load_broker_config(str(path))
    assert f"key '{key}'" in str(info.value) and "\n" not in str(info.value)


def test_rate_zero_turns_the_creation_limit_off():
    assert limits(auto_create_topic_rate_per_client=0).buckets is None
