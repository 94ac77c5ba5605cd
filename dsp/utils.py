"""Small helpers DSP v1 programs use as `dsp.utils.*`, and the one check of integer and number arguments.

>>> deduplicate(["a", "b", "a"])
['a', 'b']
>>> check_positive_int(0, "threads")
Traceback (most recent call last):
ValueError: threads must be a positive integer, got 0
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, TypeVar

__all__ = ["deduplicate", "is_int", "is_number", "check_positive_int", "check_nonnegative_int"]

T = TypeVar("T", bound=Hashable)


def deduplicate(seq: Iterable[T]) -> list[T]:
    """Drop exact repeats, keeping first occurrences in order."""
    seen: set[T] = set()
    return [x for x in seq if not (x in seen or seen.add(x))]


def is_int(value: Any) -> bool:
    """True for an integer that is not a bool (True is an int to Python, never a count to us).

    >>> is_int(3), is_int(True), is_int(3.0)
    (True, False, False)
    """
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """True for an int or a float that is not a bool (finiteness is the caller's to check).

    >>> is_number(0.5), is_number(2), is_number(False), is_number("1")
    (True, True, False, False)
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive_int(value: Any, name: str, *, optional: bool = False) -> None:
    """Raise ValueError naming `name` and the value unless `value` is an integer >= 1 (or None, if `optional`).

    >>> check_positive_int(None, "n", optional=True)
    >>> check_positive_int(True, "n", optional=True)
    Traceback (most recent call last):
    ValueError: n must be a positive integer or None, got True
    """
    if optional and value is None:
        return
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if optional else ''}, got {value!r}")


def check_nonnegative_int(value: Any, name: str, *, optional: bool = False) -> None:
    """Raise ValueError naming `name` and the value unless `value` is an integer >= 0 (or None, if `optional`).

    >>> check_nonnegative_int(-1, "skip")
    Traceback (most recent call last):
    ValueError: skip must be a non-negative integer, got -1
    """
    if optional and value is None:
        return
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer{' or None' if optional else ''}, got {value!r}")
