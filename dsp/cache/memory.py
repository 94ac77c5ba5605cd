"""The in-process layer in front of a store: what this process already read from or wrote to it.

A repeated request is answered from here by the request itself (`freeze` makes it hashable), without
hashing its canonical JSON or reading the store: those cost more than the rest of a cache hit. Sound
because an entry never changes once written (set-if-absent, never evicted).

>>> memory = Memory(limit=100)
>>> memory.put(freeze({"q": 1}, [0]), 5, '{"a":1}'), memory.get(freeze({"q": 1}, [0]))
(None, '{"a":1}')
"""

from __future__ import annotations

import threading
from typing import Any

from .keys import SECRET_FIELDS
from .per_store import PerStore

__all__ = ["MEMORY_LIMIT", "UNFROZEN", "Memory", "freeze", "memory_of", "forget", "forget_store"]

MEMORY_LIMIT = 32_000_000  # characters (requests + value texts) the in-process layer keeps per store
UNFROZEN = object()  # what `freeze` answers for a request the layer does not serve


class Memory:
    """The entries of one store this process has seen, by frozen request.

    Values are kept as JSON text and parsed on every hit, so each caller gets its own copy, as from the
    store. The oldest entries go first beyond `limit` characters.

    >>> memory = Memory(limit=20)
    >>> for i in range(3):
    ...     memory.put(("k", i), 3, '"value"')
    >>> len(memory.entries), memory.get(("k", 0)), memory.get(("k", 2))
    (2, None, '"value"')
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.entries: dict[Any, tuple[str, int]] = {}
        self.lock = threading.Lock()  # writers only; a read is one atomic dict lookup

    def get(self, frozen: Any) -> str | None:
        entry = self.entries.get(frozen)
        return entry[0] if entry is not None else None

    def put(self, frozen: Any, chars: int, text: str) -> None:
        size = chars + len(text)
        with self.lock:
            if frozen in self.entries or size > self.limit:
                return
            self.entries[frozen] = (text, size)
            self.size += size
            while self.size > self.limit:  # dicts keep insertion order: the first entry is the oldest
                oldest = next(iter(self.entries))
                self.size -= self.entries.pop(oldest)[1]


_memories: PerStore[Memory] = PerStore(lambda store: Memory(MEMORY_LIMIT))


def memory_of(store: Any) -> Memory:
    """The in-process layer of `store` (made on first use, `MEMORY_LIMIT` characters).

    >>> store = object()
    >>> memory_of(store) is memory_of(store)
    True
    """
    return _memories.get(store)


def forget_store(store: Any) -> None:
    """Drop `store`'s layer only (a store closed for good).

    >>> forget_store(object())
    """
    _memories.drop(store)


def forget() -> None:
    """Drop every store's layer, as in a new process (entries then come from the stores again).

    >>> forget()
    """
    _memories.clear()


def freeze(value: Any, chars: list[int]) -> Any:
    """A hashable stand-in for a request value, equal only for values whose canonical JSON is equal;
    `UNFROZEN` for anything but plain JSON data (exact types), a credential field or a non-finite float
    (those take the ordinary path, where `request_key` refuses them). Adds the characters of its strings
    to ``chars[0]``.

    >>> freeze({"a": 1}, [0]) == freeze({"a": 1.0}, [0]), freeze({"token": "x"}, [0]) is UNFROZEN
    (False, True)
    """
    kind = type(value)
    if kind is str:
        chars[0] += len(value)
        return value
    if kind is dict:
        items = []
        for key, item in value.items():
            if type(key) is not str or key.lower() in SECRET_FIELDS:
                return UNFROZEN
            frozen = freeze(item, chars)
            if frozen is UNFROZEN:
                return UNFROZEN
            items.append((key, frozen))
        return (dict, frozenset(items))  # key order does not matter: the canonical JSON sorts keys
    if kind is list or kind is tuple:
        items = []
        for item in value:
            frozen = freeze(item, chars)
            if frozen is UNFROZEN:
                return UNFROZEN
            items.append(frozen)
        return (list, tuple(items))  # a list and a tuple are the same JSON array
    if value is None or kind is bool or kind is int:
        return (kind, value)  # tagged: True, 1 and 1.0 are equal in Python but not in JSON
    if kind is float:
        return (float, value.hex()) if value - value == 0.0 else UNFROZEN  # -0.0 != 0.0 in JSON; no NaN/inf
    return UNFROZEN
