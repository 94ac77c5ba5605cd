"""Test helpers for the RM server and the ColBERTv2 client: a tiny RM, a served RM, and a scripted stub.

`StubServer` is a stdlib HTTP endpoint whose answers come from a function `respond(request) ->
(status, body, headers)`, recording every request it sees, so a test can count HTTP requests and
script failures (503s, bad JSON, slow answers) without any network beyond loopback.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator
from urllib.parse import parse_qsl, urlsplit

from dsp.clients.rm import RM
from dsp.serve import RMServer, make_server

__all__ = ["TinyRM", "PASSAGES", "served", "StubServer", "scripted", "slow", "closed_port"]

PASSAGES = [
    {"id": f"p{i}", "title": title, "text": text}
    for i, (title, text) in enumerate([
        ("Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
        ("William Shakespeare", "William Shakespeare was an English playwright, poet and actor."),
        ("Macbeth", "Macbeth is a tragedy by William Shakespeare about a Scottish general."),
        ("Paris", "Paris is the capital and most populous city of France."),
        ("Rome", "Rome is the capital city of Italy and of the Lazio region."),
        ("Berlin", "Berlin is the capital and largest city of Germany."),
        ("Python (programming language)", "Python is a high-level general-purpose programming language."),
        ("Guido van Rossum", "Guido van Rossum is a Dutch programmer, the creator of Python."),
        ("Danube", "The Danube is the second-longest river in Europe, after the Volga."),
        ("Volga", "The Volga is the longest river in Europe, flowing through Russia."),
        ("Mount Everest", "Mount Everest is Earth's highest mountain above sea level."),
        ("K2", "K2 is the second-highest mountain on Earth, after Mount Everest."),
    ])
]
_WORD = re.compile(r"\w+")


class TinyRM(RM):
    """Word-overlap retrieval over `PASSAGES` (ties keep corpus order); counts its backend searches."""

    provider = "tiny"

    def __init__(self, passages: list[dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.passages = passages or PASSAGES

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        words = set(_WORD.findall(query.lower()))
        scored = []
        for i, passage in enumerate(self.passages):
            tokens = _WORD.findall(f"{passage['title']} {passage['text']}".lower())
            overlap = sum(token in words for token in tokens)
            # A fractional tie-breaker keeps scores distinct, so ranks are unambiguous.
            scored.append((overlap + 1.0 / (2 + i), i))
        scored.sort(key=lambda item: -item[0])
        return [{**self.passages[i], "score": score} for score, i in scored[:k]]


@contextmanager
def served(rm: Any, **options: Any) -> Iterator[RMServer]:
    """`rm` served on a free loopback port for the duration of the block."""
    server = make_server(rm, "127.0.0.1", 0, **options)
    # A short poll interval: shutdown() waits up to one interval, and tests start many servers.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class StubServer:
    """A scripted HTTP endpoint on loopback. `requests` lists what it received:
    dicts with method, path, params (the URL's query) and body (parsed JSON or None)."""

    def __init__(self, respond: Callable[[dict[str, Any]], tuple[int, Any, dict[str, str]]]) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True
            wbufsize = 1 << 16

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                request = {"method": self.command, "path": parts.path, "params": dict(parse_qsl(parts.query)),
                           "body": json.loads(raw) if raw else None, "headers": dict(self.headers)}
                stub.requests.append(request)
                status, body, headers = stub.respond(request)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> "StubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


def scripted(*answers: tuple[int, Any, dict[str, str]] | Callable[[dict[str, Any]], Any]) -> Callable:
    """A `respond` function giving `answers` in turn (the last one repeats); a callable answer is called."""
    queue = list(answers)

    def respond(request: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        return answer(request) if callable(answer) else answer
    return respond


def slow(seconds: float, answer: tuple[int, Any, dict[str, str]]) -> Callable[[dict[str, Any]], Any]:
    """An answer that comes only after `seconds` (to trip a client's timeout)."""
    def respond(request: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        time.sleep(seconds)
        return answer
    return respond


def closed_port() -> int:
    """A loopback port with nothing listening on it (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
