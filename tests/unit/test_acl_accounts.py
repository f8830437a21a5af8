"""plain_acl.yml loading, permission words and address patterns (broker/acl/accounts.py)."""

from __future__ import annotations

import pytest

from broker.acl.accounts import (
    DENY,
    PUB,
    SUB,
    AclFileError,
    compile_address_pattern,
    load_acl_file,
    parse_acl_text,
    parse_permission,
)

EXAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.1.1-100
accounts:
  - accessKey: ops_admin_01
    secretKey: "0p5-s3cret"
    whiteRemoteAddress:
    admin: true
  - accessKey: orders_app
    secretKey: orders-secret-1
    whiteRemoteAddress: 192.168.0.*
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - OrderEvents=PUB|SUB
      - AuditLog=PUB
      - Payroll=DENY
    groupPerms:
      - billing_consumers=DENY
"""


def test_reference_example_loads_into_typed_accounts():
    config = parse_acl_text(EXAMPLE, "plain_acl.yml")
    admin, app = config.accounts["ops_admin_01"], config.accounts["orders_app"]
    assert admin.admin and admin.unrestricted_admin and admin.secret_key == "0p5-s3cret"
    assert not admin.white_address("127.0.0.1")
    assert not app.admin and app.white_address("192.168.0.9") and not app.white_address("192.168.2.9")
    assert app.permission_for("OrderEvents") == PUB | SUB
    assert app.permission_for("AuditLog") == PUB
    assert app.permission_for("Payroll") == DENY
    assert app.permission_for("Other") == DENY  # defaultTopicPerm
    assert app.permission_for("%RETRY%billing_consumers") == DENY
    assert app.permission_for("%RETRY%any_group") == SUB  # defaultGroupPerm
    assert config.globally_white("10.10.103.7") and config.globally_white("192.168.1.100")
    assert not config.globally_white("192.168.1.101")
    assert "0p5-s3cret" not in repr(admin)


@pytest.mark.parametrize("text,bits", [
    ("DENY", DENY), ("PUB", PUB), ("SUB", SUB), ("PUB|SUB", PUB | SUB), ("SUB|PUB", PUB | SUB), (" PUB ", PUB),
    ("pub", DENY), ("ANY", DENY), ("PUB | SUB", DENY), (None, DENY), ("", DENY),
])
def test_permission_words(text, bits):
    assert parse_permission(text) == bits


def test_defaults_are_deny_and_numeric_secret_is_text():
    config = parse_acl_text("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n")
    account = config.accounts["rocketmq2"]
    assert account.secret_key == "12345678" and not account.admin
    assert account.permission_for("T") == DENY and account.permission_for("%RETRY%g") == DENY


def test_retry_topic_entry_and_group_entry_are_the_same_key():
    config = parse_acl_text("accounts:\n  - accessKey: someone1\n    secretKey: secret12\n"
                            "    topicPerms: ['%RETRY%g1=SUB']\n    groupPerms: ['g2=SUB']\n")
    account = config.accounts["someone1"]
    assert account.permission_for("%RETRY%g1") == SUB and account.permission_for("%RETRY%g2") == SUB


@pytest.mark.parametrize("text,fragment", [
    ("accounts:\n  - accessKey: short\n    secretKey: secret12\n", "accessKey must be longer than 6"),
    ("accounts:\n  - accessKey: longenough\n    secretKey: 123456\n", "account 'longenough': secretKey"),
    ("accounts:\n  - accessKey: longenough\n    secretKey: secret12\n    topicPerms: ['A=PUB=SUB']\n",
     "topicPerms entry 'A=PUB=SUB' is not name=PERM"),
    ("accounts:\n  - accessKey: longenough\n    secretKey: secret12\n    whiteRemoteAddress: 1.2.3.9-4\n",
     "whiteRemoteAddress: bad address pattern"),
    ("globalWhiteRemoteAddresses: ['1.2.{3,4}.5']\n", "globalWhiteRemoteAddresses"),
    ("accounts: [\n", "not valid YAML"),
    ("- just a list\n", "expected a map"),
    ("accounts:\n  - accessKey: twice_key\n    secretKey: secret12\n  - accessKey: twice_key\n    secretKey: secret34\n",
     "appears twice"),
])
def test_invalid_files_name_the_source_and_the_problem(text, fragment):
    with pytest.raises(AclFileError) as info:
        parse_acl_text(text, "/etc/acl.yml")
    assert fragment in str(info.value) and "/etc/acl.yml" in str(info.value)


def test_unreadable_file_names_the_path(tmp_path):
    with pytest.raises(AclFileError, match="cannot read .*missing.yml"):
        load_acl_file(tmp_path / "missing.yml")


def test_empty_file_means_no_accounts(tmp_path):
    (tmp_path / "acl.yml").write_text("")
    config = load_acl_file(tmp_path / "acl.yml")
    assert config.accounts == {} and config.global_white == ()


@pytest.mark.parametrize("pattern,yes,no", [
    (None, [], ["127.0.0.1"]),
    ("", [], ["127.0.0.1"]),
    ("*", ["1.2.3.4", "::1"], []),
    ("*.*.*.*", ["1.2.3.4"], []),
    ("192.168.1.1", ["192.168.1.1", "::ffff:192.168.1.1"], ["192.168.1.2"]),
    ("192.168.1.1,192.168.1.2", ["192.168.1.2"], ["192.168.1.3"]),
    ("192.168.1.{1,2,3}", ["192.168.1.3"], ["192.168.1.4", "192.168.2.1"]),
    ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1"]),
    ("10.*.*.*", ["10.200.1.1"], ["11.0.0.1"]),
    ("192.168.1.1-100", ["192.168.1.1", "192.168.1.100"], ["192.168.1.101", "192.168.1.0"]),
    ("192.168.1-10.5", ["192.168.3.77"], ["192.168.11.5"]),  # segments after the first range are ignored
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["::2"]),
])
def test_address_patterns(pattern, yes, no):
    matches = compile_address_pattern(pattern)
    assert all(matches(ip) for ip in yes), yes
    assert not any(matches(ip) for ip in no), no


@pytest.mark.parametrize("pattern", ["1.2.3.9-4", "1.2.3.300", "*.1.2.3", "1.2.{3,4}.5", "1.2.3.4,nope", "hello"])
def test_malformed_patterns_are_refused(pattern):
    with pytest.raises(ValueError):
        compile_address_pattern(pattern)
