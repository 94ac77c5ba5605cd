"""What every cache store shares: the stored value's JSON text, the miss sentinel and the store contract.

A value is stored as compact JSON text (never pickle), the same in every store (disk, Redis), so a
cache written by one can be read by another; a store answers `MISS` for an absent key.

>>> encode_value({"choices": [{"text": " Paris"}]})
'{"choices":[{"text":" Paris"}]}'
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Protocol

__all__ = ["CACHE_FORMAT_VERSION", "MISS", "Store", "encode_value", "readable_text"]

CACHE_FORMAT_VERSION = 1
MISS = object()  # what a store's get answers for an absent key (None is a value)
# Built once: json.dumps with options builds a new encoder on every call, a good part of a small dump.
# (An encoder keeps no state between calls, so threads share it safely.)
_VALUE_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_value(value: Any) -> str:
    """The JSON text a value is stored as, identical in every store (compact, UTF-8, no NaN).

    >>> encode_value({"choices": [{"text": " Paris"}]})
    '{"choices":[{"text":" Paris"}]}'
    """
    return _VALUE_ENCODER.encode(value)


class Store(Protocol):
    """What `cached_call` needs of a store: `get` (a value or the miss sentinel), set-if-absent `add`,
    and `discard` (only for an entry that holds an error response)."""

    def get(self, key: str) -> Any: ...

    def add(self, key: str, value: Any) -> Any: ...

    def add_text(self, key: str, text: str) -> str: ...

    def add_many(self, texts: Mapping[str, str]) -> None: ...

    def discard(self, key: str) -> None: ...

    def __len__(self) -> int: ...

    def close(self) -> None: ...


def readable_text(stored: Any, text: str) -> str:
    """The text another writer stored first, or ours when theirs is gone or unreadable (a lost race only).

    >>> readable_text(b'{"a":1}', '{"a":2}'), readable_text(b'not json', '{"a":2}')
    ('{"a":1}', '{"a":2}')
    """
    if isinstance(stored, bytes):
        try:
            stored = stored.decode("utf-8")
        except UnicodeDecodeError:
            return text
    if not isinstance(stored, str):
        return text
    try:
        json.loads(stored)
    except ValueError:
        return text
    return stored
