"""Everything that touches llama.cpp's internals: loading, batches, logits, the KV cache, samplers.

`NativeModel` is the one door to llama.cpp: the client (`client.py`) asks it to tokenize, decode
tokens at positions, read logits, trim the KV cache and sample, and never sees ctypes, the
low-level ``llama_cpp.llama_cpp`` API or the `Llama` object's private parts. Importing this module
does not import llama.cpp; loading a model does.

Why the extra weight buffers: llama.cpp's AMX / repacked weight layouts ("extra buffer types") are off
by default, because on this project's machines (Xeon with AMX) the AMX matmul segfaults on
multi-token batches. `model_defaults_without_extra_buffers` turns them off for any `Llama()` load
(`dsp.serve_lm` uses it for llama_cpp.server too).

>>> model = NativeModel(default_model_path(), n_ctx=512, n_threads=1, n_batch=512)   # doctest: +SKIP
>>> model.detokenize(model.tokenize("Hello world", add_bos=True))                  # doctest: +SKIP
'Hello world'
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from .model_file import INSTALL_HINT, ModelFileError

__all__ = ["NativeModel", "load_llama", "model_defaults_without_extra_buffers", "import_llama_cpp"]

log = logging.getLogger("dsp.llamacpp")

_LOAD_LOCK = threading.Lock()     # model loading swaps a llama_cpp module attribute and fd 2


def import_llama_cpp() -> Any:
    """The llama_cpp package, or an ImportError that says how to install it.

    >>> import_llama_cpp().__name__                                   # doctest: +SKIP
    'llama_cpp'
    """
    try:
        import llama_cpp
    except ImportError:
        raise ImportError(f"LlamaCpp needs llama-cpp-python, which is not installed: run  {INSTALL_HINT}") from None
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

    >>> with model_defaults_without_extra_buffers():                   # doctest: +SKIP
    ...     llm = llama_cpp.Llama(model_path="model.gguf")
    """
    llama_cpp = import_llama_cpp()
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


def load_llama(path: Path, n_ctx: int, n_threads: int, n_batch: int, verbose: bool, extra_buffers: bool,
               flash_attn: bool = False) -> Any:
    """A `llama_cpp.Llama` for `path` (logits of the last token only), loaded quietly unless `verbose`.

    >>> llm = load_llama(default_model_path(), 2048, 1, 512, verbose=False, extra_buffers=False)  # doctest: +SKIP
    """
    llama_cpp = import_llama_cpp()
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


def _seed32(seed: int) -> int:
    """A request seed as llama.cpp's uint32 seed; 0xFFFFFFFF means "random" there, so it is avoided.

    >>> _seed32(0), _seed32(2**32 - 1), _seed32(5_000_015)
    (0, 0, 5000015)
    """
    return seed % 0xFFFFFFFF


