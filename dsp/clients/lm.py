"""The LM interface: `lm(prompt, **params) -> list[str]`, with the cache, history and usage written once.

A concrete client says who it is (`cache_identity`), which parameters a request carries
(`build_request`) and how one request is answered (`_request`, returning
``{"choices": [{"text", "finish_reason"}, ...], "usage": {...}}``). Everything else lives here:

- every request goes through the disk cache (key = the client's identity + the whole request); a
  response that is an error (no completions, or malformed) raises and is never cached;
- a prompt that is not valid text (a lone surrogate) is refused before any cache or backend work;
- n>1 on a backend that samples one completion at a time becomes n seeded draws, each cached on its
  own, so a rerun reproduces the same samples and asking for more reuses the ones already drawn; a
  backend that declares `SamplesInBatch` gets the draws missing from the cache all at once;
- completions cut by the length limit are dropped when at least one finished (DSP v1 behaviour);
- `history` keeps the last calls (bounded) and `usage` sums tokens of real (uncached) requests;
- a prompt that does not fit the context window raises `ContextLengthExceeded`, whatever the client;
- optional capabilities are declared by inheriting `CountsTokens` (count, tokenize and cut text in the
  model's own tokens), `ScoresOptions` (log-probabilities of given continuations) or `SamplesInBatch`
  (several single draws of one prompt answered together), and callers check them with `isinstance`,
  never by probing attributes;
- `name` ("provider:model") is how a client is shown in logs, tables and result files.

>>> class Echo(LM):
...     provider = "echo"
...     def _request(self, request):
...         return {"choices": [{"text": " " + request["prompt"][::-1], "finish_reason": "stop"}]}
>>> Echo("echo-1")("abc", cache=False)
[' cba']
"""

from __future__ import annotations

import copy
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from .. import cache as _cache
from ..settings import settings
from ..utils import check_positive_int

__all__ = ["LM", "Usage", "ContextLengthExceeded", "CountsTokens", "ScoresOptions", "SamplesInBatch", "HISTORY_SIZE",
           "check_text"]

HISTORY_SIZE = 1000  # calls kept per client: enough to inspect a run, bounded for long evaluations


@dataclass
class Usage:
    """Token and request counts; `cost` is filled when the client knows its prices (USD)."""

    requests: int = 0
    cached_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_tokens": self.total_tokens}

    def add(self, usage: Mapping[str, Any], cached: bool, prices: tuple[float, float] | None = None) -> None:
        """Count one response: its tokens and requests (`usage["requests"]` when a client needed several
        for one call, e.g. a server that ignores n; else one) if it was real, else one cache hit."""
        if cached:
            self.cached_requests += 1
            return
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        self.requests += int(usage.get("requests") or 1)
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if prices:
            self.cost += (prompt_tokens * prices[0] + completion_tokens * prices[1]) / 1e6


class ContextLengthExceeded(ValueError):
    """The prompt plus the tokens asked for does not fit the model's context window.

    The one error every client raises for it (the embedded model before evaluating anything, an HTTP
    client when the server says so). It is never retried: the same request cannot succeed. Known
    figures travel with it: `prompt_tokens`, `requested` (tokens to generate) and `limit` (the window);
    an HTTP client also sets `service`, `status`, `model` and `base_url`.

    >>> error = ContextLengthExceeded("too long", prompt_tokens=5000, requested=100, limit=4096)
    >>> isinstance(error, ValueError), error.limit
    (True, 4096)
    """

    def __init__(self, message: str, *, prompt_tokens: int | None = None, requested: int | None = None,
                 limit: int | None = None, service: str | None = None, status: int | None = None,
                 model: str | None = None, base_url: str | None = None, attempts: int | None = None) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.requested = requested
        self.limit = limit
        self.service = service
        self.status = status
        self.model = model
        self.base_url = base_url
        self.attempts = attempts
        self.kind = "context_length"


