"""A fault-injecting OpenAI-compatible server on loopback, for testing clients' retries (standard library only).

/v1/completions and /v1/chat/completions answer deterministically: choice i of a request whose prompt
(or last message) is P and whose seed is S reads `expected_text(P, S, i)`, so a test can check that each
call got *its own* completion. With `fault_rate`, a request is instead answered by a fault chosen from
a hash of (server seed, request, how many times this exact request was seen): 429 with Retry-After,
500, 503, a response slower than the client's timeout, a connection reset, or truncated JSON. A retry
is a new draw, so retries eventually succeed; and the draws do not depend on thread timing.

Other modes: `max_choices` (return at most that many choices whatever n says, as llama.cpp's server
does), `always=(status, message, code)` (answer every request with that error), `recording=path` (answer
/v1/completions from a DSP v1 JSONL recording, 400 for a request it does not hold).

>>> with FaultServer(fault_rate=0.3, seed=1) as server:
...     server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
True
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from hashlib import sha256
from pathlib import Path
from typing import Any

from loopback_server import JSONHandler, LoopbackServer, prompt_of

__all__ = ["FAULT_KINDS", "FaultServer", "expected_text"]

FAULT_KINDS = ("429", "500", "503", "slow", "reset", "truncated")


def expected_text(prompt: str, seed: Any = None, index: int = 0) -> str:
    """The completion the server gives for `prompt` (choice `index` of a request with `seed`)."""
    return " " + sha256(f"{prompt}|{seed}|{index}".encode("utf-8")).hexdigest()[:16]


def _canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


class _Handler(JSONHandler):
    # -- writing -------------------------------------------------------------------------------------

    def _error(self, status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        self.send_json(status, {"error": {"message": message, "type": "test_error", "code": code}}, headers)

    def _reset(self) -> None:
        """Close the socket without a response: SO_LINGER 0 makes the close a TCP reset."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    # -- routing -------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        if self.route == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "fault-model", "object": "model"}]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        owner: FaultServer = self.server.owner
        raw = self.read_body()
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "the request body is not JSON")
            return
        path = self.route
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._error(404, f"no route {self.path}")
            return
        owner._note_request(body, self.headers.get("Authorization"))
        if owner.always is not None:
            status, message, code = owner.always
            owner._count("always")
            self._error(status, message, code)
            return
        fault = owner._decide(body)
        if fault == "429":
            self._error(429, "Rate limit reached; slow down", "rate_limit_exceeded",
                        {"Retry-After": f"{owner._retry_after(body):.3f}"})
        elif fault in ("500", "503"):
            self._error(int(fault), "The server had an error while processing your request")
        elif fault == "reset":
            self._reset()
        else:
            status, payload = owner._answer(path, body, consume=fault is None)
            if fault == "slow":
                time.sleep(owner.slow_seconds)
                self.send_json(status, payload)
            elif fault == "truncated":
                text = json.dumps(payload).encode("utf-8")
                self.send_json(200, None, raw=text[: len(text) // 2])
            else:
                if status == 200:
                    owner._count_ok(body)
                self.send_json(status, payload)


class FaultServer(LoopbackServer):
    """The server; use as a context manager. Counters: `faults` (by kind), `requests`/`ok` (by prompt)."""

    handler = _Handler
    name = "fault-server"

    def __init__(
        self, *, fault_rate: float = 0.0, kinds: tuple[str, ...] = FAULT_KINDS, seed: int = 0,
        slow_seconds: float = 0.5, retry_after: tuple[float, float] = (0.01, 0.05), max_choices: int | None = None,
        always: tuple[int, str, str | None] | None = None, recording: str | Path | None = None,
    ) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
        super().__init__()
        self.fault_rate = fault_rate
        self.kinds = tuple(kinds)
        self.seed = seed
        self.slow_seconds = slow_seconds
        self.retry_after_range = retry_after
        self.max_choices = max_choices
        self.always = always
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()  # exact request -> times seen (the draw index)
        self.faults: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()  # prompt -> requests received
        self.ok: Counter[str] = Counter()  # prompt -> successful answers sent
        self.bodies: list[dict[str, Any]] = []
        self.authorizations: set[str] = set()
        self._recorded: dict[str, list[Any]] = {}
        if recording is not None:
            for line in Path(recording).read_text(encoding="utf-8").splitlines():
                if line.strip():
                    record = json.loads(line)
                    choices = record.pop("choices")
                    self._recorded.setdefault(_canonical(record), []).append(choices)

    # -- decisions (called from handler threads) -------------------------------------------------------

    def _note_request(self, body: dict[str, Any], authorization: str | None) -> None:
        with self._lock:
            self.requests[prompt_of(body)] += 1
            self.bodies.append(body)
            if authorization:
                self.authorizations.add(authorization)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.faults[kind] += 1

    def _count_ok(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.ok[prompt_of(body)] += 1

    def _draw(self, body: dict[str, Any]) -> tuple[float, int]:
        key = _canonical(body)
        with self._lock:
            self._seen[key] += 1
            nth = self._seen[key]
        digest = sha256(f"{self.seed}|{nth}|{key}".encode("utf-8")).digest()
        return int.from_bytes(digest[:4], "big") / 2**32, int.from_bytes(digest[4:8], "big")

    def _decide(self, body: dict[str, Any]) -> str | None:
        if not self.fault_rate:
            return None
        u, pick = self._draw(body)
        if u >= self.fault_rate:
            return None
        kind = self.kinds[pick % len(self.kinds)]
        self._count(kind)
        return kind

    def _retry_after(self, body: dict[str, Any]) -> float:
        low, high = self.retry_after_range
        return random.Random(_canonical(body)).uniform(low, high)

    def _answer(self, path: str, body: dict[str, Any], consume: bool) -> tuple[int, dict[str, Any]]:
        prompt = prompt_of(body)
        if self._recorded:
            # Repeats of a recorded request get the recorded answers in order (the last one sticks); a
            # faulty delivery does not use one up.
            with self._lock:
                answers = self._recorded.get(_canonical(body))
                choices = answers[0] if answers else None
                if consume and answers and len(answers) > 1:
                    answers.pop(0)
            if choices is None:
                return 400, {"error": {"message": f"unrecorded request: {_canonical(body)[:300]}", "code": None}}
            return 200, {"object": "text_completion", "choices": choices,
                         "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 1}}
        n = body.get("n") or 1
        count = n if self.max_choices is None else min(n, self.max_choices)
        seed = body.get("seed")
        texts = [expected_text(prompt, seed, i) for i in range(count)]
        if path.endswith("/chat/completions"):
            choices = [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                       for i, t in enumerate(texts)]
            kind = "chat.completion"
        else:
            choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": "stop"} for i, t in enumerate(texts)]
            if body.get("logprobs"):
                for c in choices:
                    c["logprobs"] = {"tokens": [c["text"]], "token_logprobs": [-0.5], "top_logprobs": None}
            kind = "text_completion"
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": count,
                 "total_tokens": len(prompt.split()) + count}
        return 200, {"id": "cmpl-test", "object": kind, "model": body.get("model"), "choices": choices, "usage": usage}
