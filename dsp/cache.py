"""The disk cache behind every LM and RM call: canonical request -> key, JSON values, diskcache storage.

A key is the SHA-256 of the canonical JSON of the request (client kind, model, every parameter, the
prompt or query) plus the cache-format version, so a changed parameter is a new entry and a rerun of
the same program is free. Values are JSON text (never pickle). Entries are written once (set-if-absent),
never evicted, and the store is shared safely by threads and processes (SQLite underneath).

>>> request_key({"kind": "lm", "model": "m", "prompt": "hi"}) == request_key({"prompt": "hi", "model": "m", "kind": "lm"})
True
"""

from __future__ import annotations

import json
import logging
import os
import threading
from hashlib import sha256
from pathlib import Path
from typing import Any, Callable, Mapping

import diskcache

from .settings import settings

__all__ = ["CACHE_FORMAT_VERSION", "request_key", "cache_enabled", "cache_dir", "cached_call", "get_store", "DiskStore"]

CACHE_FORMAT_VERSION = 1
# Never part of a key: a request that carries one of these is a bug in the client that built it.
SECRET_FIELDS = frozenset({"api_key", "apikey", "authorization", "password", "secret", "token", "access_token"})
_MISS = object()
log = logging.getLogger("dsp.cache")


def _check_no_secrets(value: Any, path: str = "request") -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if str(key).lower() in SECRET_FIELDS:
                raise ValueError(f"refusing to put a credential ({path}.{key}) into a cache key")
            _check_no_secrets(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_no_secrets(item, f"{path}[{i}]")


def request_key(request: Mapping[str, Any]) -> str:
    """The cache key of a request: SHA-256 of its canonical JSON (sorted keys; 0 and 0.0 differ)."""
    _check_no_secrets(request)
    canonical = json.dumps(
        {"dsp_cache_format": CACHE_FORMAT_VERSION, "request": request},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
    )
    return sha256(canonical.encode("utf-8")).hexdigest()


def cache_enabled() -> bool:
    """On unless `settings.configure(cache=False)` or the environment says DSP_CACHE=0."""
    if settings.cache is not None:
        return bool(settings.cache)
    return os.environ.get("DSP_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """`settings.cache_dir`, else $DSP_CACHEDIR, else $XDG_CACHE_HOME/dsp (~/.cache/dsp)."""
    chosen = settings.cache_dir or os.environ.get("DSP_CACHEDIR")
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dsp"


class DiskStore:
    """JSON values in a diskcache.Cache: no eviction, no size limit, set-if-absent writes."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OSError(f"cannot create the dsp cache directory {self.directory}: {error}") from None
        # Strings are stored by diskcache as raw TEXT (never pickled); eviction is off so nothing is lost.
        self._cache = diskcache.Cache(str(self.directory), eviction_policy="none", size_limit=2**62, timeout=60)

    def get(self, key: str) -> Any:
        text = self._cache.get(key, default=_MISS, retry=True)
        if text is _MISS:
            return _MISS
        try:
            return json.loads(text)
        except (TypeError, ValueError):
            log.warning("dsp cache: unreadable entry %s in %s, recomputing it", key, self.directory)
            self._cache.delete(key, retry=True)
            return _MISS

    def add(self, key: str, value: Any) -> Any:
        """Store `value` unless another writer got there first; return whichever value is stored."""
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        if self._cache.add(key, text, retry=True):
            return json.loads(text)  # callers see exactly what a later cache hit will return
        stored = self.get(key)
        return value if stored is _MISS else stored

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._cache.close()


_stores: dict[tuple[str, int], DiskStore] = {}
_stores_lock = threading.Lock()


def get_store(directory: str | os.PathLike | None = None) -> DiskStore:
    """The store for `directory` (default: `cache_dir()`), one per directory and process."""
    path = str(Path(directory) if directory is not None else cache_dir())
    key = (path, os.getpid())  # a forked child must open its own SQLite connection
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = DiskStore(path)
        return store


def cached_call(request: Mapping[str, Any], compute: Callable[[], Any]) -> tuple[Any, bool]:
    """`compute()`'s result for `request`, from the cache when present. Returns (value, was_cached)."""
    if not cache_enabled():
        return compute(), False
    key = request_key(request)
    store = get_store()
    value = store.get(key)
    if value is not _MISS:
        return value, True
    return store.add(key, compute()), False
