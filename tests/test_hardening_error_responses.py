"""Issue 15, fault 1: an error response (an LM answer without completions, an RM answer without passages,
anything malformed) is never cached, in any store or write mode; the next call asks the backend again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ListRM, ScriptedLM
from scale_helpers import redis_server, redis_url  # noqa: F401 - fixtures
from serve_helpers import StubServer, scripted

import dsp
from dsp import cache
from dsp.clients.colbertv2 import ColBERTv2

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
GOOD = {"text": "Paris | the capital of France", "pid": 7, "score": 9.0, "prob": 1.0}


def _first_then(first: list, then: list):
    """A respond function answering `first` once, then `then` (an LM backend that failed once)."""
    answers = [first]

    def respond(prompt, request):
        return answers.pop() if answers else then
    return respond


@pytest.fixture(params=["disk-durable", "disk-deferred", "redis-durable", "redis-deferred"])
def store_settings(request, tmp_path):
    """Settings choosing each store and write mode in turn, a function counting committed entries, and a
    tag to make requests unique (the Redis store, and so its in-process layer, is shared by tests)."""
    where, mode = request.param.split("-")
    if where == "redis":
        url = request.getfixturevalue("redis_url")
        chosen = {"cache_url": url, "cache_write": mode}
    else:
        chosen = {"cache_dir": str(tmp_path / "c"), "cache_write": mode}

    def committed() -> int:
        cache.flush()
        with dsp.settings.context(**chosen):
            return len(cache.get_store())
    return chosen, committed, request.param


def test_an_lm_response_without_completions_is_not_cached(store_settings):
    chosen, committed, tag = store_settings
    prompt = f"Q: capital of France? ({tag})\nA:"
    lm = ScriptedLM(_first_then([], [" Paris"]))
    with dsp.settings.context(**chosen):
        with pytest.raises(ValueError, match="returned no completions"):
            lm(prompt)
        assert committed() == 0
        assert lm(prompt) == [" Paris"]  # asked again, not served the error
        assert len(lm.prompts) == 2 and lm.history[-1]["cached"] is False
        assert committed() == 1
        assert lm(prompt) == [" Paris"] and len(lm.prompts) == 2  # the good one is kept
    fresh = ScriptedLM(lambda prompt, request: pytest.fail("the stored answer was not used"))
    with dsp.settings.context(**chosen):
        assert fresh(prompt) == [" Paris"]


def test_a_malformed_lm_response_is_not_cached(tmp_path):
    class Malformed(ScriptedLM):
        def _request(self, request):
            response = super()._request(request)
            return {"choices": [{"finish_reason": "stop"}]} if len(self.prompts) == 1 else response

    lm = Malformed(lambda prompt, request: [" ok"])
    with dsp.settings.context(cache_dir=str(tmp_path / "c")):
        with pytest.raises(ValueError, match="malformed"):
            lm("hello there")
        assert len(cache.get_store()) == 0
        assert lm("hello there") == [" ok"] and len(lm.prompts) == 2


def test_a_completion_that_is_not_valid_text_is_a_clear_error_and_not_cached(tmp_path):
    lm = ScriptedLM(_first_then([" cut \ud83d"], [" whole \U0001f600"]))
    with dsp.settings.context(cache_dir=str(tmp_path / "c")):
        with pytest.raises(ValueError, match=r"malformed response \(choice 0 contains a lone surrogate \(\\ud83d\)"):
            lm("an emoji please")
        assert len(cache.get_store()) == 0
        assert lm("an emoji please") == [" whole \U0001f600"] and len(lm.prompts) == 2


def test_one_empty_draw_of_n_is_not_cached_and_only_it_is_asked_again(tmp_path):
    calls = []

    def respond(prompt, request):
        calls.append(request["seed"])
        return [] if calls == [0, 1] else [f" s{request['seed']}"]  # the second draw fails once

    lm = ScriptedLM(respond)
    lm.native_n = False
    with dsp.settings.context(cache_dir=str(tmp_path / "c")):
        with pytest.raises(ValueError, match="returned no completions"):
            lm("pick one", n=3)
        assert lm("pick one", n=3) == [" s0", " s1", " s2"]
        assert calls == [0, 1, 1, 2]  # draw 0 came from the cache; draw 1 was asked again
        assert len(cache.get_store()) == 3


def test_an_rm_answer_without_passages_is_not_cached(store_settings):
    chosen, committed, tag = store_settings

    class Flaky(ListRM):
        def _search(self, query, k, **params):
            found = super()._search(query, k, **params)
            return [] if len(self.queries) == 1 else found

    rm = Flaky([("Paris is in France", 2.0), ("Berlin is in Germany", 1.0)])
    with dsp.settings.context(**chosen):
        with pytest.raises(ValueError, match="returned no passages"):
            rm(f"where is Paris ({tag})", k=2)
        assert committed() == 0
        assert [p.text for p in rm(f"where is Paris ({tag})", k=2)] == ["Paris is in France", "Berlin is in Germany"]
        assert rm.num_requests == 2 and committed() == 1


@pytest.mark.parametrize("bad", [[{"score": 1.0}], [{"text": "a", "score": "high"}], [{"text": "a", "prob": float("nan")}],
                                 [{"text": "cut \udc80", "score": 1.0}], ["just text"], {"text": "a"}])
def test_a_malformed_rm_answer_is_not_cached(tmp_path, bad):
    class Malformed(ListRM):
        def _search(self, query, k, **params):
            found = super()._search(query, k, **params)
            return bad if len(self.queries) == 1 else found

    rm = Malformed([("a passage", 1.0)])
    with dsp.settings.context(cache_dir=str(tmp_path / "c")):
        with pytest.raises((TypeError, ValueError)):
            rm("anything", k=1)
        assert len(cache.get_store()) == 0
        assert [p.text for p in rm("anything", k=1)] == ["a passage"] and rm.num_requests == 2


def test_colbertv2_empty_topk_is_not_cached_and_the_next_call_asks_the_server(tmp_path):
    with StubServer(scripted((200, {"topk": []}, {}), (200, {"topk": [GOOD]}, {}))) as stub:
        rm = ColBERTv2(stub.url + "/api/search")
        with pytest.raises(ValueError, match="returned no passages"):
            rm("capital of France", k=1)
        assert len(cache.get_store()) == 0
        assert [p.pid for p in rm("capital of France", k=1)] == [7]
        assert len(stub.requests) == 2
        assert [p.pid for p in rm("capital of France", k=1)] == [7] and len(stub.requests) == 2


_FRESH_PROCESS = textwrap.dedent('''
    import sys
    sys.path[:0] = [{tests!r}, {root!r}]
    import dsp
    from helpers import ListRM, ScriptedLM

    lm = ScriptedLM(lambda prompt, request: [" fresh"])
    rm = ListRM([("fresh passage", 1.0)])
    with dsp.settings.context(cache_dir={cache_dir!r}, cache_write={mode!r}):
        print(lm("Q: x?\\nA:"), len(lm.prompts), [p.text for p in rm("x", k=1)], rm.num_requests)
''')


@pytest.mark.parametrize("mode", ["durable", "deferred"])
def test_a_fresh_process_is_not_served_the_error(tmp_path, mode):
    directory = str(tmp_path / "c")
    lm = ScriptedLM(lambda prompt, request: [])
    rm = ListRM([])
    with dsp.settings.context(cache_dir=directory, cache_write=mode):
        with pytest.raises(ValueError, match="no completions"):
            lm("Q: x?\nA:")
        with pytest.raises(ValueError, match="no passages"):
            rm("x", k=1)
    cache.flush()  # what an exit would commit
    code = _FRESH_PROCESS.format(tests=str(TESTS), root=str(ROOT), cache_dir=directory, mode=mode)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DSP_CACHE_WRITE": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[' fresh'] 1 ['fresh passage'] 1"


def test_an_error_stored_by_an_older_version_is_dropped_and_asked_again(tmp_path, caplog):
    directory = str(tmp_path / "c")
    lm = ScriptedLM(lambda prompt, request: [" Paris"])
    request = lm.build_request("Q: capital?\nA:")
    key = cache.request_key({"kind": "lm", **lm.cache_identity(), "request": request})
    store = cache.get_store(directory)
    store.add_text(key, '{"choices":[],"usage":{}}')  # what an older dsp cached for good
    with dsp.settings.context(cache_dir=directory), caplog.at_level("WARNING", logger="dsp.cache"):
        assert lm("Q: capital?\nA:") == [" Paris"] and len(lm.prompts) == 1
    assert "cached error" in caplog.text
    assert store.get(key)["choices"][0]["text"] == " Paris" and len(store) == 1
