"""DSP_DATA_DIR: a local mirror of the public datasets, read in place (never copied into a project).

>>> data_path("nq_open/NQ-open.dev.jsonl")        # doctest: +SKIP
PosixPath('/data/nq_open/NQ-open.dev.jsonl')
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "data_path"]


def data_dir() -> Path:
    """The directory named by $DSP_DATA_DIR; a clear error when it is unset or missing."""
    value = os.environ.get("DSP_DATA_DIR")
    if not value:
        raise FileNotFoundError("DSP_DATA_DIR is not set: point it at a directory holding the datasets "
                                "(e.g. export DSP_DATA_DIR=../shared/data)")
    path = Path(value).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"DSP_DATA_DIR={value} is not a directory")
    return path


def data_path(relative: str) -> Path:
    """`relative` inside DSP_DATA_DIR; a clear error naming the file when it is absent."""
    path = data_dir() / relative
    if not path.exists():
        raise FileNotFoundError(f"{relative} is not in DSP_DATA_DIR ({data_dir()}): expected {path}")
    return path
