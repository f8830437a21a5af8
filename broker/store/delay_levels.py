"""messageDelayLevel values (``"1s 5s 10s ... 2h"``): parsed here, in the store's floor, because the store's own
schedule topic needs them; broker.config re-exports the parser for broker.conf validation."""

from __future__ import annotations

import re

_DELAY_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_TOKEN = re.compile(r"^(\d+)(ms|s|m|h|d)$")


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 10s ... 2h"`` -> delays in milliseconds, level 1 first. Raises ValueError when malformed."""
    tokens = text.split()
    if not tokens:
        raise ValueError("expected a space-separated list like '1s 5s 1m 2h', got an empty value")
    levels = []
    for token in tokens:
        match = _DELAY_TOKEN.match(token)
        if match is None:
            raise ValueError(
                f"expected a space-separated list of durations with unit ms/s/m/h/d, bad item {token!r}"
            )
        levels.append(int(match.group(1)) * _DELAY_UNITS_MS[match.group(2)])
    return levels
