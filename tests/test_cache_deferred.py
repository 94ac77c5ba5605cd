"""The "deferred" cache write mode: entries batched into one commit, flushed at every evaluate row and at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ScriptedLM

import dsp
from dsp import cache
from dsp.cache import deferred as cache_deferred
from dsp.cache import memory

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _stored(directory) -> int:
    return len(cache.get_store(directory))


def test_entries_wait_for_a_flush_and_answer_meanwhile(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "MEMORY_LIMIT", 0)  # no in-process layer: repeats must be served by the pending set
    directory = str(tmp_path / "c")
    with dsp.settings.context(cache_dir=directory, cache_write="deferred"):
        assert cache.cached_call({"q": 1}, lambda: {"a": (1, 2)}) == ({"a": [1, 2]}, False)
        assert cache.cached_call({"q": 1}, lambda: pytest.fail("recomputed")) == ({"a": [1, 2]}, True)
        assert _stored(directory) == 0  # nothing committed yet
        assert cache.flush() == 1 and cache.flush() == 0
        assert _stored(directory) == 1
        assert cache.cached_call({"q": 1}, lambda: pytest.fail("recomputed")) == ({"a": [1, 2]}, True)
    with dsp.settings.context(cache_dir=directory):  # the durable mode reads the same entries
        assert cache.cached_call({"q": 1}, lambda: pytest.fail("recomputed")) == ({"a": [1, 2]}, True)


def test_a_full_batch_or_an_old_entry_commits(tmp_path, monkeypatch):
    directory = str(tmp_path / "c")
    monkeypatch.setattr(cache_deferred, "DEFERRED_BATCH", 3)
    monkeypatch.setattr(cache_deferred, "DEFERRED_SECONDS", 3600.0)
    with dsp.settings.context(cache_dir=directory, cache_write="deferred"):
        for i in range(7):
            cache.cached_call({"q": i}, lambda: i)
        assert _stored(directory) == 6  # two batches of three; the seventh waits
        monkeypatch.setattr(cache_deferred, "DEFERRED_SECONDS", 0.0)
        cache.cached_call({"q": 7}, lambda: 7)  # the oldest pending entry is overdue: both commit
        assert _stored(directory) == 8


def test_the_mode_comes_from_settings_then_environment_and_is_checked(monkeypatch):
    assert cache.cache_write_mode() == "durable"
    monkeypatch.setenv("DSP_CACHE_WRITE", "Deferred")
    assert cache.cache_write_mode() == "deferred"
    with dsp.settings.context(cache_write="durable"):
        assert cache.cache_write_mode() == "durable"
    monkeypatch.setenv("DSP_CACHE_WRITE", "lazy")
    with pytest.raises(ValueError, match=r"\$DSP_CACHE_WRITE is 'lazy'; it must be one of durable, deferred"):
        cache.cached_call({"q": 1}, lambda: 1)
    with dsp.settings.context(cache_write="later"), pytest.raises(ValueError, match="cache_write is 'later'"):
        cache.cache_write_mode()


def test_lm_calls_in_deferred_mode_are_cached_like_durable_ones(tmp_path):
    lm = ScriptedLM(lambda prompt, request: [" x"])
    with dsp.settings.context(cache_dir=str(tmp_path / "c"), cache_write="deferred"):
        assert lm("hello") == [" x"] and lm("hello") == [" x"]
        assert lm.num_requests == 1 and lm.usage.cached_requests == 1
    cache.flush()
    other = ScriptedLM(lambda prompt, request: [" y"])
    with dsp.settings.context(cache_dir=str(tmp_path / "c")):
        assert other("hello") == [" x"] and other.num_requests == 0


_KILLED_RUN = textwrap.dedent('''
    import os, sys
    sys.path[:0] = [{tests!r}, {root!r}]
    import dsp
    from helpers import ScriptedLM

    lm = ScriptedLM(lambda prompt, request: [" " + prompt.split()[-1]])
    done = []

    def program(question):
        answer = lm(question)[0].strip()
        done.append(question)
        if len(done) == {kill_after}:
            os._exit(9)  # killed: no atexit, no flush of anything still pending
        return answer

    dev = [dsp.Example(question=f"say w{{i}}", answer=f"w{{i}}") for i in range(8)]
    with dsp.settings.context(cache_dir={cache_dir!r}, cache_write="deferred"):
        dsp.evaluate(program, dev, out={out!r}, progress=False, display=False)
    if {kill_after} == 0:
        print("pending", dsp.cache.deferred.pending_count())
''')


def _run(tmp_path, kill_after: int) -> subprocess.CompletedProcess:
    code = _KILLED_RUN.format(tests=str(TESTS), root=str(ROOT), kill_after=kill_after,
                              cache_dir=str(tmp_path / "c"), out=str(tmp_path / "rows.jsonl"))
    env = {**os.environ, "DSP_CACHE_WRITE": ""}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_every_recorded_row_has_its_calls_stored_even_when_killed(tmp_path):
    killed = _run(tmp_path, kill_after=5)
    assert killed.returncode == 9, killed.stderr
    rows = dsp.evaluation.read_run(tmp_path / "rows.jsonl")[1]
    assert len(rows) == 4  # the fifth example was killed before its row was written
    store = cache.get_store(tmp_path / "c")
    assert len(store) == 4  # exactly the recorded rows' calls: the killed example's call was pending, and lost
    finished = _run(tmp_path, kill_after=0)  # the rerun resumes, and exits normally
    assert finished.returncode == 0, finished.stderr
    rows = dsp.evaluation.read_run(tmp_path / "rows.jsonl")[1]
    assert sorted(r["index"] for r in rows) == list(range(8)) and all(r["score"] == 1.0 for r in rows)
    assert len(store) == 8 and "pending 0" in finished.stdout


def test_a_normal_exit_commits_what_is_pending(tmp_path):
    code = textwrap.dedent(f'''
        import sys
        sys.path[:0] = [{str(ROOT)!r}]
        from dsp import cache, settings
        with settings.context(cache_dir={str(tmp_path / "c")!r}, cache_write="deferred"):
            for i in range(5):
                cache.cached_call({{"q": i}}, lambda: i)
            print(len(cache.get_store()))
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr  # all five still pending at the end
    assert _stored(tmp_path / "c") == 5  # committed by the exit hook


def test_a_batch_writes_the_rows_diskcache_writes_and_never_overwrites(tmp_path):
    import diskcache

    texts = {cache.request_key({"q": i}): cache.encode_value({"text": f"answer {i}"}) for i in range(5)}
    long_key = cache.request_key({"q": "long"})
    texts[long_key] = cache.encode_value({"text": "x" * 40_000})  # above diskcache's inline limit: kept in a file
    one_by_one, batched = cache.DiskStore(tmp_path / "a"), cache.DiskStore(tmp_path / "b")
    assert batched._batch_insert  # the schema this was checked against
    for key, text in texts.items():
        one_by_one.add_text(key, text)
    batched.add_many({**texts})
    batched.add_many({next(iter(texts)): '{"text":"other"}'})  # set-if-absent, as add

    def rows(directory):
        with diskcache.Cache(str(directory)) as plain:
            assert plain.check() == []  # diskcache's own consistency check (counts, sizes, files)
            listing = {key: plain.get(key) for key in plain.iterkeys()}
            table = plain._sql("SELECT key, raw, expire_time, access_count, tag, size, mode, filename IS NULL, "
                               "value FROM Cache ORDER BY key").fetchall()
            return listing, table, plain.volume() > 0, len(plain)

    assert rows(tmp_path / "a") == rows(tmp_path / "b")
    assert json.loads(rows(tmp_path / "b")[0][long_key]) == {"text": "x" * 40_000}


def test_a_failed_commit_keeps_the_entries_and_the_call_succeeds(tmp_path, monkeypatch, caplog):
    directory = str(tmp_path / "c")
    monkeypatch.setattr(cache_deferred, "DEFERRED_BATCH", 2)
    store = cache.get_store(directory)
    real_add_many, failures = store.add_many, []

    def full_disk(texts):
        if not failures:
            failures.append(len(texts))
            raise OSError(28, "No space left on device")
        real_add_many(texts)

    monkeypatch.setattr(store, "add_many", full_disk)
    with dsp.settings.context(cache_dir=directory, cache_write="deferred"):
        assert cache.cached_call({"q": 0}, lambda: 0) == (0, False)
        with caplog.at_level("WARNING", logger="dsp.cache"):
            assert cache.cached_call({"q": 1}, lambda: 1) == (1, False)  # the batch is due, and its commit fails
        assert failures == [2] and "could not commit 2 pending entries" in caplog.text
        assert "No space left on device" in caplog.text and directory in caplog.text
        assert _stored(directory) == 0
        assert cache.cached_call({"q": 1}, lambda: pytest.fail("recomputed")) == (1, True)  # still held
        assert cache.flush() == 2 and _stored(directory) == 2
