"""A store held in this process only: `cache_url="memory://NAME"`, nothing written anywhere.

For calls worth reusing within one job and never after it: `dsp.compile` with the cache off keeps its
own calls here, so a reading of a free option and a longer rung reuse them, and nothing outlives the
compile. Threads share one; a forked worker starts its own, empty (as it opens its own disk store).
Entries are the same compact JSON text as on disk or in Redis, written once.

>>> store = ProcessStore("memory://demo")
>>> store.add("k", {"a": 1}), store.add("k", {"a": 2}), store.get("k"), store.get("other") is MISS
({'a': 1}, {'a': 1}, {'a': 1}, True)
"""

from __future__ import annotations

import json
import threading
from typing import Any, Mapping

from .codec import MISS, encode_value

__all__ = ["MEMORY_SCHEME", "ProcessStore"]

MEMORY_SCHEME = "memory://"


class ProcessStore:
    """The `Store` contract over a dict of JSON texts, set-if-absent under a lock."""

    def __init__(self, url: str) -> None:
        if not isinstance(url, str) or not url.startswith(MEMORY_SCHEME) or len(url) == len(MEMORY_SCHEME):
            raise ValueError(f"an in-process dsp cache is named memory://NAME; got {url!r}")
        self.url = url
        self._texts: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        text = self._texts.get(key)
        return MISS if text is None else json.loads(text)

    def add(self, key: str, value: Any) -> Any:
        return json.loads(self.add_text(key, encode_value(value)))

    def add_text(self, key: str, text: str) -> str:
        with self._lock:
            return self._texts.setdefault(key, text)

    def add_many(self, texts: Mapping[str, str]) -> None:
        with self._lock:
            for key, text in texts.items():
                self._texts.setdefault(key, text)

    def discard(self, key: str) -> None:
        with self._lock:
            self._texts.pop(key, None)

    def __len__(self) -> int:
        return len(self._texts)

    def close(self) -> None:
        with self._lock:
            self._texts.clear()

    def __repr__(self) -> str:
        return f"ProcessStore({self.url!r})"
