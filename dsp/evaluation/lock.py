"""One writer at a time: an exclusive lock on a results file (or a compile's folder) held while it is written.

Two processes appending to one results file would run every example twice and, with different settings,
mix their rows under one header. `WriterLock(path)` takes an OS lock (``flock``, released by the kernel
when the process ends, even on kill -9) on a hidden file beside `path`, ``.<name>.lock``, and writes who
holds it (pid, command, start time) into it. A second writer is refused at once with `FileInUse`, one
line naming the file and the process that holds it (or, with ``wait=`` seconds, waits that long first).
The lock file stays after release (deleting it would let a waiting process and a new one both lock).

>>> import tempfile
>>> path = Path(tempfile.mkdtemp()) / "rtr.jsonl"
>>> with WriterLock(path):                                         # doctest: +ELLIPSIS
...     WriterLock(path).acquire()
Traceback (most recent call last):
    ...
dsp.evaluation.lock.FileInUse: ...rtr.jsonl is being written by another process (pid ...): ...
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

try:  # POSIX
    import fcntl
except ImportError:  # Windows: msvcrt's byte-range lock does the same job
    fcntl = None  # type: ignore[assignment]
    import msvcrt

__all__ = ["WriterLock", "FileInUse", "lock_path"]


class FileInUse(RuntimeError):
    """Another process is writing this results file (or compile folder): this one would mix with its rows."""


def lock_path(path: str | os.PathLike) -> Path:
    """The hidden lock file that guards `path`, beside it (for a file or a folder alike, whether or not it
    exists yet: the name must not change when the folder is made).

    >>> lock_path("runs/nq.jsonl").as_posix(), lock_path("runs/compile/nq.runs").as_posix()
    ('runs/.nq.jsonl.lock', 'runs/compile/.nq.runs.lock')
    """
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:  # held by another process (EWOULDBLOCK / EACCES)
        return False
    return True


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    else:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def _holder(lock: Path) -> str:
    """Who holds the lock, as its file says (best effort: it may be between lock and write)."""
    try:
        info = json.loads(lock.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another process"
    command = str(info.get("command") or "")
    command = command if len(command) <= 80 else command[:77] + "..."
    return f"another process (pid {info['pid']}" + (f", `{command}`" if command else "") + \
           (f", since {info['since']}" if info.get("since") else "") + ")"


class WriterLock:
    """An exclusive, non-reentrant writer lock on `path` (a results file or a folder); see the module docstring.

    `wait`: seconds to wait for the other writer before `FileInUse` (0: refuse at once).
    """

    def __init__(self, path: str | os.PathLike, wait: float = 0.0) -> None:
        self.path = Path(path)
        self.wait = float(wait)
        self._fd: int | None = None

    def __repr__(self) -> str:
        return f"WriterLock({str(self.path)!r}, held={self.held})"

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "WriterLock":
        """Take the lock or raise `FileInUse` naming the file and its holder."""
        if self._fd is not None:
            return self
        lock = lock_path(self.path)
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + max(0.0, self.wait)
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                os.close(fd)
                raise FileInUse(f"{self.path} is being written by {_holder(lock)}: wait for it to finish, "
                                f"or write to another file")
            time.sleep(0.2)
        info: dict[str, Any] = {"pid": os.getpid(), "command": " ".join(sys.argv)[:500],
                                "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(info).encode("utf-8", errors="replace"))
        except OSError:  # a full disk: who holds it goes unsaid, but the lock itself must not leak
            _unlock(fd)
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (a no-op when not held)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
            _unlock(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()
