"""The Redis cache backend against a real redis-server on loopback: the disk cache's keys and JSON text,
the same opt-out, one write per entry under races between processes, clear errors, no password shown."""

from __future__ import annotations

import multiprocessing
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import ScriptedLM
from scale_helpers import redis_server, redis_url  # noqa: F401 - fixtures
from serve_helpers import closed_port

import dsp
from dsp import cache
from dsp.cache.redis import KEY_PREFIX, RedisStore


def _raw(url: str, key: str) -> bytes | None:
    import redis

    with redis.Redis.from_url(url) as client:
        return client.get(KEY_PREFIX + key)


def test_entries_have_the_disk_cache_keys_and_json_text(redis_url, tmp_path):
    request = {"kind": "lm", "provider": "x", "request": {"prompt": "Où est Paris ?", "temperature": 0.0}}
    value = {"choices": [{"text": " en France", "finish_reason": "stop"}], "usage": {"prompt_tokens": 5}}
    with dsp.settings.context(cache_url=redis_url):
        assert isinstance(cache.get_store(), RedisStore)
        assert cache.cached_call(request, lambda: value) == (value, False)
        assert cache.cached_call(request, lambda: pytest.fail("recomputed")) == (value, True)
    with dsp.settings.context(cache_dir=str(tmp_path)):
        cache.cached_call(request, lambda: value)
    with sqlite3.connect(tmp_path / "cache.db") as db:
        ((disk_key, disk_text),) = db.execute("SELECT key, value FROM Cache").fetchall()
    assert disk_key == cache.request_key(request) and KEY_PREFIX == "dsp:v1:"
    assert _raw(redis_url, disk_key) == disk_text.encode("utf-8")  # same key, byte-identical JSON text


def test_lm_calls_go_through_redis_once_and_the_opt_out_holds(redis_url, monkeypatch):
    lm = ScriptedLM(lambda prompt, request: [" x"])
    with dsp.settings.context(cache_url=redis_url):
        lm("hello")
        lm("hello")
        assert lm.num_requests == 1 and len(cache.get_store()) == 1
        with dsp.settings.context(cache=False):
            lm("hello")
            lm("other")
        assert lm.num_requests == 3
        monkeypatch.setenv("DSP_CACHE", "0")
        lm("other")
        assert lm.num_requests == 4 and len(cache.get_store()) == 1  # opted out: nothing written
    fresh = ScriptedLM(lambda prompt, request: [" y"])  # another client (another process, same server)
    monkeypatch.delenv("DSP_CACHE")
    monkeypatch.setenv("DSP_CACHE_URL", redis_url)
    assert fresh("hello") == [" x"] and fresh.num_requests == 0


def test_which_store_settings_and_environment_choose(redis_url, tmp_path, monkeypatch):
    monkeypatch.delenv("DSP_CACHE_URL", raising=False)
    assert isinstance(cache.get_store(), cache.DiskStore)  # the default is unchanged
    monkeypatch.setenv("DSP_CACHE_URL", redis_url)
    assert cache.cache_url() == redis_url and isinstance(cache.get_store(), RedisStore)
    with dsp.settings.context(cache_dir=str(tmp_path)):  # an explicit directory beats the environment
        assert cache.cache_url() is None and isinstance(cache.get_store(), cache.DiskStore)
        with dsp.settings.context(cache_url=redis_url):  # an explicit URL beats everything
            assert isinstance(cache.get_store(), RedisStore)
    assert "cache_url" in dsp.settings.config


def test_bad_or_unreachable_urls_are_named_without_their_password(redis_url):
    with pytest.raises(ValueError, match="must start with redis://"):
        cache.get_store(url="http://user:hunter2@127.0.0.1:1/0")
    closed = closed_port()
    with pytest.raises(ConnectionError, match=rf"cannot use the dsp cache at redis://\*\*\*@127.0.0.1:{closed}/0") as info:
        RedisStore(f"redis://:hunter2@127.0.0.1:{closed}/0", timeout=2)
    assert "hunter2" not in str(info.value) and info.value.__cause__ is None


