"""DSP_DATA_DIR: a local mirror of the public datasets, read in place (never copied into a project).

`data_path(name)` finds a file by its place in that layout: in DSP_DATA_DIR, else among finished
downloads, else it downloads the registered public source (verified; see `registry`).

A relative DSP_DATA_DIR is resolved when first read: against the working directory, else against the
project's root (so `DSP_DATA_DIR=../shared/data`, written for the repository root as in the README,
also works from a notebook running in notebooks/), and the absolute path is written back to the
environment, so threads, subprocesses and Ray workers all read the same directory.

For example, with DSP_DATA_DIR=/data (it reads the environment, so it is not run as a doctest),
``data_path("nq_open/NQ-open.dev.jsonl")`` is ``PosixPath('/data/nq_open/NQ-open.dev.jsonl')``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "data_path", "local_path", "mirror_dir"]

_PROJECT_ROOT = Path(__file__).resolve().parents[2]  # dsp/datasets/paths.py -> the repository


def mirror_dir() -> Path | None:
    """$DSP_DATA_DIR as an absolute path (None when unset); see the module docstring for relative values."""
    value = os.environ.get("DSP_DATA_DIR")
    if not value:
        return None
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    candidates = [Path.cwd() / path, _PROJECT_ROOT / path]
    found = next((c for c in candidates if c.is_dir()), candidates[0]).resolve()
    os.environ["DSP_DATA_DIR"] = str(found)
    return found


def data_dir() -> Path:
    """The directory named by $DSP_DATA_DIR; a clear error when it is unset or missing."""
    value = os.environ.get("DSP_DATA_DIR")
    path = mirror_dir()
    if path is None:
        raise FileNotFoundError("DSP_DATA_DIR is not set: point it at a directory holding the datasets "
                                "(e.g. export DSP_DATA_DIR=../shared/data)")
    if not path.is_dir():
        raise FileNotFoundError(f"DSP_DATA_DIR={value} is not a directory (resolved: {path})")
    return path


def local_path(name: str) -> Path | None:
    """`name` in DSP_DATA_DIR or in the download directory, if it is there; no download."""
    from .registry import download_dir

    mirror = mirror_dir()
    for base in ([mirror] if mirror else []) + [download_dir()]:
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
    raise FileNotFoundError(f"{name} is not in DSP_DATA_DIR ({mirror_dir() or 'unset'}) and has no registered download")
