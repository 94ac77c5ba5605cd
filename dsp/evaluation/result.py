"""What an evaluation returns: the rows in dev-set order, the score, its interval, and the usage.

>>> result = EvaluationResult(rows=[{"score": s, "error": None} for s in (1.0, 0.0, 0.0, 0.0)], metric_name="EM")
>>> result.score, [round(x, 1) for x in result.confidence_interval()]
(25.0, [4.6, 69.9])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..clients.lm import Usage
from ..stats import score_interval

__all__ = ["EvaluationResult", "summarize_seeds"]


@dataclass
class EvaluationResult:
    """Per-example rows (in dev-set order) and the aggregate score (mean metric x 100); `resumed` rows
    came from the results file of an earlier run with the same identity."""

    rows: list[dict[str, Any]]
    metric_name: str
    out: str | None = None
    seed: int | None = None
    usage: Usage = field(default_factory=Usage)
    resumed: int = 0

    @property
    def scores(self) -> list[float]:
        return [float(r["score"]) for r in self.rows if r.get("error") is None]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("error") is not None]

    @property
    def score(self) -> float:
        """Mean score x 100 over all examples (a failed example scores 0)."""
        return 100.0 * sum(self.scores) / len(self.rows) if self.rows else 0.0

    @property
    def df(self) -> Any:
        """The rows as a pandas DataFrame (traces left out)."""
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in r.items() if k != "trace"} for r in self.rows])

    def confidence_interval(self, z: float = 1.96) -> tuple[float, float]:
        """95% interval of the score (x 100), failed examples counted as 0: Wilson's for a right/wrong
        metric (EM), else the normal approximation kept within the scores' range (nF1, F1); see dsp.stats."""
        if not self.rows:
            return (0.0, 0.0)
        low, high = score_interval(self.scores + [0.0] * len(self.errors), z)
        return (100 * low, 100 * high)

    def summary(self) -> str:
        correct = sum(self.scores)
        shown = int(correct) if float(correct).is_integer() else round(correct, 2)
        text = f"Answered {shown} / {len(self.rows)} ({round(self.score, 1)}%) correctly."
        if self.errors:
            text += (f" {len(self.errors)} example(s) failed (see 'error' in {self.out or 'the rows'}); "
                     f"a rerun retries them.")
        return text

    def __repr__(self) -> str:
        return f"EvaluationResult({self.metric_name}={self.score:.1f}, n={len(self.rows)}, out={self.out!r})"


def summarize_seeds(results: Sequence[EvaluationResult]) -> Any:
    """A pandas table of per-seed scores; its ``attrs`` hold their mean, sample standard deviation and a
    line of text. One seed has no spread: its text is the score alone (its "std" is 0.0).

    >>> one = EvaluationResult(rows=[{"score": 1.0}, {"score": 0.0}, {"score": 0.0}], metric_name="EM", seed=0)
    >>> summarize_seeds([one]).attrs["text"], summarize_seeds([one, one]).attrs["text"]
    ('33.3 (1 seed)', '33.3 ± 0.0 over 2 seeds')
    """
    import pandas as pd

    if not results:
        raise ValueError("summarize_seeds needs at least one EvaluationResult")
    table = pd.DataFrame([{"seed": r.seed, "n": len(r.rows), "score": r.score, "errors": len(r.errors)}
                          for r in results])
    mean = table["score"].mean()
    std = table["score"].std(ddof=1) if len(table) > 1 else 0.0
    table.attrs["mean"], table.attrs["std"] = float(mean), float(std)
    # One seed has no spread to show: "± 0.0" would read as a measured one.
    table.attrs["text"] = (f"{mean:.1f} ± {std:.1f} over {len(table)} seeds" if len(table) > 1
                           else f"{mean:.1f} (1 seed)")
    return table
