"""Issue 15, faults 3 and 4: text that is not valid (a lone surrogate) is refused, naming the argument, before
any cache or backend work; fused_retrieval's errors name the caller's k, not the depth derived from it."""

from __future__ import annotations

import pytest
from helpers import ListRM, ScriptedLM

import dsp
from dsp import cache
from dsp.clients.rm import check_queries


@pytest.fixture
def no_cache_work(monkeypatch):
    """Any attempt to open a cache store or hash a request fails the test."""
    def forbidden(*args, **kwargs):
        pytest.fail("cache work was done for invalid text")
    monkeypatch.setattr(cache, "get_store", forbidden)
    monkeypatch.setattr(cache, "hash_request", forbidden)


@pytest.mark.parametrize("use_cache", [None, False])
def test_a_lone_surrogate_in_a_prompt_is_a_value_error_naming_the_prompt(no_cache_work, use_cache):
    lm = ScriptedLM(lambda prompt, request: [" x"])
    message = r"the prompt contains a lone surrogate \(\\ud800\) at character 1: not valid text"
    with pytest.raises(ValueError, match=message):
        lm("a\ud800", cache=use_cache)
    with pytest.raises(ValueError, match=r"lone surrogate \(\\udfff\) at character 3"):
        lm("Q: \udfff?", cache=use_cache)
    assert lm.prompts == [] and lm.num_requests == 0 and not lm.history


@pytest.mark.parametrize("use_cache", [None, False])
def test_a_lone_surrogate_in_a_query_is_a_value_error_naming_the_query(no_cache_work, use_cache):
    rm = ListRM([("a passage", 1.0)])
    message = r"the search query contains a lone surrogate \(\\ud800\) at character 1: not valid text"
    with pytest.raises(ValueError, match=message):
        rm("a\ud800", k=1, cache=use_cache)
    assert rm.queries == [] and rm.num_requests == 0
    with pytest.raises(ValueError, match=r"query 1: the search query contains a lone surrogate \(\\udc80\)"):
        check_queries(["fine", "b\udc80"], 1)
    with dsp.settings.context(rm=rm), pytest.raises(ValueError, match="lone surrogate"):
        dsp.retrieve("x\ud800", k=1)
    assert rm.queries == []


def test_any_other_request_field_that_is_not_valid_text_is_a_value_error_naming_it(tmp_path):
    lm = ScriptedLM(lambda prompt, request: [" x"])
    with dsp.settings.context(cache_dir=str(tmp_path / "c")):
        with pytest.raises(ValueError, match=r"request\.request\.stop\[1\] contains a lone surrogate \(\\ud800\)"):
            lm("fine prompt", stop=["\n", "\ud800"])
    assert lm.prompts == []


def test_text_that_is_valid_still_works(tmp_path):
    lm = ScriptedLM(lambda prompt, request: [" ok"])
    rm = ListRM([("a passage", 1.0)])
    with dsp.settings.context(cache_dir=str(tmp_path / "c")):
        assert lm("Où est 東京? 😀") == [" ok"] and lm("Où est 東京? 😀") == [" ok"]
        assert [p.text for p in rm("Où est 東京? 😀", k=1)] == ["a passage"]
    assert lm.num_requests == 1 and rm.num_requests == 1


@pytest.mark.parametrize("k", [-3, 0])
def test_fused_retrieval_names_the_callers_k(k):
    rm = ListRM([("a", 1.0)])
    with dsp.settings.context(rm=rm):
        with pytest.raises(ValueError, match=rf"k must be positive, got {k}$"):
            dsp.fused_retrieval(["x"], k=k)
        with pytest.raises(TypeError, match=r"k must be an integer, got float: 2.5"):
            dsp.fused_retrieval(["x"], k=2.5)
        with pytest.raises(ValueError, match=r"depth must be positive, got -1"):
            dsp.fused_retrieval(["x"], k=1, depth=-1)
    assert rm.queries == []
