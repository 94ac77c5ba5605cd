"""Everything that touches llama.cpp's internals: loading, batches, logits, the KV cache, samplers.

`NativeModel` is the one door to llama.cpp: the client (`client.py`) and the scheduler
(`scheduler.py`) ask it to tokenize, decode tokens at positions, read logits, trim and copy the KV
cache and sample, and never see ctypes, the low-level ``llama_cpp.llama_cpp`` API or the `Llama`
object's private parts. Importing this module does not import llama.cpp; loading a model does.

Why one KV stream per sequence: the context holds `n_seq` sequences, each in its own stream
(``n_seq_max=n_seq``, ``kv_unified=False``, every stream `n_ctx` cells). llama.cpp's numbers depend on
which cache cells a sequence's tokens sit in; in a shared (unified) cache a sequence's cells depend on
what else was decoded with it, so the same seeded draw would come out differently in another batch
(measured here: logits move by ~0.7 after a few steps). In a stream of its own, a sequence's cells are
always its positions, and decoding it in a batch with other streams' tokens gives bit for bit the
logits it gets alone (measured: batches of 2-20 streams, streams of other lengths, copied streams).
The price: each stream holds its own copy of a shared prompt (a whole-stream copy, and attention
reads it once per sequence).

Why batches are cut to `exact_width` tokens: ggml picks its matrix kernels by the number of tokens in
a batch, and some of those kernels round differently (measured here, AMD EPYC with AVX2: up to 7
tokens every sequence gets its lone logits bit for bit, from 8 on the q4_K projections round
otherwise). `exact_width` measures, once per process and model, the widest batch that changes no
sequence's numbers; the scheduler never decodes more tokens than that in one call.

Why the extra weight buffers: llama.cpp's AMX / repacked weight layouts ("extra buffer types") are off
by default, because on this project's machines (Xeon with AMX) the AMX matmul segfaults on
multi-token batches. `model_defaults_without_extra_buffers` turns them off for any `Llama()` load
(`dsp.serve_lm` uses it for llama_cpp.server too).

Every example here needs a loaded model, so they are shown as code, not run as doctests::

    model = NativeModel(default_model_path(), n_ctx=512, n_threads=1, n_batch=512)
    model.detokenize(model.tokenize("Hello world", add_bos=True))     # 'Hello world'
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Iterator, Sequence

from .model_file import INSTALL_HINT, ModelFileError

__all__ = ["NativeModel", "load_llama", "model_defaults_without_extra_buffers", "import_llama_cpp"]

log = logging.getLogger("dsp.llamacpp")

_LOAD_LOCK = threading.Lock()     # model loading swaps a llama_cpp module attribute and fd 2
# (model file, threads, kernels) -> (exact batch width, widest batch tried), measured once per process.
_EXACT_WIDTHS: dict[tuple[Any, ...], tuple[int, int]] = {}


def import_llama_cpp() -> Any:
    """The llama_cpp package, or an ImportError that says how to install it.

    With the [local] extra installed, ``import_llama_cpp().__name__`` is ``'llama_cpp'``.
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

    For example (a model load, so not run here)::

        with model_defaults_without_extra_buffers():
            llm = llama_cpp.Llama(model_path="model.gguf")
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


@contextlib.contextmanager
def _context_defaults(n_seq: int) -> Iterator[None]:
    """While open, new contexts hold `n_seq` sequences, one KV stream each (`Llama()` takes no option
    for it but reads `llama_context_default_params` at call time). Call with `_LOAD_LOCK` held."""
    low = import_llama_cpp().llama_cpp
    original = low.llama_context_default_params

    def params_with_streams() -> Any:
        params = original()
        params.n_seq_max = n_seq
        params.kv_unified = False  # a stream per sequence: see the module notes
        return params

    low.llama_context_default_params = params_with_streams
    try:
        yield
    finally:
        low.llama_context_default_params = original


