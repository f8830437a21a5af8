"""plain_acl.yml: accounts, permissions and address patterns, loaded into immutable typed objects.

The file format is RocketMQ 4.x's ("plain ACL"): ``globalWhiteRemoteAddresses`` (address patterns whose requests
pass unchecked) and ``accounts`` (``accessKey``, ``secretKey``, ``whiteRemoteAddress``, ``admin``,
``defaultTopicPerm``, ``defaultGroupPerm``, ``topicPerms``, ``groupPerms``). Loading is all or nothing: a short key,
a malformed ``name=PERM`` entry or a bad address pattern raises ``AclFileError`` naming the file and the account, so
a reload can keep the accounts it had. Unknown permission words silently mean DENY, as in the reference.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from protocol.acl_signature import value_text

__all__ = [
    "ANY",
    "DENY",
    "PUB",
    "RETRY_GROUP_PREFIX",
    "SUB",
    "Account",
    "AclConfig",
    "AclFileError",
    "compile_address_pattern",
    "group_resource",
    "load_acl_file",
    "parse_acl_text",
    "parse_permission",
    "unmap_ipv4",
]

DENY = 1
ANY = 2
PUB = 4
SUB = 8
RETRY_GROUP_PREFIX = "%RETRY%"
MIN_KEY_LENGTH = 7  # the reference wants accessKey and secretKey longer than 6 characters

_PERMISSION_WORDS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}

AddressMatcher = Callable[[str], bool]


class AclFileError(ValueError):
    """plain_acl.yml cannot be used; the message names the file (and the account or entry when known)."""


def parse_permission(text: object) -> int:
    """``DENY``/``PUB``/``SUB``/``PUB|SUB`` -> permission bits; anything else is DENY (the reference's silent rule)."""
    if not isinstance(text, str):
        return DENY
    return _PERMISSION_WORDS.get(text.strip(), DENY)


def permission_text(bits: int) -> str:
    if bits & DENY or not bits & (PUB | SUB):
        return "DENY"
    return {PUB: "PUB", SUB: "SUB"}.get(bits & (PUB | SUB), "PUB|SUB")


def group_resource(group: str) -> str:
    """Groups are stored and checked as the topic name ``%RETRY%<group>``."""
    return RETRY_GROUP_PREFIX + group


def unmap_ipv4(host: str) -> str:
    """``::ffff:1.2.3.4`` (an IPv4 client on a dual-stack socket) -> ``1.2.3.4``; other text unchanged."""
    if host.startswith("::ffff:") and "." in host:
        return host[7:]
    return host.strip("[]")


# -- address patterns --------------------------------------------------------------------------------
def _match_nothing(_ip: str) -> bool:
    return False


def _match_all(_ip: str) -> bool:
    return True


def _normal_ip(text: str) -> str:
    """A valid IP in canonical text (IPv6 compared in one form); ValueError when invalid."""
    return str(ipaddress.ip_address(text.strip()))


def _segment_number(text: str, pattern: str) -> int:
    if not text.isdigit() or int(text) > 255:
        raise ValueError(f"bad address pattern {pattern!r}: segment {text!r} is not 0..255")
    return int(text)


def compile_address_pattern(pattern: object) -> AddressMatcher:
    """An address pattern of plain_acl.yml -> a predicate on a client IP text. ValueError when malformed.

    Blank matches nothing; ``*`` (and the all-wildcard IPv4/IPv6 forms) everything; ``a,b`` any of the listed IPs;
    ``1.2.3.{4,5}`` the listed last segments; ``1.2.3.*`` / ``1.2.*.*`` / ``1.2.3.1-100``: the first wildcard or
    range segment among the 2nd-4th bounds that segment (later segments are ignored, as in the reference).
    """
    if pattern is None:
        return _match_nothing
    text = value_text(pattern).strip()
    if not text:
        return _match_nothing
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _match_all
    if "{" in text or "}" in text:
        return _compile_brace_list(text)
    if "," in text:
        try:
            allowed = frozenset(_normal_ip(part) for part in text.split(","))
        except ValueError:
            raise ValueError(f"bad address pattern {text!r}: every item of a comma list must be an IP address") from None
        return lambda ip: _safe_normal(ip) in allowed
    if "*" in text or "-" in text:
        return _compile_segment_pattern(text)
    try:
        single = _normal_ip(text)
    except ValueError:
        raise ValueError(f"bad address pattern {text!r}: not an IP address") from None
    return lambda ip: _safe_normal(ip) == single


def _safe_normal(ip: str) -> str:
    try:
        return _normal_ip(unmap_ipv4(ip))
    except ValueError:
        return ip


def _compile_brace_list(text: str) -> AddressMatcher:
    head, sep, tail = text.rpartition(".")
    if not sep or not tail.startswith("{") or not tail.endswith("}") or "{" in head or "}" in head:
        raise ValueError(f"bad address pattern {text!r}: a {{a,b}} list is allowed only as the last IPv4 segment")
    prefix = head.split(".")
    if len(prefix) != 3:
        raise ValueError(f"bad address pattern {text!r}: expected a.b.c.{{x,y}}")
    for part in prefix:
        _segment_number(part, text)
    endings = {_segment_number(p.strip(), text) for p in tail[1:-1].split(",")}
    allowed = frozenset(f"{head}.{n}" for n in endings)
    return lambda ip: unmap_ipv4(ip) in allowed


def _compile_segment_pattern(text: str) -> AddressMatcher:
    parts = text.split(".")
    if len(parts) != 4:
        raise ValueError(f"bad address pattern {text!r}: wildcards and ranges are supported for IPv4 a.b.c.d only")
    first_wild = next((i for i in (1, 2, 3) if parts[i] == "*" or "-" in parts[i]), None)
    if first_wild is None:
        raise ValueError(f"bad address pattern {text!r}: a wildcard is supported only in the 2nd-4th segment")
    fixed = [_segment_number(p, text) for p in parts[:first_wild]]
    spec = parts[first_wild]
    if spec == "*":
        low, high = 0, 255
    else:
        lo_text, _, hi_text = spec.partition("-")
        low, high = _segment_number(lo_text, text), _segment_number(hi_text, text)
        if low > high:
            raise ValueError(f"bad address pattern {text!r}: range {spec} is reversed")
    for later in parts[first_wild + 1:]:  # ignored when matching, but must still look like a segment
        if later != "*" and "-" not in later:
            _segment_number(later, text)

    def matches(ip: str) -> bool:
        segments = unmap_ipv4(ip).split(".")
        if len(segments) != 4:
            return False
        try:
            if [int(s) for s in segments[:first_wild]] != fixed:
                return False
            return low <= int(segments[first_wild]) <= high
        except ValueError:
            return False

    return matches


# -- accounts ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)  # never in logs
    white_address: AddressMatcher = _match_nothing
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    # resource -> bits; groups are under "%RETRY%<group>"
    resource_perms: dict[str, int] = field(default_factory=dict)

    @property
    def unrestricted_admin(self) -> bool:
        """An admin without topicPerms/groupPerms may use every topic and group (§4.4)."""
        return self.admin and not self.resource_perms

    def permission_for(self, resource: str) -> int:
        owned = self.resource_perms.get(resource)
        if owned is not None:
            return owned
        return self.default_group_perm if resource.startswith(RETRY_GROUP_PREFIX) else self.default_topic_perm


@dataclass(frozen=True, slots=True)
class AclConfig:
    global_white: tuple[AddressMatcher, ...] = ()
    accounts: dict[str, Account] = field(default_factory=dict)
    source: str = ""

    def globally_white(self, ip: str) -> bool:
        return any(match(ip) for match in self.global_white)


def _key_text(raw: Any, name: str, where: str) -> str:
    text = "" if raw is None else value_text(raw).strip()
    if len(text) < MIN_KEY_LENGTH:
        raise AclFileError(f"{where}: {name} must be longer than 6 characters")
    return text


def _perm_list(raw: Any, key: str, where: str, to_resource: Callable[[str], str]) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise AclFileError(f"{where}: {key} must be a list of name=PERM entries")
    out: dict[str, int] = {}
    for entry in raw:
        parts = value_text(entry).split("=")
        if len(parts) != 2 or not parts[0].strip():
            raise AclFileError(f"{where}: {key} entry {value_text(entry)!r} is not name=PERM")
        out[to_resource(parts[0].strip())] = parse_permission(parts[1])
    return out


def _account(raw: Any, index: int, source: str) -> Account:
    where = f"{source}: accounts[{index}]"
    if not isinstance(raw, dict):
        raise AclFileError(f"{where}: expected a map with accessKey and secretKey")
    access_key = _key_text(raw.get("accessKey"), "accessKey", where)
    where = f"{source}: account {access_key!r}"
    secret_key = _key_text(raw.get("secretKey"), "secretKey", where)
    try:
        white = compile_address_pattern(raw.get("whiteRemoteAddress"))
    except ValueError as exc:
        raise AclFileError(f"{where}: whiteRemoteAddress: {exc}") from None
    admin = raw.get("admin")
    perms = _perm_list(raw.get("topicPerms"), "topicPerms", where, lambda name: name)
    perms.update(_perm_list(raw.get("groupPerms"), "groupPerms", where, group_resource))
    return Account(
        access_key=access_key, secret_key=secret_key, white_address=white,
        admin=admin is True or (isinstance(admin, str) and admin.strip().lower() == "true"),
        default_topic_perm=parse_permission(raw.get("defaultTopicPerm")),
        default_group_perm=parse_permission(raw.get("defaultGroupPerm")),
        resource_perms=perms,
    )


def parse_acl_text(text: str, source: str = "plain_acl.yml") -> AclConfig:
    """YAML text -> AclConfig; AclFileError naming ``source`` when it cannot be used."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise AclFileError(f"{source}{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AclFileError(f"{source}: expected a map with globalWhiteRemoteAddresses and accounts")
    white_raw = data.get("globalWhiteRemoteAddresses") or []
    if not isinstance(white_raw, list):
        raise AclFileError(f"{source}: globalWhiteRemoteAddresses must be a list of address patterns")
    white = []
    for pattern in white_raw:
        try:
            white.append(compile_address_pattern(pattern))
        except ValueError as exc:
            raise AclFileError(f"{source}: globalWhiteRemoteAddresses: {exc}") from None
    accounts_raw = data.get("accounts") or []
    if not isinstance(accounts_raw, list):
        raise AclFileError(f"{source}: accounts must be a list of account maps")
    accounts: dict[str, Account] = {}
    for index, raw in enumerate(accounts_raw):
        account = _account(raw, index, source)
        if account.access_key in accounts:
            raise AclFileError(f"{source}: accessKey {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return AclConfig(tuple(white), accounts, source)


def load_acl_file(path: str | os.PathLike) -> AclConfig:
    """Read and parse plain_acl.yml; AclFileError (naming the file) when unreadable or invalid."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise AclFileError(f"cannot read {source}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_acl_text(text, source)
