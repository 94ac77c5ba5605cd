"""Fusing ranked passage lists into one: CombSUM over passage probabilities (DSP's default), or RRF.

Used by `dsp.fused_retrieval` (one RM, several queries) and `HybridRM` (one query, several RMs), so a
passage found by several lists is scored the same way in both.

>>> a = [Passage(long_text="x", prob=0.6, rank=1), Passage(long_text="y", prob=0.4, rank=2)]
>>> b = [Passage(long_text="y", prob=0.9, rank=1)]
>>> [(p.long_text, round(p.score, 2)) for p in fuse([a, b], k=2)]
[('y', 1.3), ('x', 0.6)]
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from .rm import Passage

__all__ = ["fuse", "FUSIONS", "RRF_K"]

RRF_K = 60  # the constant of reciprocal-rank fusion (Cormack et al., 2009)


def _combsum(passage: Passage, by_prob: bool) -> float:
    return float(passage["prob"] if by_prob else passage.get("score", 0.0))


def _rrf(passage: Passage, by_prob: bool) -> float:
    return 1.0 / (RRF_K + passage["rank"])


FUSIONS: dict[str, Callable[[Passage, bool], float]] = {"combsum": _combsum, "rrf": _rrf}


def fuse(results: Iterable[Sequence[Passage]], k: int, method: str = "combsum", by_prob: bool = True) -> list[Passage]:
    """The top `k` of the passages of `results` (lists of passages), each passage (identified by its
    long text) scored by the sum of its contributions: its probability (or score, with by_prob=False)
    for "combsum", 1/(60 + rank) for "rrf". Returns Passage records with the fused `score` and `rank`."""
    if method not in FUSIONS:
        raise ValueError(f"unknown fusion {method!r}; choose one of {', '.join(FUSIONS)}")
    contribution = FUSIONS[method]
    scores: dict[str, float] = {}
    records: dict[str, Passage] = {}
    for passages in results:
        for passage in passages:
            text = passage["long_text"]
            scores[text] = scores.get(text, 0.0) + contribution(passage, by_prob)
            records.setdefault(text, passage)
    ranked = sorted(((score, text) for text, score in scores.items()), reverse=True)[:k]
    return [Passage(records[text], score=score, rank=i) for i, (score, text) in enumerate(ranked, start=1)]
