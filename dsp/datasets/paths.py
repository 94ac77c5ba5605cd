"""DSP_DATA_DIR: a local mirror of the public datasets, read in place (never copied into a project).

`data_path(name)` finds a file by its place in that layout: in DSP_DATA_DIR, else among finished
downloads, else it downloads the registered public source (verified; see `registry`).

>>> data_path("nq_open/NQ-open.dev.jsonl")        # doctest: +SKIP
PosixPath('/data/nq_open/NQ-open.dev.jsonl')
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "data_path", "local_path"]


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


def local_path(name: str) -> Path | None:
    """`name` in DSP_DATA_DIR or in the download directory, if it is there; no download."""
    from .registry import download_dir

    mirror = os.environ.get("DSP_DATA_DIR")
    for base in ([Path(mirror).expanduser()] if mirror else []) + [download_dir()]:
        if (base / name).exists():
            return base / name
    return None


def data_path(name: str) -> Path:
    """The local path of dataset file `name`, downloading a registered public file if needed."""
    found = local_path(name)
    if found is not None:
        return found
    from .registry import REGISTRY, fetch

    if name in REGISTRY and REGISTRY[name].url:
        return fetch(name)
    mirror = os.environ.get("DSP_DATA_DIR")
    raise FileNotFoundError(f"{name} is not in DSP_DATA_DIR ({mirror or 'unset'}) and has no registered download")
