"""Serve any local dsp RM over HTTP with the ColBERTv2 server API, so `dsp.ColBERTv2(url)` can use it.

Endpoints (the API of the ColBERTv2 servers DSP v1 queried):

- ``GET /?query=...&k=...`` and ``GET /api/search?query=...&k=...``
- ``POST /`` or ``POST /api/search`` with the JSON body ``{"query": ..., "k": ...}``
- ``GET /health``

A search answers ``{"query", "k", "topk": [{"text", "pid", "rank", "score", "prob"}, ...]}``, where
`text` is the passage's ``"Title | text"`` (its `long_text`) and `pid` its id. `k` defaults to 10 and
is capped at `max_k` (100), as on the public server. Errors are JSON ``{"error": "..."}``: 400 for a
missing or empty query, a query that is not valid Unicode (a lone surrogate), a k that is not a
positive integer, a body that is not a JSON object (or is nested absurdly deep), or a Content-Length that
is not a byte count in ASCII digits; 404/405 for a wrong path or method; 500 when the RM fails.
``GET /health`` answers ``{"status": "ok", "rm", "provider", "index", "passages", "searches"}``: the RM's
class, provider and index name, never a filesystem path.

>>> import threading
>>> from dsp.clients.bm25 import BM25
>>> from dsp.clients.colbertv2 import ColBERTv2
>>> server = make_server(BM25([{"id": "hamlet", "title": "Hamlet", "text": "A tragedy by William Shakespeare."},
...                            {"id": "paris", "title": "Paris", "text": "The capital of France."},
...                            {"id": "nile", "title": "Nile", "text": "A river of north-eastern Africa."}]), port=0)
>>> threading.Thread(target=server.serve_forever, daemon=True).start()
>>> [p.pid for p in ColBERTv2(server.url + "/api/search")("Who wrote Hamlet?", k=1, cache=False)]
['hamlet']
>>> server.shutdown(); server.server_close()

From a shell (the `dsp` command)::

    dsp serve --index wiki-bm25/              # a saved BM25 index directory
    dsp serve --index passages.jsonl.gz       # build BM25 over a passages file at start-up
    dsp serve --index wiki-e5/ --backend dense --port 8894
    dsp serve --index wiki-colbert/ --backend colbert --checkpoint models/colbertv2.0

The standard library's threaded HTTP server is enough for one machine's programs and evaluations;
it listens on 127.0.0.1 unless told otherwise, and has no authentication: put a reverse proxy in
front of it before exposing it to a network.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import parse_qsl, urlsplit

from .clients.rm import RM
from .utils import check_positive_int, is_int

__all__ = ["make_server", "serve", "load_index", "RMServer", "DEFAULT_PORT", "DEFAULT_K", "MAX_K"]

log = logging.getLogger("dsp.serve")

DEFAULT_PORT = 8893
DEFAULT_K = 10   # the public ColBERTv2 server's default
MAX_K = 100      # ... and its cap
SEARCH_PATHS = ("/", "/api/search")
MAX_BODY = 1 << 20  # a search request is a query and a number; anything bigger is a mistake or abuse
_K_TEXT = re.compile(r"\s*\+?(?=[0-9])0*([0-9]*)\s*")  # group 1: the digits after leading zeros
# A k past 18 digits is no count of passages but garbage or abuse (int() even refuses text of over 4,300
# digits): it is refused, where a plausible k above max_k is capped, as the public server does.
_K_DIGITS = 18
_LENGTH_TEXT = re.compile(r"\s*([0-9]{1,%d})\s*" % _K_DIGITS)  # a Content-Length: ASCII digits only


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _parse_k(value: Any, default_k: int, max_k: int) -> int:
    if value is None:
        return default_k
    match = _K_TEXT.fullmatch(value) if isinstance(value, str) else None
    if match:
        digits = match.group(1)
        if len(digits) > _K_DIGITS:
            raise _BadRequest(400, f"k must be a positive integer of at most {_K_DIGITS} digits (k is capped at "
                                   f"{max_k}), got one of {len(digits)} digits")
        k = int(digits or "0")
    elif is_int(value):
        k = value
    else:
        raise _BadRequest(400, f"k must be a positive integer, got {value!r:.40}")
    if k <= 0:
        raise _BadRequest(400, f"k must be a positive integer, got {k}")
    return min(k, max_k)


def _parse_query(value: Any) -> str:
    if value is None:
        raise _BadRequest(400, "missing 'query': pass ?query=...&k=... or a JSON body {\"query\": ..., \"k\": ...}")
    if not isinstance(value, str):
        raise _BadRequest(400, f"'query' must be text, got {type(value).__name__}")
    if not value.strip():
        raise _BadRequest(400, "the search query is empty")
    try:
        # A JSON escape like \ud800 gives text no UTF-8 can hold, and the cache key and answer need UTF-8.
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _BadRequest(400, f"'query' is not valid Unicode text: it holds a lone surrogate "
                               f"{value[error.start]!r} at position {error.start}") from None
    return value


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)  # numpy scalars too
    return number if math.isfinite(number) else None


def _topk(passages: Sequence[Any]) -> list[dict[str, Any]]:
    """An RM's passages in the ColBERTv2 server's shape."""
    records = [dict(p) if isinstance(p, Mapping) else {"text": str(p)} for p in passages]
    if any(key not in r for r in records for key in ("long_text", "rank", "prob")):
        records = RM._complete(records)  # a duck-typed RM: fill long_text, rank and prob as the base does
    topk = []
    for record in records:
        pid = record.get("pid", record.get("id"))
        if hasattr(pid, "item"):  # a numpy integer id
            pid = pid.item()
        topk.append({
            "text": record.get("long_text") or record["text"],
            "pid": pid if pid is None or isinstance(pid, (str, int, float)) else str(pid),
            "rank": int(record["rank"]),
            "score": _number(record.get("score")),
            "prob": _number(record.get("prob")),
        })
    return topk


def _describe(rm: Any) -> dict[str, Any]:
    """What /health tells a client about the RM: its class and what the RM declares (`RM.describe`:
    provider, index name, passage count; never its repr, which holds the server's file paths). A
    duck-typed RM (a plain function) declares nothing."""
    described = rm.describe() if isinstance(rm, RM) else {"provider": None, "index": None, "passages": None}
    return {"rm": type(rm).__name__, **described}


class RMServer(ThreadingHTTPServer):
    """A threading HTTP server holding the RM and the API settings; `url` is where it listens."""

    daemon_threads = True  # an idle keep-alive connection must not hold the process open
    # The listen backlog (socketserver's default is 5): a burst of new connections beyond it has its
    # SYNs dropped and resent after 1, 3, 7 s. The kernel caps it at net.core.somaxconn.
    request_queue_size = max(1024, socket.SOMAXCONN)

    def __init__(self, address: tuple[str, int], rm: Callable[..., Any], *, default_k: int, max_k: int,
                 cache: bool | None, threadsafe: bool) -> None:
        super().__init__(address, _Handler)
        self.rm = rm
        self.default_k = default_k
        self.max_k = max_k
        self.cache = cache
        # RMs are not promised to be thread-safe (a ColBERT Searcher is not); searches are CPU-bound, so
        # serialising them costs little. `threadsafe=True` lets an RM that is safe run them in parallel.
        self.rm_lock: threading.Lock | None = None if threadsafe else threading.Lock()
        self.searches = 0
        self._count_lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}"

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        kwargs = {} if self.cache is None else {"cache": self.cache}
        if self.rm_lock is None:
            passages = self.rm(query, k=k, **kwargs)
        else:
            with self.rm_lock:
                passages = self.rm(query, k=k, **kwargs)
        with self._count_lock:
            self.searches += 1
        return _topk(list(passages)[:k])


class _Handler(BaseHTTPRequestHandler):
    server: RMServer
    protocol_version = "HTTP/1.1"  # keep-alive, so pooled clients reuse their connection
    server_version = "dsp-rm-server"
    # TCP_NODELAY, and a write buffer that holds headers and body: each response leaves in one send()
    # when flushed, instead of a small header write that Nagle + delayed ACK would hold ~40 ms.
    disable_nagle_algorithm = True
    wbufsize = 1 << 16
    timeout = 120  # seconds an idle keep-alive connection may hold its thread

    # -- plumbing -----------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("%s %s", self.address_string(), format % args)

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol-level errors (malformed request line, unsupported method) as JSON too."""
        self.close_connection = True
        try:
            self._send_json(code, {"error": message or explain or self.responses.get(code, ("error",))[0]},
                            {"Connection": "close"})
        except OSError:
            pass  # the client is gone; nothing to tell it

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise _BadRequest(411, "send the JSON body with a Content-Length (chunked bodies are not supported)")
        if length is None:
            return b""
        # ASCII digits only, and few of them: str.isdigit() and int() accept "²" and other Unicode
        # digits (int("²") then raises), and int() refuses text of over 4,300 digits.
        digits = _LENGTH_TEXT.fullmatch(length)
        if digits is None:
            self.close_connection = True
            shown = length if len(length) <= 40 else f"{length[:20]}... ({len(length)} characters)"
            raise _BadRequest(400, f"bad Content-Length {shown!r}: give the body's size in bytes, "
                                   f"at most {_K_DIGITS} ASCII digits")
        size = int(digits.group(1))
        if size > MAX_BODY:
            self.close_connection = True  # the unread body would be taken for the next request
            raise _BadRequest(413, f"request body of {size} bytes is larger than {MAX_BODY}")
        return self.rfile.read(size)

    def _closing(self) -> dict[str, str]:
        """A `Connection: close` header when this connection ends after the answer (its body went unread),
        so the client knows not to reuse it."""
        return {"Connection": "close"} if self.close_connection else {}

    def _route(self) -> str | None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        if path == "/health":
            return "health"
        return "search" if path in SEARCH_PATHS else None

    def _handle(self, method: str) -> None:
        try:
            body = self._read_body()
            route = self._route()
            if route is None:
                raise _BadRequest(404, f"no endpoint {urlsplit(self.path).path!r}; "
                                       f"search at {' or '.join(SEARCH_PATHS)}, health at /health")
            if route == "health":
                if method != "GET":
                    self._send_json(405, {"error": f"{method} /health: use GET"}, {"Allow": "GET"})
                    return
                self._send_json(200, {"status": "ok", **_describe(self.server.rm), "searches": self.server.searches})
                return
            params = self._params(method, body)
            query = _parse_query(params.get("query"))
            k = _parse_k(params.get("k"), self.server.default_k, self.server.max_k)
        except _BadRequest as error:
            self._send_json(error.status, {"error": error.message}, self._closing())
            return
        try:
            topk = self.server.search(query, k)
        except Exception as error:  # any RM failure becomes a 500 that names it; the server keeps going
            log.exception("search failed for query %r (k=%d)", query, k)
            self._send_json(500, {"error": f"the RM failed: {type(error).__name__}: {error}"})
            return
        self._send_json(200, {"query": query, "k": k, "topk": topk})

    def _params(self, method: str, body: bytes) -> dict[str, Any]:
        try:
            params: dict[str, Any] = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True,
                                                    errors="strict"))
        except UnicodeDecodeError:
            raise _BadRequest(400, "the URL's query string is not valid UTF-8") from None
        if method == "POST":
            try:
                data = json.loads(body.decode("utf-8")) if body.strip() else None
            except (UnicodeDecodeError, ValueError) as error:
                raise _BadRequest(400, f"the POST body is not valid JSON: {error}") from None
            except RecursionError:  # json's decoder recurses once per [ or {
                raise _BadRequest(400, "the POST body is JSON nested too deeply") from None
            if not isinstance(data, dict):
                raise _BadRequest(400, 'a POST body must be a JSON object like {"query": "...", "k": 3}')
            params.update(data)  # the body wins over URL parameters
        return params

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _not_allowed(self) -> None:
        try:
            self._read_body()
        except _BadRequest:
            pass
        self._send_json(405, {"error": f"method {self.command} is not allowed; use GET or POST"},
                        {"Allow": "GET, POST", **self._closing()})

    do_PUT = do_DELETE = do_PATCH = _not_allowed  # noqa: N815


