"""Failed console sign-ins slow down and then lock out, per client address and per account.

After ``delay_after`` failures a key (an address, or an access key) must wait before its next attempt: 1 s, then
twice as long after each further failure, at most ``max_delay_s``. After ``lock_after`` failures it is refused for
``lock_s``. An attempt made too early is refused without looking at the secret (so it neither counts nor tells
anything), with the seconds to wait (HTTP Retry-After). Failures are forgotten ``lock_s`` after the last one, and
the tables hold at most ``max_keys`` entries each (the oldest go first), so a flood of names or addresses cannot
grow memory. Nothing sleeps: a refusal is answered at once and holds no connection.

Accounts get their own, higher thresholds by default (dashboardSignInAccount*): one guessing address is locked out
long before the account it guesses is, so its owner still signs in from elsewhere, while guesses spread over many
addresses still lock the account."""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from broker.acl.accounts import unmap_ipv4

__all__ = ["MAX_KEYS", "SignInRefusal", "SignInThrottle", "ThrottlePolicy", "address_key"]

MAX_KEYS = 10_000
BASE_DELAY_S = 1.0


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    delay_after: int = 5
    lock_after: int = 20
    max_delay_s: float = 60.0
    lock_s: float = 900.0


@dataclass(frozen=True, slots=True)
class SignInRefusal:
    message: str
    retry_after_s: int


@dataclass(slots=True)
class _Failures:
    count: int = 0
    last: float = 0.0
    locked_until: float = 0.0


class FailureTable:
    """Failures per key under one policy; bounded to ``max_keys`` entries."""

    def __init__(self, policy: ThrottlePolicy, max_keys: int = MAX_KEYS) -> None:
        self.policy = policy
        self.max_keys = max_keys
        self._entries: OrderedDict[str, _Failures] = OrderedDict()  # oldest last failure first

    def __len__(self) -> int:
        return len(self._entries)

    def _live(self, key: str, now: float) -> _Failures | None:
        entry = self._entries.get(key)
        if entry is not None and now >= entry.locked_until and now - entry.last >= self.policy.lock_s:
            del self._entries[key]  # forgotten
            return None
        return entry

    def wait(self, key: str, now: float) -> tuple[float, bool]:
        """(seconds before ``key`` may try again, locked?); (0, False) when it may try now."""
        entry = self._live(key, now)
        if entry is None:
            return 0.0, False
        if entry.locked_until > now:
            return entry.locked_until - now, True
        if entry.count < self.policy.delay_after:
            return 0.0, False
        delay = min(self.policy.max_delay_s, BASE_DELAY_S * 2.0 ** min(entry.count - self.policy.delay_after, 62))
        return max(0.0, entry.last + delay - now), False

    def fail(self, key: str, now: float) -> int:
        """Count one failure of ``key``; its failures so far."""
        entry = self._live(key, now)
        if entry is None:
            while len(self._entries) >= self.max_keys:
                self._entries.popitem(last=False)
            entry = self._entries[key] = _Failures()
        else:
            self._entries.move_to_end(key)
        entry.count += 1
        entry.last = now
        if entry.count >= self.policy.lock_after:
            entry.locked_until = now + self.policy.lock_s
        return entry.count

    def clear(self, key: str) -> None:
        self._entries.pop(key, None)


def address_key(remote: str | None) -> str:
    """The client address a limit applies to: an IPv6 client by its /64 (one host usually holds the whole
    prefix), an IPv4 one by itself."""
    host = unmap_ipv4(remote or "?")
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class SignInThrottle:
    """Checks before a sign-in, counts after it."""

    def __init__(self, by_address: ThrottlePolicy, by_account: ThrottlePolicy, *, max_keys: int = MAX_KEYS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.addresses = FailureTable(by_address, max_keys)
        self.accounts = FailureTable(by_account, max_keys)
        self._clock = clock

    def check(self, remote: str | None, access_key: str) -> SignInRefusal | None:
        """A refusal when the address or the account must wait (the longer wait wins), else None."""
        now = self._clock()
        address = address_key(remote)
        worst: SignInRefusal | None = None
        for table, who in ((self.addresses, f"from {address}"), (self.accounts, f"for account {access_key!r}")):
            key = address if table is self.addresses else access_key
            wait, locked = table.wait(key, now)
            if wait <= 0:
                continue
            seconds = max(1, math.ceil(wait))
            if locked:
                message = (f"too many failed sign-ins {who}: sign-in is locked for {seconds} s "
                           f"(after {table.policy.lock_after} failures)")
            else:
                message = f"too many failed sign-ins {who}: wait {seconds} s before trying again"
            if worst is None or seconds > worst.retry_after_s:
                worst = SignInRefusal(message, seconds)
        return worst

    def failed(self, remote: str | None, access_key: str) -> None:
        now = self._clock()
        self.addresses.fail(address_key(remote), now)
        self.accounts.fail(access_key, now)

    def succeeded(self, access_key: str) -> None:
        """The account's owner proved its secret: its own count starts again (the address's does not, so a
        caller with one valid account cannot reset its address between guesses at others)."""
        self.accounts.clear(access_key)
