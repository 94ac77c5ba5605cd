"""A torch extension build lock left by a killed build is named in an error instead of hanging forever.

torch's extension loader waits on a `lock` file for as long as it exists; a build killed mid-way (a
session ended, a CI run cancelled) leaves one, and every later ColBERTLocal would hang in colbert-ai.
No colbert-ai is needed here: the check only reads the build directory.
"""

from __future__ import annotations

import os
import time

import pytest

from dsp.clients.colbert_local import STALE_BUILD_SECONDS, check_extension_locks


def _build_dir(root, name="filter_pids_cpp", *, age: float, nested: bool = False):
    folder = (root / "py311_cpu" / name) if nested else (root / name)
    folder.mkdir(parents=True)
    (folder / "build.ninja").write_text("rule cxx\n")
    lock = folder / "lock"
    lock.touch()
    then = time.time() - age
    for entry in folder.iterdir():
        os.utime(entry, (then, then))
    return lock


@pytest.mark.parametrize("nested", [False, True])  # TORCH_EXTENSIONS_DIR layout, and torch's default one
def test_a_stale_lock_is_named(tmp_path, nested):
    lock = _build_dir(tmp_path, age=STALE_BUILD_SECONDS + 120, nested=nested)
    with pytest.raises(RuntimeError, match="filter_pids_cpp") as error:
        check_extension_locks(tmp_path)
    assert str(lock) in str(error.value) and "Delete the file" in str(error.value)
    assert lock.exists()  # the user decides: another process might still be building


def test_a_build_in_progress_is_left_to_finish(tmp_path):
    lock = _build_dir(tmp_path, age=STALE_BUILD_SECONDS + 120)
    (lock.parent / "filter_pids.o").write_bytes(b"\0")  # the compiler is writing: fresh activity
    check_extension_locks(tmp_path)
    _build_dir(tmp_path, "segmented_lookup_cpp", age=30)  # a lock taken half a minute ago
    check_extension_locks(tmp_path)


def test_finished_builds_and_other_extensions_are_ignored(tmp_path):
    lock = _build_dir(tmp_path, age=STALE_BUILD_SECONDS * 10)
    lock.unlink()  # a finished build releases its lock
    _build_dir(tmp_path, "someone_elses_cpp", age=STALE_BUILD_SECONDS * 10)
    check_extension_locks(tmp_path)


def test_torch_extensions_dir_is_honoured(tmp_path, monkeypatch):
    _build_dir(tmp_path, age=STALE_BUILD_SECONDS + 120)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="has not changed for 12 minutes"):
        check_extension_locks()
