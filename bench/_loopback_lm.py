"""A loopback OpenAI-compatible LM server for benchmarks: answers every request after a fixed delay.

Not a benchmark by itself: `bench_parallel.py` and `bench_cache.py` start it in its own process
(`python bench/_loopback_lm.py --delay 0.2`); it prints its base URL (http://127.0.0.1:PORT/v1) and
serves until killed. Standard library only, so DSPy's venv could run it too.

- POST /v1/completions answers " Paris" (what a base model writes after "Answer:"), n choices;
- POST /v1/chat/completions answers in DSPy's ChatAdapter format ("[[ ## answer ## ]]\\nParis ..."),
  so DSPy parses it on the first try (a parse failure would make DSPy retry with another adapter);
- GET /stats reports requests served and the most ever in flight; GET /reset zeroes them.

Every response is one write on a TCP_NODELAY socket (Nagle + delayed ACK would add ~40 ms to a
response written in pieces), the listen backlog is 1024, and each connection has its own thread
(ThreadingHTTPServer), so 32 or more concurrent clients are served at once. HTTP/1.1 keep-alive.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_ANSWER = "[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]"
TEXT_ANSWER = " Paris"


class Counters:
    """Requests served, in flight now, and the peak in flight (under a lock: handlers are threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = self.in_flight = self.peak = 0

    def enter(self) -> None:
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def snapshot(self, reset: bool = False) -> dict[str, int]:
        with self.lock:
            shown = {"requests": self.requests, "peak": self.peak, "in_flight": self.in_flight}
            if reset:
                self.requests, self.peak = 0, self.in_flight
            return shown


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    delay = 0.2
    counters: Counters

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client hung up: not the server's error
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return

    def _send(self, payload: Any, status: int = 200) -> None:
        body = json.dumps(payload).encode("utf-8")
        head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        try:
            self.wfile.write(head.encode("latin-1") + body)  # one write: see the module docstring
        except OSError:
            self.close_connection = True

    def do_GET(self) -> None:
        path = self.path.rstrip("/")
        if path in ("/stats", "/reset"):
            self._send(self.server.counters.snapshot(reset=path == "/reset"))
        elif path == "/v1/models":
            self._send({"object": "list", "data": [{"id": "slow", "object": "model"}]})
        else:
            self._send({"error": {"message": f"no route {self.path}"}}, 404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        path = self.path.rstrip("/")
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._send({"error": {"message": f"no route {self.path}"}}, 404)
            return
        counters = self.server.counters
        counters.enter()
        try:
            time.sleep(self.server.delay)
        finally:
            counters.leave()
        n = int(body.get("n") or 1)
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        if path == "/v1/completions":
            choices = [{"index": i, "text": TEXT_ANSWER, "logprobs": None, "finish_reason": "stop"} for i in range(n)]
            self._send({"id": "cmpl-loop", "object": "text_completion", "created": 0, "model": body.get("model"),
                        "choices": choices, "usage": usage})
        else:
            choices = [{"index": i, "message": {"role": "assistant", "content": CHAT_ANSWER}, "finish_reason": "stop"}
                       for i in range(n)]
            self._send({"id": "chatcmpl-loop", "object": "chat.completion", "created": int(time.time()),
                        "model": body.get("model"), "choices": choices, "usage": usage})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    server.delay = args.delay
    server.counters = Counters()
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
