"""Order retrieved passages inside a prompt: most relevant first, last, or at both ends.

Liu et al. (2023), *Lost in the Middle*, found that LMs use information at the start and the end of
their context best and information in the middle worst. `order_passages` takes passages ranked best
first (as `dsp.retrieve` returns them) and arranges them for the prompt; `"lost_in_the_middle"` puts
the most relevant passages at both ends and the least relevant in the middle:

>>> order_passages(["r1", "r2", "r3", "r4", "r5"], strategy="lost_in_the_middle")
['r1', 'r3', 'r5', 'r4', 'r2']
>>> order_passages(["r1", "r2", "r3"], strategy="reverse")
['r3', 'r2', 'r1']

In a DSP program: ``x.context = dsp.order_passages(dsp.retrieve(x.question, k=20))``.
"""

from __future__ import annotations

import math
import random
from typing import Any, Literal, Sequence, TypeVar, get_args

from ..utils import is_number

__all__ = ["order_passages", "ORDER_STRATEGIES", "OrderStrategy"]

T = TypeVar("T")

# The strategies as a type, so a program's `order: OrderStrategy` option declares its valid values.
OrderStrategy = Literal["relevance", "reverse", "lost_in_the_middle", "random"]
ORDER_STRATEGIES = get_args(OrderStrategy)


def order_passages(passages: Sequence[T], strategy: str = "lost_in_the_middle", *,
                   scores: Sequence[float] | None = None, seed: int = 0) -> list[T]:
    """`passages` (best first, or ranked by `scores`, higher = more relevant) arranged by `strategy`:

    - ``"relevance"``: best first (the retriever's order);
    - ``"reverse"``: best last, right before the question;
    - ``"lost_in_the_middle"``: rank 1 first, rank 2 last, rank 3 second, rank 4 second to last, ...,
      so the least relevant passages end up in the middle;
    - ``"random"``: a shuffle seeded by `seed` (a control).

    With `scores`, passages are first sorted by score, highest first (ties keep their order).
    Returns a new list of the same objects.

    >>> order_passages(["a", "b", "c", "d"], scores=[0.1, 0.9, 0.5, 0.7])
    ['b', 'c', 'a', 'd']
    """
    if strategy not in ORDER_STRATEGIES:
        raise ValueError(f"unknown passage order {strategy!r}; choose one of {', '.join(ORDER_STRATEGIES)}")
    if isinstance(passages, (str, bytes)) or not isinstance(passages, Sequence):
        raise TypeError(f"order_passages needs a list of passages, got {type(passages).__name__}")
    ranked: list[Any] = list(passages)
    if scores is not None:
        scores = list(scores)
        if len(scores) != len(ranked):
            raise ValueError(f"order_passages got {len(ranked)} passages but {len(scores)} scores")
        for i, score in enumerate(scores):
            if not is_number(score) or math.isnan(score):
                raise ValueError(f"scores[{i}] must be a number, got {score!r}")
        # sorted() is stable: equal scores keep the caller's order.
        order = sorted(range(len(ranked)), key=lambda i: -scores[i])
        ranked = [ranked[i] for i in order]
    if strategy == "relevance":
        return ranked
    if strategy == "reverse":
        return ranked[::-1]
    if strategy == "random":
        random.Random(seed).shuffle(ranked)
        return ranked
    # Even ranks (1st, 3rd, ...) fill the front in order; odd ranks (2nd, 4th, ...) fill the back inwards.
    return ranked[0::2] + ranked[1::2][::-1]
