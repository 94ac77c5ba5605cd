"""Issue 15, fault 2: deferred cache writes of a multiprocessing child are committed when it exits (its exit
skips atexit), and a fork child never inherits, serves or commits its parent's pending entries."""

from __future__ import annotations

import multiprocessing
import sys
import threading

import pytest

import dsp
from dsp import cache
from dsp.cache import memory, stores

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
FORK = multiprocessing.get_context("fork") if sys.platform != "win32" else None


def _hundred_calls(offset: int) -> None:
    for i in range(100):
        cache.cached_call({"child": offset + i}, lambda: {"i": offset + i})
    # All 100 are still held when the child returns (the batch is 512, the delay 2 s): its exit must commit.


def _run_child(target, *args) -> int:
    child = FORK.Process(target=target, args=args)
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        child.join()
        pytest.fail("the fork child hung")
    return child.exitcode


@pytest.mark.parametrize("how", ["settings", "environment"])
def test_a_fork_child_that_exits_normally_stores_all_its_calls(tmp_path, monkeypatch, how):
    directory = str(tmp_path / "c")
    chosen = {"cache_dir": directory}
    if how == "environment":
        monkeypatch.setenv("DSP_CACHE_WRITE", "deferred")
    else:
        chosen["cache_write"] = "deferred"
    with dsp.settings.context(**chosen):
        assert _run_child(_hundred_calls, 0) == 0
    assert len(cache.get_store(directory)) == 100


def _check_nothing_inherited() -> None:
    from dsp.cache import deferred as cache_deferred

    if cache_deferred.pending_count() != 0:
        raise SystemExit(4)  # the parent's pending entries came along
    _hundred_calls(1000)


def test_a_fork_child_neither_inherits_nor_commits_the_parents_pending_entries(tmp_path):
    from dsp.cache import deferred as cache_deferred

    directory = str(tmp_path / "c")
    with dsp.settings.context(cache_dir=directory, cache_write="deferred"):
        for i in range(5):
            cache.cached_call({"parent": i}, lambda: i)
        assert cache_deferred.pending_count() == 5
        assert _run_child(_check_nothing_inherited) == 0
        store = cache.get_store(directory)
        assert len(store) == 100  # the child's own calls only: the parent's five are still the parent's
        assert cache.get_store(directory).get(cache.request_key({"parent": 0})) is cache.MISS
        assert cache.flush() == 5 and len(store) == 105


def test_a_fork_while_another_thread_holds_the_pending_lock_does_not_hang_the_child(tmp_path):
    from dsp.cache import deferred as cache_deferred

    directory = str(tmp_path / "c")
    with dsp.settings.context(cache_dir=directory, cache_write="deferred"):
        cache.cached_call({"parent": 0}, lambda: 0)
        held, release = threading.Event(), threading.Event()
        pending = cache_deferred.pending_of(cache.get_store(directory))

        def hold():
            with pending.lock, cache_deferred._pending._lock, stores._stores_lock, memory._memories._lock:
                held.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        try:
            assert _run_child(_hundred_calls, 0) == 0
        finally:
            release.set()
            holder.join()
        assert len(cache.get_store(directory)) == 100
        assert cache.flush() == 1  # the parent's own entry, committed by the parent only
        assert len(cache.get_store(directory)) == 101
