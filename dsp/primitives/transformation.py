"""The `transformation` decorator: marks a function Example -> Example (or None, for failure).

>>> @transformation
... def add_context(x):
...     return x.copy(context=["A | a"])
>>> add_context({"question": "q"}).context
['A | a']
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from ..example import Example

__all__ = ["transformation"]


def transformation(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a transformation; a plain dict passed as its first argument arrives as an Example.

    The Example is passed as is (not copied), as in DSP v1, so a transformation may update it in place.
    """
    @functools.wraps(fn)
    def wrapper(example: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(example, Mapping) and not isinstance(example, Example):
            example = Example(example)
        return fn(example, *args, **kwargs)

    wrapper.is_transformation = True  # type: ignore[attr-defined]
    return wrapper
