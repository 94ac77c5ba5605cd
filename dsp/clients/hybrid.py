"""Hybrid retrieval: one query searched by several RMs (e.g. BM25 and a dense index), their lists fused.

The lists are fused as `dsp.fused_retrieval` fuses the lists of several queries: CombSUM over each
passage's probability (each RM's softmax over its own scores, so lexical and dense scores on different
scales add up fairly), or reciprocal-rank fusion. Each RM's own search goes through its cache; the
fused answer is cached too.

>>> rm = HybridRM([dsp.BM25("passages.jsonl.gz"), dsp.DenseRM("passages.jsonl.gz")])   # doctest: +SKIP
>>> rm("who wrote hamlet", k=5)                                                         # doctest: +SKIP

Spec: ``hybrid:passages.jsonl.gz`` (BM25 and an E5 dense index over the same passages), option
``fuse=rrf``.
"""

from __future__ import annotations

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
