"""A loopback OpenAI-compatible LM server that answers after a fixed delay (standard library only).

It stands in for a remote LM serving cluster whose latency dominates: every request is answered
`delay` seconds after it arrives, and the server counts requests and the most it ever had in flight
at once (`peak`), so a test can check a concurrency limit and a benchmark can compare achieved with
ideal throughput.

- POST /v1/completions: n choices of `answer_for(prompt, seed)` (a hash, so each prompt gets its own
  answer), or of " ANSWER" when the server has a fixed `answer` (the benchmarks use "Paris", what a
  base model writes after "Answer:");
- POST /v1/chat/completions: the same answer in DSPy's ChatAdapter format ("[[ ## answer ## ]]\\nParis
  ..."), so DSPy parses it on the first try (a parse failure would make DSPy retry with another adapter);
- GET /v1/models; GET /stats reports the counters; GET /reset reports them and zeroes them.

In process (tests):

>>> with SlowLMServer(delay=0.2) as server:
...     server.spec.startswith("openai-compatible:http://127.0.0.1:") and server.spec.endswith("/v1,model=slow")
True

In its own process (benchmarks, so its threads do not share the client's GIL): `python
tests/slow_lm_server.py --delay 0.2 [--answer Paris] [--port P]` prints its base URL and serves until
killed; `with spawn(0.2) as url:` runs it so for a block, and `fetch_stats(url)` reads /stats or
/reset. It imports only the standard library and `loopback_server.py` next to it, so any python can
run it (DSPy's venv included).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import sha256
from pathlib import Path
from typing import Any

from loopback_server import JSONHandler, LoopbackServer, prompt_of

__all__ = ["SlowLMServer", "answer_for", "chat_answer", "fetch_stats", "main", "spawn"]


def answer_for(prompt: str, seed: Any = None) -> str:
    """The completion the server gives for `prompt`: a short hex word, stable across runs and processes."""
    return " " + sha256(f"{prompt}|{seed}".encode("utf-8")).hexdigest()[:8]


def chat_answer(answer: str) -> str:
    """`answer` as DSPy's ChatAdapter expects a signature "... -> answer" to be answered."""
    return f"[[ ## answer ## ]]\n{answer.strip()}\n\n[[ ## completed ## ]]"


class _Handler(JSONHandler):
    def _not_found(self) -> None:
        self.send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_GET(self) -> None:
        owner: SlowLMServer = self.server.owner
        if self.route == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "slow", "object": "model"}]})
        elif self.route in ("/stats", "/reset"):  # for a benchmark running the server in another process
            self.send_json(200, owner.snapshot(reset=self.route == "/reset"))
        else:
            self._not_found()

    def do_POST(self) -> None:
        raw = self.read_body()
        if self.route not in ("/v1/completions", "/v1/chat/completions"):
            self._not_found()
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self.send_json(400, {"error": {"message": "the request body is not JSON"}})
            return
        owner: SlowLMServer = self.server.owner
        owner._enter()
        try:
            time.sleep(owner.delay)
        finally:
            owner._leave()
        prompt = prompt_of(body)
        n = int(body.get("n") or 1)
        texts = [owner.text_for(prompt, (body.get("seed"), i) if n > 1 else body.get("seed")) for i in range(n)]
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n, "total_tokens": len(prompt.split()) + n}
        if self.route == "/v1/completions":
            choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": "stop"} for i, t in enumerate(texts)]
            self.send_json(200, {"id": "cmpl-slow", "object": "text_completion", "created": 0,
                                 "model": body.get("model"), "choices": choices, "usage": usage})
        else:
            choices = [{"index": i, "message": {"role": "assistant", "content": chat_answer(t)}, "finish_reason": "stop"}
                       for i, t in enumerate(texts)]
            self.send_json(200, {"id": "chatcmpl-slow", "object": "chat.completion", "created": int(time.time()),
                                 "model": body.get("model"), "choices": choices, "usage": usage})


class SlowLMServer(LoopbackServer):
    """The server; a context manager. `requests` (answered or not), `in_flight` and `peak` are counters.

    `answer`: the one answer to every prompt (None: `answer_for` the prompt).
    """

    handler = _Handler
    name = "slow-lm-server"

    def __init__(self, delay: float = 0.2, *, answer: str | None = None, port: int = 0) -> None:
        super().__init__(port)
        self.delay = float(delay)
        self.answer = answer
        self.requests = 0
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()  # the handlers are threads

    def text_for(self, prompt: str, seed: Any = None) -> str:
        """The completion text for `prompt` (with a leading space, as a base model writes after "Answer:")."""
        return answer_for(prompt, seed) if self.answer is None else " " + self.answer.strip()

    def _enter(self) -> None:
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def snapshot(self, reset: bool = False) -> dict[str, int]:
        """The counters; with `reset`, then zeroes `requests` and `peak` (requests in flight stay counted)."""
        with self._lock:
            shown = {"requests": self.requests, "peak": self.peak, "in_flight": self.in_flight}
            if reset:
                self.requests, self.peak = 0, self.in_flight
            return shown

    def reset_counters(self) -> None:
        """Zero `requests` and `peak` (as GET /reset does)."""
        self.snapshot(reset=True)

    @property
    def spec(self) -> str:
        """The `--lm` spec of this server (model named, so building the client asks the server nothing)."""
        return f"openai-compatible:{self.url},model=slow"


@contextmanager
def spawn(delay: float, *, answer: str | None = None, python: str = sys.executable) -> Iterator[str]:
    """Run the server in its own process with `python` for a `with` block; yields its base URL."""
    command = [python, str(Path(__file__).resolve()), "--delay", str(delay)]
    if answer is not None:
        command += ["--answer", answer]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        url = (proc.stdout.readline() if proc.stdout else "").strip()
        if not url.startswith("http://"):
            raise RuntimeError("the loopback LM server did not start")
        yield url
    finally:
        proc.kill()  # it keeps no state worth a clean shutdown, and a kill cannot hang
        proc.wait()


def fetch_stats(url: str, reset: bool = False) -> dict[str, int]:
    """The counters of the server at base URL `url` (GET /stats); with `reset`, GET /reset (then zeroed)."""
    route = "/reset" if reset else "/stats"
    with urllib.request.urlopen(url.rsplit("/v1", 1)[0] + route, timeout=10) as response:
        return json.load(response)


def main(argv: list[str] | None = None) -> None:
    """Serve until killed, after printing the base URL (the one line `spawn` reads)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.2, help="seconds before each answer")
    parser.add_argument("--answer", default=None, help="answer every prompt with this (default: a hash of the prompt)")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    args = parser.parse_args(argv)
    server = SlowLMServer(delay=args.delay, answer=args.answer, port=args.port).start()
    print(server.url, flush=True)  # the parent reads this line to learn the port
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
