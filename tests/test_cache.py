"""The disk cache: canonical keys, JSON values, opt-out, no credentials, threads and processes."""

from __future__ import annotations

import multiprocessing
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import ScriptedLM

import dsp
from dsp import cache


def test_keys_are_canonical_and_type_exact():
    a = cache.request_key({"prompt": "p", "temperature": 0.0, "n": 1})
    assert a == cache.request_key({"n": 1, "temperature": 0.0, "prompt": "p"})
    assert a != cache.request_key({"prompt": "p", "temperature": 0, "n": 1})  # 0 and 0.0 differ
    assert a != cache.request_key({"prompt": "p ", "temperature": 0.0, "n": 1})


def test_a_credential_never_enters_a_key():
    with pytest.raises(ValueError, match=r"credential \(request.headers.api_key\)"):
        cache.request_key({"headers": {"api_key": "sk-x"}})


def test_cached_call_stores_json_once_and_returns_it(tmp_path):
    calls = []
    with dsp.settings.context(cache_dir=str(tmp_path)):
        value, hit = cache.cached_call({"q": 1}, lambda: calls.append(1) or {"a": (1, 2)})
        again, hit2 = cache.cached_call({"q": 1}, lambda: calls.append(1) or {"a": "other"})
    assert (value, hit) == ({"a": [1, 2]}, False)  # what a later hit returns, from the first call on
    assert (again, hit2) == ({"a": [1, 2]}, True) and calls == [1]
    with sqlite3.connect(tmp_path / "cache.db") as db:
        assert db.execute("SELECT mode, value FROM Cache").fetchall() == [(1, '{"a":[1,2]}')]  # 1 = raw text


def test_cache_can_be_turned_off_by_setting_or_environment(monkeypatch):
    lm = ScriptedLM(lambda prompt, request: [" x"])
    lm("hello")
    lm("hello")
    assert lm.num_requests == 1
    with dsp.settings.context(cache=False):
        lm("hello")
    assert lm.num_requests == 2
    monkeypatch.setenv("DSP_CACHE", "0")
    lm("hello")
    assert lm.num_requests == 3
    with dsp.settings.context(cache=True):
        lm("hello")
    assert lm.num_requests == 3  # the setting wins over the environment


def test_an_in_process_cache_answers_within_the_process_writes_nothing_and_forks_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("DSP_CACHEDIR", str(tmp_path / "disk"))
    lm = ScriptedLM(lambda prompt, request: [" x"], model="in-process")
    with dsp.settings.context(cache_url="memory://test-in-process"):
        lm("hello")
        lm("hello")
        assert lm.num_requests == 1 and len(cache.get_store()) == 1
        with multiprocessing.get_context("fork").Pool(1) as pool:  # a forked worker starts its own, empty
            assert pool.apply(_store_size) == 0
    assert not (tmp_path / "disk").exists()  # nothing written anywhere
    cache.discard_store("memory://test-in-process")
    with dsp.settings.context(cache_url="memory://test-in-process"):
        lm("hello")
    assert lm.num_requests == 2  # discarded: asked again
    cache.discard_store("memory://test-in-process")
    with pytest.raises(ValueError, match="memory://NAME"):
        cache.get_store(url="memory://")


def _store_size() -> int:
    return len(cache.get_store())


def test_cache_location_follows_settings_then_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DSP_CACHEDIR", str(tmp_path / "env"))
    assert cache.cache_dir() == tmp_path / "env"
    with dsp.settings.context(cache_dir=str(tmp_path / "set")):
        assert cache.cache_dir() == tmp_path / "set"
    monkeypatch.delenv("DSP_CACHEDIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "dsp"


def test_an_unreadable_entry_is_recomputed(tmp_path):
    store = cache.get_store(tmp_path)
    key = cache.request_key({"q": 2})
    store._cache.set(key, "{truncated")
    with dsp.settings.context(cache_dir=str(tmp_path)):
        assert cache.cached_call({"q": 2}, lambda: [1]) == ([1], False)


def _hammer(args):
    directory, worker = args
    from concurrent.futures import ThreadPoolExecutor as Pool

    import dsp as dsp_
    from dsp import cache as cache_

    def one(i):
        shared = i % 50  # every process and thread writes the same 50 keys, and some of its own
        with dsp_.settings.context(cache_dir=directory):
            a, _ = cache_.cached_call({"shared": shared}, lambda: {"value": shared, "by": worker})
            b, _ = cache_.cached_call({"own": worker, "i": i}, lambda: {"value": i, "by": worker})
        return a["value"] == shared and b == {"value": i, "by": worker}

    with Pool(4) as pool:
        return all(pool.map(one, range(200)))


def test_four_processes_by_four_threads_share_one_cache_without_loss(tmp_path):
    directory = str(tmp_path / "shared")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        assert all(pool.map(_hammer, [(directory, w) for w in range(4)]))
    store = cache.get_store(directory)
    assert len(store) == 50 + 4 * 200
    with dsp.settings.context(cache_dir=directory):
        owners = set()
        for shared in range(50):
            value, hit = cache.cached_call({"shared": shared}, lambda: pytest.fail("lost entry"))
            owners.add(value["by"])
            assert hit and value["value"] == shared
        for worker in range(4):
            for i in range(200):
                assert cache.cached_call({"own": worker, "i": i}, lambda: pytest.fail("lost"))[0]["by"] == worker


def test_threads_racing_on_one_key_all_return_the_stored_value(tmp_path):
    with dsp.settings.context(cache_dir=str(tmp_path)):
        def one(i):
            with dsp.settings.context(cache_dir=str(tmp_path)):
                return cache.cached_call({"race": 1}, lambda: {"by": i})[0]["by"]

        with ThreadPoolExecutor(16) as pool:
            winners = list(pool.map(one, range(64)))
        stored = cache.cached_call({"race": 1}, lambda: {"by": -1})[0]["by"]
    # one writer wins; every other caller, hit or loser of the race, returns the winner's value
    assert set(winners) == {stored} and stored != -1
