"""Passage corpora: read `{id, title, text}` JSONL(.gz) files, validate them, and store them for indexes.

A corpus file holds one JSON object per line: `text` (required), `title` (optional, default ""),
`id` (optional, default: the 0-based line index, as ColBERT's pids count lines) and any other
fields, which are kept. Blank lines are skipped. Reading streams line by line, so a corrupt line is
reported with the file and line number and a multi-GB corpus never sits in memory twice.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     corpus = Path(tmp) / "corpus.jsonl"
...     _ = corpus.write_text('{"text": "Ankara is the capital of Turkey.", "title": "Ankara"}\\n\\n'
...                           '{"id": "x7", "text": "Lima is the capital of Peru.", "lang": "en"}\\n')
...     for passage in read_passages(corpus):
...         print(passage)
{'id': 0, 'title': 'Ankara', 'text': 'Ankara is the capital of Turkey.'}
{'id': 'x7', 'title': '', 'text': 'Lima is the capital of Peru.', 'lang': 'en'}

(On the shared data, ``read_passages(data_path("wiki2018/passages.jsonl.gz"))`` holds 14,808 passages.)

>>> normalize_passages(["a bare string"])
[{'id': 0, 'title': '', 'text': 'a bare string'}]

Indexes (BM25, DenseRM) keep their passages with `write_passages(path, passages)`, a JSONL file plus
an offsets array (`.offsets.npy`), and read them back with `MappedPassages`, which memory-maps the
file and decodes only the passages a search returns.
"""

from __future__ import annotations

import gzip
import json
import logging
import mmap
import os
import zlib
from hashlib import sha256
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..utils import is_int
from .jsonl import DataFileError

__all__ = [
    "CorpusError", "iter_passages", "read_passages", "normalize_passages", "corpus_fingerprint",
    "write_passages", "MappedPassages",
]

log = logging.getLogger("dsp.corpus")
_GZIP_MAGIC = b"\x1f\x8b"


class CorpusError(DataFileError):
    """A corpus file or passage list that cannot be used; the message names the file and line.

    A `DataFileError` (so a `ValueError`), like the other dataset readers' errors."""


def _where(source: str, line: int | None) -> str:
    return f"{source}, line {line}" if line is not None else source


def _check_record(record: Any, index: int, source: str, line: int | None) -> dict[str, Any]:
    """One validated passage dict (a fresh copy) or a CorpusError naming where it came from."""
    where = _where(source, line)
    if isinstance(record, str):
        record = {"text": record}
    if not isinstance(record, dict):
        raise CorpusError(f"{where}: a passage must be a JSON object with a 'text' field, "
                          f"got {type(record).__name__}: {record!r:.80}")
    text = record.get("text")
    if not isinstance(text, str):
        missing = "has no 'text' field" if "text" not in record else f"has a non-text 'text' ({type(text).__name__})"
        raise CorpusError(f"{where}: the passage {missing}: {json.dumps(record, ensure_ascii=False)[:120]}")
    title = record.get("title")
    if title is None:
        title = ""
    elif not isinstance(title, str):
        raise CorpusError(f"{where}: 'title' must be text, got {type(title).__name__}: {title!r:.80}")
    pid = record.get("id", index)
    # bool is an int subclass; an id of true/false is a data bug, not a number.
    if not (isinstance(pid, str) or is_int(pid)):
        raise CorpusError(f"{where}: 'id' must be a string or an integer, got {type(pid).__name__}: {pid!r:.80}")
    passage = {"id": pid, "title": title, "text": text}
    for key, value in record.items():
        if key not in passage:
            passage[key] = value
    return passage


class _DuplicateIds:
    """Tracks ids seen so far; a repeated id is an error naming both places (or a warning)."""

    def __init__(self, source: str, duplicates: str) -> None:
        if duplicates not in ("error", "warn", "ignore"):
            raise ValueError(f"duplicates must be 'error', 'warn' or 'ignore', got {duplicates!r}")
        self.source, self.policy, self.first_seen, self.count = source, duplicates, {}, 0

    def check(self, pid: Any, line: int | None, index: int) -> None:
        if self.policy == "ignore":
            return
        key = (type(pid).__name__, pid)  # 7 and "7" are different ids
        first = self.first_seen.setdefault(key, (line, index))
        if first == (line, index):
            return
        self.count += 1
        here = f"line {line}" if line is not None else f"item {index}"
        earlier = f"line {first[0]}" if first[0] is not None else f"item {first[1]}"
        message = f"{self.source}, {here}: duplicate passage id {pid!r} (first seen at {earlier})"
        if self.policy == "error":
            raise CorpusError(message + "; pass duplicates='warn' to keep both")
        if self.count <= 5:
            log.warning("%s", message)

    def finish(self) -> None:
        if self.policy == "warn" and self.count > 5:
            log.warning("%s: %d duplicate passage ids in all", self.source, self.count)