def load_llama(path: Path, n_ctx: int, n_threads: int, n_batch: int, verbose: bool, extra_buffers: bool,
               flash_attn: bool = False, n_seq: int = 1) -> Any:
    """A `llama_cpp.Llama` for `path` (logits of the last token only), loaded quietly unless `verbose`.
    With `n_seq` > 1 its context holds that many sequences of up to `n_ctx` tokens, one KV stream each.

    For example (a model load, so not run here)::

        llm = load_llama(default_model_path(), 2048, 1, 512, verbose=False, extra_buffers=False)
    """
    llama_cpp = import_llama_cpp()
    with model_defaults_without_extra_buffers(not extra_buffers):
        try:
            with _quiet_stderr(not verbose), _context_defaults(n_seq) if n_seq > 1 else contextlib.nullcontext():
                return llama_cpp.Llama(
                    model_path=str(path), n_ctx=n_ctx * n_seq, n_batch=n_batch, n_ubatch=n_batch,
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
    """One loaded llama.cpp model and its context of `n_seq` sequences (ids 0..n_seq-1, one KV stream
    each), as plain Python calls.

    Not thread-safe: the caller serialises every call that decodes, samples or touches the KV cache
    (`sample_many` spreads its own work over threads). Logits are numpy float32 arrays over the
    vocabulary; a sampler is an opaque handle that must be given back to `free_sampler`.

    The examples of its methods use a loaded model, so they are shown, not run::

        model = NativeModel(path, n_ctx=1024, n_threads=2, n_batch=512)
        model.decode(model.tokenize("The sky is", add_bos=True), 0, "last")
        int(model.logits().argmax()) == model.tokenize(" blue")[0]        # True
    """

    def __init__(self, path: Path, n_ctx: int, n_threads: int, n_batch: int, verbose: bool = False,
                 extra_buffers: bool = False, flash_attn: bool = False, n_seq: int = 1) -> None:
        self._llm = load_llama(path, n_ctx, n_threads, n_batch, verbose, extra_buffers, flash_attn, n_seq)
        self._low = import_llama_cpp().llama_cpp
        self._vocab = self._llm._model.vocab
        self._memory = self._low.llama_get_memory(self._llm.ctx)
        self.n_vocab = int(self._low.llama_vocab_n_tokens(self._vocab))
        self.add_bos = bool(self._low.llama_vocab_get_add_bos(self._vocab))
        self.n_seq = n_seq
        self.n_batch = n_batch
        # Our own batch with one sequence id per token (Llama's holds n_ctx ids per token).
        self._batch = self._low.llama_batch_init(n_batch, 0, 1)
        self._free_batch = weakref.finalize(self, self._low.llama_batch_free, self._batch)  # once, close or GC
        self._pieces: dict[int, bytes] = {}
        self._local = threading.local()  # each sampling thread's candidate array over the vocabulary
        self._pool: ThreadPoolExecutor | None = None
        self._n_threads = n_threads
        self._path = path
        self._kernels = (bool(extra_buffers), bool(flash_attn))  # they change which kernels run
        self.eos, self.bos = int(self._low.llama_vocab_eos(self._vocab)), int(self._low.llama_vocab_bos(self._vocab))
        self.chat_template: str | None = self._llm.metadata.get("tokenizer.chat_template") or None  # from the GGUF

    # -- vocabulary ---------------------------------------------------------------------------------

    def tokenize(self, text: str, add_bos: bool = False, special: bool = False) -> list[int]:
        """Token ids of `text`; special-token markup is read as plain text unless `special` (a prompt
        rendered by a chat template, whose markup is the model's own control tokens).

        For example, ``model.tokenize("Hello world")`` is ``[9259, 1902]`` (Gemma 3).
        """
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special))

    def token_text(self, token: int) -> str:
        """A token's text as the vocabulary stores it (control tokens included); "" for -1 (no such token).

        For example, ``model.token_text(model.eos)`` is ``'<|im_end|>'`` (SmolLM2).
        """
        return "" if token < 0 else self._low.llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")

    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens render as nothing), remembered per token.

        For example, ``model.piece(9259)`` is ``b'Hello'`` (Gemma 3).
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

        For example, ``model.detokenize([9259, 1902])`` is ``'Hello world'`` (Gemma 3).
        """
        text = b"".join(self.piece(t) for t in ids).decode("utf-8", errors="ignore")
        # Tokenizers that prefix a space (SentencePiece with add_space_prefix) get it back off here.
        if ids and self._llm.metadata.get("tokenizer.ggml.add_space_prefix") == "true" and text.startswith(" "):
            text = text[1:]
        return text

    def is_eog(self, token: int) -> bool:
        """Whether `token` ends generation (end of sequence, end of turn, ...).

        For example, ``model.is_eog(1)`` is ``True`` (Gemma 3's end of sequence).
        """
        return bool(self._low.llama_vocab_is_eog(self._vocab, token))

    # -- evaluation ---------------------------------------------------------------------------------

    def _run(self, n: int, what: str) -> None:
        batch = self._batch
        batch.n_tokens = n
        code = self._low.llama_decode(self._llm.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode failed with code {code} on {what}")

    def decode(self, tokens: Sequence[int], start: int, outputs: str, seq: int = 0) -> None:
        """Decode `tokens` of sequence `seq` at positions start.. ; outputs: "none", "last" or "all" rows
        of logits.

        For example, ``model.decode([2, 9259], 0, "last")`` decodes two tokens of sequence 0 from
        position 0 and keeps the last one's logits.
        """
        batch = self._batch
        flag = 1 if outputs == "all" else 0
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = flag
        if outputs == "last":
            batch.logits[len(tokens) - 1] = 1
        self._run(len(tokens), f"sequence {seq}, positions {start}..{start + len(tokens) - 1}")

    def decode_step(self, tokens: Sequence[int], positions: Sequence[int], seqs: Sequence[int]) -> None:
        """Decode one token for each of several sequences in one batch; logits row i is entry i's.
        Each sequence gets bit for bit the logits it would get decoded alone (see the module notes).

        For example, ``model.decode_step([9259, 1902], [7, 12], [0, 1])`` decodes token 9259 at
        position 7 of sequence 0 and token 1902 at position 12 of sequence 1.
        """
        batch = self._batch
        for i, (token, position, seq) in enumerate(zip(tokens, positions, seqs)):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 1
        self._run(len(tokens), f"a step of sequences {list(seqs)}")

    def exact_width(self, limit: int) -> int:
        """The most sequences (at most `limit`, one token each) that `decode_step` may take at once with
        every sequence getting bit for bit the logits it gets decoded alone, for every width up to it.
        Measured once per process and model setup, leaving the cache empty: sequence i holds a short
        prompt cut i tokens short (so lengths differ) and decodes two tokens of its own (a word, then an
        arbitrary id: some kernels' differences show on one kind only), alone and then in batches of 2,
        3, ... ggml picks kernels by a batch's width, and past some width a sequence's numbers depend on
        the other sequences' data: both show on this project's machine (7 here).

        For example, ``model.exact_width(16)`` is ``7`` on that machine.
        """
        import numpy as np
        limit = max(1, min(limit, self.n_seq, self.n_batch))
        key = (str(self._path), self._path.stat().st_size, self._n_threads, self._kernels)
        known = _EXACT_WIDTHS.get(key)
        if known is not None and (known[0] < known[1] or limit <= known[1]):  # a wider one failed, or wide enough
            return min(known[0], limit)
        words = " ".join(f"Item {i} of the list is the number {i * 7 % 100}." for i in range(6))
        prompt = self.tokenize(words, add_bos=self.add_bos)[:48]
        pool = self.tokenize(" river castle engine garden harbor violin glacier market lantern orchard")
        tokens = [(pool[i % len(pool)], (1000 + 37 * i) % self.n_vocab) for i in range(limit)]
        starts = [max(1, len(prompt) - seq) for seq in range(limit)]
        alone: list[list[Any]] = []

        def decode_two(seqs: range) -> list[list[Any]]:
            """Each sequence's logits after its two tokens, decoded one step at a time for all of `seqs`."""
            found: list[list[Any]] = [[] for _ in seqs]
            for step in range(2):
                self.decode_step([tokens[s][step] for s in seqs], [starts[s] + step for s in seqs], seqs)
                for i in range(len(seqs)):
                    found[i].append(self.logits(i).view(np.uint32).copy())  # compared bit for bit
            for seq in seqs:
                self.kv_remove_from(starts[seq], seq)
            return found

        try:
            self.decode(prompt, 0, "last")
            width = 0
            while width < limit:
                seq = width  # sequence `seq` joins: its prompt (a copy, cut short), its tokens decoded alone
                if seq:
                    self.kv_copy(0, seq)
                    self.kv_remove_from(starts[seq], seq)
                alone.append(decode_two(range(seq, seq + 1))[0])
                if seq and not all(np.array_equal(a, b) for got, want in zip(decode_two(range(seq + 1)), alone)
                                   for a, b in zip(got, want)):
                    break
                width += 1
        finally:
            for seq in range(len(alone)):
                self.kv_remove_from(0, seq)  # metadata only: faster than clearing a large cache
        _EXACT_WIDTHS[key] = (width, min(width + 1, limit))
        return width

    def logits(self, index: int = -1) -> Any:
        """The logits row `index` of the last decode (-1: the last row), a view into llama.cpp's buffer:
        copy it to keep it past the next decode.

        For example, ``model.logits().shape`` is ``(262144,)`` (Gemma 3's vocabulary).
        """
        import numpy as np
        pointer = self._low.llama_get_logits_ith(self._llm.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def kv_remove_from(self, position: int, seq: int = 0) -> bool:
        """Drop sequence `seq` from `position` on (0: all of it); False when llama.cpp cannot.

        For example, ``model.kv_remove_from(256)`` keeps sequence 0's first 256 positions (``True``).
        """
        return bool(self._low.llama_memory_seq_rm(self._memory, seq, position, -1))

    def kv_copy(self, source: int, target: int) -> None:
        """Make sequence `target` a copy of sequence `source` (llama.cpp copies the whole stream, at the
        next decode; `target`'s own cells are dropped first).

        For example, ``model.kv_copy(0, 3)`` makes sequence 3 a copy of sequence 0.
        """
        self._low.llama_memory_seq_cp(self._memory, source, target, -1, -1)

    def kv_clear(self) -> None:
        """Empty the KV cache (every sequence).

        For example, ``model.kv_clear()`` before a prompt that shares nothing with the last one.
        """
        self._low.llama_memory_clear(self._memory, True)

    # -- sampling -----------------------------------------------------------------------------------

    def new_sampler(self, temperature: float, top_k: int, top_p: float, min_p: float, seed: int) -> Any:
        """A sampler chain: greedy at temperature 0, else temperature, the filters and a seeded draw.

        For example, ``model.new_sampler(0.7, top_k=0, top_p=1.0, min_p=0.0, seed=3)``: a seeded
        draw at temperature 0.7 with no filter.
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
        """Sample with `chain` from a logits array (kept prompt logits, or a `logits()` row): what
        llama_sampler_sample does, on a candidate array of this thread's own.

        For example, ``token = model.sample_from(chain, kept_logits)``.
        """
        import numpy as np
        low = self._low
        candidates = getattr(self._local, "candidates", None)
        if candidates is None:
            data = np.zeros(self.n_vocab, dtype=np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)],
                                                         align=True))
            array = low.llama_token_data_array(data=data.ctypes.data_as(low.llama_token_data_p), size=self.n_vocab,
                                               selected=-1, sorted=False)
            candidates = self._local.candidates = (data, array, np.arange(self.n_vocab, dtype=np.intc))
        data, array, ids = candidates
        data["id"] = ids  # the filters reorder candidates: start from the vocabulary's order every time
        data["logit"] = logits
        data["p"] = 0.0
        array.size, array.selected, array.sorted = self.n_vocab, -1, False
        low.llama_sampler_apply(chain, ctypes.byref(array))
        if not 0 <= array.selected < array.size:
            raise RuntimeError(f"the llama.cpp sampler selected no token (selected={array.selected})")
        token = int(data["id"][array.selected])
        low.llama_sampler_accept(chain, token)
        return token

    def sample_many(self, chains: Sequence[Any], sources: Sequence[Any]) -> list[int]:
        """One token per chain, each from its source: a logits row index of the last decode, or a logits
        array. Several chains are sampled on `n_threads` threads at once: a draw over a 262k-token
        vocabulary costs ~2.7 ms of one core, as much as a decode step shared by 10 sequences.

        For example, ``model.sample_many([chain_a, chain_b], [0, kept_logits])`` gives one token per
        chain (``[1902, 651]``): the first from the last decode's row 0, the second from kept logits.
        """
        if len(chains) < 2 or self._n_threads < 2:  # in this thread; rows as llama_sampler_sample reads them
            return [int(self._low.llama_sampler_sample(chain, self._llm.ctx, source)) if isinstance(source, int)
                    else self.sample_from(chain, source) for chain, source in zip(chains, sources)]
        # Rows are looked up here, in the caller's thread: the first lookup after a decode may reorder
        # llama.cpp's output buffer, which must not race with the sampling threads.
        arrays = [self.logits(source) if isinstance(source, int) else source for source in sources]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._n_threads, thread_name_prefix="dsp-llamacpp-sample")
        futures = [self._pool.submit(self.sample_from, chain, array) for chain, array in zip(chains, arrays)]
        try:
            return [future.result() for future in futures]
        finally:
            wait(futures)  # interrupted or failed: no thread may still use a chain the caller will free

    def free_sampler(self, chain: Any) -> None:
        """Free a chain made by `new_sampler` (and its parts).

        For example, ``model.free_sampler(chain)`` once the sequence that drew with it is done.
        """
        self._low.llama_sampler_free(chain)

    # -- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the model, its context and the sampling threads now; the object is unusable afterwards.

        For example, ``model.close()`` when the client is closed; no method may be called afterwards.
        """
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        llm, self._llm = self._llm, None
        if llm is not None:
            self._free_batch()
            llm.close()
