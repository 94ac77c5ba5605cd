"""What the cache's per-process registries share: a lock a forked child gets fresh, and one object per
live store made on first use.

>>> made = PerStore(lambda store: [store])
>>> store = object()
>>> made.get(store) is made.get(store), made.get(store)[0] is store
(True, True)
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Generic, TypeVar

__all__ = ["ForkSafeLock", "PerStore"]

T = TypeVar("T")


class ForkSafeLock:
    """A lock replaced in a forked child: one another parent thread held at the fork would never be
    released there.

    >>> lock = ForkSafeLock()
    >>> with lock:
    ...     pass
    """

    def __init__(self, on_fork: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._on_fork = on_fork
        if hasattr(os, "register_at_fork"):  # POSIX only; elsewhere there is no fork
            os.register_at_fork(after_in_child=self._renew)

    def _renew(self) -> None:
        self._lock = threading.Lock()
        if self._on_fork is not None:
            self._on_fork()

    def __enter__(self) -> "ForkSafeLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()


class PerStore(Generic[T]):
    """`make(store)` once per live store object, kept by its id. An id is reused after a store is gone,
    so an entry counts only for the very object it was made for. `forget_at_fork`: a forked child starts
    empty (the parent's entries are the parent's)."""

    def __init__(self, make: Callable[[Any], T], *, forget_at_fork: bool = False) -> None:
        self._make = make
        self._entries: dict[int, tuple[Any, T]] = {}
        self._lock = ForkSafeLock(self._entries.clear if forget_at_fork else None)

    def get(self, store: Any) -> T:
        entry = self._entries.get(id(store))  # every cached call comes here: the lock only to make one
        if entry is None or entry[0] is not store:
            with self._lock:
                entry = self._entries.get(id(store))
                if entry is None or entry[0] is not store:
                    entry = self._entries[id(store)] = (store, self._make(store))
        return entry[1]

    def values(self) -> list[T]:
        return [value for _, value in list(self._entries.values())]

    def clear(self) -> None:
        self._entries.clear()

    def drop(self, store: Any) -> None:
        """Forget `store`'s entry (a store being closed for good)."""
        with self._lock:
            entry = self._entries.get(id(store))
            if entry is not None and entry[0] is store:
                del self._entries[id(store)]
