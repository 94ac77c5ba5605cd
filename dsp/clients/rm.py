"""The RM interface: `rm(query, k) -> list of passages`, with the cache and history written once.

A concrete client provides `cache_identity` and `_search(query, k, **params)`, returning dicts with at
least `text` and `score` (and `id`/`pid`, `title`, `prob` where it has them). The base validates the
call (a query must be valid text, k a positive integer), caches the answer unless it is an error (no
passages, or malformed: it raises and the next call asks again), and completes every passage:
`long_text` (``"Title | text"`` when a title is separate, as ColBERTv2's Wikipedia passages read),
`rank` from 1, and `prob` = softmax of the scores when the backend gives none.

>>> class Two(RM):
...     provider = "two"
...     def _search(self, query, k, **params):
...         return [{"text": "a", "score": 2.0}, {"text": "b", "score": 1.0}][:k]
>>> [round(p.prob, 3) for p in Two()("q", k=2, cache=False)]
[0.731, 0.269]
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from .. import cache as _cache
from ..example import Example
from ..utils import is_int, is_number
from .lm import HISTORY_SIZE, check_text

__all__ = ["RM", "Passage", "softmax", "check_query", "check_queries", "check_count", "index_name",
           "source_name"]


class Passage(Example):
    """A retrieved passage: text, long_text, score, prob, rank, and id/pid/title when known."""


def softmax(scores: Sequence[float]) -> list[float]:
    """Numerically stable softmax (probabilities of a result list, as ColBERTv2's server reports)."""
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def index_name(source: str | os.PathLike | None) -> str | None:
    """The name an RM's index goes by in public (a server's /health): the last part of its path, never
    the path itself; None for passages held in memory (whose source is the word "passages").

    >>> index_name("/srv/indexes/wiki-bm25"), index_name("passages")
    ('wiki-bm25', None)
    """
    if source is None or str(source) == "passages":
        return None
    return Path(source).name or None


def source_name(passages: Any, source: str | None = None) -> str:
    """What an RM's corpus is called in messages and `describe()`: `source` if given (in-memory passages
    read from a file), else the file `passages` names, else "passages".

    >>> source_name("wiki/passages.jsonl.gz"), source_name([{"text": "x"}]), source_name([], "p.jsonl")
    ('wiki/passages.jsonl.gz', 'passages', 'p.jsonl')
    """
    if source is not None:
        return source
    return str(passages) if isinstance(passages, (str, os.PathLike)) else "passages"


def check_count(value: Any, name: str = "k") -> None:
    """Raise a clear error, naming `name` and the caller's value, unless `value` is a positive integer.

    >>> check_count(-3)
    Traceback (most recent call last):
    ValueError: k must be positive, got -3
    """
    if not is_int(value):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}: {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def check_query(query: Any, k: Any) -> None:
    """Raise a clear error for a query that is not text, not valid text or empty, or a k that is not a
    positive integer."""
    if not isinstance(query, str):
        raise TypeError(f"a search query must be text, got {type(query).__name__}: {query!r:.80}")
    check_text(query, "the search query")
    if not query.strip():
        raise ValueError("the search query is empty")
    check_count(k)


def _results_problem(results: Any) -> str | None:
    """What makes a backend's answer an error rather than passages, or None for a good one."""
    if not isinstance(results, list):
        return f"a malformed answer (a {type(results).__name__}, not a list of passages)"
    if not results:
        return "no passages"
    for i, result in enumerate(results):
        if not isinstance(result, Mapping) or not isinstance(result.get("text"), str):
            return f"a malformed answer (result {i} is not a passage with a 'text' string: {str(result)[:120]})"
        try:
            check_text(result["text"], f"passage {i}")
        except ValueError as error:
            return f"a malformed answer ({error})"
        for field in ("score", "prob"):
            value = result.get(field)
            if value is not None and (not is_number(value) or not math.isfinite(value)):
                return f"a malformed answer (passage {i}'s {field} is not a number: {value!r:.80})"
    return None


def check_queries(queries: Any, k: Any) -> list[str]:
    """A batch of queries as a list, each checked like `check_query` (errors name the query's index)."""
    if isinstance(queries, str) or not isinstance(queries, Sequence):
        raise TypeError(f"a batch search takes a list of queries, got {type(queries).__name__}")
    for i, query in enumerate(queries):
        try:
            check_query(query, k)
        except (TypeError, ValueError) as error:
            raise type(error)(f"query {i}: {error}") from None
    return list(queries)


class RM:
    """Base class of retrieval-model clients. Subclasses implement `_search`."""

    provider = "rm"
    spec: str | None = None  # the text spec that rebuilds this client (set by dsp.rm_from_spec)

    def __init__(self) -> None:
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_SIZE)
        self.num_requests = 0  # searches that reached the backend (cache hits excluded)
        self._lock = threading.Lock()

    def cache_identity(self) -> dict[str, Any]:
        return {"provider": self.provider}

    def describe(self) -> dict[str, Any]:
        """What a server tells its clients about this RM: provider, index name (`index_name`: no path)
        and passage count, None where the client does not know them."""
        return {"provider": self.provider, "index": None, "passages": None}

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        raise NotImplementedError(f"{type(self).__name__} must implement _search(query, k)")

    def __call__(self, query: str, k: int = 3, cache: bool | None = None, **params: Any) -> list[Passage]:
        """The top-`k` passages for `query`, best first."""
        check_query(query, k)

        def compute() -> Any:
            with self._lock:
                self.num_requests += 1
            results = self._search(query, k, **params)
            return list(results) if isinstance(results, (tuple, Iterator)) else results

        def check(results: Any) -> None:
            problem = _results_problem(results)
            if problem is not None:
                raise ValueError(f"{self!r} returned {problem} for the query {query!r}")

        if cache is False:
            results, cached = compute(), False
            check(results)
        else:
            request = {"kind": "rm", **self.cache_identity(), "query": query, "k": k, **params}
            # The check runs before the cache stores anything: an error is never an answer for later calls.
            results, cached = _cache.cached_call(request, compute, check=check)
        passages = self._complete(results)
        self.history.append({"query": query, "k": k, "params": params, "passages": passages,
                             "cached": cached, "timestamp": time.time()})
        return passages

    @staticmethod
    def _complete(results: list[dict[str, Any]]) -> list[Passage]:
        probs = None
        if any(r.get("prob") is None for r in results):
            probs = softmax([float(r.get("score") or 0.0) for r in results])  # a score may be None
        passages = []
        for i, result in enumerate(results):
            passage = Passage(result)
            if not isinstance(passage.get("text"), str):
                raise TypeError(f"passage {i} from the RM has no text: {result!r:.120}")
            if "long_text" not in passage:
                title = passage.get("title")
                passage["long_text"] = f"{title} | {passage['text']}" if title else passage["text"]
            passage.setdefault("rank", i + 1)
            if probs is not None:
                passage["prob"] = probs[i]
            passages.append(passage)
        return passages

    def inspect_history(self, n: int = 1, printed: bool = True) -> str:
        """Show the last `n` searches with their passages; returns the text shown."""
        blocks = []
        for entry in list(self.history)[-n:]:
            lines = [f"query: {entry['query']!r} (k={entry['k']}{', cached' if entry['cached'] else ''})"]
            lines += [f"  {p['rank']}. [{p.get('score', 0):.3f}] {p['long_text'][:160]}" for p in entry["passages"]]
            blocks.append("\n".join(lines))
        text = "\n\n".join(blocks)
        if printed:
            print(text)
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
