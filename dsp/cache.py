"""The cache behind every LM and RM call: canonical request -> key, JSON values, diskcache or Redis storage.

A key is the SHA-256 of the canonical JSON of the request (client kind, model, every parameter, the
prompt or query) plus the cache-format version, so a changed parameter is a new entry and a rerun of
the same program is free. Values are JSON text (never pickle). Entries are written once (set-if-absent),
never evicted, and the store is shared safely by threads and processes (SQLite underneath).

The store is a `DiskStore` (diskcache, the default) or, when `settings.cache_url` / $DSP_CACHE_URL names
a Redis server, a `dsp.cache_redis.RedisStore` holding the same keys and the same JSON text, so every
process of a cluster reuses every call (see `get_store`). In the opt-in "deferred" write mode new
entries are committed in batches (see `dsp.cache_deferred`; `flush` commits them now).

A disk cache this process may read but not write (a read-only mount, another user's file) is served
read-only (`ReadOnlyDiskStore`): its entries answer as ever, new results are computed and returned but
not saved, with one warning. A cache that cannot be used at all (its folder or file cannot be created or
read, or cache.db is not an SQLite database) is a `CacheFileError` naming the path.

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

from .cache_codec import CACHE_FORMAT_VERSION, MISS, Store, encode_value
from .cache_deferred import flush, pending_of
from .cache_disk import CacheFileError, DiskStore, ReadOnlyDiskStore, open_disk_store
from .settings import settings

__all__ = ["CACHE_FORMAT_VERSION", "request_key", "cache_enabled", "cache_dir", "cache_url", "cache_write_mode",
           "cached_call", "flush", "get_store", "encode_value", "Store", "DiskStore", "ReadOnlyDiskStore",
           "CacheFileError", "MISS"]

# Never part of a key: a request that carries one of these is a bug in the client that built it.
SECRET_FIELDS = frozenset({"api_key", "apikey", "authorization", "password", "secret", "token", "access_token"})
log = logging.getLogger("dsp.cache")
# Built once: json.dumps with options builds a new encoder on every call, a good part of a small dump.
# (An encoder keeps no state between calls, so threads share these safely.)
_KEY_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _check_no_secrets(value: Any, path: str = "request") -> None:
    if isinstance(value, str):  # most leaves (the prompt, the model): nothing to look into
        return
    if isinstance(value, dict) or isinstance(value, Mapping):  # dict first: typing's isinstance is slow
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
    return _hash_request(request)


def _hash_request(request: Mapping[str, Any]) -> str:
    canonical = _KEY_ENCODER.encode({"dsp_cache_format": CACHE_FORMAT_VERSION, "request": request})
    try:
        encoded = canonical.encode("utf-8")
    except UnicodeEncodeError as error:  # clients refuse such a prompt or query; this names any other field
        where = _surrogate_path(request, "request") or "the request"
        raise ValueError(f"{where} contains a lone surrogate (\\u{ord(canonical[error.start]):04x}): not valid text, "
                         "so the request cannot be cached") from None
    return sha256(encoded).hexdigest()


def _surrogate_path(value: Any, path: str) -> str:
    """Where in a request the first string that is not valid text (holds a lone surrogate) is, or ""."""
    if isinstance(value, str):
        return path if any("\ud800" <= char <= "\udfff" for char in value) else ""
    is_mapping = isinstance(value, Mapping)
    items = value.items() if is_mapping else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _surrogate_path(item, f"{path}.{key}" if is_mapping else f"{path}[{key}]")
        if found:
            return found
    return ""


def cache_enabled() -> bool:
    """On unless `settings.configure(cache=False)` or the environment says DSP_CACHE=0."""
    if settings.cache is not None:
        return bool(settings.cache)
    return os.environ.get("DSP_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_url() -> str | None:
    """The Redis URL of a shared cache, or None for the disk cache.

    `settings.cache_url` first; else, unless `settings.cache_dir` picks a disk cache explicitly,
    $DSP_CACHE_URL. A setting always beats the environment, as for `cache` and `cache_dir`.

    >>> with settings.context(cache_url="redis://127.0.0.1:6379/0"):
    ...     cache_url()
    'redis://127.0.0.1:6379/0'
    """
    if settings.cache_url:
        return str(settings.cache_url)
    if settings.cache_dir:
        return None
    return os.environ.get("DSP_CACHE_URL", "").strip() or None


WRITE_MODES = ("durable", "deferred")


def cache_write_mode() -> str:
    """"durable" or "deferred": `settings.cache_write`, else $DSP_CACHE_WRITE, else "durable".

    >>> with settings.context(cache_write="deferred"):
    ...     cache_write_mode()
    'deferred'
    """
    mode = settings.cache_write
    source = "dsp.settings.cache_write"
    if mode is None:
        mode, source = os.environ.get("DSP_CACHE_WRITE", "").strip().lower() or "durable", "$DSP_CACHE_WRITE"
    if mode not in WRITE_MODES:
        raise ValueError(f"{source} is {mode!r}; it must be one of {', '.join(WRITE_MODES)}")
    return mode


def cache_dir() -> Path:
    """`settings.cache_dir`, else $DSP_CACHEDIR, else $XDG_CACHE_HOME/dsp (~/.cache/dsp)."""
    chosen = settings.cache_dir or os.environ.get("DSP_CACHEDIR")
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dsp"


_stores: dict[tuple[str, str, int], Store] = {}
_stores_lock = threading.Lock()


def _new_stores_lock() -> None:
    """In a forked child: a lock another parent thread held at the fork would never be released here."""
    global _stores_lock
    _stores_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX only; elsewhere there is no fork
    os.register_at_fork(after_in_child=_new_stores_lock)


def get_store(directory: str | os.PathLike | None = None, *, url: str | None = None) -> Store:
    """The store in use: a `DiskStore` for `directory`, a `RedisStore` for `url`, else the configured one
    (`cache_url()` if set, else `cache_dir()`). One per location and process. A disk cache whose cache.db
    this process may read but not write is a `ReadOnlyDiskStore` (with a warning); one it cannot use at
    all is a `CacheFileError` naming the path.

    >>> get_store(url="memcached://x")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ValueError: the dsp cache URL must start with redis://, rediss:// or unix:// ...
    """
    if directory is None and url is None:
        url = cache_url()
    if url is not None and directory is None:
        # Imported here: the redis package is only needed by those who ask for a shared cache.
        from .cache_redis import RedisStore, check_url

        check_url(url)
        key = ("redis", url, os.getpid())  # a forked child must open its own connections
        with _stores_lock:
            store = _stores.get(key)
            if store is None:
                store = _stores[key] = RedisStore(url)
            return store
    path = str(Path(directory)) if directory is not None else _configured_disk_path()
    key = ("disk", path, os.getpid())  # a forked child must open its own SQLite connection
    store = _stores.get(key)  # every cached call comes here: skip the lock once the store exists
    if store is not None:
        return store
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = open_disk_store(path)
        return store


_disk_paths: dict[tuple[Any, ...], str] = {}


def _configured_disk_path() -> str:
    """`str(cache_dir())`, remembered per (setting, environment): building a Path costs more than the
    rest of a cache hit's bookkeeping."""
    chosen = settings.cache_dir
    environ = os.environ
    memo_key = (chosen, environ.get("DSP_CACHEDIR"), environ.get("XDG_CACHE_HOME"), environ.get("HOME"))
    try:
        return _disk_paths[memo_key]
    except KeyError:
        pass
    except TypeError:  # an unhashable cache_dir setting: no memo
        return str(cache_dir())
    path = str(cache_dir())
    if len(_disk_paths) < 1024:
        _disk_paths[memo_key] = path
    return path


