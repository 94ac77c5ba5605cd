"""Read JSON, JSON Lines and CSV data files (plain or .gz) with errors that name the file and line.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = Path(tmp) / "rows.jsonl.gz"
...     with gzip.open(path, "wt", encoding="utf-8") as f:
...         _ = f.write('{"question": "who wrote hamlet"}\\n\\n[1, 2]\\n')
...     rows = []
...     try:
...         for number, row in read_jsonl(path):
...             rows.append((number, row))
...     except DataFileError as error:
...         message = str(error)
>>> rows, message.split("rows.jsonl.gz")[1]
([(1, {'question': 'who wrote hamlet'})], ', line 3: expected a JSON object, got list')
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
from pathlib import Path
from typing import Any, Iterator

__all__ = ["DataFileError", "open_text", "read_jsonl", "read_json", "read_csv"]


class DataFileError(ValueError):
    """A data file that cannot be read as expected; the message names the file (and line)."""


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open a text file for reading, transparently gunzipping `.gz` files."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; a bad line raises naming file and line."""
    with open_text(path) as lines:
        try:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as error:
                    raise DataFileError(f"{path}, line {number}: not valid JSON ({error})") from None
                if not isinstance(record, dict):
                    raise DataFileError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
                yield number, record
        except (EOFError, OSError, UnicodeDecodeError) as error:  # truncated gzip, bad bytes
            raise DataFileError(f"{path}: unreadable ({type(error).__name__}: {error})") from None


def read_json(path: str | os.PathLike) -> Any:
    """The whole JSON document in `path` (plain or .gz)."""
    with open_text(path) as f:
        try:
            return json.load(f)
        except ValueError as error:
            raise DataFileError(f"{path}: not valid JSON ({error})") from None
        except (EOFError, OSError, UnicodeDecodeError) as error:
            raise DataFileError(f"{path}: unreadable ({type(error).__name__}: {error})") from None


def read_csv(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, row) from a CSV with a header; unnamed (empty-header) columns are dropped."""
    with open_text(path) as f:
        reader = csv.DictReader(f)
        for row in reader:
            yield reader.line_num, {k: v for k, v in row.items() if k and k.strip()}
