"""dsp.settings: the only ambient state, i.e. which LM, RM and vectorizer a program talks to.

`configure(...)` sets process-wide defaults (from the main thread, e.g. a notebook cell);
`with settings.context(...)` overrides them for the current thread or task only, held in a contextvar,
so threads and nested contexts never see each other's values.

>>> from dsp import settings
>>> settings.lm is None or True
True
>>> with settings.context(branch_idx=3):
...     settings.branch_idx
3
"""

from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Iterator, Mapping

__all__ = ["Settings", "settings", "SETTINGS_KEYS"]

# Every setting and its meaning; all read as None until configured.
SETTINGS_KEYS: Mapping[str, str] = MappingProxyType({
    "lm": "the language model: callable as lm(prompt, **params) -> list[str]",
    "rm": "the retrieval model: callable as rm(query, k) -> list of passages",
    "vectorizer": "text -> vector function used by dsp.knn (and dense retrieval)",
    "reranker": "optional (query, passages) -> scores function used by dsp.rank",
    "cache": "False turns the disk cache off (default: on unless DSP_CACHE=0)",
    "cache_dir": "where the disk cache lives (default: $DSP_CACHEDIR or the user cache dir)",
    "cache_url": "redis://host:port/db: keep the cache in Redis, shared by every process and machine; "
                 "memory://NAME: in this process only, nothing written (default: $DSP_CACHE_URL unless "
                 "cache_dir is set; unset = the disk cache)",
    "cache_write": '"durable" (default: every new entry is committed before the call returns) or "deferred" '
                   "(entries are batched and committed at most a few seconds later, at each dsp.evaluate row "
                   "and at exit: faster bulk runs; default: $DSP_CACHE_WRITE or durable)",
    "branch_idx": "seed of dsp.sample and of branch-specific LM sampling",
    "lm_overrides": "dict of generation parameters forced on every generate call (dsp.branch sets it)",
    "trace": "a list that records every generate stage when set (dsp.evaluate sets one per example)",
    "usage": "a dsp.Usage that also counts this context's LM requests and tokens (one per evaluated example)",
})

_OVERLAY: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar("dsp_settings", default=None)


class Settings:
    """Read settings as attributes; change them with `configure` or, scoped, with `context`."""

    def __init__(self) -> None:
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_base", MappingProxyType({key: None for key in SETTINGS_KEYS}))

    @staticmethod
    def _check(changes: Mapping[str, Any]) -> None:
        unknown = sorted(set(changes) - set(SETTINGS_KEYS))
        if unknown:
            raise TypeError(f"unknown setting(s) {', '.join(unknown)}; valid settings: {', '.join(SETTINGS_KEYS)}")

    def configure(self, **changes: Any) -> None:
        """Set defaults. From the main thread, outside any `context`, they apply process-wide; from
        elsewhere they apply to the current context only (a worker thread cannot rewire its siblings).

        >>> settings.configure(branch_idx=None)
        """
        self._check(changes)
        overlay = _OVERLAY.get()
        if overlay is None and threading.current_thread() is threading.main_thread():
            with self._lock:
                object.__setattr__(self, "_base", MappingProxyType({**self._base, **changes}))
        else:
            _OVERLAY.set(MappingProxyType({**(overlay or {}), **changes}))

    @contextmanager
    def context(self, **changes: Any) -> Iterator["Settings"]:
        """Override settings inside a `with` block, for this thread/task only; restored on exit."""
        self._check(changes)
        token = _OVERLAY.set(MappingProxyType({**(_OVERLAY.get() or {}), **changes}))
        try:
            yield self
        finally:
            _OVERLAY.reset(token)

    @property
    def config(self) -> dict[str, Any]:
        """A snapshot of every setting as seen from here."""
        return {key: getattr(self, key) for key in SETTINGS_KEYS}

    def __getattr__(self, key: str) -> Any:
        if key not in SETTINGS_KEYS:
            raise AttributeError(f"no setting {key!r}; valid settings: {', '.join(SETTINGS_KEYS)}")
        overlay = _OVERLAY.get()
        if overlay is not None and key in overlay:
            return overlay[key]
        return self._base[key]

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"use dsp.settings.configure({key}=...) or dsp.settings.context({key}=...)")

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.config.items() if v is not None}
        return f"Settings({shown})"


settings = Settings()
