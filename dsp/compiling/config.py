"""`CompileConfig`: what `dsp.compile` searches and how much it may spend, as one plain frozen dataclass.

Every field is checked when the config is made, so a bad value is one line naming the field before any
data is split or any LM is called.

>>> config = CompileConfig(candidates=4, val=20, bootstrap_limit=10, seed=0)
>>> config.candidates, config.racing, config.budget_for(4, 20)
(4, True, 800)
>>> CompileConfig(alpha=1.5)
Traceback (most recent call last):
    ...
ValueError: CompileConfig.alpha: a level strictly between 0 and 1, got 1.5
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..utils import is_int, is_number
from .space import Space

__all__ = ["CompileConfig", "VECTORIZERS"]

VECTORIZERS = ("hashing", "e5")  # how a knn pool is searched (`dsp.clients.vectorizers`)


def _integer(value: Any, minimum: int) -> bool:
    """Whether `value` is an int (never a bool) of at least `minimum`."""
    return is_int(value) and value >= minimum


@dataclass(frozen=True)
class CompileConfig:
    """The search (`space`, how many `candidates`, the `seed` of the split, the draws and the sample) and
    its budget: `val` validation examples held out of the training set (None: half of it, 10 to 400);
    `bootstrap_limit` pool examples run to bootstrap demos (None: the whole pool), each shown
    `bootstrap_demos` raw demos; a trace becomes a demo when its score reaches `passing` (and, with
    `require_context`, its context holds the answer); `racing` (else every candidate on the whole
    validation part), `budget` candidate-example evaluations (None: 200 a candidate when racing), the race's
    level `alpha`; `group` a field whose examples are held out together (a conversation's turns: None, each
    alone); `vectorizer` ("hashing" or "e5") finds the nearest demos; `progress` shows bars."""

    space: Space = field(default_factory=Space)
    candidates: int = 8
    val: int | None = None
    bootstrap_limit: int | None = 40
    bootstrap_demos: int = 3
    require_context: bool = False
    passing: float = 1.0
    racing: bool = True
    budget: int | None = None
    alpha: float = 0.05
    seed: int = 0
    group: str | None = None
    vectorizer: str = "hashing"
    progress: bool = True

    def __post_init__(self) -> None:
        problems = [
            (isinstance(self.space, Space), "space", "a dsp.Space"),
            (_integer(self.candidates, 1), "candidates", "a positive integer"),
            (self.val is None or _integer(self.val, 1), "val", "a positive integer or None"),
            (self.bootstrap_limit is None or _integer(self.bootstrap_limit, 1), "bootstrap_limit",
             "a positive integer or None (the whole pool)"),
            (_integer(self.bootstrap_demos, 0), "bootstrap_demos", "a non-negative integer"),
            (isinstance(self.require_context, bool), "require_context", "True or False"),
            (is_number(self.passing) and 0 < self.passing <= 1, "passing", "a score in (0, 1]"),
            (isinstance(self.racing, bool), "racing", "True or False"),
            (self.budget is None or _integer(self.budget, 1), "budget",
             "a positive number of evaluations or None"),
            (is_number(self.alpha) and 0 < self.alpha < 1, "alpha", "a level strictly between 0 and 1"),
            (_integer(self.seed, 0), "seed", "a non-negative integer"),
            (self.group is None or (isinstance(self.group, str) and self.group != ""), "group",
             "a field name or None"),
            (self.vectorizer in VECTORIZERS, "vectorizer", f"one of {', '.join(VECTORIZERS)}"),
            (isinstance(self.progress, bool), "progress", "True or False"),
        ]
        for ok, name, wanted in problems:
            if not ok:
                raise ValueError(f"CompileConfig.{name}: {wanted}, got {getattr(self, name)!r:.80}")

    def budget_for(self, candidates: int, val: int) -> int:
        """The evaluations (candidate x validation example) the search may spend: `budget`, or by default
        200 per candidate when racing, else every candidate on the whole validation part.

        >>> CompileConfig().budget_for(12, 400), CompileConfig(racing=False).budget_for(12, 400)
        (2400, 4800)
        >>> CompileConfig(budget=500).budget_for(12, 400)
        500
        """
        if self.budget is not None:
            return self.budget
        return 200 * candidates if self.racing else candidates * val
