"""DEMONSTRATE: choose and bootstrap demonstrations from training examples.

- `sample(train, k)`: k examples in a seeded shuffle (DSP v1: seed = settings.branch_idx or 0).
- `annotate(*transformations)(train, k)`: run the program's own transformations on training examples
  and keep those that succeed (return an Example, not None) as augmented demos with their stage records.
- `knn(train)`: the nearest training examples to an input, by `settings.vectorizer`.
- `crossval(train, n, k, evaluate)`: the best of n sampled k-demo sets on the held-out rest.
- `all_but(train, x)`: the training set without x (or anything sharing its question or history).

>>> [e.question for e in sample([Example(question=str(i)) for i in range(6)], k=3)]
['4', '2', '1']
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..example import Example
from ..settings import settings
from ..utils import check_nonnegative_int
from .predict import _as_example

__all__ = ["sample", "annotate", "knn", "crossval", "all_but"]


def _check_train(train: Any) -> list[Example]:
    if isinstance(train, (str, bytes)) or not isinstance(train, Iterable):
        raise TypeError(f"a training set is a list of Examples, got {type(train).__name__}")
    return [_as_example(e) for e in train]


def _check_k(k: Any, name: str = "k") -> int:
    check_nonnegative_int(k, name)
    return k


def sample(train: Sequence[Example], k: int, seed: int | None = None) -> list[Example]:
    """The first k of a copy of `train` shuffled by `random.Random(seed)`; seed defaults to
    `settings.branch_idx or 0`, so every call in the same branch draws the same demos (DSP v1)."""
    k = _check_k(k)
    shuffled = [Example(e) for e in _check_train(train)]
    if seed is None:
        seed = settings.branch_idx if isinstance(settings.branch_idx, int) else 0
    random.Random(seed).shuffle(shuffled)
    return shuffled[:k]


def annotate(*transformations: Callable[[Example], Example | None]) -> Callable[..., list[Example]]:
    """Bootstrap demonstrations: `annotate(f, g)(train, k=None, return_all=False)`.

    Each training example goes through the transformations in turn; one that comes out as an Example
    (not None) is kept with `augmented=True`, carrying every stage record the pipeline wrote on it.
    Once k have succeeded the rest are not attempted. With `return_all`, the failures (and the
    unattempted) follow as raw demos with `augmented=False`.
    """
    for f in transformations:
        if not callable(f):
            raise TypeError(f"annotate takes transformations (callables), got {type(f).__name__}")

    def do_annotate(train: Sequence[Example], k: int | None = None, return_all: bool = False) -> list[Example]:
        if k is not None:
            _check_k(k)
        augmented, raw = [], []
        for original in _check_train(train):
            result: Example | None = None
            if k is None or len(augmented) < k:
                result = original
                for f in transformations:
                    result = f(result)
                    if result is None:
                        break
                    if not isinstance(result, dict):
                        raise TypeError(f"transformation {getattr(f, '__name__', f)!r} returned "
                                        f"{type(result).__name__}; a transformation returns an Example or None")
            if result is not None:
                augmented.append(_as_example(result).copy(augmented=True))
            else:
                raw.append(original.copy(augmented=False))
        return augmented + raw if return_all else augmented

    return do_annotate


def all_but(train: Sequence[Example], x: Example) -> list[Example]:
    """The training examples that share neither question nor any history turn with `x` (train order)."""
    def keys(e: Example) -> set[Any]:
        return {*e.get("history", []), e.get("question")}

    excluded = keys(x)
    return [y for y in _check_train(train) if not keys(y) & excluded]


def knn(train: Sequence[Example], cast: Callable[[Example], str] | None = None) -> Callable[[Example, int], list[Example]]:
    """A function `(example, k) -> the k nearest training examples`, by `settings.vectorizer`.

    `cast` turns an example into the text to embed (default: its question). Ties keep train order.

    >>> import dsp
    >>> train = [dsp.Example(question=q) for q in
    ...          ("Who wrote Hamlet?", "What is the capital of France?", "Who painted the Mona Lisa?")]
    >>> with dsp.settings.context(vectorizer=dsp.HashingVectorizer()):
    ...     nearest = dsp.knn(train)
    ...     [demo.question for demo in nearest(dsp.Example(question="Who wrote Macbeth?"), k=1)]
    ['Who wrote Hamlet?']
    """
    import faiss  # imported here: only knn needs it

    vectorizer = settings.vectorizer
    if vectorizer is None:
        raise RuntimeError("dsp.knn needs a vectorizer: dsp.settings.configure(vectorizer=dsp.HashingVectorizer())")
    cast = cast or (lambda e: e.question)
    examples = _check_train(train)
    if not examples:
        raise ValueError("dsp.knn needs a non-empty training set")
    vectors = np.ascontiguousarray(vectorizer([cast(e) for e in examples]), dtype=np.float32)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)

    def nearest(example: Example, k: int) -> list[Example]:
        k = min(_check_k(k), len(examples))
        if k == 0:
            return []
        query = np.ascontiguousarray(vectorizer([cast(_as_example(example))]), dtype=np.float32)
        scores, ids = index.search(query, len(examples))
        # faiss orders equal scores arbitrarily; re-sort so ties keep train order (deterministic).
        order = sorted(zip(scores[0].tolist(), ids[0].tolist()), key=lambda s: (-round(s[0], 6), s[1]))
        return [examples[i].copy() for _, i in order[:k]]

    return nearest


def crossval(train: Sequence[Example], n: int, k: int,
             evaluate: Callable[[list[Example], list[Example]], float], seed: int = 0) -> list[Example]:
    """The best of `n` sampled `k`-demo sets, each scored by `evaluate(demos, heldout)` on the rest.

    Trial i samples with seed `seed + i`; the first best set wins ties.
    """
    examples = _check_train(train)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"crossval needs n >= 1 trials, got {n!r}")
    if _check_k(k) >= len(examples):
        raise ValueError(f"crossval needs k < len(train) to hold examples out (k={k}, {len(examples)} examples)")
    best, best_score = None, -float("inf")
    for trial in range(n):
        order = list(range(len(examples)))
        random.Random(seed + trial).shuffle(order)
        demos = [examples[i].copy() for i in order[:k]]
        heldout = [examples[i].copy() for i in order[k:]]
        score = float(evaluate(demos, heldout))
        if score > best_score:
            best, best_score = demos, score
    return best
