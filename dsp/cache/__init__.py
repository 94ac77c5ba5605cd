"""The cache behind every LM and RM call: canonical request -> key, JSON values, diskcache or Redis storage.

A key is the SHA-256 of the canonical JSON of the request (client kind, model, every parameter, the
prompt or query) plus the cache-format version, so a changed parameter is a new entry and a rerun of
the same program is free (`keys`). Values are JSON text, never pickle (`codec`). Entries are written once
(set-if-absent), never evicted, and the store is shared safely by threads and processes (SQLite
underneath).

The store is a `DiskStore` (diskcache, the default; `disk`) or, when `settings.cache_url` /
$DSP_CACHE_URL names a Redis server, a `dsp.cache.redis.RedisStore` holding the same keys and the same
JSON text, so every process of a cluster reuses every call (`stores.get_store`); `memory://NAME` is a
`ProcessStore`, held by this process alone and gone with it (`process_store`). In the opt-in "deferred"
write mode new entries are committed in batches (`deferred`; `flush` commits them now). In front of the
store, each process remembers what it has read and written (`memory`).

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
from typing import Any, Callable, Mapping

from .codec import CACHE_FORMAT_VERSION, MISS, Store, encode_value
from .deferred import discard_pending, flush, pending_of
from .disk import CacheFileError, DiskStore, ReadOnlyDiskStore
from .keys import SECRET_FIELDS, hash_request, request_key
from .memory import UNFROZEN, forget_store, freeze, memory_of
from .stores import cache_dir, cache_enabled, cache_url, cache_write_mode, get_store, pop_store

__all__ = ["CACHE_FORMAT_VERSION", "SECRET_FIELDS", "request_key", "cache_enabled", "cache_dir", "cache_url",
           "cache_write_mode", "cached_call", "flush", "get_store", "discard_store", "encode_value", "Store",
           "DiskStore", "ReadOnlyDiskStore", "CacheFileError", "MISS"]

log = logging.getLogger("dsp.cache")


def cached_call(request: Mapping[str, Any], compute: Callable[[], Any],
                check: Callable[[Any], None] | None = None) -> tuple[Any, bool]:
    """`compute()`'s result for `request`, from the cache when present. Returns (value, was_cached).

    `check(value)` raises (ValueError or TypeError) for a value that is an error rather than an answer
    (an LM response without completions, say): such a value is raised, never stored, so the next call
    computes again; a stored one (left by an older dsp) is dropped and computed again. A request this
    process has already seen for this store is answered from memory (`dsp.cache.memory`).

    >>> def no_empty(value):
    ...     if not value: raise ValueError("empty")
    >>> from dsp import settings
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
    frozen = freeze(request, chars)
    store = memory = None
    if frozen is not UNFROZEN:
        store = get_store()
        memory = memory_of(store)
        text = memory.get(frozen)
        if text is not None:  # only checked values get here
            return json.loads(text), True
    # A frozen request has already been checked for credentials (`freeze` refuses them).
    key = hash_request(request) if frozen is not UNFROZEN else request_key(request)
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


def discard_store(url: str) -> None:
    """Close this process's in-process cache `url` (memory://NAME) and forget it, its in-process layer
    and its uncommitted entries: for a cache whose job is over (`dsp.compile` with the cache off). A
    later call for that URL starts it afresh, empty.

    >>> store = get_store(url="memory://scratch")
    >>> _ = store.add("k", 1)
    >>> discard_store("memory://scratch")
    >>> len(get_store(url="memory://scratch")), get_store(url="memory://scratch") is store
    (0, False)
    >>> discard_store("memory://scratch")
    """
    store = pop_store(url)
    if store is None:
        return
    forget_store(store)
    discard_pending(store)
    store.close()


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
