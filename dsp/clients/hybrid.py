"""Hybrid retrieval: one query searched by several RMs (e.g. BM25 and a dense index), their lists fused.

The lists are fused as `dsp.fused_retrieval` fuses the lists of several queries: CombSUM over each
passage's probability (each RM's softmax over its own scores, so lexical and dense scores on different
scales add up fairly), or reciprocal-rank fusion. Each RM's own search goes through its cache; the
fused answer is cached too.

>>> from dsp.clients.bm25 import BM25
>>> from dsp.clients.dense import DenseRM
>>> from dsp.clients.vectorizers import HashingVectorizer
>>> passages = [{"id": "h", "title": "Hamlet", "text": "A tragedy by William Shakespeare."},
...             {"id": "p", "title": "Paris", "text": "The capital of France."}]
>>> rm = HybridRM([BM25(passages), DenseRM(passages, HashingVectorizer(dim=256))])
>>> [(p.id, round(p.prob, 3)) for p in rm("who wrote hamlet", k=2, cache=False)]
[('h', 0.561), ('p', 0.439)]

Over a passages file with E5, or with a remote RM (a model and a server, so shown, not run)::

    rm = HybridRM.from_passages("passages.jsonl.gz")    # BM25 + E5 dense, the file read once
    rm = HybridRM([dsp.BM25("passages.jsonl.gz"), dsp.ColBERTv2(url)])

Spec: ``hybrid:passages.jsonl.gz`` (BM25 and an E5 dense index over the same passages), option
``fuse=rrf``.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from .fusion import FUSIONS, fuse
from .rm import RM, check_count

__all__ = ["HybridRM"]


class HybridRM(RM):
    """Searches every RM in `rms` for `depth` passages (default 3k) and fuses them into the top k."""

    provider = "hybrid"

    def __init__(self, rms: Sequence[RM], fuse: str = "combsum", depth: int | None = None) -> None:
        super().__init__()
        rms = list(rms)
        if len(rms) < 2 or not all(isinstance(rm, RM) for rm in rms):
            raise TypeError(f"HybridRM fuses two or more RMs, got {rms!r:.200}")
        if fuse not in FUSIONS:
            raise ValueError(f"unknown fusion {fuse!r}; choose one of {', '.join(FUSIONS)}")
        if depth is not None:
            check_count(depth, "depth")
        self.rms, self.fuse, self.depth = rms, fuse, depth

    @classmethod
    def from_passages(cls, path: str | os.PathLike, fuse: str = "combsum") -> "HybridRM":
        """BM25 and a dense index (the default vectorizer) over the passages file `path`, which is read
        and parsed once for both (the ``hybrid:`` spec)."""
        from ..datasets.corpus import read_passages
        from .bm25 import BM25
        from .dense import DenseRM

        passages = read_passages(path)
        return cls([BM25(passages, source=str(path)), DenseRM(passages, source=str(path))], fuse=fuse)

    def cache_identity(self) -> dict[str, Any]:
        return {"provider": self.provider, "rms": [rm.cache_identity() for rm in self.rms], "fuse": self.fuse,
                "depth": self.depth}

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        depth = self.depth or 3 * k
        fused = fuse((rm(query, k=depth, **params) for rm in self.rms), k, self.fuse)
        # The fused score is the passage's score here; its probability is recomputed from it by the base.
        return [{key: value for key, value in p.items() if key not in ("prob", "rank")} for p in fused]

    def __repr__(self) -> str:
        return f"HybridRM({', '.join(repr(rm) for rm in self.rms)}, fuse={self.fuse!r})"
