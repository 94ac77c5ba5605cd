"""The disk store of the request cache: diskcache's SQLite file, or the same file read-only.

`DiskStore` is a diskcache folder (cache.db) written by every process that shares it. When cache.db is
there but this process may not write it (another user's file, a read-only mount), `open_disk_store`
serves it with `ReadOnlyDiskStore`, which reads diskcache's table itself and never writes; a file that
cannot be used at all is a `CacheFileError` naming the path.

>>> open_disk_store("/proc/dsp-cache-here")  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
CacheFileError: /proc/dsp-cache-here: cannot create the cache folder ...
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import diskcache

from .codec import MISS, Store, encode_value, readable_text

__all__ = ["DiskStore", "ReadOnlyDiskStore", "CacheFileError", "open_disk_store"]

log = logging.getLogger("dsp.cache")


# diskcache's Cache table (stable since diskcache 3) and the row its `add` writes for a short string
# key and value: raw key, no expiry or tag, size 0, mode MODE_RAW (1), the text inline.
_DISKCACHE_COLUMNS = ("rowid", "key", "raw", "store_time", "expire_time", "access_time", "access_count", "tag",
                      "size", "mode", "filename", "value")
_BATCH_INSERT = ("INSERT OR IGNORE INTO Cache (key, raw, store_time, expire_time, access_time, access_count, tag, "
                 "size, mode, filename, value) VALUES (?, 1, ?, NULL, ?, 0, NULL, 0, 1, NULL, ?)")


class CacheFileError(OSError):
    """A disk cache that cannot be used: its folder or cache.db cannot be created or read, or cache.db is
    not an SQLite database. The message names the path; `read_only` says the file is there but this
    process may not write it (`get_store` then serves it with a `ReadOnlyDiskStore`)."""

    def __init__(self, message: str, read_only: bool = False) -> None:
        super().__init__(message)
        self.read_only = read_only


# SQLite's primary result codes (the low byte of an extended code) for a file it may not write or open.
_SQLITE_READONLY, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 8, 14, 26
_ELSEWHERE = "point dsp.settings.cache_dir or $DSP_CACHEDIR elsewhere, or turn the cache off (DSP_CACHE=0)"


def _sqlite_code(error: sqlite3.Error) -> int | None:
    """The primary result code of an sqlite3 error (Python 3.11+ carries it; earlier, read from its text)."""
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    text = str(error)
    for part, found in (("readonly database", _SQLITE_READONLY), ("unable to open database", _SQLITE_CANTOPEN),
                        ("not a database", _SQLITE_NOTADB)):
        if part in text:
            return found
    return None


def _open_error(database: Path, error: sqlite3.Error) -> CacheFileError:
    """The one-line error for a cache.db that diskcache could not open for writing."""
    code = _sqlite_code(error)
    if code == _SQLITE_NOTADB:
        return CacheFileError(f"{database} is not a dsp cache (not an SQLite database: {error}): move it away, "
                              f"or {_ELSEWHERE}")
    if code in (_SQLITE_READONLY, _SQLITE_CANTOPEN):
        if database.is_file():
            reason = "a read-only file system" if _read_only_file_system(database.parent) else error
            return CacheFileError(f"cannot write the dsp cache {database} ({reason})", read_only=True)
        return CacheFileError(f"cannot create the dsp cache {database} ({error}): is its folder read-only? "
                              f"{_ELSEWHERE[0].upper()}{_ELSEWHERE[1:]}")
    return CacheFileError(f"cannot open the dsp cache {database} ({error}); {_ELSEWHERE}")


class DiskStore:
    """JSON values in a diskcache.Cache: no eviction, no size limit, set-if-absent writes.

    A cache.db it cannot open for writing is a `CacheFileError` naming it (see `get_store` for the
    read-only fallback).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CacheFileError(f"cannot create the dsp cache directory {self.directory} ({error.strerror or error}): "
                                 f"{_ELSEWHERE}") from None
        # Strings are stored by diskcache as raw TEXT (never pickled); eviction is off so nothing is lost.
        try:
            self._cache = diskcache.Cache(str(self.directory), eviction_policy="none", size_limit=2**62, timeout=60,
                                          cull_limit=0)
        except sqlite3.Error as error:  # diskcache writes its settings on open: a read-only file fails here
            raise _open_error(self.directory / diskcache.core.DBNAME, error) from None
        columns = tuple(row[1] for row in self._cache._sql("PRAGMA table_info(Cache)").fetchall())
        self._batch_insert = columns == _DISKCACHE_COLUMNS and diskcache.core.MODE_RAW == 1

    def get(self, key: str) -> Any:
        text = self._cache.get(key, default=MISS, retry=True)
        if text is MISS:
            return MISS
        try:
            return json.loads(text)
        except (TypeError, ValueError):
            log.warning("dsp cache: unreadable entry %s in %s, recomputing it", key, self.directory)
            self._cache.delete(key, retry=True)
            return MISS

    def add(self, key: str, value: Any) -> Any:
        """Store `value` unless another writer got there first; return whichever value is stored."""
        # callers see exactly what a later cache hit will return
        return json.loads(self.add_text(key, encode_value(value)))

    def add_text(self, key: str, text: str) -> str:
        """`add` for a value already encoded by `encode_value`; returns the stored text."""
        if self._cache.add(key, text, retry=True):
            return text
        return readable_text(self._cache.get(key, default=None, retry=True), text)

    def add_many(self, texts: Mapping[str, str]) -> None:
        """Store encoded values set-if-absent in one transaction (one commit for the whole batch).

        Short values go in with one INSERT OR IGNORE statement, the rows diskcache's own `add` writes
        for a short string (its unique (key, raw) index makes it set-if-absent); per-entry `add`
        costs three times as much. Long ones (diskcache keeps them in files) and a table whose schema
        is not the one this was checked against take diskcache's `add`.
        """
        limit = self._cache.disk_min_file_size if self._batch_insert else -1
        short = [(key, text) for key, text in texts.items() if len(text) < limit]
        with self._cache.transact(retry=True):
            if short:
                now = time.time()
                self._cache._con.executemany(_BATCH_INSERT, [(key, now, now, text) for key, text in short])
            if len(short) < len(texts):
                for key, text in texts.items():
                    if len(text) >= limit:
                        self._cache.add(key, text, retry=True)

    def discard(self, key: str) -> None:
        """Remove the entry of `key`, if any (an error response an older version stored)."""
        self._cache.delete(key, retry=True)

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._cache.close()

    def __repr__(self) -> str:
        return f"DiskStore({str(self.directory)!r})"


