"""The LM interface: `lm(prompt, **params) -> list[str]`, with the cache, history and usage written once.

A concrete client says who it is (`cache_identity`), which parameters a request carries
(`build_request`) and how one request is answered (`_request`, returning
``{"choices": [{"text", "finish_reason"}, ...], "usage": {...}}``). Everything else lives here:

- every request goes through the disk cache (key = the client's identity + the whole request);
- n>1 on a backend that samples one completion at a time becomes n seeded draws, each cached on its
  own, so a rerun reproduces the same samples and asking for more reuses the ones already drawn;
- completions cut by the length limit are dropped when at least one finished (DSP v1 behaviour);
- `history` keeps the last calls (bounded) and `usage` sums tokens of real (uncached) requests.

>>> class Echo(LM):
...     provider = "echo"
...     def _request(self, request):
...         return {"choices": [{"text": " " + request["prompt"][::-1], "finish_reason": "stop"}]}
>>> Echo("echo-1")("abc", cache=False)
[' cba']
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from .. import cache as _cache
from ..settings import settings

__all__ = ["LM", "Usage", "HISTORY_SIZE"]

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
        """Count one response: its tokens if it was a real request, else one cache hit."""
        if cached:
            self.cached_requests += 1
            return
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if prices:
            self.cost += (prompt_tokens * prices[0] + completion_tokens * prices[1]) / 1e6


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
    # USD per 1M (prompt, completion) tokens, when known; used for Usage.cost.
    prices: tuple[float, float] | None = None

    def __init__(self, model: str, **params: Any) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"an LM needs a model name, got {model!r}")
        self.model = model
        self.kwargs: dict[str, Any] = dict(params)  # default generation parameters (DSP v1: lm.kwargs)
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_SIZE)
        self.usage = Usage()
        self._lock = threading.Lock()

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
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        request = self.build_request(prompt, **params)
        n = request.get("n", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        if n > 1 and not self.native_n:
            response, cached = self._draw_each(request, n, cache)
        else:
            response, cached = self._cached_request(request, cache)
        choices = response.get("choices") or []
        if not choices:
            raise ValueError(f"{self!r} returned no completions for a prompt ending {prompt[-80:]!r}")
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

    def _cached_request(self, request: dict[str, Any], cache: bool | None) -> tuple[dict[str, Any], bool]:
        key_request = {"kind": "lm", **self.cache_identity(), "request": request}

        def compute() -> dict[str, Any]:
            response = self._request(_copy_request(request))
            self._account(response, cached=False)
            return response

        if cache is False:
            return compute(), False
        response, cached = _cache.cached_call(key_request, compute)
        if cached:
            self._account(response, cached=True)
        return response, cached

    def _draw_each(self, request: dict[str, Any], n: int, cache: bool | None) -> tuple[dict[str, Any], bool]:
        """n>1 as n single draws seeded seed, seed+1, ...: each cached alone, so reruns reproduce them."""
        seed = request.get("seed") or 0
        choices, usage, all_cached = [], {"prompt_tokens": 0, "completion_tokens": 0}, True
        for i in range(n):
            one, cached = self._cached_request({**request, "n": 1, "seed": seed + i}, cache)
            all_cached &= cached
            choices.extend(one.get("choices") or [])
            for key in usage:
                usage[key] += (one.get("usage") or {}).get(key, 0)
        return {"choices": choices, "usage": usage}, all_cached

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

    def inspect_history(self, n: int = 1, printed: bool = True) -> str:
        """Show the last `n` prompts, each followed by its completions; returns the text shown."""
        blocks = []
        for entry in list(self.history)[-n:]:
            shown = entry["completions"]
            first = shown[0] if shown else ""
            rest = f"\n\n\t(and {len(shown) - 1} other completions)" if len(shown) > 1 else ""
            blocks.append(f"{entry['prompt']}\x1b[32m{first}\x1b[0m{rest}")
        text = "\n\n\n".join(blocks)
        if printed:
            print("\n\n" + text + "\n\n")
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"
