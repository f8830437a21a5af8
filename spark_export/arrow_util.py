"""Numpy gathers of big-endian fields and zero-copy Arrow array builders over a store file's bytes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ARANGE", "be_int", "be32", "be64", "gather_ranges", "binary_array", "as_string", "even_offsets", "slices",
           "take_or_null", "with_nulls"]

ARANGE = {w: np.arange(w, dtype=np.int64) for w in (1, 2, 4, 8, 20)}


def be_int(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Signed big-endian integers of `width` bytes at each position (int64 result).

    One gather through a byte-strided view of the buffer (element i = the `width` bytes at position i), so
    unaligned reads cost one fancy index instead of `width` of them.
    """
    if width == 1:
        return buf[pos].view(np.int8).astype(np.int64)
    if len(buf) < width or not buf.flags.c_contiguous:
        raw = buf[pos[:, None] + ARANGE[width]]
        return raw.view(f">i{width}").reshape(-1).astype(np.int64)
    view = np.ndarray((len(buf) - width + 1,), dtype=f">i{width}", buffer=buf, strides=(1,))
    return view[pos].astype(np.int64)


def be32(buf, pos):
    return be_int(buf, pos, 4)


def be64(buf, pos):
    return be_int(buf, pos, 8)


def gather_ranges(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate buf[start:start+length] for every range: (int32 offsets of n+1, uint8 data)."""
    n = len(starts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return offsets.astype(np.int32), np.empty(0, dtype=np.uint8)
    idx = np.repeat(starts - offsets[:-1], lengths)
    idx += np.arange(total, dtype=np.int64)
    return offsets.astype(np.int32), buf[idx]


def binary_array(offsets: np.ndarray, data: np.ndarray, typ: pa.DataType) -> pa.Array:
    n = len(offsets) - 1
    arr = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return as_string(arr) if typ == pa.string() else arr


def as_string(arr: pa.Array) -> pa.Array:
    """A binary array as strings; invalid UTF-8 is decoded like Java does (replacement characters)."""
    text = arr.view(pa.string())
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        text = pa.array([None if v is None else v.decode("utf-8", "replace") for v in arr.to_pylist()], pa.string())
    return text


_EVEN_CACHE: dict[int, pa.Array] = {}


def even_offsets(n: int) -> pa.Array:
    index = _EVEN_CACHE.get(n)
    if index is None:
        index = pa.array(np.arange(0, 2 * n, 2, dtype=np.int32))
        if len(_EVEN_CACHE) > 64:
            _EVEN_CACHE.clear()
        _EVEN_CACHE[n] = index
    return index


def slices(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, typ: pa.DataType) -> pa.Array:
    """An Arrow binary/string array of buf[start:start+length] for every range, built by Arrow's `take`.

    The ranges (ascending and disjoint, as fields of consecutive records are) cut the spanned bytes into
    alternating wanted/unwanted pieces; a zero-copy binary array over those bytes then gives the wanted pieces
    with one `take` of the even elements: a memcpy per value instead of a per-byte index.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], typ)
    starts = starts.astype(np.int64, copy=False)
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = starts
    bounds[1::2] = starts + lengths
    lo, hi = int(bounds[0]), int(bounds[-1])
    if hi - lo >= (1 << 31) - 1 or (n > 1 and bool((bounds[1:] < bounds[:-1]).any())):
        return binary_array(*gather_ranges(buf, starts, lengths), typ)
    bounds -= lo
    pieces = pa.Array.from_buffers(pa.binary(), 2 * n - 1,
                                   [None, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(buf[lo:hi])])
    out = pieces.take(even_offsets(n))
    return as_string(out) if typ == pa.string() else out


def take_or_null(values: pa.Array, index: np.ndarray) -> pa.Array:
    """values[index[i]] or null where index[i] < 0."""
    missing = index < 0
    if not missing.any():
        return values.take(pa.array(index))
    if not len(values):
        return pa.nulls(len(index), values.type)
    return values.take(pa.array(np.where(missing, 0, index), mask=missing))




def with_nulls(values: pa.Array, valid: np.ndarray) -> pa.Array:
    """values with nulls where `valid` is False (zero-copy when values has no validity bitmap yet)."""
    buffers = values.buffers()
    if buffers[0] is None and values.offset == 0:
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(values.type, len(values), [bitmap, *buffers[1:]])
    return pc.if_else(pa.array(valid), values, pa.nulls(len(values), values.type))
