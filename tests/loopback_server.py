"""What the loopback HTTP servers of the tests and benchmarks share (standard library only).

`LoopbackServer` runs a threaded HTTP server on 127.0.0.1 in a daemon thread: `start`/`stop`, a
context manager, and the OpenAI-style base `url`. `JSONHandler` is the request handlers' base:
HTTP/1.1 keep-alive (as real API servers do), TCP_NODELAY, no access log, and `send_json`, which
writes status line, headers and body in one write. `slow_lm_server.py` (a slow LM) and
`fault_server.py` (a faulty one) build on them. A server is a subclass naming its handler::

    class Echo(LoopbackServer):
        handler = EchoHandler            # a JSONHandler with do_GET / do_POST

    with Echo() as server:
        server.url                       # 'http://127.0.0.1:PORT/v1'
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

__all__ = ["JSONHandler", "LoopbackHTTPServer", "LoopbackServer", "prompt_of"]

_S = TypeVar("_S", bound="LoopbackServer")


def prompt_of(body: dict[str, Any]) -> str:
    """The prompt of a completions body, or the last message of a chat body."""
    if "messages" in body:
        return str(body["messages"][-1]["content"])
    return str(body.get("prompt", ""))


class LoopbackHTTPServer(ThreadingHTTPServer):
    """One thread per connection; `owner` is the `LoopbackServer` the handlers report to."""

    daemon_threads = True
    request_queue_size = 1024  # dozens of concurrent clients must not see refused or delayed SYNs
    owner: Any

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that closed its connection (a timeout, a benchmark ending) is not a server error.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet keep-alive handler whose every response is one write of a JSON body."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real API servers do
    server: LoopbackHTTPServer

    def setup(self) -> None:
        # Without TCP_NODELAY, Nagle + delayed ACK add ~40 ms to a response written in pieces.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return  # quiet: the tests and benchmarks print their own figures

    @property
    def route(self) -> str:
        """The request path without a trailing slash."""
        return self.path.rstrip("/")

    def read_body(self) -> bytes:
        """The request body (read in full, so the connection can be kept alive)."""
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None,
                  raw: bytes | None = None) -> None:
        """Status line, headers and `payload` as JSON (or `raw` bytes) in ONE write (see setup)."""
        body = raw if raw is not None else json.dumps(payload).encode("utf-8")
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Content-Type: application/json",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        try:
            self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        except OSError:  # the client gave up and closed the connection
            self.close_connection = True


class LoopbackServer:
    """A server on 127.0.0.1 (`port` 0: a free one) in a daemon thread; a context manager.

    Subclasses set `handler` (a `JSONHandler` subclass, which reaches this object as `self.server.owner`)
    and `name` (the thread's name) and call `super().__init__(port)` from their own `__init__`.
    """

    handler: type[JSONHandler]
    name = "loopback-server"

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._httpd: LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None

    def start(self: _S) -> _S:
        self._httpd = LoopbackHTTPServer(("127.0.0.1", self.port), self.handler)
        self._httpd.owner = self
        self._url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        # poll_interval: how soon `stop` is noticed (the default 0.5 s would slow every test's teardown)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL, http://127.0.0.1:PORT/v1 (stays readable after `stop`, for messages that name it)."""
        if self._url is None:
            raise RuntimeError(f"{type(self).__name__} was never started")
        return self._url