class ReadOnlyDiskStore:
    """The entries of a disk cache this process may read but not write: hits are served; new results are
    computed and returned but not saved (`add_text` returns the text as `DiskStore` would after storing it).

    It reads diskcache's table itself and never writes: diskcache writes its settings whenever it opens a
    cache. cache.db is opened with SQLite's ``mode=ro``; on a read-only file system, where SQLite cannot
    make the shared-memory file a WAL database needs, as ``immutable`` (nothing can change it there).
    Only text values are read (the only kind dsp stores): a pickled value is never loaded.

    >>> ReadOnlyDiskStore("/nowhere/dsp-cache")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    dsp.cache.disk.CacheFileError: cannot read the dsp cache /nowhere/dsp-cache/cache.db (...): ...
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.database = self.directory / diskcache.core.DBNAME
        self._lock = threading.Lock()  # one connection, shared by threads: reads are short
        self._con = self._connect()

    def _connect(self) -> sqlite3.Connection:
        uri = self.database.absolute().as_uri()
        try:
            return self._checked(sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False))
        except sqlite3.DatabaseError as error:
            if _sqlite_code(error) == _SQLITE_NOTADB or not _read_only_file_system(self.directory):
                raise self._error(error) from None
        try:
            return self._checked(sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False))
        except sqlite3.DatabaseError as error:
            raise self._error(error) from None

    def _checked(self, con: sqlite3.Connection) -> sqlite3.Connection:
        """`con`, once it is known to read a diskcache table (its first read is where most faults show)."""
        try:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError:
            con.close()
            raise
        if "Cache" not in tables:
            con.close()
            raise CacheFileError(f"{self.database} is not a dsp cache (an SQLite database without diskcache's "
                                 f"Cache table): move it away, or {_ELSEWHERE}")
        return con

    def _error(self, error: sqlite3.Error) -> CacheFileError:
        if _sqlite_code(error) == _SQLITE_NOTADB:
            return _open_error(self.database, error)
        return CacheFileError(f"cannot read the dsp cache {self.database} ({error}): {_ELSEWHERE}")

    def _text(self, mode: int, filename: str | None, value: Any) -> str | None:
        """The stored text of a row: inline (raw mode) or in diskcache's file (text mode); else None."""
        if mode == diskcache.core.MODE_RAW:
            if isinstance(value, bytes):
                return value.decode("utf-8", errors="replace")
            return value if isinstance(value, str) else None
        if mode == diskcache.core.MODE_TEXT and isinstance(filename, str):
            path = (self.directory / filename).resolve()
            if self.directory.resolve() not in path.parents:  # only diskcache's own files, under the folder
                return None
            try:
                return path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return None
        return None  # a pickled or binary value: never written by dsp, never loaded

    def get(self, key: str) -> Any:
        with self._lock:
            row = self._con.execute("SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1 AND "
                                    "(expire_time IS NULL OR expire_time > ?)", (key, time.time())).fetchone()
        if row is None:
            return MISS
        text = self._text(*row)
        try:
            return json.loads(text) if text is not None else MISS
        except ValueError:
            log.warning("dsp cache: unreadable entry %s in %s (read-only), computing it", key, self.directory)
            return MISS

    def add(self, key: str, value: Any) -> Any:
        """`value` as a later hit would return it; nothing is stored."""
        return json.loads(encode_value(value))

    def add_text(self, key: str, text: str) -> str:
        """`text`; nothing is stored."""
        return text

    def add_many(self, texts: Mapping[str, str]) -> None:
        """Nothing is stored."""

    def discard(self, key: str) -> None:
        """Nothing can be removed: the entry stays (and is refused again by the caller's check)."""

    def __len__(self) -> int:
        with self._lock:
            return int(self._con.execute("SELECT COUNT(*) FROM Cache").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __repr__(self) -> str:
        return f"ReadOnlyDiskStore({str(self.directory)!r})"


def _read_only_file_system(path: Path) -> bool:
    """Whether `path` is on a file system mounted read-only (False where that cannot be told)."""
    statvfs = getattr(os, "statvfs", None)
    if statvfs is None:
        return False
    try:
        return bool(statvfs(path).f_flag & getattr(os, "ST_RDONLY", 1))
    except OSError:
        return False


def open_disk_store(path: str) -> Store:
    """A `DiskStore` for `path`, or a `ReadOnlyDiskStore` when its cache.db is there but may not be written."""
    try:
        return DiskStore(path)
    except CacheFileError as error:
        if not error.read_only:
            raise
        store = ReadOnlyDiskStore(path)  # a CacheFileError naming the file if it cannot be read either
        log.warning("%s; serving its entries read-only: new results are computed but not saved", error)
        return store
