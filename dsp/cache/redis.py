"""The shared cache backend: the disk cache's entries (same keys, same JSON text) in a Redis server.

Chosen with ``DSP_CACHE_URL=redis://host:port/db`` or ``dsp.settings.configure(cache_url=...)``; every
process on every machine that names the same server then reuses each LM and RM call. Keys are the
cache's SHA-256 request keys under the prefix ``dsp:v1:`` (the cache-format version), values are the
exact JSON text `DiskStore` writes. An entry is written once: ``SET key value NX`` lets one writer win
a race, and a loser returns the winner's value, so every racer sees what a later hit will return.

Entries carry no expiry (a run's cache is its record). Run the server with ``--maxmemory-policy
noeviction`` (the default) and persistence (``--appendonly yes``) when the cache matters. A password
never travels in the URL to workers: put it in ``$DSP_CACHE_PASSWORD`` on each machine.

``RedisStore("redis://127.0.0.1:6379/0")`` connects to the server (and pings it) at once; every key it writes
starts with

>>> KEY_PREFIX
'dsp:v1:'
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from .codec import CACHE_FORMAT_VERSION, MISS, encode_value, readable_text

__all__ = ["RedisStore", "KEY_PREFIX", "check_url", "redact_url", "strip_password"]

KEY_PREFIX = f"dsp:v{CACHE_FORMAT_VERSION}:"
_SCHEMES = ("redis", "rediss", "unix")
log = logging.getLogger("dsp.cache")


def check_url(url: str) -> None:
    """Raise a clear error unless `url` is a Redis URL redis-py understands.

    >>> check_url("redis://127.0.0.1:6379/0")
    """
    if not isinstance(url, str) or urlsplit(url.strip()).scheme.lower() not in _SCHEMES:
        raise ValueError(f"the dsp cache URL must start with redis://, rediss:// or unix://, "
                         f"e.g. redis://127.0.0.1:6379/0 (or be memory://NAME, a cache in this process only); "
                         f"got {redact_url(str(url))!r}")


def _replace_password(url: str, password: str | None) -> str:
    """`url` with its password replaced by `password`, or dropped when None (with an empty user too)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    if password is not None:
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{password}@{host}"))
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=user + host))


def redact_url(url: str) -> str:
    """`url` fit for a message: its user and password replaced by ``***`` (the project's one redaction,
    `dsp.clients.retry.redact_urls`).

    >>> redact_url("redis://user:secret@cache:6379/2")
    'redis://***@cache:6379/2'
    """
    from ..clients.retry import redact_urls

    return redact_urls(url)


def strip_password(url: str) -> str:
    """`url` without its password (what may be sent to other processes; they read $DSP_CACHE_PASSWORD).

    >>> strip_password("redis://:secret@cache:6379/2")
    'redis://cache:6379/2'
    """
    return _replace_password(url, None)


class RedisStore:
    """JSON values in Redis under `prefix` + key: set-if-absent writes, no expiry."""

    def __init__(self, url: str, prefix: str = KEY_PREFIX, timeout: float = 30.0) -> None:
        check_url(url)
        try:
            import redis
        except ImportError:
            raise ImportError('a Redis cache (DSP_CACHE_URL / cache_url) needs the redis package: '
                              'pip install "dsp[scale]"') from None
        self.url = redact_url(url)  # the only form ever shown
        self.prefix = prefix
        password = None if urlsplit(url).password else os.environ.get("DSP_CACHE_PASSWORD") or None
        # redis-py's client is a thread-safe connection pool: one per process serves every thread.
        self._redis = redis.Redis.from_url(url, password=password, socket_timeout=timeout,
                                           socket_connect_timeout=timeout, health_check_interval=30)
        self._errors = redis.RedisError
        try:
            self._redis.ping()
        except redis.RedisError as error:
            hint = " (if it needs a password, set DSP_CACHE_PASSWORD)" if isinstance(
                error, (redis.AuthenticationError, redis.ResponseError)) else ""
            raise ConnectionError(f"cannot use the dsp cache at {self.url}: {error}{hint}") from None

    def get(self, key: str) -> Any:
        raw = self._redis.get(self.prefix + key)
        if raw is None:
            return MISS
        try:
            return json.loads(raw)
        except ValueError:  # includes undecodable bytes: a foreign or damaged entry is recomputed
            log.warning("dsp cache: unreadable entry %s in %s, recomputing it", key, self.url)
            self._redis.delete(self.prefix + key)
            return MISS

    def add(self, key: str, value: Any) -> Any:
        """Store `value` unless another writer got there first; return whichever value is stored."""
        # callers see exactly what a later cache hit will return
        return json.loads(self.add_text(key, encode_value(value)))

    def add_text(self, key: str, text: str) -> str:
        """`add` for a value already encoded by `encode_value`; returns the stored text."""
        # SET NX is atomic on the server: of racing writers exactly one stores its value.
        if self._redis.set(self.prefix + key, text.encode("utf-8"), nx=True):
            return text
        return readable_text(self._redis.get(self.prefix + key), text)

    def add_many(self, texts: Mapping[str, str]) -> None:
        """Store encoded values set-if-absent in one round trip (a pipeline of SET NX)."""
        pipe = self._redis.pipeline(transaction=False)
        for key, text in texts.items():
            pipe.set(self.prefix + key, text.encode("utf-8"), nx=True)
        pipe.execute()

    def discard(self, key: str) -> None:
        """Remove the entry of `key`, if any (an error response an older version stored)."""
        self._redis.delete(self.prefix + key)

    def __len__(self) -> int:
        # SCAN, not KEYS: it never blocks a shared server; a count is for inspection and tests.
        return sum(1 for _ in self._redis.scan_iter(match=self.prefix + "*", count=1000))

    def close(self) -> None:
        self._redis.close()

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, prefix={self.prefix!r})"
