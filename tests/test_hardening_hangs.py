"""Issue 29, items 8 and 9: the OpenAI client never hangs on a hostile or broken server.

- ``{"choices": [null]}`` is an unusable answer: retried within the retry budget, then one clear error
  (it made the client loop forever, 807 requests in 40 s);
- a 200 whose body (or whose headers) arrive a byte at a time fails within `timeout`: the timeout bounds
  the whole attempt, read included (httpx's read timeout alone is per chunk).
"""

from __future__ import annotations

import threading
import time

import pytest

import dsp
from dsp.clients.retry import RetriesExhausted, RetryPolicy
from loopback_server import JSONHandler, LoopbackServer

NO_WAIT = RetryPolicy(max_retries=2, base_delay=0.0, max_delay=0.0)


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch):
    """The developer's own OPENAI_* variables must not leak into these tests."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


class _Answers(JSONHandler):
    def do_POST(self) -> None:
        self.read_body()
        owner: HostileServer = self.server.owner
        with owner.lock:
            owner.requests += 1
        owner.answer(self)


class HostileServer(LoopbackServer):
    """Counts requests; `answer(handler)` writes each response."""

    handler = _Answers
    name = "hostile-lm-server"

    def __init__(self, answer) -> None:
        super().__init__()
        self.answer = answer
        self.requests = 0
        self.lock = threading.Lock()
        self.stop_dripping = threading.Event()

    def stop(self) -> None:
        self.stop_dripping.set()
        super().stop()


GOOD = {"choices": [{"index": 0, "text": " ok", "finish_reason": "stop"}]}
# After this many broken answers the server gives a good one: a client that loops on them ends (and fails
# the test by the count) instead of hanging the test run.
PATIENCE = 40


def _broken(choices: list):
    def answer(handler: JSONHandler) -> None:
        handler.send_json(200, GOOD if handler.server.owner.requests > PATIENCE else {"choices": choices})

    return answer


@pytest.mark.parametrize("choices", [[None], [None, None], ["text"], [17]])
def test_choices_that_are_not_objects_are_retried_then_one_error(choices):
    answer = _broken(choices)

    with HostileServer(answer) as server:
        lm = dsp.OpenAI("m", base_url=server.url, model_type="text", retry_policy=NO_WAIT, timeout=5)
        started = time.monotonic()
        with pytest.raises(RetriesExhausted, match="choice 0 is not an object") as raised:
            lm("Question: q?\nAnswer:", cache=False)
        assert server.requests == 3  # the first attempt and max_retries=2 retries: never a loop
        assert time.monotonic() - started < 5
    assert "\n" not in str(raised.value) and raised.value.attempts == 3


def test_null_choices_in_chat_mode_and_with_n_are_bounded_too():
    with HostileServer(_broken([None])) as server:
        lm = dsp.OpenAI("m", base_url=server.url, retry_policy=NO_WAIT, timeout=5)
        with pytest.raises(RetriesExhausted, match="unusable response"):
            lm("Question: q?\nAnswer:", cache=False, n=3, temperature=0.7)
        assert server.requests == 3


def _drip(what: str, seconds_per_byte: float):
    """A 200 whose headers ("headers") or body ("body") arrive one byte every `seconds_per_byte` s."""

    def answer(handler: JSONHandler) -> None:
        body = b'{"choices": [{"index": 0, "text": " slow", "finish_reason": "stop"}]}'
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                f"X-Padding: {'x' * 40}\r\n\r\n").encode("latin-1")
        fast, slow = (head, body) if what == "body" else (b"", head + body)
        stop = handler.server.owner.stop_dripping
        try:
            handler.wfile.write(fast)
            handler.wfile.flush()
            for i in range(len(slow)):
                if stop.wait(seconds_per_byte):
                    return
                handler.wfile.write(slow[i:i + 1])
                handler.wfile.flush()
        except OSError:  # the client gave up and closed the connection: what the test wants
            handler.close_connection = True

    return answer


@pytest.mark.parametrize("what", ["body", "headers"])
def test_a_response_dripping_a_byte_at_a_time_fails_within_the_timeout(what):
    # ~70 bytes at 0.25 s each: 17 s to send whole, a byte every 0.25 s (never a 1 s pause between bytes).
    with HostileServer(_drip(what, 0.25)) as server:
        lm = dsp.OpenAI("m", base_url=server.url, model_type="text", timeout=1,
                        retry_policy=RetryPolicy(max_retries=0))
        started = time.monotonic()
        with pytest.raises(RetriesExhausted, match="timed out") as raised:
            lm("Question: q?\nAnswer:", cache=False)
        elapsed = time.monotonic() - started
        assert elapsed < 1.8, f"timeout=1 took {elapsed:.1f} s"
        assert server.requests == 1
    assert "within 1 s" in str(raised.value)


def test_the_timeout_bounds_every_attempt_of_a_retried_call():
    with HostileServer(_drip("body", 0.25)) as server:
        lm = dsp.OpenAI("m", base_url=server.url, model_type="text", timeout=1, retry_policy=NO_WAIT)
        started = time.monotonic()
        with pytest.raises(RetriesExhausted, match="gave up after 3 attempts"):
            lm("Question: q?\nAnswer:", cache=False)
        assert time.monotonic() - started < 3 * 1 + 1.5
        assert server.requests == 3


def test_a_fast_server_still_answers_and_the_connection_is_reused():
    def answer(handler: JSONHandler) -> None:
        handler.send_json(200, {"choices": [{"index": 0, "text": " ok", "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 3, "completion_tokens": 1}})

    with HostileServer(answer) as server:
        lm = dsp.OpenAI("m", base_url=server.url, model_type="text", timeout=1)
        assert [lm(f"Question: q{i}?\nAnswer:", cache=False) for i in range(3)] == [[" ok"]] * 3
        time.sleep(1.2)  # longer than the timeout: an idle kept-alive connection is not an expired attempt
        assert lm("Question: again?\nAnswer:", cache=False) == [" ok"]
        assert server.requests == 4