def test_a_password_comes_from_the_environment_not_the_url(redis_url, redis_server, monkeypatch):
    import redis

    from dsp.cache.redis import strip_password

    host, port = redis_server
    with redis.Redis(host=host, port=port) as admin:
        admin.config_set("requirepass", "hunter2")
    try:
        shipped = strip_password(f"redis://:hunter2@{host}:{port}/0")  # what the Ray backend sends to workers
        assert "hunter2" not in shipped
        monkeypatch.delenv("DSP_CACHE_PASSWORD", raising=False)
        with pytest.raises(ConnectionError, match="set DSP_CACHE_PASSWORD"):
            RedisStore(shipped, timeout=2)
        monkeypatch.setenv("DSP_CACHE_PASSWORD", "hunter2")
        store = RedisStore(shipped, timeout=2)
        assert store.add("k", {"v": 1}) == {"v": 1} and store.get("k") == {"v": 1}
        assert "hunter2" not in repr(store)
        store.close()
    finally:
        with redis.Redis(host=host, port=port, password="hunter2") as admin:
            admin.config_set("requirepass", "")


def test_an_unreadable_entry_is_recomputed(redis_url):
    import redis

    key = cache.request_key({"q": 2})
    with redis.Redis.from_url(redis_url) as client:
        client.set(KEY_PREFIX + key, b"{truncated")
    with dsp.settings.context(cache_url=redis_url):
        assert cache.cached_call({"q": 2}, lambda: [1]) == ([1], False)
        assert cache.cached_call({"q": 2}, lambda: [2]) == ([1], True)


def test_threads_racing_on_one_key_all_return_the_stored_value(redis_url):
    def one(i):
        with dsp.settings.context(cache_url=redis_url):
            return cache.cached_call({"race": 1}, lambda: {"by": i})[0]["by"]

    with ThreadPoolExecutor(16) as pool:
        winners = list(pool.map(one, range(64)))
    with dsp.settings.context(cache_url=redis_url):
        stored = cache.cached_call({"race": 1}, lambda: {"by": -1})[0]["by"]
    assert set(winners) == {stored} and stored != -1


def _hammer(args):
    url, worker = args
    from concurrent.futures import ThreadPoolExecutor as Pool

    import dsp as dsp_
    from dsp import cache as cache_

    def one(i):
        shared = i % 50  # every process and thread writes the same 50 keys, and some of its own
        with dsp_.settings.context(cache_url=url):
            a, _ = cache_.cached_call({"shared": shared}, lambda: {"value": shared, "by": worker})
            b, _ = cache_.cached_call({"own": worker, "i": i}, lambda: {"value": i, "by": worker})
        return a, b == {"value": i, "by": worker}

    with Pool(4) as pool:
        return list(pool.map(one, range(200)))


def test_four_processes_racing_write_each_entry_once(redis_url):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_hammer, [(redis_url, w) for w in range(4)])
    with dsp.settings.context(cache_url=redis_url):
        assert len(cache.get_store()) == 50 + 4 * 200
        stored = {s: cache.cached_call({"shared": s}, lambda: pytest.fail("lost entry"))[0] for s in range(50)}
    for rows in results:
        assert all(own_ok for _, own_ok in rows)
        # whoever won a shared key's race, every racer in every process got the winner's value
        assert all(a == stored[a["value"]] for a, _ in rows)


def test_deferred_writes_reach_redis_in_one_pipeline_at_flush(redis_url):
    with dsp.settings.context(cache_url=redis_url, cache_write="deferred"):
        store = cache.get_store()
        before = len(store)
        for i in range(20):
            assert cache.cached_call({"deferred": i}, lambda: {"i": i}) == ({"i": i}, False)
        assert len(store) == before  # held back
        assert cache.flush() == 20
        assert len(store) == before + 20
    key = cache.request_key({"deferred": 3})
    assert _raw(redis_url, key) == b'{"i":3}'
    with dsp.settings.context(cache_url=redis_url):  # another reader sees them as ordinary entries
        assert cache.cached_call({"deferred": 3}, lambda: pytest.fail("recomputed")) == ({"i": 3}, True)
