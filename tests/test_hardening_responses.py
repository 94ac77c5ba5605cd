"""Issue 29, items 14 and 16: an OpenAI(-compatible) answer whose choice carries no completion is an error.

- a chat choice whose ``message`` is a string (``{"choices": [{"message": "hi"}]}``) raised AttributeError;
- a text choice with no ``"text"`` field became ``''``, was returned, and cached for good.

Both are now an unusable response (``bad_response``): retried within the retry budget, then one
`RetriesExhausted` naming the choice, and nothing cached.
"""

from __future__ import annotations

import threading
from typing import Any

import diskcache
import pytest

import dsp
from dsp.clients.retry import RetriesExhausted, RetryPolicy
from loopback_server import JSONHandler, LoopbackServer

__all__: list[str] = []

NO_WAIT = RetryPolicy(max_retries=2, base_delay=0.0, max_delay=0.0)
ATTEMPTS = NO_WAIT.max_retries + 1


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch):
    """The developer's own OPENAI_* variables must not leak into these tests."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


class _Answers(JSONHandler):
    def do_POST(self) -> None:
        self.read_body()
        owner: FixedServer = self.server.owner
        with owner.lock:
            owner.requests.append(self.route)
        self.send_json(200, owner.payload)


class FixedServer(LoopbackServer):
    """Answers every POST with `payload` (status 200) and records the paths it was asked."""

    handler = _Answers
    name = "fixed-lm-server"

    def __init__(self, payload: Any) -> None:
        super().__init__()
        self.payload = payload
        self.requests: list[str] = []
        self.lock = threading.Lock()


def cached_keys(directory) -> list[str]:
    with diskcache.Cache(str(directory)) as store:
        return list(store.iterkeys())


# -- item 14: a chat message that is no object --------------------------------------------------------------

@pytest.mark.parametrize("choice, says", [
    ({"message": "hi"}, 'choice 0 has a "message" that is not an object: "hi"'),
    ({"message": ["hi"]}, 'choice 0 has a "message" that is not an object'),
    ({"message": 7, "finish_reason": "stop"}, 'choice 0 has a "message" that is not an object: 7'),
    ({"index": 0, "finish_reason": "stop"}, 'choice 0 has no "message"'),
], ids=["string", "list", "number", "missing"])
def test_a_chat_choice_without_a_message_object_is_retried_then_one_error(choice, says, tmp_path):
    prompt = "Question: who wrote Hamlet?\nAnswer:"
    with FixedServer({"choices": [choice]}) as server, dsp.settings.context(cache_dir=str(tmp_path / "c")):
        lm = dsp.OpenAI("m", base_url=server.url, retry_policy=NO_WAIT, timeout=5)
        with pytest.raises(RetriesExhausted) as raised:
            lm(prompt)
        assert server.requests == ["/v1/chat/completions"] * ATTEMPTS  # retried, within the budget
    error = raised.value
    assert error.kind == "bad_response" and error.attempts == ATTEMPTS
    assert says in str(error) and "unusable response" in str(error) and "\n" not in str(error)
    assert cached_keys(tmp_path / "c") == []
    assert lm.retry_stats["exhausted"] == 1


def test_a_chat_message_with_null_content_is_still_an_empty_completion():
    # A refusal or a tool call has a message object whose content is null: a valid answer, not a fault.
    with FixedServer({"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]}) \
            as server:
        lm = dsp.OpenAI("m", base_url=server.url, retry_policy=NO_WAIT, timeout=5)
        assert lm("Question: q?\nAnswer:", cache=False) == [""]
        assert len(server.requests) == 1


# -- item 16: a text choice without "text" ------------------------------------------------------------------

@pytest.mark.parametrize("choice, says", [
    ({"index": 0, "finish_reason": "stop"}, 'choice 0 has no "text" string'),
    ({"index": 0, "text": None, "finish_reason": "stop"}, 'choice 0 has no "text" string'),
    ({"index": 0, "text": 42}, 'choice 0 has no "text" string'),
], ids=["missing", "null", "number"])
def test_a_text_choice_without_text_is_an_error_and_never_cached(choice, says, tmp_path):
    prompt = "Question: what is the capital of France?\nAnswer:"
    cache_dir = tmp_path / "c"
    with FixedServer({"choices": [choice]}) as server, dsp.settings.context(cache_dir=str(cache_dir)):
        lm = dsp.OpenAI("m", base_url=server.url, model_type="text", retry_policy=NO_WAIT, timeout=5)
        with pytest.raises(RetriesExhausted, match=says) as raised:
            lm(prompt)
        assert raised.value.kind == "bad_response" and raised.value.attempts == ATTEMPTS
        assert server.requests == ["/v1/completions"] * ATTEMPTS
        assert cached_keys(cache_dir) == []  # nothing stored for that prompt
        with pytest.raises(RetriesExhausted):  # asked again, not served an empty completion from the cache
            lm(prompt)
        assert len(server.requests) == 2 * ATTEMPTS and lm.usage.cached_requests == 0
    assert cached_keys(cache_dir) == []


def test_an_empty_text_completion_is_still_an_answer(tmp_path):
    # "text": "" is what a model that stopped at once says: a completion, returned and cached.
    with FixedServer({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}) as server, \
            dsp.settings.context(cache_dir=str(tmp_path / "c")):
        lm = dsp.OpenAI("m", base_url=server.url, model_type="text", retry_policy=NO_WAIT, timeout=5)
        assert lm("Question: q?\nAnswer:") == [""]
        assert lm("Question: q?\nAnswer:") == [""] and len(server.requests) == 1
    assert len(cached_keys(tmp_path / "c")) == 1
