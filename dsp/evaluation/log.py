"""The results file of an evaluation: resumable JSONL that knows what made it.

The first line is a header, ``{"dsp_run": {"format": 1, "identity": {...}, "created": ..., "machine": ...}}``,
whose identity holds everything that decides the rows: the program (its function and bound options, the
training set's digest), the metric, the declared fields, the seed, the LM and RM (their cache
identities and default parameters) and whatever the caller adds (dataset, split, preset, shots, ...).
Each later line is one finished example's row, appended and fsynced as it finishes.

Opening a file to resume:

- the same identity: finished rows are reused and only the rest run;
- another identity: `RunMismatch`, one line naming what changed (``options.k: 1 -> 3``) -- rows of
  different settings are never mixed or reported as new; write to another file instead;
- the same identity on another machine (`machine()`: processor, its vector instructions, the LM
  runtime's version): the rows are reused, and a second header line saying where and when the rest
  were made is appended, with a warning -- a local model's numbers can round differently on another
  processor and flip a few answers, and the file says which rows may differ;
- a last line cut mid-write (a kill, a full disk): the torn text is moved to ``<file>.torn`` and the
  file is cut back to its last whole row, once, with a warning; that example runs again;
- a row that cannot be written (a full disk, a read-only folder): `ResultsWriteError`, one line naming
  the file and the cause; the part of the row that got out is cut back off (else the next open sets it
  aside, as above), so the same command run again resumes after the last whole row;
- a file another process is writing (`WriterLock`): `FileInUse` at once, naming the file and that
  process -- two writers would run every example twice or mix two runs' rows. The lock is taken before
  the header is read or written and held until `close()` (`dsp.evaluate` closes it when done).

One rule reads rows everywhere (`finished_by_index`: resume, `dsp compare`): an example's row is its last
finished one (a later row was made by a later run of the same example), else its last failed one;
an example with more than one finished row is named in a warning.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     log = RunLog(Path(tmp) / "rtr.jsonl", {"program": "rtr", "options": {"k": 1}})
...     log.open()                   # {index: row} of the rows already there: none yet
...     log.append({"index": 0, "prediction": "Paris", "score": 1.0})
...     log.close()
...     again = RunLog(Path(tmp) / "rtr.jsonl", {"program": "rtr", "options": {"k": 1}})
...     again.open()                 # the same run resumes
...     again.close()
...     try:
...         RunLog(Path(tmp) / "rtr.jsonl", {"program": "rtr", "options": {"k": 3}}).open()
...     except RunMismatch as error:
...         print(str(error).split("rtr.jsonl ")[1])
{}
{0: {'index': 0, 'prediction': 'Paris', 'score': 1.0}}
holds rows of another run (options.k: 1 -> 3); write to another file or move it away
"""

from __future__ import annotations

import errno
import functools
import inspect
import json
import logging
import os
import platform
import threading
import time
from hashlib import sha256
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..clients.lm import LM
from ..clients.rm import RM
from ..utils import is_int
from .lock import WriterLock
from .rows import canonical, jsonable

__all__ = ["RunLog", "RunMismatch", "BadRow", "ResultsWriteError", "describe", "identity_diff", "read_run",
           "finished_by_index", "machine", "FORMAT"]

FORMAT = 1
HEADER_KEY = "dsp_run"
log = logging.getLogger("dsp.evaluate")


# The packages whose version changes a local model's numbers.
_RUNTIMES = ("llama-cpp-python",)
# The processor features that decide which kernels llama.cpp (and numpy) run, so how they round.
_VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                 "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")


