"""A loopback OpenAI-compatible completions server that answers after a fixed delay (standard library only).

It stands in for a remote LM serving cluster whose latency dominates: every /v1/completions request
is answered `delay` seconds after it arrives with a deterministic text (a hash of prompt and seed), and
the server counts requests and the most it ever had in flight at once (`peak`), so a test can check a
concurrency limit and a benchmark can compare achieved with ideal throughput.

>>> with SlowLMServer(delay=0.2) as server:                       # doctest: +SKIP
...     spec = server.spec                                          # 'openai-compatible:http://127.0.0.1:PORT/v1,model=slow'

Run alone (`python tests/slow_lm_server.py --delay 0.2`) it prints its base URL and serves until killed;
GET /stats then reports its counters and GET /reset zeroes them.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["SlowLMServer", "answer_for"]


def answer_for(prompt: str, seed: Any = None) -> str:
    """The completion the server gives for `prompt`: a short hex word, stable across runs and processes."""
    return " " + sha256(f"{prompt}|{seed}".encode("utf-8")).hexdigest()[:8]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # dozens of concurrent clients must not see refused or delayed SYNs
    owner: "SlowLMServer"

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client closed its connection: not a server error
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real API servers do
    server: _Server

    def setup(self) -> None:
        # Without TCP_NODELAY, Nagle + delayed ACK add ~40 ms to a response written in pieces.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return

    def _send(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode("utf-8")
        head = f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        try:
            self.wfile.write(head.encode("latin-1") + body)  # one write per response (see setup)
        except OSError:
            self.close_connection = True

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "slow", "object": "model"}]})
        elif self.path.rstrip("/") in ("/stats", "/reset"):  # for a benchmark running the server elsewhere
            owner = self.server.owner
            if self.path.rstrip("/") == "/reset":
                owner.reset_counters()
            self._send(200, {"requests": owner.requests, "peak": owner.peak, "in_flight": owner.in_flight})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/v1/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        body = json.loads(raw)
        owner = self.server.owner
        owner._enter()
        try:
            time.sleep(owner.delay)
        finally:
            owner._leave()
        prompt = str(body.get("prompt", ""))
        n = int(body.get("n") or 1)
        choices = [{"index": i, "text": answer_for(prompt, (body.get("seed"), i) if n > 1 else body.get("seed")),
                    "logprobs": None, "finish_reason": "stop"} for i in range(n)]
        self._send(200, {"id": "cmpl-slow", "object": "text_completion", "created": 0, "model": body.get("model"),
                         "choices": choices,
                         "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": n,
                                   "total_tokens": len(prompt.split()) + n}})


class SlowLMServer:
    """The server; a context manager. `requests` (answered or not), `in_flight` and `peak` are counters."""

    def __init__(self, delay: float = 0.2) -> None:
        self.delay = float(delay)
        self.requests = 0
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def _enter(self) -> None:
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def reset_counters(self) -> None:
        with self._lock:
            self.requests, self.peak = 0, self.in_flight

    def start(self) -> "SlowLMServer":
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="slow-lm-server", daemon=True)
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

    def __enter__(self) -> "SlowLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def spec(self) -> str:
        """The `--lm` spec of this server (model named, so building the client asks the server nothing)."""
        return f"openai-compatible:{self.url},model=slow"


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="a loopback OpenAI-compatible server answering after --delay s")
    parser.add_argument("--delay", type=float, default=0.2)
    args = parser.parse_args()
    server = SlowLMServer(delay=args.delay).start()
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()
