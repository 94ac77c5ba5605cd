"""The paper's evaluation protocol: k-shot training sets sampled per seed, a downsampled dev set.

DSP (§3) samples 16 training examples per seed, runs 5 seeds and reports the mean; dev sets are
downsampled for cost. Both draws are seeded and independent of each other, so a run is reproducible.

>>> pool = [Example(question=str(i), answer=[str(i)]) for i in range(100)]
>>> shots = few_shot_train(pool, k=16, seeds=range(5))
>>> [len(shots[s]) for s in range(5)]
[16, 16, 16, 16, 16]
>>> len(downsample(pool, 30)) == 30 and downsample(pool, 30) == downsample(pool, 30)
True
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

from ..example import Example
from ..utils import check_nonnegative_int, check_positive_int

__all__ = ["few_shot_train", "downsample", "sample_indices", "draw_order", "split_pool"]

PAPER_SHOTS = 16
PAPER_SEEDS = (0, 1, 2, 3, 4)


def few_shot_train(pool: Sequence[Example], k: int = PAPER_SHOTS, seeds: Iterable[int] = PAPER_SEEDS) -> dict[int, list[Example]]:
    """For each seed, k training examples drawn without replacement from `pool` (seeded shuffle)."""
    pool = list(pool)
    check_nonnegative_int(k, "k (training examples per seed)")
    if k > len(pool):
        raise ValueError(f"cannot draw {k} training examples from a pool of {len(pool)}")
    out = {}
    for seed in seeds:
        order = list(range(len(pool)))
        random.Random(f"train-{seed}").shuffle(order)
        out[seed] = [Example(pool[i]) for i in order[:k]]
    return out


def downsample(dev: Sequence[Example], n: int | None, seed: int = 0) -> list[Example]:
    """n dev examples chosen by a seeded draw, kept in their original order (all of them if n is None)."""
    dev = list(dev)
    return [dev[i] for i in sample_indices(len(dev), n, seed)]


def sample_indices(total: int, n: int | None, seed: int = 0) -> list[int]:
    """The positions `downsample` keeps of a list of `total` examples (sorted; all of them if n is None).

    >>> sample_indices(5, None), len(sample_indices(100, 30, 1)), sample_indices(100, 30) == sample_indices(100, 30)
    ([0, 1, 2, 3, 4], 30, True)
    """
    check_positive_int(n, "n (dev examples)", optional=True)
    if n is None or n >= total:
        return list(range(total))
    return sorted(random.Random(f"dev-{seed}").sample(range(total), n))


def draw_order(total: int, seed: int = 0) -> list[int]:
    """All `total` positions in the order the seeded draw picks them: the first n are a draw of n, and a
    prefix of the first m > n, so a run over the first n extends to m by resuming (what `sample_indices`,
    kept in list order, cannot give). For n >= 86 of 1,000 (where `random.sample` takes the same path for
    n as for all), the first n are the very positions `sample_indices(total, n, seed)` keeps.

    >>> order = draw_order(1000)
    >>> sorted(order) == list(range(1000)), sorted(order[:500]) == sample_indices(1000, 500)
    (True, True)
    """
    check_nonnegative_int(total, "total (examples)")
    return random.Random(f"dev-{seed}").sample(range(total), total)


def split_pool(examples: Sequence[Example], n_train_pool: int, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """Split one labelled set into a training pool and the rest, for datasets whose train split is not
    available locally (NQ-open and SQuAD dev here): the two never share an example."""
    examples = list(examples)
    if not 0 < n_train_pool < len(examples):
        raise ValueError(f"a training pool of {n_train_pool} does not fit {len(examples)} examples")
    order = list(range(len(examples)))
    random.Random(f"pool-{seed}").shuffle(order)
    pool = set(order[:n_train_pool])
    return ([examples[i] for i in sorted(pool)], [examples[i] for i in range(len(examples)) if i not in pool])
