"""A read-only or non-SQLite cache.db (issue 29, item 17): a populated read-only cache serves its hits
(it made 0 LM calls and failed 10 of 10 before), and a cache that cannot be used is one error naming
its path.

Tests run as root, whom file permissions do not stop, so "read-only" is made the way SQLite itself
meets it: for a file it may not open for writing (another user's, or on a read-only mount), SQLite
opens it read-only and every write fails with "attempt to write a readonly database"; `read_only`
below opens cache.db so. One test also remounts a real tmpfs read-only when it may (root, Linux).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ScriptedLM

import dsp
from dsp import cache
from dsp.cache import stores

PROMPTS = [f"Question: q{i}\nAnswer:" for i in range(10)]


def _answer(prompt: str, request: dict) -> list[str]:
    # The last answer is long: diskcache keeps a value of 32 KiB or more in a file of its own.
    return [" a" + prompt.split()[1] + (" long" * 10_000 if prompt == PROMPTS[-1] else "")]


def _refuse(prompt: str, request: dict) -> list[str]:
    raise AssertionError("the LM was called for an answer the cache holds")


def _forget(directory: Path) -> None:
    """Close this process's store for `directory`, as if the next call came from a new process."""
    for key in [key for key in stores._stores if key[0] == "disk" and key[1] == str(directory)]:
        stores._stores.pop(key).close()


def _populate(directory: Path) -> list[list[str]]:
    lm = ScriptedLM(_answer)
    with dsp.settings.context(cache_dir=str(directory)):
        answers = [lm(prompt) for prompt in PROMPTS]
    assert lm.num_requests == 10
    _forget(directory)
    return answers


@pytest.fixture
def read_only(monkeypatch):
    """`read_only(directory)`: from now on SQLite may only read the files under `directory`."""
    real = sqlite3.connect
    locked: list[str] = []

    def connect(database, *args, **kwargs):
        text = os.fspath(database) if not isinstance(database, str) else database
        if not kwargs.get("uri") and any(text.startswith(prefix) for prefix in locked):
            return real(Path(text).absolute().as_uri() + "?mode=ro", *args, uri=True, **kwargs)
        return real(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    return lambda directory: locked.append(str(directory) + os.sep)


def _serve_all(directory: Path) -> tuple[ScriptedLM, list[list[str]]]:
    lm = ScriptedLM(_refuse)
    with dsp.settings.context(cache_dir=str(directory)):
        return lm, [lm(prompt) for prompt in PROMPTS]


def test_a_populated_read_only_cache_serves_every_hit(tmp_path, read_only, caplog):
    directory = tmp_path / "cache"
    expected = _populate(directory)
    read_only(directory)
    with caplog.at_level("WARNING", logger="dsp.cache"):
        lm, answers = _serve_all(directory)
    assert answers == expected and lm.num_requests == 0 and lm.usage.cached_requests == 10
    assert isinstance(cache.get_store(directory), cache.ReadOnlyDiskStore) and len(cache.get_store(directory)) == 10
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and str(directory / "cache.db") in warnings[0] and "read-only" in warnings[0]

    # A miss is computed and returned, not saved (and nothing in the folder changed).
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.name == "cache.db"}
    fresh = ScriptedLM(_answer)
    with dsp.settings.context(cache_dir=str(directory)):
        assert fresh("Question: new\nAnswer:") == [" anew"] and fresh.num_requests == 1
        with dsp.settings.context(cache_write="deferred"):
            assert fresh("Question: newer\nAnswer:") == [" anewer"]
            cache.flush()
    _forget(directory)
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.name == "cache.db"} == before
    lm, answers = _serve_all(directory)
    assert answers == expected and lm.num_requests == 0


def test_the_read_write_store_names_a_read_only_file(tmp_path, read_only):
    directory = tmp_path / "cache"
    _populate(directory)
    read_only(directory)
    with pytest.raises(cache.CacheFileError, match=rf"^cannot write the dsp cache {directory / 'cache.db'} "
                                                   r"\(attempt to write a readonly database\)$") as raised:
        cache.DiskStore(directory)
    assert raised.value.read_only


def test_a_non_sqlite_cache_db_is_one_error_naming_it(tmp_path):
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / "cache.db").write_text("these are my notes, not a database\n" * 40)
    message = rf"^{directory / 'cache.db'} is not a dsp cache \(not an SQLite database: file is not a database\)"
    with pytest.raises(cache.CacheFileError, match=message):
        cache.get_store(directory)
    lm = ScriptedLM(_answer)
    with dsp.settings.context(cache_dir=str(directory)), pytest.raises(cache.CacheFileError, match=message):
        lm(PROMPTS[0])
    with pytest.raises(cache.CacheFileError, match=message):
        cache.ReadOnlyDiskStore(directory)
    assert lm.num_requests == 0


def test_an_sqlite_file_that_is_not_a_dsp_cache_is_refused_read_only(tmp_path, read_only):
    directory = tmp_path / "cache"
    directory.mkdir()
    with sqlite3.connect(directory / "cache.db") as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    read_only(directory)
    with pytest.raises(cache.CacheFileError, match=rf"^{directory / 'cache.db'} is not a dsp cache \(an SQLite "
                                                   r"database without diskcache's Cache table\)"):
        cache.get_store(directory)


def test_dsp_ask_with_a_non_sqlite_cache_exits_2_with_one_line(data_dir, tmp_path, monkeypatch, capsys):
    from programs.cli import main
    from slow_lm_server import SlowLMServer

    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / "cache.db").write_bytes(b"\x00garbage" * 100)
    monkeypatch.setenv("DSP_CACHEDIR", str(directory))
    with SlowLMServer(delay=0.0) as server:
        assert main(["ask", "who wrote hamlet", "--program", "vanilla", "--lm", server.spec]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()[-1]
    assert err.startswith(f"dsp ask: error: {directory / 'cache.db'} is not a dsp cache")
    assert "Traceback" not in captured.err + captured.out


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None,
                    reason="remounting a tmpfs read-only needs root on Linux")
def test_a_cache_on_a_read_only_mount(tmp_path, caplog):
    """EROFS, which stops root too: SQLite cannot even make the WAL's shared-memory file there."""
    mount = tmp_path / "mount"
    mount.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)):
        pytest.skip("this machine does not let the test mount a tmpfs")
    try:
        directory = mount / "cache"
        expected = _populate(directory)
        (mount / "empty").mkdir()
        assert _mount("-o", "remount,ro", str(mount))
        with caplog.at_level("WARNING", logger="dsp.cache"):
            lm, answers = _serve_all(directory)
        assert answers == expected and lm.num_requests == 0
        assert any(f"cannot write the dsp cache {directory / 'cache.db'} (a read-only file system)" in r.getMessage()
                   for r in caplog.records)
        empty = mount / "empty" / "cache.db"
        with pytest.raises(cache.CacheFileError, match=rf"^cannot create the dsp cache {empty} "):
            cache.get_store(mount / "empty")
        with pytest.raises(cache.CacheFileError, match=rf"^cannot create the dsp cache directory {mount / 'new'} "
                                                       r"\(Read-only file system\)"):
            cache.get_store(mount / "new")
        _forget(directory)
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
