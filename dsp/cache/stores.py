"""Which store a cached call uses: the settings and environment that choose it, one open store per place.

The store is a `DiskStore` (diskcache, the default) under `cache_dir()`, or, when `settings.cache_url` /
$DSP_CACHE_URL names a Redis server, a `RedisStore` holding the same keys and the same JSON text, or,
for `memory://NAME`, a `ProcessStore` this process alone holds (gone with it). A setting always beats
the environment.

>>> with settings.context(cache=False):
...     cache_enabled()
False
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..settings import settings
from .codec import Store
from .disk import open_disk_store
from .per_store import ForkSafeLock
from .process_store import MEMORY_SCHEME, ProcessStore

__all__ = ["WRITE_MODES", "cache_enabled", "cache_url", "cache_write_mode", "cache_dir", "get_store", "pop_store"]

WRITE_MODES = ("durable", "deferred")


def cache_enabled() -> bool:
    """On unless `settings.configure(cache=False)` or the environment says DSP_CACHE=0.

    >>> with settings.context(cache=True):
    ...     cache_enabled()
    True
    """
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
    """`settings.cache_dir`, else $DSP_CACHEDIR, else $XDG_CACHE_HOME/dsp (~/.cache/dsp).

    >>> with settings.context(cache_dir="/tmp/my-cache"):
    ...     str(cache_dir())
    '/tmp/my-cache'
    """
    chosen = settings.cache_dir or os.environ.get("DSP_CACHEDIR")
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dsp"


_stores: dict[tuple[str, str, int], Store] = {}
_stores_lock = ForkSafeLock()


def get_store(directory: str | os.PathLike | None = None, *, url: str | None = None) -> Store:
    """The store in use: a `DiskStore` for `directory`, a `RedisStore` for `url` (a `ProcessStore` for
    memory://NAME), else the configured one (`cache_url()` if set, else `cache_dir()`). One per location
    and process. A disk cache whose cache.db this process may read but not write is a `ReadOnlyDiskStore`
    (with a warning); one it cannot use at all is a `CacheFileError` naming the path.

    >>> get_store(url="memcached://x")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ValueError: the dsp cache URL must start with redis://, rediss:// or unix:// ...
    """
    if directory is None and url is None:
        url = cache_url()
    if url is not None and directory is None and url.startswith(MEMORY_SCHEME):
        key = ("memory", url, os.getpid())  # a forked child starts its own, empty
        store = _stores.get(key)
        if store is None:
            with _stores_lock:
                store = _stores.get(key)
                if store is None:
                    store = _stores[key] = ProcessStore(url)
        return store
    if url is not None and directory is None:
        # Imported here: the redis package is only needed by those who ask for a shared cache.
        from .redis import RedisStore, check_url

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


def pop_store(url: str) -> Store | None:
    """This process's open store for the in-process cache `url` (memory://NAME), no longer handed out
    (None if none is open); the caller closes it (`dsp.cache.discard_store`).

    >>> pop_store("memory://never-opened") is None
    True
    """
    with _stores_lock:
        return _stores.pop(("memory", url, os.getpid()), None)


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
