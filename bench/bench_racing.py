"""How often the compile's race and the successive halving it replaced choose the better candidate.

Simulated candidates, no LM: 12 candidates (the program as written first) answer validation questions
right when 0.8 x the question's difficulty + 0.2 x noise of their own falls below a cut set for their
accuracy; all are 40% right but the last two, which are 40% + MARGIN. With MARGIN 0, every choice but
the program as written is noise (a seed-dependent choice); with MARGIN > 0 the better two should win.

- race: `dsp.compiling.race` over rungs 20, 40, ..., 400 (`doubling_sizes(400)`), its default budget
  (200 evaluations a candidate) and alpha 0.05;
- halving (the compile before racing, the anchor): rungs of a quarter, a half and all of 80 validation
  questions, the best third (at least 2) kept on each, the program as written kept on every rung and
  winning ties, the best on the last rung chosen.

    python bench/bench_racing.py --seeds 40 --margins 0,0.06,0.08,0.1
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
from typing import Callable

from dsp.compiling import doubling_sizes, race

CANDIDATES = ["as_written", *[f"alike{i}" for i in range(9)], "better_a", "better_b"]


def _unit(*parts: object) -> float:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12], 16) / 16 ** 12


def _cuts(margin: float, mix: float) -> dict[str, float]:
    draws = sorted(mix * _unit("u", i) + (1 - mix) * _unit("v", i) for i in range(20000))
    accuracy = {key: 0.40 + (margin if key.startswith("better") else 0.0) for key in CANDIDATES}
    return {key: draws[int(a * len(draws))] for key, a in accuracy.items()}


def _right(cuts: dict[str, float], mix: float) -> Callable[[str, int], float]:
    return lambda key, q: float(mix * _unit("u", q) + (1 - mix) * _unit("c", key, q) < cuts[key])


def halving(right: Callable[[str, int], float], questions: list[int]) -> str:
    """The choice of the successive halving dsp.compile used before racing."""
    rungs = sorted({math.ceil(len(questions) / 4), math.ceil(len(questions) / 2), len(questions)})
    alive = list(CANDIDATES)
    for rung, size in enumerate(rungs, start=1):
        ranked = sorted(alive, key=lambda k: (-sum(right(k, q) for q in questions[:size]), CANDIDATES.index(k)))
        keep = 1 if rung == len(rungs) else max(2, math.ceil(len(ranked) / 3))
        alive = ranked[:keep]
        if rung < len(rungs):
            alive = ["as_written"] + [k for k in alive if k != "as_written"]
    return alive[0]


def racing(right: Callable[[str, int], float], questions: list[int]) -> str:
    def score(key: str, n: int) -> dict[str, float]:
        return {str(q): right(key, q) for q in questions[:n]}

    return race(CANDIDATES, score, doubling_sizes(len(questions)), baseline="as_written",
                budget=200 * len(CANDIDATES)).chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--margins", default="0,0.06,0.08,0.1")
    parser.add_argument("--mix", type=float, default=0.8, help="the share of a question's difficulty all candidates share")
    args = parser.parse_args()
    print(f"{'margin':>6}  {'halving (80 q)':>16}  {'race (400 q)':>14}   chosen right, of {args.seeds} seeds")
    for margin in (float(m) for m in args.margins.split(",")):
        right = _right(_cuts(margin, args.mix), args.mix)
        wanted = ("better_a", "better_b") if margin > 0 else ("as_written",)
        counts = {"halving": 0, "race": 0}
        for seed in range(args.seeds):
            pool = random.Random(seed).sample(range(5000), 400)
            counts["halving"] += halving(right, pool[:80]) in wanted
            counts["race"] += racing(right, pool) in wanted
        print(f"{margin:>6}  {counts['halving']:>16}  {counts['race']:>14}")


if __name__ == "__main__":
    main()
