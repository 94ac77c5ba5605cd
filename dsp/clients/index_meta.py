"""meta.json, the file that makes a directory a finished index (BM25, DenseRM, ColBERTLocal).

An index is written in two steps: `begin_index_write` removes an old meta.json first (so an
interrupted overwrite never looks finished), the index files are written, then `write_index_meta`
puts meta.json in place atomically. `read_index_meta` refuses a directory without one, an unreadable
one, and one of another index format, naming the file.

>>> import tempfile
>>> directory = begin_index_write(tempfile.mkdtemp())
>>> _ = write_index_meta(directory, {"format": "demo/1", "count": 3})
>>> read_index_meta(directory, "demo/1", "demo")["count"]
3
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

__all__ = ["META_NAME", "begin_index_write", "write_index_meta", "read_index_meta"]

META_NAME = "meta.json"


def begin_index_write(index_dir: str | os.PathLike) -> Path:
    """Create `index_dir` if needed and remove its meta.json: until the new one is written, it is no index."""
    index_dir = Path(index_dir).expanduser()
    index_dir.mkdir(parents=True, exist_ok=True)
    (index_dir / META_NAME).unlink(missing_ok=True)
    return index_dir


def write_index_meta(index_dir: str | os.PathLike, meta: Mapping[str, Any]) -> Path:
    """Write meta.json last and atomically (a temporary file renamed over it); returns its path."""
    path = Path(index_dir) / META_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dict(meta), indent=2), encoding="utf-8")
    tmp.replace(path)
    return path


def read_index_meta(index_dir: str | os.PathLike, index_format: str, what: str) -> dict[str, Any]:
    """The meta.json of a finished `index_format` index, or an error naming the file and what is wrong.

    >>> read_index_meta("/nonexistent", "dsp.bm25/1", "BM25")
    Traceback (most recent call last):
    FileNotFoundError: /nonexistent is not a saved dsp BM25 index (no meta.json)
    """
    path = Path(index_dir) / META_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{index_dir} is not a saved dsp {what} index (no {META_NAME})")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: unreadable index metadata ({error})") from None
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != index_format:
        raise ValueError(f"{path}: not a {index_format} index (format {found!r})")
    return meta