@functools.lru_cache(maxsize=1)
def machine() -> dict[str, Any]:
    """Where rows are made: processor, its vector instructions and the runtimes' versions (no host name).

    A results file records it in its header; it is not part of the run's identity, since an LM served
    elsewhere (an API, a server) does not depend on it, but a local model's answers can. It is the
    machine that writes the file: with the Ray backend, the driver's, not the workers'.

    >>> sorted(machine())
    ['cpu', 'cpu_flags', 'runtimes', 'system']
    """
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())  # the first processor speaks for all
    except OSError:  # not Linux: the processor string is all there is
        pass
    cpu = info.get("model name") or info.get("Model") or platform.processor() or platform.machine()
    listed = info.get("flags") or info.get("Features")
    flags = sorted(set(listed.split()) & set(_VECTOR_FLAGS)) if listed is not None else None
    runtimes = {}
    for name in _RUNTIMES:
        try:
            runtimes[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            runtimes[name] = None
    return {"system": f"{platform.system()} {platform.machine()}", "cpu": cpu, "cpu_flags": flags,
            "runtimes": runtimes}


class RunMismatch(ValueError):
    """A results file holds rows of another run (or of an unknown one); resuming would mix them."""


class BadRow(ValueError):
    """A results file's row holds what no run writes (a score that is not a number between 0 and 1)."""


class ResultsWriteError(OSError):
    """A results file could not be written (a full disk, a read-only folder). The rows written before are
    whole and kept: the same command run again, once the cause is fixed, resumes after them. `errno`
    is the failed write's, `filename` the results file.

    >>> print(ResultsWriteError(errno.ENOSPC, "runs/x.jsonl: cannot write the results file: disk full", "runs/x.jsonl"))
    runs/x.jsonl: cannot write the results file: disk full
    """

    def __str__(self) -> str:
        # The one-line message alone, not OSError's "[Errno 28] ...: 'file'".
        return self.strerror if isinstance(self.strerror, str) else super().__str__()


# The errors of a device without room: the message says "disk full", which the user knows how to fix.
_DISK_FULL = frozenset(code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if code is not None)


def _digest(value: Any) -> str:
    text = json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False)
    return sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def describe(value: Any) -> Any:
    """A stable, JSON-able description of a program, metric or option value for a run's identity.

    Functions by their qualified name, partials by function and bound arguments, clients by their cache
    identity, large or nested data (a training set) by size and digest, other objects by their type
    (never by repr, which may hold a memory address that changes from run to run).

    >>> describe(functools.partial(max, key=len))
    {'function': 'builtins.max', 'args': [], 'keywords': {'key': 'builtins.len'}}
    >>> describe([{"question": "q", "answer": "a"}] * 3)["items"]
    3
    """
    if _is_plain(value):
        return value
    if isinstance(value, functools.partial):
        return {"function": describe(value.func), "args": [describe(a) for a in value.args],
                "keywords": {str(k): describe(v) for k, v in sorted(value.keywords.items())}}
    if isinstance(value, LM):
        return {"lm": jsonable(value.cache_identity()), "defaults": jsonable(value.kwargs)}
    if isinstance(value, RM):
        return {"rm": jsonable(value.cache_identity())}
    if isinstance(value, (list, tuple)):
        if len(value) <= 20 and all(_is_plain(v) for v in value):
            return list(value)
        return {"items": len(value), "sha256": _digest(value)}
    if isinstance(value, Mapping):
        if len(value) <= 20 and all(_is_plain(v) for v in value.values()):
            return {str(k): v for k, v in value.items()}
        return {"keys": len(value), "sha256": _digest(value)}
    if inspect.isroutine(value) or inspect.isclass(value):
        return f"{getattr(value, '__module__', None) or '?'}.{getattr(value, '__qualname__', repr(value))}"
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True) if value is not _MISSING else "(unset)"
    return text if len(text) <= 60 else text[:57] + "..."


_MISSING = object()


def identity_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What changed between two identities, as "key: old -> new" texts (dotted keys, sorted). A key one
    side lacks and the other holds as null or false is no change: an option added to a program later,
    at its "not given" or "off" default (None, False), makes the same run as before it existed.

    >>> identity_diff({"options": {"k": 1}, "seed": 0}, {"options": {"k": 3}, "seed": 0})
    ['options.k: 1 -> 3']
    >>> identity_diff({"options": {"k": 1}}, {"options": {"k": 1, "demos": None, "extractive": False}})
    []
    """
    a, b = _flatten(canonical(old)), _flatten(canonical(new))

    def same(x: Any, y: Any) -> bool:
        if x is _MISSING or y is _MISSING:
            present = y if x is _MISSING else x
            return present is None or present is False  # not 0: k=0 is a setting, not "off"
        return x == y

    return [f"{key}: {_short(a.get(key, _MISSING))} -> {_short(b.get(key, _MISSING))}"
            for key in sorted(a.keys() | b.keys()) if not same(a.get(key, _MISSING), b.get(key, _MISSING))]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8", errors="surrogateescape") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line


def read_run(path: str | os.PathLike) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(identity, rows) of a results file; identity is None for a file without a header.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     log = RunLog(Path(tmp) / "rtr.jsonl", {"program": "rtr"})
    ...     _ = log.open()
    ...     log.append({"index": 0, "prediction": "Paris", "score": 1.0})
    ...     log.close()
    ...     read_run(Path(tmp) / "rtr.jsonl")
    ({'program': 'rtr'}, [{'index': 0, 'prediction': 'Paris', 'score': 1.0}])
    """
    identity: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    for number, line in _lines(Path(path)):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and HEADER_KEY in record:
            header = record[HEADER_KEY]
            found = header.get("identity") if isinstance(header, dict) else None
            if not isinstance(header, dict) or not isinstance(found if found is not None else {}, dict):
                raise RunMismatch(f"{path}: line {number}: the {HEADER_KEY!r} header (or its identity) is not "
                                  f"a JSON object: not a results file of dsp")
            if number == 1 or identity is None:
                identity = dict(found or {})
            continue
        if isinstance(record, dict):
            rows.append(record)
    return identity, rows


