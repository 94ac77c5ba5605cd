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
  file is cut back to its last whole row, once, with a warning; that example runs again.

>>> log = RunLog("runs/rtr.jsonl", {"program": "rtr", "options": {"k": 1}})        # doctest: +SKIP
>>> done = log.open()                # {index: row} of the rows already there       # doctest: +SKIP
"""

from __future__ import annotations

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
from typing import Any, Callable, Iterator, Mapping

from ..clients.lm import LM
from ..clients.rm import RM
from .rows import canonical, jsonable

__all__ = ["RunLog", "RunMismatch", "describe", "identity_diff", "read_run", "machine", "FORMAT"]

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

    >>> identity, rows = read_run("runs/nq-retrieve_then_read-seed0.jsonl")          # doctest: +SKIP
    """
    identity: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    for number, line in _lines(Path(path)):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and HEADER_KEY in record:
            if number == 1 or identity is None:
                identity = dict(record[HEADER_KEY].get("identity") or {})
            continue
        if isinstance(record, dict):
            rows.append(record)
    return identity, rows


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
        """Check the file against this run's identity, repair a torn tail, write the header of a new file,
        and return the finished rows by index."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        done: dict[int, dict[str, Any]] = {}
        if self.path.exists() and self.path.stat().st_size > 0:
            self._repair_torn_tail()
            header: dict[str, Any] | None = None
            made_on: Any = None  # the machine of the latest header line
            bad = 0
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
                elif isinstance(record.get("index"), int) and record.get("error") is None:
                    done[record["index"]] = record
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
        with self.path.open("a", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def append(self, row: Mapping[str, Any]) -> None:
        """Append one finished row (thread-safe; the caller's `before_write` runs first, e.g. a cache flush)."""
        line = json.dumps(canonical(row), ensure_ascii=False)
        with self._lock:
            if self.before_write is not None:
                self.before_write()
            self._write(line)