# -- the in-process layer in front of a store ------------------------------------------------------

MEMORY_LIMIT = 32_000_000  # characters (requests + value texts) the in-process layer keeps per store
_UNFROZEN = object()


class _Memory:
    """What this process already read from or wrote to one store, by request rather than by key.

    A repeated request is answered from here without hashing its canonical JSON or reading the store
    (those cost more than the rest of a cache hit). Sound because an entry never changes once written
    (set-if-absent, never evicted). Values are kept as JSON text and parsed on every hit, so each caller
    gets its own copy, as from the store. The oldest entries go first beyond `limit` characters.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.entries: dict[Any, tuple[str, int]] = {}
        self.lock = threading.Lock()  # writers only; a read is one atomic dict lookup

    def get(self, frozen: Any) -> str | None:
        entry = self.entries.get(frozen)
        return entry[0] if entry is not None else None

    def put(self, frozen: Any, chars: int, text: str) -> None:
        size = chars + len(text)
        with self.lock:
            if frozen in self.entries or size > self.limit:
                return
            self.entries[frozen] = (text, size)
            self.size += size
            while self.size > self.limit:  # dicts keep insertion order: the first entry is the oldest
                oldest = next(iter(self.entries))
                self.size -= self.entries.pop(oldest)[1]


def _attached(table: dict[int, tuple[Any, Any]], store: Any, make: Callable[[Any], Any]) -> Any:
    """What `table` keeps for `store` (its memory layer, its pending writes), made once per store."""
    entry = table.get(id(store))
    if entry is None or entry[0] is not store:  # an id is reused after a store is gone: check identity
        with _stores_lock:
            entry = table.get(id(store))
            if entry is None or entry[0] is not store:
                entry = table[id(store)] = (store, make(store))
    return entry[1]


_memories: dict[int, tuple[Any, _Memory]] = {}


def _memory_of(store: Any) -> _Memory:
    return _attached(_memories, store, lambda _: _Memory(MEMORY_LIMIT))


def _freeze(value: Any, chars: list[int]) -> Any:
    """A hashable stand-in for a request value, equal only for values whose canonical JSON is equal;
    `_UNFROZEN` for anything but plain JSON data (exact types), a credential field or a non-finite
    float (those take the ordinary path, where `request_key` refuses them)."""
    kind = type(value)
    if kind is str:
        chars[0] += len(value)
        return value
    if kind is dict:
        items = []
        for key, item in value.items():
            if type(key) is not str or key.lower() in SECRET_FIELDS:
                return _UNFROZEN
            frozen = _freeze(item, chars)
            if frozen is _UNFROZEN:
                return _UNFROZEN
            items.append((key, frozen))
        return (dict, frozenset(items))  # key order does not matter: the canonical JSON sorts keys
    if kind is list or kind is tuple:
        items = []
        for item in value:
            frozen = _freeze(item, chars)
            if frozen is _UNFROZEN:
                return _UNFROZEN
            items.append(frozen)
        return (list, tuple(items))  # a list and a tuple are the same JSON array
    if value is None or kind is bool or kind is int:
        return (kind, value)  # tagged: True, 1 and 1.0 are equal in Python but not in JSON
    if kind is float:
        return (float, value.hex()) if value - value == 0.0 else _UNFROZEN  # -0.0 != 0.0 in JSON; no NaN/inf
    return _UNFROZEN


def cached_call(request: Mapping[str, Any], compute: Callable[[], Any],
                check: Callable[[Any], None] | None = None) -> tuple[Any, bool]:
    """`compute()`'s result for `request`, from the cache when present. Returns (value, was_cached).

    `check(value)` raises (ValueError or TypeError) for a value that is an error rather than an answer
    (an LM response without completions, say): such a value is raised, never stored, so the next call
    computes again; a stored one (left by an older dsp) is dropped and computed again. A request this
    process has already seen for this store is answered from memory (see `_Memory`).

    >>> def no_empty(value):
    ...     if not value: raise ValueError("empty")
    >>> with settings.context(cache=False):
    ...     cached_call({"q": 1}, lambda: [], check=no_empty)
    Traceback (most recent call last):
    ValueError: empty
    """
    if not cache_enabled():
        value = compute()
        if check is not None:
            check(value)
        return value, False
    chars = [0]
    frozen = _freeze(request, chars)
    store = memory = None
    if frozen is not _UNFROZEN:
        store = get_store()
        memory = _memory_of(store)
        text = memory.get(frozen)
        if text is not None:  # only checked values get here
            return json.loads(text), True
    # A frozen request has already been checked for credentials (`_freeze` refuses them).
    key = _hash_request(request) if frozen is not _UNFROZEN else request_key(request)
    if store is None:
        store = get_store()  # after request_key, which refuses a bad request before a store is opened
    pending = pending_of(store) if cache_write_mode() == "deferred" else None
    text = None if pending is None else pending.get_text(key)
    value = json.loads(text) if text is not None else _stored_value(store, key, check)
    if value is not MISS:
        if memory is not None:
            memory.put(frozen, chars[0], encode_value(value))
        return value, True
    value = compute()
    if check is not None:
        check(value)  # before any write: an error response must not answer every later identical call
    text = encode_value(value)
    text = store.add_text(key, text) if pending is None else pending.add_text(key, text)
    if memory is not None:
        memory.put(frozen, chars[0], text)
    return json.loads(text), False  # exactly what a later cache hit will return


def _stored_value(store: Store, key: str, check: Callable[[Any], None] | None) -> Any:
    """The value `store` holds for `key`, or the miss sentinel; an entry `check` refuses is dropped."""
    value = store.get(key)
    if value is MISS or check is None:
        return value
    try:
        check(value)
    except (TypeError, ValueError) as error:
        # Older versions cached error responses for good; set-if-absent would keep it forever.
        log.warning("dsp cache: dropping a cached error for %s in %r (%s); asking again", key, store, error)
        store.discard(key)
        return MISS
    return value