def finished_by_index(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike | None = None
                      ) -> tuple[dict[int, dict[str, Any]], list[int]]:
    """({index: row}, indexes with more than one finished row): the one rule that reads a results file's rows.

    An example's row is its last finished row (error null), else its last failed one: a resumed run
    retries failed examples and appends their new rows. Rows without an integer index are not rows of an
    example and are left out. With `path`, duplicates are named in a warning (they come from two writers
    at once before files were locked, or from a changed example rerun at the same index).

    >>> rows = [{"index": 0, "error": "E"}, {"index": 0, "error": None, "score": 1.0},
    ...         {"index": 1, "error": None, "score": 0.0}, {"index": 1, "error": None, "score": 1.0}]
    >>> by_index, duplicated = finished_by_index(rows)
    >>> by_index[0]["score"], by_index[1]["score"], duplicated
    (1.0, 1.0, [1])
    """
    by_index: dict[int, dict[str, Any]] = {}
    finished: dict[int, int] = {}
    for row in rows:
        index = row.get("index")
        if not is_int(index):
            continue
        if row.get("error") is None:
            finished[index] = finished.get(index, 0) + 1
            by_index[index] = dict(row)
        elif finished.get(index, 0) == 0:
            by_index[index] = dict(row)
    duplicated = sorted(index for index, count in finished.items() if count > 1)
    if duplicated and path is not None:
        more = len(duplicated) - 10
        shown = ", ".join(map(str, duplicated[:10])) + (f" and {more} more" if more > 0 else "")
        log.warning("%s: examples %s have more than one finished row; the last of each is used", path, shown)
    return by_index, duplicated


def _short_machine(made_on: Any) -> str:
    if not isinstance(made_on, dict):
        return repr(made_on)
    flags = made_on.get("cpu_flags")
    return f"{made_on.get('cpu')}, {len(flags) if isinstance(flags, list) else '?'} vector flags, " \
           f"llama-cpp-python {(made_on.get('runtimes') or {}).get('llama-cpp-python')}"