def make_server(rm: Callable[..., Any], host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
                default_k: int = DEFAULT_K, max_k: int = MAX_K, cache: bool | None = None,
                threadsafe: bool = False) -> RMServer:
    """A ready (bound, not yet serving) HTTP server for `rm` with the ColBERTv2 API.

    `port=0` picks a free port (see `server.url`). `cache` is passed to every `rm(query, k, cache=...)`
    call when given; `threadsafe=True` lets concurrent requests search at the same time. Run it with
    `server.serve_forever()` (e.g. in a thread) and stop it with `server.shutdown(); server.server_close()`.

    >>> server = make_server(lambda query, k: ["a passage"], port=0)
    >>> server.url.startswith("http://127.0.0.1:")
    True
    >>> server.server_close()
    """
    if not callable(rm):
        raise TypeError(f"make_server needs an RM (callable as rm(query, k)), got {type(rm).__name__}")
    for name, value in (("default_k", default_k), ("max_k", max_k)):
        check_positive_int(value, name)
    if not is_int(port) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer in 0..65535, got {port!r}")
    try:
        return RMServer((host, port), rm, default_k=min(default_k, max_k), max_k=max_k, cache=cache,
                        threadsafe=threadsafe)
    except OSError as error:
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None


def serve(rm: Callable[..., Any], host: str = "127.0.0.1", port: int = DEFAULT_PORT, **options: Any) -> None:
    """Serve `rm` until interrupted (Ctrl-C); `options` as for `make_server`.

    For example (it blocks until interrupted, so it is not run as a doctest)::

        serve(BM25.load("wiki-bm25"), port=8893)
    """
    server = make_server(rm, host, port, **options)
    log.info("serving %r at %s (search: %s/api/search?query=...&k=..., health: %s/health)",
             rm, server.url, server.url, server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("interrupted; stopping")
    finally:
        server.server_close()


def load_index(index: str | os.PathLike, backend: str = "bm25", vectorizer: str | None = None,
               checkpoint: str | None = None) -> Any:
    """The RM to serve: a saved index directory is loaded, a passages file indexed (`backend` bm25, dense
    or colbert; `vectorizer` e5 or hashing for a dense index built here).

    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     passages = Path(tmp) / "passages.jsonl"
    ...     _ = passages.write_text(json.dumps({"id": "p1", "title": "Paris", "text": "The capital of France."})
    ...                             + "\\n" + json.dumps({"id": "p2", "title": "Nile", "text": "A river."}) + "\\n")
    ...     rm = load_index(passages)
    >>> type(rm).__name__, [p.id for p in rm("capital of France", k=1, cache=False)]
    ('BM25', ['p1'])
    """
    from .datasets import CorpusError, DataFileError

    path = Path(index).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{index}: no such file or directory")
    try:
        return _load_index(path, backend, vectorizer, checkpoint)
    except DataFileError:
        # --index may name any file (/etc/shadow): the reader's own error quotes the line at fault, which
        # must not end up on a terminal or in a log; `dsp index` on a file of one's own shows it.
        raise CorpusError(f"{index} is neither a saved index nor a passages file (JSONL, one {{\"text\": ...}} "
                          f"object a line); dsp index --passages {index} --out DIR names the line at fault") from None


def _load_index(path: Path, backend: str, vectorizer: str | None, checkpoint: str | None) -> Any:
    index = str(path)
    if backend == "bm25":
        from .clients.bm25 import BM25  # imported here: the server module works without the backends
        return BM25.load(path) if path.is_dir() else BM25(path)
    if backend == "dense":
        from .clients.dense import DenseRM
        if path.is_dir():
            return DenseRM.load(path)
        from .clients import vectorizers
        if vectorizer == "hashing":
            return DenseRM(path, vectorizers.HashingVectorizer())
        return DenseRM(path, vectorizers.E5Vectorizer())
    if backend == "colbert":
        from .clients.colbert_local import ColBERTLocal
        if not path.is_dir():
            raise ValueError(f"{index}: the colbert backend needs an index directory built with "
                             "ColBERTLocal.build_index")
        if not checkpoint:
            raise ValueError("the colbert backend needs a checkpoint (a local ColBERTv2 checkpoint directory)")
        return ColBERTLocal(path, checkpoint)
    raise ValueError(f"unknown backend {backend!r}")