class CountsTokens(ABC):
    """Capability: the LM counts, tokenizes and cuts text in its own tokens, and has a context window.

    A client declares it by inheriting it; callers check ``isinstance(lm, CountsTokens)``.
    """

    n_ctx: int  # the context window in tokens (prompt + completion)

    @abstractmethod
    def tokenize(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of `text`; a prompt adds the BOS token the model expects."""

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """How many tokens `text` takes (no BOS)."""

    @abstractmethod
    def truncate(self, text: str, max_tokens: int, keep: str = "start", separator: str = "\n...\n") -> str:
        """`text` cut to at most `max_tokens` tokens, keeping the "start", the "end" or "both" ends."""


class ScoresOptions(ABC):
    """Capability: the LM gives log P(option | prompt) for given continuations (multiple choice).

    A client declares it by inheriting it; callers check ``isinstance(lm, ScoresOptions)``.
    """

    @abstractmethod
    def option_logprobs(self, prompt: str, options: Iterable[str], cache: bool | None = None) -> dict[str, float]:
        """{option: summed token log-probability of `option` as the continuation of `prompt`}."""


class SamplesInBatch(ABC):
    """Capability: the LM answers several single-draw requests for one prompt together (evaluating the
    prompt once and decoding the draws as one batch), each response what `_request` gives for that
    request alone. `LM._draw_each` then computes the draws of an n>1 call that the cache lacks in one
    `_request_batch` call, and caches each on its own as before.

    A client declares it by inheriting it; callers check ``isinstance(lm, SamplesInBatch)``.

    >>> class Batched(LM, SamplesInBatch):
    ...     native_n = False
    ...     def _request(self, request):
    ...         return self._request_batch([request])[0]
    ...     def _request_batch(self, requests):
    ...         print("one batch of", len(requests))
    ...         return [{"choices": [{"text": f" #{r['seed']}", "finish_reason": "stop"}]} for r in requests]
    >>> Batched("b")("Q:", n=3, seed=5, cache=False)
    one batch of 3
    [' #5', ' #6', ' #7']
    """

    @abstractmethod
    def _request_batch(self, requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """One response per request, in order; the requests share their prompt and ask for n=1 each
        (`LM._draw_each` sends ones that differ only in `seed`)."""


class _NotCached(Exception):
    """Raised in place of computing: asks the cache whether it holds an answer, and nothing else."""


def _not_cached() -> Any:
    raise _NotCached


def check_text(text: str, what: str) -> None:
    """Raise a ValueError naming `what` when `text` is not valid text: a lone surrogate (say from bytes
    decoded with errors="surrogateescape") can be neither hashed into a cache key nor sent to a backend.

    >>> check_text("a\\ud800", "the prompt")
    Traceback (most recent call last):
    ValueError: the prompt contains a lone surrogate (\\ud800) at character 1: not valid text
    """
    if text.isascii():  # the usual case, answered without encoding anything
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{what} contains a lone surrogate (\\u{ord(text[error.start]):04x}) at character "
                         f"{error.start}: not valid text") from None


def _response_problem(response: Any) -> str | None:
    """What makes a backend's response an error rather than an answer, or None for a good one."""
    if not isinstance(response, Mapping):
        return f"a malformed response (a {type(response).__name__}, not an object)"
    choices = response.get("choices")
    if not isinstance(choices, (list, tuple)):
        return f"a malformed response (no 'choices' list: {str(response)[:120]})"
    if not choices:
        return "no completions"
    for i, choice in enumerate(choices):
        if not isinstance(choice, Mapping) or not isinstance(choice.get("text"), str):
            return f"a malformed response (choice {i} has no 'text' string: {str(choice)[:120]})"
        try:
            check_text(choice["text"], f"choice {i}")  # e.g. JSON cut inside an escaped surrogate pair
        except ValueError as error:
            return f"a malformed response ({error})"
    return None


_ATOMIC = frozenset({str, int, float, bool, type(None)})


def _copy_request(request: dict[str, Any]) -> dict[str, Any]:
    """A copy of `request` that `_request` may change without touching the cache key or the history.

    Only container values are copied deeply: strings and numbers cannot change, and a deep copy of a
    whole request (its long prompt included) would cost more than the rest of a cache-off call.
    """
    return {key: value if type(value) in _ATOMIC else copy.deepcopy(value) for key, value in request.items()}


class LM:
    """Base class of language-model clients. Subclasses implement `_request`."""

    provider = "lm"
    native_n = True  # False: the backend returns one completion per request; n>1 is n seeded draws
    spec: str | None = None  # the text spec that rebuilds this client (set by dsp.lm_from_spec)
    # USD per 1M (prompt, completion) tokens, when known; used for Usage.cost.
    prices: tuple[float, float] | None = None
    # A small model (hundreds of millions of parameters): programs pick the settings that suit it (no
    # rationale, one passage, few samples) from this declaration, never from the provider's name.
    small: bool = False

    def __init__(self, model: str, **params: Any) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"an LM needs a model name, got {model!r}")
        self.model = model
        self.kwargs: dict[str, Any] = dict(params)  # default generation parameters (DSP v1: lm.kwargs)
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_SIZE)
        self.usage = Usage()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """How this client is shown in logs, tables and result files: "provider:model".

        >>> LM("gpt-x").name
        'lm:gpt-x'
        """
        return f"{self.provider}:{self.model}"

    # -- what a subclass provides -----------------------------------------------------------------

    def cache_identity(self) -> dict[str, Any]:
        """What, besides the request, decides the answer (never a credential)."""
        return {"provider": self.provider, "model": self.model}

    def build_request(self, prompt: str, **params: Any) -> dict[str, Any]:
        """The full request for `prompt`: defaults, then `params`. Key order is irrelevant."""
        return {"model": self.model, **self.kwargs, **params, "prompt": prompt}

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement _request(request)")

    # -- the call ---------------------------------------------------------------------------------

    def __call__(self, prompt: str, only_completed: bool = True, cache: bool | None = None, **params: Any) -> list[str]:
        """Complete `prompt`; returns the completion texts (DSP v1's interface).

        `cache=False` skips the disk cache for this call; `only_completed` drops length-truncated
        completions when at least one finished.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"a prompt must be text, got {type(prompt).__name__}: {prompt!r:.80}")
        check_text(prompt, "the prompt")
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        request = self.build_request(prompt, **params)
        n = request.get("n", 1)
        check_positive_int(n, "n")
        if n > 1 and not self.native_n:
            response, cached = self._draw_each(request, n, cache)
        else:
            response, cached = self._cached_request(request, cache)
        choices = response["choices"]  # checked by _cached_request: a non-empty list of completions
        kept = choices
        if only_completed and any(c.get("finish_reason") != "length" for c in choices):
            kept = [c for c in choices if c.get("finish_reason") != "length"]
        completions = [c.get("text", "") for c in kept]
        self.history.append({
            "prompt": prompt,
            "params": {k: v for k, v in request.items() if k != "prompt"},
            "response": response,
            "completions": completions,
            "cached": cached,
            "timestamp": time.time(),
        })
        return completions

    def _cached_request(self, request: dict[str, Any], cache: bool | None,
                        answer: Callable[[], Any] | None = None) -> tuple[dict[str, Any], bool]:
        """`request`'s response and whether it came from the cache. On a miss `answer()` gives it when
        set (a response computed already, and accounted, by the caller), else `_request`."""
        key_request = {"kind": "lm", **self.cache_identity(), "request": request}

        def compute() -> dict[str, Any]:
            if answer is not None:
                return answer()
            response = self._request(_copy_request(request))
            # Counted even when it is an error: the backend was asked (and may have charged).
            self._account(response if isinstance(response, Mapping) else {}, cached=False)
            return response

        def check(response: Any) -> None:
            problem = _response_problem(response)
            if problem is not None:
                raise ValueError(f"{self!r} returned {problem} for a prompt ending {request['prompt'][-80:]!r}")

        if cache is False:
            response = compute()
            check(response)
            return response, False
        # The check runs before the cache stores anything: an error is never an answer for later calls.
        response, cached = _cache.cached_call(key_request, compute, check=check)
        if cached:
            self._account(response, cached=True)
        return response, cached

    def _draw_each(self, request: dict[str, Any], n: int, cache: bool | None) -> tuple[dict[str, Any], bool]:
        """n>1 as n single draws seeded seed, seed+1, ...: each cached alone, so reruns reproduce them.
        A `SamplesInBatch` backend computes the draws the cache lacks in one batch."""
        seed = request.get("seed") or 0
        draws = [{**request, "n": 1, "seed": seed + i} for i in range(n)]
        if isinstance(self, SamplesInBatch):
            answered = self._draw_batched(draws, cache)
        else:
            answered = [self._cached_request(draw, cache) for draw in draws]
        choices, usage, all_cached = [], {"prompt_tokens": 0, "completion_tokens": 0}, True
        for one, cached in answered:
            all_cached &= cached
            choices.extend(one.get("choices") or [])
            for key in usage:
                usage[key] += (one.get("usage") or {}).get(key, 0)
        return {"choices": choices, "usage": usage}, all_cached

    def _draw_batched(self, draws: list[dict[str, Any]], cache: bool | None) -> list[tuple[dict[str, Any], bool]]:
        """The draws' (response, cached): cache hits as they are, the rest from one `_request_batch`."""
        if not isinstance(self, SamplesInBatch):
            raise TypeError(f"{type(self).__name__} does not declare SamplesInBatch")
        answered: list[tuple[dict[str, Any], bool] | None] = [None] * len(draws)
        if cache is not False:
            for i, draw in enumerate(draws):
                try:
                    answered[i] = self._cached_request(draw, cache, answer=_not_cached)
                except _NotCached:
                    pass
        missing = [i for i, found in enumerate(answered) if found is None]
        if len(missing) == 1:
            answered[missing[0]] = self._cached_request(draws[missing[0]], cache)
        elif missing:
            responses = self._request_batch([_copy_request(draws[i]) for i in missing])
            if not isinstance(responses, (list, tuple)) or len(responses) != len(missing):
                raise ValueError(f"{self!r} returned {type(responses).__name__} for a batch of {len(missing)} "
                                 f"requests, not a list of {len(missing)} responses")
            for response in responses:  # counted before any check: the backend computed them all
                self._account(response if isinstance(response, Mapping) else {}, cached=False)
            for i, response in zip(missing, responses):
                answered[i] = self._cached_request(draws[i], cache, answer=lambda response=response: response)
        return [found for found in answered if found is not None]

    def _account(self, response: Mapping[str, Any], cached: bool) -> None:
        # The client's own totals, and the current context's (dsp.evaluate counts tokens per example).
        targets = [self.usage] + ([settings.usage] if isinstance(settings.usage, Usage) else [])
        with self._lock:
            for usage in targets:
                usage.add(response.get("usage") or {}, cached, self.prices)

    @property
    def num_requests(self) -> int:
        """Requests that reached the backend (cache hits excluded)."""
        return self.usage.requests

    # -- inspection -------------------------------------------------------------------------------

    def inspect_history(self, n: int = 1, printed: bool = True, color: bool | None = None) -> str | None:
        """Show the last `n` prompts, each followed by its completions (the first in green on a terminal).

        Prints the text and returns None (so a notebook shows it once), or with ``printed=False`` returns
        it without printing. `color` marks the first completion with ANSI green; by default only when it is
        printed to a terminal (a file or a pipe gets plain text; so does the returned text).

        >>> class Echo(LM):
        ...     def _request(self, request):
        ...         return {"choices": [{"text": " ok", "finish_reason": "stop"}]}
        >>> lm = Echo("echo")
        >>> _ = lm("Q: hi\\nA:", cache=False)
        >>> lm.inspect_history(printed=False)
        'Q: hi\\nA: ok'
        >>> lm.inspect_history(printed=False, color=True)
        'Q: hi\\nA:\\x1b[32m ok\\x1b[0m'
        """
        if color is None:
            color = printed and sys.stdout is not None and sys.stdout.isatty()
        green, reset = ("\x1b[32m", "\x1b[0m") if color else ("", "")
        blocks = []
        for entry in list(self.history)[-n:]:
            shown = entry["completions"]
            first = shown[0] if shown else ""
            rest = f"\n\n\t(and {len(shown) - 1} other completions)" if len(shown) > 1 else ""
            blocks.append(f"{entry['prompt']}{green}{first}{reset}{rest}")
        text = "\n\n\n".join(blocks)
        if not printed:
            return text
        print("\n\n" + text + "\n\n")
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"