class RunLog:
    """The resumable results file of one run with identity `identity` (see the module docstring).

    `open()` checks and repairs the file and returns the finished rows {index: row} (errored rows are
    not finished: they run again); `append(row)` adds a row durably from any thread.
    """

    def __init__(self, path: str | os.PathLike, identity: Mapping[str, Any],
                 before_write: Callable[[], Any] | None = None) -> None:
        self.path = Path(path)
        self.identity = jsonable(dict(identity))
        self.before_write = before_write
        self.resumed = 0
        self._lock = threading.Lock()
        self._writer = WriterLock(self.path)

    def __repr__(self) -> str:
        return f"RunLog({str(self.path)!r})"

    def _repair_torn_tail(self) -> None:
        """Cut a last line that never got its newline (a kill mid-write) back off, keeping it aside."""
        size = self.path.stat().st_size
        if size == 0:
            return
        with self.path.open("rb+") as handle:
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return
            back = min(size, 1 << 20)
            handle.seek(size - back)
            tail = handle.read(back)
            cut = tail.rfind(b"\n")
            keep = size - back + cut + 1 if cut >= 0 else (0 if back == size else None)
            if keep is None:  # a line over 1 MiB with no newline: read it whole
                handle.seek(0)
                data = handle.read()
                keep = data.rfind(b"\n") + 1
            handle.seek(keep)
            torn = handle.read()
            aside = self.path.with_name(self.path.name + ".torn")
            with aside.open("ab") as out:
                out.write(torn + b"\n")
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
        log.warning("%s: its last line was cut mid-write (%d bytes); moved to %s, that example runs again",
                    self.path, len(torn), aside)

    def open(self) -> dict[int, dict[str, Any]]:
        """Take the file's writer lock (`FileInUse` if another process holds it), check the file against
        this run's identity, repair a torn tail, write the header of a new file, and return the finished
        rows by index. The lock is held until `close()`."""
        try:  # a full disk or a read-only folder: the same one line as a failed row write
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer.acquire()
        except OSError as error:
            raise self._write_error(error) from None
        try:
            return self._open_locked()
        except BaseException:
            self._writer.release()
            raise

    def close(self) -> None:
        """Release the writer lock (rows already appended are on disk: nothing else to do)."""
        self._writer.release()

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _open_locked(self) -> dict[int, dict[str, Any]]:
        done: dict[int, dict[str, Any]] = {}
        if self.path.exists() and self.path.stat().st_size > 0:
            try:
                self._repair_torn_tail()
            except OSError as error:  # no room for <file>.torn yet: nothing was cut, a later run repairs it
                raise self._write_error(error) from None
            header: dict[str, Any] | None = None
            made_on: Any = None  # the machine of the latest header line
            bad = 0
            rows: list[dict[str, Any]] = []
            for number, line in _lines(self.path):
                try:
                    record = json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                if not isinstance(record, dict):
                    bad += 1
                elif HEADER_KEY in record:
                    header = header or record[HEADER_KEY]
                    if isinstance(record[HEADER_KEY], dict):
                        made_on = record[HEADER_KEY].get("machine")
                elif header is None:
                    raise RunMismatch(f"{self.path} has rows but no run identity (written by an older dsp); "
                                      f"move it away or write to another file")
                else:
                    rows.append(record)
            by_index, _ = finished_by_index(rows, self.path)
            done = {index: row for index, row in by_index.items() if row.get("error") is None}
            if bad:
                log.warning("%s: %d line(s) are not rows and were skipped", self.path, bad)
            if header is not None:
                if not isinstance(header, dict) or int(header.get("format", 0)) > FORMAT:
                    raise RunMismatch(f"{self.path} was written by a newer dsp (format {header.get('format')!r})")
                changed = identity_diff(header.get("identity") or {}, self.identity)
                if changed:
                    shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
                    raise RunMismatch(f"{self.path} holds rows of another run ({shown}); write to another file "
                                      f"or move it away")
                self.resumed = len(done)
                here = jsonable(machine())
                if made_on != here:
                    before = ("another machine (" + _short_machine(made_on) + ")" if made_on is not None
                              else "a machine its header does not name")
                    log.warning("%s: its rows were made on %s; the rest are made on this one (%s), and a "
                                "header line says so", self.path, before, _short_machine(here))
                    self._write_header()
                return done
        self._write_header()
        return done

    def _write_header(self) -> None:
        self._write(json.dumps({HEADER_KEY: {"format": FORMAT, "identity": self.identity,
                                             "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                             "machine": jsonable(machine())}}, ensure_ascii=False))

    def _write(self, line: str) -> None:
        """Append `line` and its newline durably, whole or not at all (see `ResultsWriteError`)."""
        data = memoryview((line + "\n").encode("utf-8", errors="surrogatepass"))
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
        except OSError as error:
            raise self._write_error(error) from None
        try:
            start = os.fstat(fd).st_size  # one writer (the lock): nobody else appends meanwhile
            try:
                # os.write, not a buffered file: a short write (the disk filled mid-row) is seen and retried,
                # so the failure is known exactly where it happened.
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)  # some file systems report a full disk only here
            except OSError as error:
                try:
                    os.ftruncate(fd, start)  # shrinking needs no room: the file ends with a whole row again
                except OSError:  # the torn tail stays; the next open() sets it aside (_repair_torn_tail)
                    log.warning("%s: could not cut back a partly written row; the next run sets it aside",
                                self.path)
                raise self._write_error(error) from None
        finally:
            os.close(fd)

    def _write_error(self, error: OSError) -> ResultsWriteError:
        """The one-line error for a failed write of this results file."""
        reason = error.strerror or str(error)
        if error.errno in _DISK_FULL:
            reason = f"disk full ({reason})"
        return ResultsWriteError(error.errno, f"{self.path}: cannot write the results file: {reason}; the rows "
                                 f"written before are kept: make room (or fix the cause) and run the same "
                                 f"command again to resume", str(self.path))

    def append(self, row: Mapping[str, Any]) -> None:
        """Append one finished row (thread-safe; the caller's `before_write` runs first, e.g. a cache flush)."""
        line = json.dumps(canonical(row), ensure_ascii=False)
        with self._lock:
            if self.before_write is not None:
                self.before_write()
            self._write(line)
