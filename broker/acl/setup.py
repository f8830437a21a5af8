"""Plain ACL of a broker process (aclEnable): the accounts file read at start-up, so that a bad one stops it."""

from __future__ import annotations

import logging
import os
from typing import Any

from broker.errors import ConfigError

log = logging.getLogger("broker.broker")  # the boot's own logger: the "ACL on" line reads as before

__all__ = ["build_acl"]


def build_acl(config: Any, lookups: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """(validator, file watcher, request guard) when aclEnable=true, else (None, None, None); ``lookups`` (store,
    offsets, consumers) find the topic of a record named by its offset and the topics a group consumes.
    An unreadable or invalid aclFile raises ConfigError naming the key and the file."""
    if not config.acl_enable:
        return None, None, None
    # imported only with ACL on (PyYAML and the validator are not needed otherwise)
    from broker.acl.accounts import AclFileError, load_acl_file
    from broker.acl.authorizer import Authorizer
    from broker.acl.resources import BrokerLookups
    from broker.acl.validator import AclValidator
    from broker.acl.watcher import AclFileWatcher

    path = config.acl_file or os.path.abspath("plain_acl.yml")
    try:
        accounts = load_acl_file(path)
    except AclFileError as exc:
        raise ConfigError(f"key 'aclFile': {exc}", "aclFile") from None
    validator = AclValidator(Authorizer(accounts, time_tolerance_s=float(config.acl_time_tolerance_seconds)),
                             BrokerLookups(*lookups))
    log.info("ACL on: %d account(s) from %s", len(accounts.accounts), path)
    return validator, AclFileWatcher(path, validator.update), validator.request_guard()
