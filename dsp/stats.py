"""Statistics for reported figures, in one place: intervals of a score and paired tests of two systems.

- `wilson_interval`: the Wilson score interval of a proportion (right/wrong metrics such as EM);
- `mean_interval`: the normal-approximation interval of a mean, kept inside the scores' range (F1-type
  metrics, where a proportion's interval does not apply);
- `score_interval`: whichever of the two fits a list of per-example scores;
- `mcnemar_exact` and `paired`: the exact McNemar test of two systems scored on the same examples (the
  sign test for graded scores).

`dsp.evaluate` results, the long-context suites and RESULTS.md all use these.

>>> [round(x, 3) for x in wilson_interval(50, 100)]
[0.404, 0.596]
>>> paired({"q1": 1.0, "q2": 1.0, "q3": 0.0}, {"q1": 0.0, "q2": 1.0, "q3": 0.0})
{'n': 3, 'a_only': 1, 'b_only': 0, 'p': 1.0}
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

__all__ = ["wilson_interval", "mean_interval", "score_interval", "mcnemar_exact", "sign_test_greater", "paired"]


def wilson_interval(correct: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default), as fractions; unlike the normal
    approximation it stays inside [0, 1] and is not empty at 0 or n correct.

    >>> [round(x, 3) for x in wilson_interval(0, 20)]
    [0.0, 0.161]
    >>> wilson_interval(0, 0)
    (0.0, 0.0)
    """
    if n <= 0:
        return (0.0, 0.0)
    p = correct / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """The normal-approximation interval of the mean of `values` (sample standard deviation), clipped to
    the values' own range so it never claims a score no example could have.

    >>> [round(x, 3) for x in mean_interval([0.5, 0.0, 1.0, 0.5])]
    [0.1, 0.9]
    >>> mean_interval([])
    (0.0, 0.0)
    """
    n = len(values)
    if n == 0:
        return (0.0, 0.0)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / max(n - 1, 1)
    half = z * math.sqrt(var / n)
    return (max(min(values), mean - half), min(max(values), mean + half))


def score_interval(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """The 95% interval of a mean score (as fractions): Wilson's when every score is 0 or 1, else the
    clipped normal one.

    >>> [round(x, 3) for x in score_interval([1.0, 0.0, 0.0, 0.0])]
    [0.046, 0.699]
    """
    if all(v in (0.0, 1.0) for v in values):
        return wilson_interval(sum(values), len(values), z)
    return mean_interval(values, z)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value for paired right/wrong outcomes: `a_only` items right under A
    only, `b_only` under B only (the items both got right or wrong carry no information).

    >>> round(mcnemar_exact(16, 1), 4), mcnemar_exact(3, 3)
    (0.0003, 1.0)
    """
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def sign_test_greater(a_only: int, b_only: int) -> float:
    """One-sided exact sign test (McNemar's, for right/wrong outcomes): the chance of A scoring higher on
    at least `a_only` of the `a_only + b_only` items the two told apart, were neither better.

    >>> round(sign_test_greater(10, 0), 5), sign_test_greater(0, 4), sign_test_greater(0, 0)
    (0.00098, 1.0, 1.0)
    """
    n = a_only + b_only
    if n == 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) for i in range(a_only, n + 1)) / 2 ** n)


def paired(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float | int]:
    """System A against system B on the examples both were scored on ({example id: score}): on how many
    each scored higher than the other, and the exact p-value of that split. With 0/1 scores (right or
    wrong) it is the exact McNemar test; with graded scores (F1), the exact sign test.

    >>> paired({"x": 1.0, "y": 0.0}, {"x": 1.0, "z": 1.0})
    {'n': 1, 'a_only': 0, 'b_only': 0, 'p': 1.0}
    >>> paired({"x": 0.5, "y": 0.2}, {"x": 0.4, "y": 0.2})
    {'n': 2, 'a_only': 1, 'b_only': 0, 'p': 1.0}
    """
    shared = a.keys() & b.keys()
    a_only = sum(1 for key in shared if a[key] > b[key])
    b_only = sum(1 for key in shared if b[key] > a[key])
    return {"n": len(shared), "a_only": a_only, "b_only": b_only, "p": mcnemar_exact(a_only, b_only)}
