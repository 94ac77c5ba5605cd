"""A compile's own calls with the cache off: kept in this process for the compile, gone after it.

A compile reuses its own calls twice over. Each reading of a free option (the extractive vote) is read
from the calls the first reading made; and, without an `out` folder to resume rows from, each rung of
the race runs a candidate again on a longer prefix of the validation part, whose earlier questions it
has asked before. With the cache on, those calls come back from it. With the cache off (`DSP_CACHE=0`,
`settings.cache=False`) they used to be sampled again: a second reading cost as many LM requests as the
first and read other samples, and a rung answered its earlier questions anew. So with the cache off a
compile keeps its calls in an in-process cache of its own (`memory://`, nothing written anywhere),
dropped when it ends: no call is answered from a cache the user turned off, and none outlives the compile.

>>> from dsp.cache import cache_url
>>> with settings.context(cache=False):
...     with kept_for_the_compile():
...         inside = cache_enabled(), cache_url().startswith("memory://compile-")
...     after = cache_enabled()
>>> inside, after  # the compile's own cache inside, the user's setting after
((True, True), False)
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from typing import Iterator

from ..cache import cache_enabled, discard_store
from ..settings import settings

__all__ = ["kept_for_the_compile"]


@contextmanager
def kept_for_the_compile() -> Iterator[None]:
    """With the user's cache off, an in-process cache of the compile's own in effect, dropped on exit;
    with it on, nothing changes."""
    if cache_enabled():
        yield
        return
    url = f"memory://compile-{uuid.uuid4().hex}"
    try:
        with settings.context(cache=True, cache_url=url):
            yield
    finally:
        discard_store(url)
