"""dsp.settings: a contextvar per thread/task; nothing leaks between threads or nested contexts."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import ScriptedLM

import dsp
from templates.intro import qa_template


def test_settings_read_as_none_before_configuration():
    fresh = dsp.settings.__class__()
    assert fresh.lm is None and fresh.rm is None and fresh.vectorizer is None and fresh.cache is None
    with pytest.raises(AttributeError, match="valid settings"):
        fresh.not_a_setting
    with pytest.raises(TypeError, match="unknown setting"):
        fresh.configure(lmm=1)
    with pytest.raises(AttributeError, match="configure"):
        fresh.lm = 1


def test_configure_and_nested_contexts_restore_on_exit():
    dsp.settings.configure(branch_idx=1)
    with dsp.settings.context(branch_idx=2):
        assert dsp.settings.branch_idx == 2
        with dsp.settings.context(rm="rm"):
            assert (dsp.settings.branch_idx, dsp.settings.rm) == (2, "rm")
        assert dsp.settings.rm is None
        dsp.settings.configure(branch_idx=5)  # inside a context: lasts until the context exits
        assert dsp.settings.branch_idx == 5
    assert dsp.settings.branch_idx == 1
    assert dsp.settings.config["branch_idx"] == 1


def test_sixteen_threads_each_see_only_their_own_lm():
    barrier = threading.Barrier(16)

    def worker(i):
        lm = ScriptedLM(lambda prompt, request, i=i: [f" thread-{i}"], model=f"m{i}")
        seen = []
        with dsp.settings.context(lm=lm, cache=False):
            barrier.wait()  # all 16 contexts are open at once
            for _ in range(20):
                seen.append(dsp.settings.lm.model)
                seen.append(dsp.generate(qa_template)(dsp.Example(question="q"))[1].answer)
        return i, seen, dsp.settings.lm

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(worker, range(16)))
    for i, seen, after in results:
        assert set(seen) == {f"m{i}", f"thread-{i}"}
        assert after is None or after is dsp.settings.lm  # the context closed in that thread


def test_configure_from_a_worker_thread_does_not_rewire_other_threads():
    dsp.settings.configure(rm="main-rm")
    done = threading.Event()

    def worker():
        dsp.settings.configure(rm="worker-rm")
        assert dsp.settings.rm == "worker-rm"
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert done.is_set() and dsp.settings.rm == "main-rm"


def test_a_new_thread_sees_the_process_wide_configuration():
    dsp.settings.configure(branch_idx=7)
    out = []
    thread = threading.Thread(target=lambda: out.append(dsp.settings.branch_idx))
    thread.start()
    thread.join()
    assert out == [7]