class NativeModel:
    """One loaded llama.cpp model and its context (sequence 0 only), as plain Python calls.

    Not thread-safe: the caller serialises every call that decodes, samples or touches the KV cache.
    Logits are numpy float32 arrays over the vocabulary; a sampler is an opaque handle that must be
    given back to `free_sampler`.

    >>> model = NativeModel(path, n_ctx=1024, n_threads=2, n_batch=512)           # doctest: +SKIP
    >>> model.decode(model.tokenize("The sky is", add_bos=True), 0, "last")       # doctest: +SKIP
    >>> int(model.logits().argmax()) == model.tokenize(" blue")[0]                # doctest: +SKIP
    True
    """

    def __init__(self, path: Path, n_ctx: int, n_threads: int, n_batch: int, verbose: bool = False,
                 extra_buffers: bool = False, flash_attn: bool = False) -> None:
        self._llm = load_llama(path, n_ctx, n_threads, n_batch, verbose, extra_buffers, flash_attn)
        self._low = import_llama_cpp().llama_cpp
        self._vocab = self._llm._model.vocab
        self.n_vocab = int(self._low.llama_vocab_n_tokens(self._vocab))
        self.add_bos = bool(self._low.llama_vocab_get_add_bos(self._vocab))
        self._pieces: dict[int, bytes] = {}
        self._candidates: Any = None  # llama_token_data_array over the vocabulary, made on first use

    # -- vocabulary ---------------------------------------------------------------------------------

    def tokenize(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of `text`, special-token markup read as plain text.

        >>> model.tokenize("Hello world")                              # doctest: +SKIP
        [9259, 1902]
        """
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False))

    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens render as nothing), remembered per token.

        >>> model.piece(9259)                                          # doctest: +SKIP
        b'Hello'
        """
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
        """Text of valid token ids (broken UTF-8 is dropped, a tokenizer's space prefix taken off).

        >>> model.detokenize([9259, 1902])                             # doctest: +SKIP
        'Hello world'
        """
        text = b"".join(self.piece(t) for t in ids).decode("utf-8", errors="ignore")
        # Tokenizers that prefix a space (SentencePiece with add_space_prefix) get it back off here.
        if ids and self._llm.metadata.get("tokenizer.ggml.add_space_prefix") == "true" and text.startswith(" "):
            text = text[1:]
        return text

    def is_eog(self, token: int) -> bool:
        """Whether `token` ends generation (end of sequence, end of turn, ...).

        >>> model.is_eog(1)                                            # doctest: +SKIP
        True
        """
        return bool(self._low.llama_vocab_is_eog(self._vocab, token))

    # -- evaluation ---------------------------------------------------------------------------------

    def decode(self, tokens: Sequence[int], start: int, outputs: str) -> None:
        """Decode `tokens` at positions start.. ; outputs: "none", "last" or "all" rows of logits.

        >>> model.decode([2, 9259], 0, "last")                         # doctest: +SKIP
        """
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
        code = self._low.llama_decode(self._llm.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode failed with code {code} at positions {start}..{start + n - 1}")

    def logits(self, index: int = -1) -> Any:
        """The logits row `index` of the last decode (-1: the last row), a view into llama.cpp's buffer:
        copy it to keep it past the next decode.

        >>> model.logits().shape                                       # doctest: +SKIP
        (262144,)
        """
        import numpy as np
        pointer = self._low.llama_get_logits_ith(self._llm.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def kv_remove_from(self, position: int) -> bool:
        """Drop the KV cache from `position` on; False when llama.cpp cannot (then clear it instead).

        >>> model.kv_remove_from(256)                                  # doctest: +SKIP
        True
        """
        return bool(self._llm._ctx.kv_cache_seq_rm(0, position, -1))

    def kv_clear(self) -> None:
        """Empty the KV cache.

        >>> model.kv_clear()                                           # doctest: +SKIP
        """
        self._llm._ctx.kv_cache_clear()

    # -- sampling -----------------------------------------------------------------------------------

    def new_sampler(self, temperature: float, top_k: int, top_p: float, min_p: float, seed: int) -> Any:
        """A sampler chain: greedy at temperature 0, else temperature, the filters and a seeded draw.

        >>> chain = model.new_sampler(0.7, top_k=0, top_p=1.0, min_p=0.0, seed=3)  # doctest: +SKIP
        """
        low = self._low
        chain = low.llama_sampler_chain_init(low.llama_sampler_chain_default_params())
        if temperature == 0.0:
            parts = [low.llama_sampler_init_greedy()]
        else:
            # Temperature first, then the filters (as OpenAI/HF), then a draw seeded per request.
            parts = [low.llama_sampler_init_temp(temperature)]
            if top_k > 0:
                parts.append(low.llama_sampler_init_top_k(top_k))
            if top_p < 1.0:
                parts.append(low.llama_sampler_init_top_p(top_p, 1))
            if min_p > 0.0:
                parts.append(low.llama_sampler_init_min_p(min_p, 1))
            parts.append(low.llama_sampler_init_dist(_seed32(seed)))
        for part in parts:
            low.llama_sampler_chain_add(chain, part)  # the chain owns and frees its parts
        return chain

    def sample_from(self, chain: Any, logits: Any) -> int:
        """Sample with `chain` from a logits array (e.g. kept prompt logits), as `sample` would.

        >>> token = model.sample_from(chain, kept_logits)              # doctest: +SKIP
        """
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

    def sample(self, chain: Any) -> int:
        """Sample with `chain` from the last logits row of the last decode.

        >>> token = model.sample(chain)                                # doctest: +SKIP
        """
        return int(self._low.llama_sampler_sample(chain, self._llm.ctx, -1))

    def free_sampler(self, chain: Any) -> None:
        """Free a chain made by `new_sampler` (and its parts).

        >>> model.free_sampler(chain)                                  # doctest: +SKIP
        """
        self._low.llama_sampler_free(chain)

    # -- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the model and its context now; the object is unusable afterwards.

        >>> model.close()                                              # doctest: +SKIP
        """
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.close()
