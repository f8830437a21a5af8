"""Hot reload of plain_acl.yml (broker/acl/watcher.py) and the standalone name server's ACL keys."""

from __future__ import annotations

import logging
import os

import pytest

from broker.acl.accounts import load_acl_file
from broker.acl.watcher import AclFileWatcher
from broker.namesrv.__main__ import _namesrv_acl, load_namesrv_config

GOOD = "accounts:\n  - accessKey: first_key\n    secretKey: first_secret\n"
BETTER = GOOD + "  - accessKey: second_key\n    secretKey: second_secret\n"


def bump(path, text):
    path.write_text(text)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a distinct mtime even on coarse clocks


async def test_changed_file_is_applied_and_a_bad_one_keeps_the_accounts(tmp_path, caplog):
    path = tmp_path / "plain_acl.yml"
    path.write_text(GOOD)
    applied = []
    watcher = AclFileWatcher(str(path), applied.append)
    assert await watcher.check() is False  # unchanged since construction
    bump(path, BETTER)
    assert await watcher.check() is True and set(applied[-1].accounts) == {"first_key", "second_key"}
    with caplog.at_level(logging.ERROR, logger="broker.acl.watcher"):
        bump(path, "accounts:\n  - accessKey: tiny\n    secretKey: x\n")
        assert await watcher.check() is False
        assert await watcher.check() is False  # the same bad file: no second error
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "keeping the previous accounts" in errors[0].getMessage()
    assert len(applied) == 1
    os.remove(path)  # a vanished file is a failed reload too, not a crash
    assert await watcher.check() is False and len(applied) == 1


def test_namesrv_conf_acl_keys(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=9999\naclEnable=true\n")
    settings, _ = load_namesrv_config(str(conf))
    assert settings["aclEnable"] is True and settings["aclFile"] == str(tmp_path / "plain_acl.yml")
    with pytest.raises(ValueError, match=r"^key 'aclFile': cannot read .*plain_acl.yml"):
        _namesrv_acl(settings)
    (tmp_path / "plain_acl.yml").write_text(GOOD)
    validator, watcher = _namesrv_acl(settings)
    assert validator is not None and watcher is not None and "first_key" in validator.config.accounts
    conf.write_text("aclEnable=yes\n")
    with pytest.raises(ValueError, match="aclEnable: expected true or false"):
        load_namesrv_config(str(conf))
    assert load_acl_file(tmp_path / "plain_acl.yml").accounts
