"""Small helpers DSP v1 programs use as `dsp.utils.*`.

>>> deduplicate(["a", "b", "a"])
['a', 'b']
"""

from __future__ import annotations

from typing import Hashable, Iterable, TypeVar

__all__ = ["deduplicate"]

T = TypeVar("T", bound=Hashable)


def deduplicate(seq: Iterable[T]) -> list[T]:
    """Drop exact repeats, keeping first occurrences in order."""
    seen: set[T] = set()
    return [x for x in seq if not (x in seen or seen.add(x))]
