"""Crash-safe JSON config persistence (topics.json, consumerOffset.json, ...).

Writes go to ``<path>.tmp`` first, are fsync'ed, the previous version is kept as
``<path>.bak`` and the new file is renamed into place, so a crash at any moment
leaves either the new file, or the old one under ``.bak``. Loading uses the
lenient JSON reader because Java's fastjson writes bare integer map keys.
"""

from __future__ import annotations

import json
import logging
import os

log = logging.getLogger(__name__)


def _loads(text: str) -> object:
    try:
        from protocol.jsonlenient import loads_lenient
    except ImportError:  # protocol package not available yet: plain JSON
        return json.loads(text)
    return loads_lenient(text)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class JsonConfigFile:
    """One JSON config file with a ``.bak`` fallback."""

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self.bak_path = self.path + ".bak"
        self.tmp_path = self.path + ".tmp"

    def _read(self, path: str) -> object | None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        text = data.decode("utf-8")
        if not text.strip():
            return None
        return _loads(text)

    def load(self) -> object | None:
        """The parsed content; falls back to ``.bak`` when the file is missing or corrupt."""
        try:
            obj = self._read(self.path)
            if obj is not None:
                return obj
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("config file %s is corrupt (%s); trying %s", self.path, exc, self.bak_path)
        try:
            return self._read(self.bak_path)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("config backup %s is corrupt too (%s)", self.bak_path, exc)
            return None

    def load_text(self) -> str | None:
        """Raw text of the file (or its backup), for callers that parse themselves."""
        for path in (self.path, self.bak_path):
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8")
            except (FileNotFoundError, UnicodeDecodeError):
                continue
            if text.strip():
                return text
        return None

    def save(self, obj_or_text: object) -> None:
        """Persist atomically: tmp + fsync + keep the old file as .bak + rename."""
        if isinstance(obj_or_text, (bytes, bytearray, memoryview)):
            data = bytes(obj_or_text)
        elif isinstance(obj_or_text, str):
            data = obj_or_text.encode("utf-8")
        else:
            data = json.dumps(obj_or_text, ensure_ascii=False, indent="\t").encode("utf-8")
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, exist_ok=True)
        with open(self.tmp_path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(self.path):
            os.replace(self.path, self.bak_path)
        os.replace(self.tmp_path, self.path)
        _fsync_dir(directory)