def _open_lines(path: Path) -> Iterator[bytes]:
    """Raw lines of a plain or gzip file (gzip detected by its magic bytes, not the suffix)."""
    with open(path, "rb") as probe:
        compressed = probe.read(2) == _GZIP_MAGIC
    opener = gzip.open if compressed else open
    with opener(path, "rb") as handle:
        yield from handle


def iter_passages(path: str | os.PathLike, *, duplicates: str = "error") -> Iterator[dict[str, Any]]:
    """Stream validated passages from a JSONL or JSONL.gz file (see the module docstring for the format).

    `duplicates`: "error" (default) raises on a repeated id, "warn" logs it, "ignore" skips the check.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     corpus = Path(tmp) / "corpus.jsonl"
    ...     _ = corpus.write_text('{"id": "a", "text": "one"}\\n{"id": "a", "text": "two"}\\n')
    ...     [p["text"] for p in iter_passages(corpus, duplicates="ignore")]
    ['one', 'two']
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"passage file not found: {path}")
    source = str(path)
    seen = _DuplicateIds(source, duplicates)
    index = -1
    line_no = 0
    lines = _open_lines(path)
    while True:
        try:
            raw = next(lines)
        except StopIteration:
            break
        except (OSError, EOFError, zlib.error) as error:
            # A truncated or corrupt gzip stream fails while reading, after line_no good lines.
            raise CorpusError(f"{source}: unreadable after line {line_no}: {error}") from None
        line_no += 1
        index += 1
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise CorpusError(f"{_where(source, line_no)}: not UTF-8 text ({error.reason} at byte {error.start})") from None
        except json.JSONDecodeError as error:
            raise CorpusError(f"{_where(source, line_no)}: invalid JSON ({error.msg} at column {error.colno}): "
                              f"{raw[:80].decode('utf-8', 'replace')!r}") from None
        if isinstance(record, str):  # a bare JSON string on a line is not a passage record
            raise CorpusError(f"{_where(source, line_no)}: a passage must be a JSON object, got a string")
        passage = _check_record(record, index, source, line_no)
        seen.check(passage["id"], line_no, index)
        yield passage
    seen.finish()


def read_passages(path: str | os.PathLike, *, duplicates: str = "error") -> list[dict[str, Any]]:
    """All passages of a JSONL(.gz) file as `{"id", "title", "text", ...}` dicts, validated.

    Raises `CorpusError` naming the file and line for a line that is not JSON, not an object, or has
    no text `text`; a repeated id is an error too unless `duplicates="warn"` or `"ignore"`.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     corpus = Path(tmp) / "corpus.jsonl"
    ...     _ = corpus.write_text('{"id": "a", "text": "one"}\\n["not", "an object"]\\n')
    ...     try:
    ...         read_passages(corpus)
    ...     except CorpusError as error:
    ...         message = str(error)
    >>> message.split("corpus.jsonl")[1]
    ", line 2: a passage must be a JSON object with a 'text' field, got list: ['not', 'an object']"
    """
    return list(iter_passages(path, duplicates=duplicates))


def normalize_passages(passages: Iterable[Any], *, source: str = "passages",
                       duplicates: str = "error") -> list[dict[str, Any]]:
    """Validate an in-memory list of passage dicts or strings into `{"id", "title", "text", ...}` dicts.

    A string becomes `{"id": its position, "title": "", "text": it}`; a dict follows the file format.

    >>> normalize_passages([{"title": "T", "text": "body", "id": "p1"}])
    [{'id': 'p1', 'title': 'T', 'text': 'body'}]
    """
    if isinstance(passages, (str, bytes)) or not isinstance(passages, Iterable):
        raise TypeError(f"{source} must be a list of passage dicts or strings, got {type(passages).__name__}")
    seen = _DuplicateIds(source, duplicates)
    out = []
    for index, record in enumerate(passages):
        passage = _check_record(record, index, f"{source}[{index}]", None)
        seen.check(passage["id"], None, index)
        out.append(passage)
    seen.finish()
    return out


def _passage_line(passage: dict[str, Any]) -> bytes:
    # Canonical (sorted keys, compact) so the same passages always give the same bytes and fingerprint.
    return json.dumps(passage, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      allow_nan=False).encode("utf-8") + b"\n"


def corpus_fingerprint(passages: Iterable[dict[str, Any]]) -> str:
    """SHA-256 (hex) of the passages' canonical JSON lines, in order: the corpus's content identity.

    Indexes compute it once while building and store it, so a cache key never depends on a path.

    >>> corpus_fingerprint([{"id": 0, "title": "", "text": "a"}])[:12]
    '35cb0fea6eb7'
    """
    digest = sha256()
    for i, passage in enumerate(passages):
        try:
            digest.update(_passage_line(passage))
        except (TypeError, ValueError) as error:
            raise CorpusError(f"passage {i} cannot be stored as JSON ({error}): {passage!r:.120}") from None
    return digest.hexdigest()


def write_passages(path: str | os.PathLike, passages: Sequence[dict[str, Any]]) -> str:
    """Write passages as canonical JSONL at `path`, with byte offsets at `<path>.offsets.npy`.

    Returns the corpus fingerprint (the same as `corpus_fingerprint(passages)`).

    >>> import tempfile
    >>> passages = normalize_passages(["Ankara is the capital of Turkey.", "Lima is the capital of Peru."])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     fingerprint = write_passages(Path(tmp) / "passages.jsonl", passages)
    ...     sorted(p.name for p in Path(tmp).iterdir())
    ['passages.jsonl', 'passages.jsonl.offsets.npy']
    >>> fingerprint == corpus_fingerprint(passages)
    True
    """
    path = Path(path)
    offsets = np.zeros(len(passages) + 1, dtype=np.int64)
    digest = sha256()
    with open(path, "wb") as handle:
        for i, passage in enumerate(passages):
            line = _passage_line(passage)
            digest.update(line)
            handle.write(line)
            offsets[i + 1] = offsets[i] + len(line)
    np.save(_offsets_path(path), offsets, allow_pickle=False)
    return digest.hexdigest()


def _offsets_path(path: Path) -> Path:
    return path.with_name(path.name + ".offsets.npy")


class MappedPassages(Sequence):
    """Read-only passages from `write_passages` output, memory-mapped: `len()`, `[i]` -> a fresh dict.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = write_passages(Path(tmp) / "passages.jsonl", normalize_passages(["one", "two"]))
    ...     store = MappedPassages(Path(tmp) / "passages.jsonl")
    ...     len(store), store[-1]
    (2, {'id': 1, 'text': 'two', 'title': ''})
    """

    def __init__(self, path: str | os.PathLike, *, mmap_file: bool = True) -> None:
        self.path = Path(path)
        offsets_path = _offsets_path(self.path)
        for needed in (self.path, offsets_path):
            if not needed.is_file():
                raise FileNotFoundError(f"passage store incomplete: {needed} is missing")
        self._offsets = np.load(offsets_path, mmap_mode="r" if mmap_file else None, allow_pickle=False)
        if self._offsets.ndim != 1 or len(self._offsets) < 1:
            raise CorpusError(f"{offsets_path}: not a passage offsets array")
        size = self.path.stat().st_size
        if int(self._offsets[-1]) != size:
            raise CorpusError(f"{self.path}: {size} bytes but its offsets say {int(self._offsets[-1])}; "
                              "the passage store is truncated or was changed")
        if size == 0:
            self._data: Any = b""
        elif mmap_file:
            with open(self.path, "rb") as handle:
                self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        else:
            self._data = self.path.read_bytes()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> dict[str, Any]:  # type: ignore[override]
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"passage index must be an integer, got {type(i).__name__}")
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"passage {i} out of range ({n} passages in {self.path})")
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        try:
            return json.loads(self._data[start:end])
        except ValueError as error:
            raise CorpusError(f"{self.path}: passage {i} is unreadable ({error})") from None

    def fingerprint(self) -> str:
        """Recompute the fingerprint from the stored bytes (a full read; indexes store it instead)."""
        digest = sha256()
        step = 1 << 24
        for start in range(0, len(self._data), step):
            digest.update(self._data[start:start + step])
        return digest.hexdigest()

    def __repr__(self) -> str:
        return f"MappedPassages({str(self.path)!r}, n={len(self)})"
