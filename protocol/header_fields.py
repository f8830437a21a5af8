"""Typed custom headers (the `extFields` of a command) with liberal decoding: the machinery (the header classes
themselves are in protocol/headers.py).

A header class lists its fields declaratively::

    class GetMaxOffsetRequestHeader(Header):
        topic = F("topic", str, required=True)
        queue_id = F("queueId", int, required=True)

At class creation the metaclass generates straight-line `decode`, `encode`, `__init__`, `__eq__` and
`__repr__` functions for that exact field list, so decoding a header costs a few dict look-ups and
conversions and no per-field loop or reflection (this runs once per request on the hot path).

Decoding accepts str/int/bool/float for every field (clients in the wild send JSON numbers and
booleans), converts by declared type, ignores unknown keys and fills defaults. Integer fields carry
their Java width (`int32` for Integer, `int64` for Long; plain `int` means int64) and are range-checked.
A missing required field, a value that cannot be converted, or an integer its Java type cannot hold
raises HeaderError naming the wire key (the server answers INVALID_PARAMETER with that text).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

__all__ = ["HeaderError", "F", "Header", "JavaInt", "int32", "int64"]


class HeaderError(ValueError):
    """A request's custom header is unusable (missing required field or unconvertible value)."""


_EMPTY: Mapping[str, Any] = {}


class JavaInt:
    """Marker type for an integer field with a Java width: `int32` (Java int/Integer), `int64` (long/Long).

    Python ints are unbounded; a value outside the Java type would later break struct packing or store
    arithmetic, so the generated decoder range-checks it (one chained comparison) and raises HeaderError.
    A field declared with plain `int` gets the int64 range."""

    __slots__ = ("java_name", "lo", "hi")

    def __init__(self, java_name: str, bits: int) -> None:
        self.java_name = java_name
        self.lo = -(1 << (bits - 1))
        self.hi = (1 << (bits - 1)) - 1

    def __repr__(self) -> str:
        return f"int{self.hi.bit_length() + 1}"


int32 = JavaInt("int", 32)
int64 = JavaInt("long", 64)
_TYPES = (str, int, bool, float)


class F:
    """Declaration of one header field: wire name, type, required flag, default, aliases, V2 short key."""

    __slots__ = ("wire", "type", "java_int", "required", "default", "aliases", "short", "attr")

    def __init__(
        self,
        wire: str,
        type: type | JavaInt = str,
        *,
        required: bool = False,
        default: Any = None,
        aliases: tuple[str, ...] = (),
        short: str | None = None,
    ) -> None:
        java_int: JavaInt | None = None
        if isinstance(type, JavaInt):
            java_int, type = type, int
        elif type is int:
            java_int = int64
        if type not in _TYPES:
            raise TypeError(f"unsupported header field type {type!r}")
        self.wire = wire
        self.type = type
        self.java_int = java_int
        self.required = required
        self.default = default
        self.aliases = tuple(aliases)
        self.short = short
        self.attr = ""


# ---------------------------------------------------------------------------------------------
# slow-path converters (the generated code only calls these when the value is not already a str
# of the right shape)


