"""One completion being generated: its sampler, its tokens, its text, stop strings, log-probabilities.

The scheduler (`scheduler.py`) decides when a `Draw` is decoded and sampled; this module decides what a
sampled token means for it (end of generation, a stop string, the length limit) and builds its
response, exactly as a one-request-at-a-time loop does: the same tokens give the same response.

>>> draw = Draw({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 0,
...              "max_tokens": 4, "stop": ["\\n"], "logprobs": None}, n_prompt=12)
>>> draw.position, draw.stops, draw.finished
(12, ['\\n'], False)
"""

from __future__ import annotations

from typing import Any, Mapping

from .native import NativeModel

__all__ = ["Draw", "top_logprobs"]


def top_logprobs(native: NativeModel, logits: Any, token: int, k: int) -> tuple[float, dict[str, float]]:
    """(log P(token), {text: log P} of the k most likely tokens) under the model's own distribution.

    It reads only the vocabulary size and token pieces of `native`, so a stand-in shows it:

    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> vocab = [b" Paris", b" The", b" Rome"]
    >>> native = SimpleNamespace(n_vocab=3, piece=lambda i: vocab[i])
    >>> logprob, best = top_logprobs(native, np.log(np.array([0.7, 0.2, 0.1], dtype=np.float32)), 2, 2)
    >>> round(logprob, 3), {text: round(value, 3) for text, value in best.items()}
    (-2.303, {' Paris': -0.357, ' The': -1.609})
    """
    import numpy as np
    values = logits.astype(np.float64)
    top = values.max()
    logprobs = values - (top + np.log(np.exp(values - top).sum()))
    best: dict[str, float] = {}
    if k > 0:
        ids = np.argpartition(-logprobs, k - 1)[:k] if k < native.n_vocab else np.arange(native.n_vocab)
        for i in sorted(ids.tolist(), key=lambda i: -logprobs[i]):
            text = native.piece(i).decode("utf-8", errors="replace")
            best.setdefault(text, float(logprobs[i]))
    return float(logprobs[token]), best


class Draw:
    """One single-draw request in flight: where it is decoded (`stream`, `position`), its sampler, and
    what it has produced. `take` adds a sampled token; `response` is the finished answer.

    For example (`native` is a loaded model, so not run as a doctest)::

        draw = Draw(request, n_prompt=len(ids))
        draw.begin(native, stream=3)
        draw.take(native, native.sample_from(draw.chain, prompt_logits), prompt_logits)   # True
    """

    def __init__(self, request: Mapping[str, Any], n_prompt: int) -> None:
        self.temperature: float = request["temperature"]
        self.top_k: int = request["top_k"]
        self.top_p: float = request["top_p"]
        self.min_p: float = request["min_p"]
        self.seed: int = request["seed"]
        self.max_tokens: int = request["max_tokens"]
        self.stops: list[str] = list(request["stop"])
        self.k: int | None = request["logprobs"]
        self.longest_stop = max((len(s) for s in self.stops), default=0)
        self.n_prompt = n_prompt
        self.chain: Any = None
        self.stream: int | None = None
        self.owner: Any = None  # whoever scheduled it (the scheduler's job)
        self.response: dict[str, Any] | None = None
        self.reset()

    def reset(self) -> None:
        """Back to nothing generated (a draw restarted after an interrupt gives the same answer)."""
        self.position = self.n_prompt  # where the last sampled token will be decoded
        self.tokens: list[int] = []
        self.starts: list[int] = []  # character offset where each kept token's text starts
        self.token_logprobs: list[float] = []
        self.top_logprobs: list[dict[str, float]] = []
        self.text, self.raw, self.finish = "", b"", "length"
        self.finished = False
        self.prompt_logits: Any = None  # the first token's source, until it is sampled

    def begin(self, native: NativeModel, stream: int) -> None:
        """Take KV stream `stream` (which holds the prompt) and a fresh sampler seeded for this draw."""
        self.stream = stream
        self.chain = native.new_sampler(self.temperature, self.top_k, self.top_p, self.min_p, self.seed)

    def end(self, native: NativeModel) -> None:
        """Give back the sampler (the scheduler frees the stream)."""
        chain, self.chain, self.stream = self.chain, None, None
        if chain is not None:
            native.free_sampler(chain)

    def take(self, native: NativeModel, token: int, logits: Any) -> bool:
        """Add a token sampled from `logits`; True when the draw goes on (the token is decoded next),
        False when it has finished (end of generation, a stop string, or max_tokens)."""
        if native.is_eog(token):
            self.finish = "stop"
            return self._done(native)
        if self.k is not None:
            chosen, best = top_logprobs(native, logits, token, self.k)
            self.token_logprobs.append(chosen)
            self.top_logprobs.append(best)
        self.tokens.append(token)
        self.starts.append(len(self.text))
        self.raw += native.piece(token)
        seen = len(self.text)
        self.text = self.raw.decode("utf-8", errors="ignore")  # an unfinished character waits for its bytes
        if self.stops:
            # Only the new text (plus a stop's length of overlap) can hold a new match.
            window = max(0, seen - self.longest_stop)
            hits = [i for i in (self.text.find(s, window) for s in self.stops) if i >= 0]
            if hits:
                self.text, self.finish = self.text[:min(hits)], "stop"
                return self._done(native)
        if len(self.tokens) >= self.max_tokens:
            return self._done(native)
        return True

    def _done(self, native: NativeModel) -> bool:
        choice: dict[str, Any] = {"text": self.text, "finish_reason": self.finish}
        if self.k is not None:
            tokens = self.tokens
            kept = sum(1 for s in self.starts if s < len(self.text)) if self.finish == "stop" and self.stops \
                else len(tokens)
            choice["logprobs"] = {
                "tokens": [native.piece(t).decode("utf-8", errors="replace") for t in tokens[:kept]],
                "token_ids": tokens[:kept],
                "token_logprobs": self.token_logprobs[:kept],
                "top_logprobs": self.top_logprobs[:kept],
            }
        self.response = {"choices": [choice],
                         "usage": {"prompt_tokens": self.n_prompt, "completion_tokens": len(self.tokens)}}
        self.finished = True
        return False
