"""SEARCH: retrieve passages for a query, fuse the results of several queries, rank passages.

>>> import dsp
>>> rm = dsp.BM25([{"title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."},
...                {"title": "Paris", "text": "Paris is the capital of France."}])
>>> with dsp.settings.context(rm=rm, cache=False):
...     dsp.retrieve("Who wrote Hamlet?", k=1)
...     dsp.fused_retrieval(["Hamlet author", "Who wrote Hamlet?"], k=1)
['Hamlet | Hamlet is a tragedy by William Shakespeare.']
['Hamlet | Hamlet is a tragedy by William Shakespeare.']
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..clients.fusion import FUSIONS
from ..clients.fusion import fuse as fuse_lists
from ..clients.rm import check_count
from ..settings import settings

__all__ = ["retrieve", "fused_retrieval", "retrieveEnsemble", "rank", "FUSIONS"]


def _current_rm() -> Any:
    rm = settings.rm
    if rm is None:
        raise RuntimeError("no RM is configured: call dsp.settings.configure(rm=...) first")
    return rm


def retrieve(query: str, k: int, **params: Any) -> list[str]:
    """The texts of the top-`k` passages for `query` from `settings.rm` (``"Title | text"`` form)."""
    return [p["long_text"] for p in _current_rm()(query, k=k, **params)]


def fused_retrieval(queries: Sequence[str], k: int, fuse: str = "combsum", by_prob: bool = True,
                    depth: int | None = None, return_passages: bool = False, **params: Any) -> list[Any]:
    """Search every query for `depth` (default 3k) passages and fuse them into one top-`k` list.

    CombSUM (default) adds each passage's probability (or its score, with by_prob=False) over the
    queries; "rrf" adds 1/(60 + rank). Passages are identified by text; empty queries are skipped and
    repeated queries count again, as in DSP v1's retrieveEnsemble. Returns texts, or Passage records
    with the fused `score` when `return_passages`.

    >>> fused_retrieval(["Hamlet author"], k=-3)
    Traceback (most recent call last):
    ValueError: k must be positive, got -3
    """
    # The caller's own k and depth, before k is scaled into a depth: an error must name what was passed.
    check_count(k)
    if depth is not None:
        check_count(depth, "depth")
    if fuse not in FUSIONS:
        raise ValueError(f"unknown fusion {fuse!r}; choose one of {', '.join(FUSIONS)}")
    if isinstance(queries, str) or not isinstance(queries, Sequence):
        raise TypeError(f"fused_retrieval needs a list of queries, got {type(queries).__name__}")
    queries = [q for q in queries if q]
    if not queries:
        raise ValueError("fused_retrieval got no non-empty query")
    rm = _current_rm()
    depth = 3 * k if depth is None else depth
    fused = fuse_lists((rm(query, k=depth, **params) for query in queries), k, fuse, by_prob)
    return fused if return_passages else [p["long_text"] for p in fused]


retrieveEnsemble = fused_retrieval  # DSP v1's name


def rank(query: str, passages: Sequence[str]) -> list[str]:
    """`passages` reordered by relevance to `query`, most relevant first.

    Uses `settings.reranker` (a function `(query, passages) -> scores`) when set, otherwise the cosine
    similarity of `settings.vectorizer` embeddings.
    """
    passages = list(passages)
    if not passages:
        return []
    if settings.reranker is not None:
        scores = np.asarray(settings.reranker(query, passages), dtype=np.float64)
    elif settings.vectorizer is not None:
        vectors = np.asarray(settings.vectorizer([query, *passages]), dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1)
        norms[norms == 0] = 1.0
        vectors = vectors / norms[:, None]
        scores = vectors[1:] @ vectors[0]
    else:
        raise RuntimeError("dsp.rank needs settings.reranker or settings.vectorizer to be configured")
    if scores.shape != (len(passages),):
        raise ValueError(f"the reranker returned {scores.shape} scores for {len(passages)} passages")
    order = sorted(range(len(passages)), key=lambda i: -scores[i])  # stable: ties keep input order
    return [passages[i] for i in order]