def _conv_int(value: Any, key: str) -> int | None:
    if type(value) is bool:
        return int(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise HeaderError(f"header field {key!r}: expected an integer, got {value!r}")
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            pass
        try:
            as_float = float(text)
        except ValueError:
            as_float = None
        if as_float is not None and as_float.is_integer():
            return int(as_float)
    raise HeaderError(f"header field {key!r}: expected an integer, got {str(value)[:60]!r}")


def _out_of_range(value: int, key: str, java_name: str) -> HeaderError:
    text = str(value) if value.bit_length() < 200 else f"{str(value)[:24]}... ({value.bit_length()} bits)"
    return HeaderError(f"header field {key!r}: value {text} does not fit a Java {java_name}")


def _conv_bool(value: Any, key: str) -> bool | None:
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        return text.lower() == "true"  # Java Boolean.parseBoolean
    if isinstance(value, (int, float)):
        return value != 0
    raise HeaderError(f"header field {key!r}: expected a boolean, got {str(value)[:60]!r}")


def _conv_float(value: Any, key: str) -> float | None:
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return float(text)
        except ValueError:
            pass
    elif isinstance(value, (int, float)):
        return float(value)
    raise HeaderError(f"header field {key!r}: expected a number, got {str(value)[:60]!r}")


def _conv_str(value: Any, key: str) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if isinstance(value, int):
        return str(int(value))
    return str(value)


def _wire_bool(value: Any) -> str:
    if isinstance(value, str):
        return "true" if value.strip().lower() == "true" else "false"
    return "true" if value else "false"


def _wire_value(value: Any) -> str:
    return _conv_str(value, "")


# ---------------------------------------------------------------------------------------------
# code generation


def _decode_source(fields: list[F], use_short: bool) -> list[str]:
    """Lines of a decode function body for the given fields (mapping in `ext`, result in `self`)."""
    lines = ["    get = (_EMPTY if ext is None else ext).get", "    self = _new(cls)"]
    for i, f in enumerate(fields):
        keys = ([f.short, f.wire] if use_short and f.short else [f.wire]) + list(f.aliases)
        key = keys[0]
        label = f"{key} ({f.wire})" if key != f.wire else key
        missing = f"missing required header field '{key}'" + (f" ({f.wire})" if key != f.wire else "")
        lines.append(f"    v = get({key!r})")
        for alt in keys[1:]:
            lines.append(f"    if v is None: v = get({alt!r})")
        if f.type is str:
            lines.append("    if v is not None and type(v) is not str:")
            lines.append(f"        v = _conv_str(v, {label!r})")
        elif f.type is int:
            lines.append("    if v is not None and type(v) is not int:")
            lines.append("        if type(v) is str:")
            lines.append("            try: v = int(v)")
            lines.append(f"            except ValueError: v = _conv_int(v, {label!r})")
            lines.append(f"        else: v = _conv_int(v, {label!r})")
        elif f.type is bool:
            lines.append("    if v is not None and type(v) is not bool:")
            lines.append("        if v == 'true' or v == 'false': v = v == 'true'")
            lines.append(f"        else: v = _conv_bool(v, {label!r})")
        else:
            lines.append("    if v is not None and type(v) is not float:")
            lines.append(f"        v = _conv_float(v, {label!r})")
        lines.append("    if v is None:")
        if f.required:
            lines.append(f"        raise HeaderError({missing!r})")
        else:
            lines.append(f"        v = _default_{i}")
        if f.java_int is not None:  # the one comparison the hot path pays per integer field
            jt = f.java_int
            lines.append(f"    elif not {jt.lo} <= v <= {jt.hi}:")
            lines.append(f"        raise _out_of_range(v, {label!r}, {jt.java_name!r})")
        lines.append(f"    self.{f.attr} = v")
    lines.append("    return self")
    return lines


def _encode_source(fields: list[F], use_short: bool) -> list[str]:
    lines = ["    d = {}"]
    for f in fields:
        key = f.short if use_short and f.short else f.wire
        lines.append(f"    v = self.{f.attr}")
        lines.append("    if v is not None:")
        if f.type is bool:
            lines.append(f"        d[{key!r}] = 'true' if v is True else ('false' if v is False else _wire_bool(v))")
        elif f.type is int:
            lines.append(f"        d[{key!r}] = str(v) if type(v) is int else _wire_value(v)")
        else:
            lines.append(f"        d[{key!r}] = v if type(v) is str else _wire_value(v)")
    lines.append("    return d")
    return lines


def _build(cls: type, fields: list[F]) -> None:
    namespace: dict[str, Any] = {
        "_EMPTY": _EMPTY,
        "_new": object.__new__,
        "HeaderError": HeaderError,
        "_conv_int": _conv_int,
        "_out_of_range": _out_of_range,
        "_conv_bool": _conv_bool,
        "_conv_float": _conv_float,
        "_conv_str": _conv_str,
        "_wire_bool": _wire_bool,
        "_wire_value": _wire_value,
    }
    for i, f in enumerate(fields):
        namespace[f"_default_{i}"] = f.default
    src: list[str] = []
    # __init__: keyword arguments, every field optional at construction time
    params = ", ".join(f"{f.attr}=_default_{i}" for i, f in enumerate(fields))
    src.append(f"def __init__(self{', *, ' + params if params else ''}):")
    src.extend(f"    self.{f.attr} = {f.attr}" for f in fields)
    if not fields:
        src.append("    pass")
    src.append("def decode(cls, ext):")
    src.extend(_decode_source(fields, False))
    src.append("def encode(self):")
    src.extend(_encode_source(fields, False))
    has_short = any(f.short for f in fields)
    if has_short:
        src.append("def decode_v2(cls, ext):")
        src.extend(_decode_source(fields, True))
        src.append("def encode_v2(self):")
        src.extend(_encode_source(fields, True))
    exec("\n".join(src), namespace)  # noqa: S102 - generated from the class's own field declarations
    cls.__init__ = namespace["__init__"]
    cls.decode = classmethod(namespace["decode"])
    cls.encode = namespace["encode"]
    if has_short:
        cls.decode_v2 = classmethod(namespace["decode_v2"])
        cls.encode_v2 = namespace["encode_v2"]


class _HeaderMeta(type):
    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any]):
        inherited: list[F] = []
        for base in bases:
            inherited.extend(getattr(base, "_fields", ()))
        own: list[F] = []
        for attr, value in list(ns.items()):
            if isinstance(value, F):
                value.attr = attr
                own.append(value)
                del ns[attr]
        own_names = {f.attr for f in own}
        fields = [f for f in inherited if f.attr not in own_names] + own
        ns["__slots__"] = tuple(f.attr for f in own if f.attr not in {g.attr for g in inherited})
        cls = super().__new__(mcls, name, bases, ns)
        cls._fields = tuple(fields)
        _build(cls, fields)
        return cls


class Header(metaclass=_HeaderMeta):
    """Base of all custom headers. Subclasses declare fields with `F`."""

    __slots__ = ()
    _fields: tuple[F, ...] = ()

    decode: Callable[[Mapping[str, Any] | None], "Header"]
    encode: Callable[[], dict[str, str]]

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f.attr) == getattr(other, f.attr) for f in self._fields)

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.attr}={getattr(self, f.attr)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """Attribute name -> value (for logging and tests)."""
        return {f.attr: getattr(self, f.attr) for f in self._fields}
