"""A deadline for a whole HTTP attempt: connecting, sending, and reading the headers and the body.

httpx's timeouts bound each wait on the socket (the read timeout restarts with every chunk), so a server
that sends a byte a second never times out. Inside ``with deadline(seconds):``, the connections of a
`DeadlineTransport` wait on their sockets only until the deadline, then raise httpx's own timeout
errors (which the openai package reports as `APITimeoutError`): a client's `timeout` means the attempt.

httpx's synchronous client does its I/O in the calling thread, so the deadline is a context variable:
each thread's attempt keeps its own.

For example (it asks a server, so it is not run as a doctest)::

    client = httpx2.Client(transport=DeadlineTransport())
    with deadline(2.0):
        client.get("http://127.0.0.1:8080/v1/models")                 # at most 2 s, whatever the server does
"""

from __future__ import annotations

import contextvars
import time
import urllib.request
from contextlib import contextmanager
from typing import Any, Iterable, Iterator
from urllib.parse import urlsplit

import httpcore2
import httpx2

__all__ = ["deadline", "DeadlineTransport", "environment_proxy"]

# When the current attempt must be over (time.monotonic()); None: no deadline, httpx's timeouts alone.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("dsp_http_deadline", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Connections of a `DeadlineTransport` used in this block give up `seconds` from now.

    >>> with deadline(5.0):
    ...     0 < _left(None, httpcore2.ReadTimeout) <= 5.0
    True
    """
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """`timeout` (httpx's, for one wait) cut to what is left of the attempt; `expired` when nothing is."""
    until = _DEADLINE.get()
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:
        raise expired("the attempt's time is up")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore2.NetworkStream):
    """A connection whose every read and write waits at most until the current attempt's deadline."""

    def __init__(self, stream: httpcore2.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, _left(timeout, httpcore2.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore2.NetworkBackend):
    """A network backend handing out `_Stream` connections (made by the backend it wraps)."""

    def __init__(self, backend: httpcore2.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        timeout = _left(timeout, httpcore2.ConnectTimeout)
        return _Stream(self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        timeout = _left(timeout, httpcore2.ConnectTimeout)
        return _Stream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class DeadlineTransport(httpx2.HTTPTransport):
    """httpx's transport (its pooling, TLS and proxying as they are; the same arguments) whose connections
    keep to the `deadline` of the attempt using them."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # httpx's transport takes no network backend, so its pool's (one attribute for the direct pool and
        # both proxy pools) is wrapped; tests/test_hardening_hangs.py fails if httpx moves it.
        self._pool._network_backend = _Backend(self._pool._network_backend)


def environment_proxy(url: str) -> str | None:
    """The proxy the environment sets for `url` (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY; NO_PROXY honoured).
    httpx reads these only for a transport it makes itself, so a `DeadlineTransport` is given it explicitly.

    For example, with HTTPS_PROXY=http://proxy.example.org:3128 and no NO_PROXY (it reads the
    environment, so it is not run as a doctest), ``environment_proxy("https://api.openai.com/v1")`` is
    ``'http://proxy.example.org:3128'``.
    """
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")
