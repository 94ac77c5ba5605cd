"""The "deferred" cache write mode: new entries held per store and committed in batches.

`dsp.cache.cached_call` holds each new entry here instead of writing it at once when the write mode is
"deferred" (`settings.cache_write` / $DSP_CACHE_WRITE). A commit costs one SQLite transaction (or one
Redis round trip) per batch instead of one per entry. Entries are committed when `DEFERRED_BATCH` are
pending, at the first call `DEFERRED_SECONDS` after the oldest, by `flush()` (which `dsp.evaluate` calls
before recording each example), and when the process ends normally: at interpreter exit, and at the
end of a `multiprocessing` child (whose exit skips `atexit`). A forked child starts with nothing
pending: its parent's entries stay the parent's to commit.

What a process killed before a commit had pending is lost, and is recomputed by the next run (a
`multiprocessing.Pool` terminated by its ``with`` block kills its workers so). Two processes racing on
one request may each keep their own sample (the store keeps the first committed). Hence opt-in.

This module knows stores only by their `add_many(texts)`; it imports nothing else of `dsp.cache`.

>>> DEFERRED_BATCH, DEFERRED_SECONDS
(512, 2.0)
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from typing import Any

from .per_store import PerStore

__all__ = ["DEFERRED_BATCH", "DEFERRED_SECONDS", "Pending", "pending_of", "pending_count", "flush", "discard_pending"]

DEFERRED_BATCH = 512  # pending entries that trigger a commit
DEFERRED_SECONDS = 2.0  # the oldest pending entry is committed at the next call after this long
log = logging.getLogger("dsp.cache")


class Pending:
    """New entries of one store that this process has not committed yet.

    >>> class Store:
    ...     def add_many(self, texts): print(sorted(texts))
    >>> pending = Pending(Store())
    >>> pending.add_text("k", '{"a":1}'), pending.get_text("k")
    ('{"a":1}', '{"a":1}')
    >>> pending.flush()
    ['k']
    1
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self.pid = os.getpid()  # a forked child never commits its parent's entries over inherited connections
        self.texts: dict[str, str] = {}
        self.since = 0.0
        self.retry_at = 0.0  # after a failed commit, the next automatic one waits until then
        self.lock = threading.Lock()

    def get_text(self, key: str) -> str | None:
        """The encoded value held for `key`, or None."""
        return self.texts.get(key)

    def add_text(self, key: str, text: str) -> str:
        """Hold an encoded value for commit unless an earlier one is pending; return the text kept."""
        with self.lock:
            text = self.texts.setdefault(key, text)
            now = time.monotonic()
            if len(self.texts) == 1:
                self.since = now
            due = now >= self.retry_at and (len(self.texts) >= DEFERRED_BATCH or now - self.since >= DEFERRED_SECONDS)
        if due:
            try:
                self.flush()
            except Exception as error:  # the entries stay held: the call that got here must not fail
                self.retry_at = time.monotonic() + DEFERRED_SECONDS
                log.warning("dsp cache: could not commit %d pending entries to %r (%s: %s); they are kept and the "
                            "commit is retried", len(self.texts), self.store, type(error).__name__, error)
        return text

    def flush(self) -> int:
        """Commit what is pending; returns how many entries were committed."""
        with self.lock:
            if not self.texts or self.pid != os.getpid():
                return 0
            self.store.add_many(self.texts)
            count = len(self.texts)
            self.texts = {}  # only once committed: a reader always finds an entry here or in the store
            return count


_exit_hook_pid: int | None = None


def pending_of(store: Any) -> Pending:
    """The pending entries of `store` in this process (made on first use).

    >>> class Store:
    ...     def add_many(self, texts): pass
    >>> store = Store()
    >>> pending_of(store) is pending_of(store)
    True
    """
    return _pending.get(store)


def pending_count() -> int:
    """How many entries this process holds uncommitted, over all stores.

    >>> pending_count()
    0
    """
    return sum(len(pending.texts) for pending in _pending.values())


def discard_pending(store: Any) -> None:
    """Drop, without committing them, the entries this process holds for `store`: a store closed for
    good, whose entries nobody will read (a compile's in-process cache).

    >>> discard_pending(object())
    """
    _pending.drop(store)


def flush() -> int:
    """Commit every entry this process holds back in the "deferred" write mode; returns the count.

    A no-op in the default "durable" mode, where nothing is ever pending.

    >>> flush()
    0
    """
    return sum(pending.flush() for pending in _pending.values())


def _flush_at_exit() -> None:
    try:
        flush()
    except Exception as error:  # an exit hook cannot raise to anyone: say what is lost
        log.error("dsp cache: could not commit %d pending entries at exit (%s: %s); they are lost and will be "
                  "recomputed by the next run", pending_count(), type(error).__name__, error)


def _commit_at_child_exit() -> None:
    """Commit at the end of a multiprocessing child too: it ends with os._exit right after running
    multiprocessing's own exit finalizers, so `atexit` never runs there. Registered once per process, on
    first use: multiprocessing empties a child's finalizers as it starts, after any fork hook has run."""
    global _exit_hook_pid
    if _exit_hook_pid == os.getpid():
        return
    _exit_hook_pid = os.getpid()
    multiprocessing = sys.modules.get("multiprocessing")  # never imported here: a child has it already
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        from multiprocessing import util

        util.Finalize(None, _flush_at_exit, exitpriority=10)


def _new_pending(store: Any) -> Pending:
    _commit_at_child_exit()
    return Pending(store)


# In a forked child the parent's entries are the parent's to commit: the child starts empty.
_pending: PerStore[Pending] = PerStore(_new_pending, forget_at_fork=True)
atexit.register(_flush_at_exit)
