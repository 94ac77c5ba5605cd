"""A results directory on a full disk (issue 29, item 13): one line naming the file (exit status 2 from
the CLI), no half row left behind, and a rerun once there is room resumes with every row exactly once.

The disk is simulated where the results file is written (`dsp.evaluation.log`'s view of `os`), so these
run anywhere; one test also fills a real 64 KiB tmpfs when it may mount one (root, Linux)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import dsp
from dsp.evaluation import log as run_log
from dsp.evaluation.log import ResultsWriteError

NO_SPACE = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FullDisk:
    """`os` as log.py sees it on a disk that fills up after `room` durable writes (the header is one).

    `fault`: "fsync" (the data went out, the flush to disk reports ENOSPC, as on file systems that
    allocate late), "short" (the write that fills the disk writes half the row, the next raises ENOSPC,
    as write(2) does) or "short-and-stuck" (that, and cutting the half row back fails too).
    """

    def __init__(self, room: int, fault: str) -> None:
        self.room, self.fault, self.synced, self.half_written = room, fault, 0, False

    def __getattr__(self, name: str):
        return getattr(os, name)

    def _full(self) -> bool:
        return self.synced >= self.room

    def write(self, fd: int, data) -> int:
        if self.fault != "fsync" and self._full():
            if self.half_written:
                raise NO_SPACE
            self.half_written = True
            return os.write(fd, bytes(data[: len(data) // 2]))
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.fault == "fsync" and self._full():
            raise NO_SPACE
        os.fsync(fd)
        self.synced += 1

    def ftruncate(self, fd: int, length: int) -> None:
        if self.fault == "short-and-stuck":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.ftruncate(fd, length)


def _dev(n: int) -> list[dsp.Example]:
    return [dsp.Example(question=f"q{i}", answer=f"Q{i}") for i in range(n)]


def _counting_program(calls: Counter):
    def program(question: str) -> str:
        calls[question] += 1
        return question.upper()
    return program


def _indexes(path: Path) -> list[int]:
    return sorted(row["index"] for row in dsp.evaluation.read_run(path)[1])


@pytest.mark.parametrize("fault", ["fsync", "short", "short-and-stuck"])
def test_a_full_disk_is_one_error_and_a_rerun_resumes_every_row_exactly_once(fault, tmp_path, monkeypatch, caplog):
    out = tmp_path / "runs" / "rtr.jsonl"
    calls: Counter = Counter()
    program = _counting_program(calls)
    monkeypatch.setattr(run_log, "os", FullDisk(room=3, fault=fault))  # the header and two rows fit
    with pytest.raises(ResultsWriteError) as raised:
        dsp.evaluate(program, _dev(6), out=out, progress=False, display=False)
    message = str(raised.value)
    assert message == (f"{out}: cannot write the results file: disk full (No space left on device); the rows written "
                       "before are kept: make room (or fix the cause) and run the same command again to resume")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(out)
    assert isinstance(raised.value, OSError)  # callers that catch OSError still do
    assert sum(calls.values()) == 3  # the run stopped at the row it could not write
    text = out.read_bytes()
    if fault == "short-and-stuck":
        assert not text.endswith(b"\n")  # half a row stays: the next open sets it aside
    else:
        assert text.endswith(b"\n") and _indexes(out) == [0, 1]  # cut back to the last whole row

    monkeypatch.setattr(run_log, "os", os)  # room again
    with caplog.at_level("WARNING", logger="dsp.evaluate"):
        result = dsp.evaluate(program, _dev(6), out=out, progress=False, display=False)
    assert result.resumed == 2 and result.score == 100.0
    assert _indexes(out) == [0, 1, 2, 3, 4, 5]  # every row exactly once
    assert calls == Counter({"q2": 2, "q0": 1, "q1": 1, "q3": 1, "q4": 1, "q5": 1})  # only the lost row ran twice
    torn = out.with_name(out.name + ".torn")
    assert torn.exists() == (fault == "short-and-stuck")
    assert any("cut mid-write" in r.getMessage() for r in caplog.records) == (fault == "short-and-stuck")


def test_no_room_even_for_the_header_is_the_same_one_line(tmp_path, monkeypatch):
    out = tmp_path / "rtr.jsonl"
    monkeypatch.setattr(run_log, "os", FullDisk(room=0, fault="fsync"))
    with pytest.raises(ResultsWriteError, match=rf"^{out}: cannot write the results file: disk full"):
        dsp.evaluate(str.upper, _dev(2), out=out, progress=False, display=False)
    assert out.read_bytes() == b""  # no half header
    monkeypatch.setattr(run_log, "os", os)
    assert dsp.evaluate(str.upper, _dev(2), out=out, progress=False, display=False).score == 100.0


def test_dsp_run_on_a_full_disk_exits_2_with_one_line_and_resumes(data_dir, tmp_path, monkeypatch, capsys):
    from programs.cli import main
    from slow_lm_server import SlowLMServer

    with SlowLMServer(delay=0.0) as server:
        argv = ["run", "vanilla", "--dataset", "nq", "--n", "4", "--shots", "2", "--lm", server.spec,
                "--out", str(tmp_path)]
        monkeypatch.setattr(run_log, "os", FullDisk(room=2, fault="fsync"))  # the header and one row
        assert main(argv) == 2
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()[-1]  # after the progress bar's lines
        out = tmp_path / "nq-vanilla-shots2-seed0.jsonl"
        assert err.startswith(f"dsp run: error: {out}: cannot write the results file: disk full")
        assert "run the same command again to resume" in err and "Traceback" not in captured.err + captured.out
        monkeypatch.setattr(run_log, "os", os)
        assert main(argv) == 0
        assert "resumed 1 rows from" in capsys.readouterr().out
    assert _indexes(out) == [0, 1, 2, 3]


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None,
                    reason="mounting a tmpfs needs root on Linux")
def test_a_real_full_tmpfs(tmp_path):
    """The kernel's own ENOSPC: the row that fills the disk goes out in part, then the write fails."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)):
        pytest.skip("this machine does not let the test mount a tmpfs")
    try:
        out = disk / "rtr.jsonl"
        dev = _dev(40)
        wide = lambda question: question.upper() + "x" * 3000  # ~3 KB rows: 64 KiB holds about 15 # noqa: E731
        with pytest.raises(ResultsWriteError, match=rf"^{out}: cannot write the results file: disk full"):
            dsp.evaluate(wide, dev, out=out, progress=False, display=False)
        written = _indexes(out)
        assert out.read_bytes().endswith(b"\n") and written == list(range(len(written))) and 5 < len(written) < 40
        assert _mount("-o", "remount,size=1m", str(disk))
        result = dsp.evaluate(wide, dev, out=out, progress=False, display=False)
        assert result.resumed == len(written) and _indexes(out) == list(range(40))
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
