"""Vectorizers: text -> vector functions for dsp.knn, dsp.rank and dense retrieval.

A vectorizer is called on a list of texts and returns a float32 array of shape (len(texts), dim) whose
rows are L2-normalised, so inner product is cosine similarity.

>>> v = HashingVectorizer(dim=64)
>>> v(["a cat", "a cat"]).shape
(2, 64)
"""

from __future__ import annotations

import re
from hashlib import blake2b
from typing import Sequence

import numpy as np

__all__ = ["Vectorizer", "HashingVectorizer", "normalize_rows"]

_WORD = re.compile(r"\w+", re.UNICODE)


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


class Vectorizer:
    """Base class: subclasses implement `_embed(texts) -> array (n, dim)`; the base validates and normalises."""

    provider = "vectorizer"
    dim = 0

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise TypeError(f"a vectorizer takes a list of texts, got {type(texts).__name__}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {i} to embed is a {type(text).__name__}, not text: {text!r:.80}")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalize_rows(self._embed(list(texts)))

    def _embed(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement _embed(texts)")


class HashingVectorizer(Vectorizer):
    """A deterministic bag-of-words embedding (signed feature hashing of lower-cased words).

    No model, no randomness, the same vectors in every process: meant for tests and for knn over
    short questions where word overlap is a fair proxy.
    """

    provider = "hashing"

    def __init__(self, dim: int = 1024) -> None:
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.dim = dim

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return out

    def __repr__(self) -> str:
        return f"HashingVectorizer(dim={self.dim})"
