"""The in-process layer in front of a cache store: it answers only what the store itself would answer."""

from __future__ import annotations

import dsp
from dsp import cache
from dsp.cache import memory


def _count_calls():
    calls = []

    def compute(value):
        def run():
            calls.append(value)
            return value
        return run

    return calls, compute


def test_requests_equal_in_python_but_not_in_json_are_different_entries(tmp_path):
    calls, compute = _count_calls()
    with dsp.settings.context(cache_dir=str(tmp_path)):
        variants = [{"t": 1}, {"t": 1.0}, {"t": True}, {"t": 0.0}, {"t": -0.0}, {"t": [1]}, {"t": "1"}]
        for i, request in enumerate(variants):
            assert cache.cached_call(request, compute(i)) == (i, False)
        for i, request in enumerate(variants):  # now from memory: each its own value
            assert cache.cached_call(request, compute(-1)) == (i, True)
    assert calls == list(range(len(variants)))


def test_key_order_and_list_or_tuple_do_not_matter_as_in_the_key(tmp_path):
    with dsp.settings.context(cache_dir=str(tmp_path)):
        cache.cached_call({"a": 1, "b": [1, 2]}, lambda: "first")
        assert cache.cached_call({"b": (1, 2), "a": 1}, lambda: "second") == ("first", True)
    assert cache.request_key({"a": 1, "b": [1, 2]}) == cache.request_key({"b": (1, 2), "a": 1})


def test_each_hit_is_a_fresh_copy_and_each_store_its_own(tmp_path):
    with dsp.settings.context(cache_dir=str(tmp_path / "one")):
        cache.cached_call({"q": 1}, lambda: {"choices": ["x"]})
        first, _ = cache.cached_call({"q": 1}, lambda: None)
        first["choices"].append("changed by the caller")
        assert cache.cached_call({"q": 1}, lambda: None) == ({"choices": ["x"]}, True)
    with dsp.settings.context(cache_dir=str(tmp_path / "two")):  # another store: nothing from the first
        assert cache.cached_call({"q": 1}, lambda: "two") == ("two", False)


def test_a_hit_from_disk_in_a_new_process_state_matches_memory(tmp_path):
    with dsp.settings.context(cache_dir=str(tmp_path)):
        cache.cached_call({"q": "disk"}, lambda: {"v": 1.5})
    memory.forget()  # as in a new process: the entry comes from the store, then from memory
    with dsp.settings.context(cache_dir=str(tmp_path)):
        assert cache.cached_call({"q": "disk"}, lambda: None) == ({"v": 1.5}, True)
        assert cache.cached_call({"q": "disk"}, lambda: None) == ({"v": 1.5}, True)


def test_requests_the_key_refuses_are_still_refused(tmp_path):
    import pytest

    with dsp.settings.context(cache_dir=str(tmp_path)):
        with pytest.raises(ValueError, match="credential"):
            cache.cached_call({"api_key": "sk-1", "q": 1}, lambda: 1)
        with pytest.raises(ValueError):
            cache.cached_call({"q": float("nan")}, lambda: 1)


def test_the_layer_keeps_at_most_its_limit():
    layer = memory.Memory(limit=100)
    for i in range(50):
        layer.put(("k", i), 10, "0123456789")
    assert layer.size <= 100 and len(layer.entries) == 5
    assert layer.get(("k", 49)) == "0123456789" and layer.get(("k", 0)) is None
