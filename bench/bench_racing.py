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

`--readings` measures instead how often a free option (`dsp.Space.free`: one that changes no LM call,
as the extractive vote) is chosen when it helps every candidate a little, as on Open-SQuAD with Gemma
3 270M (the vote: +3.4 EM on 1,000 dev questions, 35 right only with it, 1 without): 8 candidates, all
28% right as written; the vote turns a wrong answer right with a chance set for a gain of GAIN points
(on questions partly shared among candidates: `--reading-mix`) and a right one wrong on 0.3%.

- readings (the anchor is the race before them): the vote a reading of every candidate, decided on the
  evidence of all of them together;
- pairwise: the vote a searched option like any other, as in the SQuAD compile of seed 0: the program
  as written with and without it, and six others, three with it; chosen right when the choice votes.

Both race over 400 validation questions at the default budget (200 evaluations a candidate; the SQuAD
compiles ran at 100).

    python bench/bench_racing.py --readings --seeds 40 --gains 0,2,3.4,5
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
    return {key: _cut(0.40 + (margin if key.startswith("better") else 0.0), mix) for key in CANDIDATES}


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


PROGRAMS = ["as_written", *[f"alike{i}" for i in range(7)]]


def _vote_right(gain: float, mix: float, reading_mix: float) -> Callable[[str, str, int], float]:
    """right(program, reading, question): 28% as written; the vote a gain of `gain` points."""
    plain = _right({key: _cut(0.28, mix) for key in PROGRAMS}, mix)
    flip_up = (gain / 100 + 0.003 * 0.28) / 0.72  # with no gain, as many turned right as wrong
    up_cut = _cut(flip_up, reading_mix, "g")

    def right(key: str, reading: str, q: int) -> float:
        was = plain(key, q)
        if reading == "plain":
            return was
        if was:
            return float(_unit("down", key, q) >= 0.003)
        return float(reading_mix * _unit("g", q) + (1 - reading_mix) * _unit("gc", key, q) < up_cut)

    return right


def _cut(accuracy: float, mix: float, name: str = "u") -> float:
    draws = sorted(mix * _unit(name, i) + (1 - mix) * _unit("v", i) for i in range(20000))
    return draws[int(accuracy * len(draws))]


def readings_choose_the_vote(right: Callable[[str, str, int], float], questions: list[int]) -> bool:
    def score(key: str, n: int) -> dict[str, dict[str, float]]:
        return {r: {str(q): right(key, r, q) for q in questions[:n]} for r in ("plain", "vote")}

    return race(PROGRAMS, score, doubling_sizes(len(questions)), baseline="as_written", budget=200 * len(PROGRAMS),
                readings=["plain", "vote"]).reading == "vote"


def pairwise_chooses_the_vote(right: Callable[[str, str, int], float], questions: list[int]) -> bool:
    keys = ["as_written|plain", "as_written|vote", *(f"alike{i}|{'vote' if i % 2 else 'plain'}" for i in range(6))]

    def score(key: str, n: int) -> dict[str, float]:
        program, reading = key.split("|")
        return {str(q): right(program, reading, q) for q in questions[:n]}

    chosen = race(keys, score, doubling_sizes(len(questions)), baseline=keys[0], budget=200 * len(keys)).chosen
    return chosen.endswith("|vote")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--margins", default="0,0.06,0.08,0.1")
    parser.add_argument("--mix", type=float, default=0.8, help="the share of a question's difficulty all candidates share")
    parser.add_argument("--readings", action="store_true", help="measure the choice of a free option (the vote)")
    parser.add_argument("--gains", default="0,2,3.4,5", help="the vote's gain in EM points (with --readings)")
    parser.add_argument("--reading-mix", type=float, default=0.5,
                        help="the share of the vote's gain on questions all candidates share")
    args = parser.parse_args()
    if args.readings:
        print(f"{'gain':>6}  {'pairwise':>10}  {'readings':>10}   the vote chosen, of {args.seeds} seeds")
        for gain in (float(g) for g in args.gains.split(",")):
            right = _vote_right(gain, args.mix, args.reading_mix)
            counts = {"pairwise": 0, "readings": 0}
            for seed in range(args.seeds):
                pool = random.Random(seed).sample(range(5000), 400)
                counts["pairwise"] += pairwise_chooses_the_vote(right, pool)
                counts["readings"] += readings_choose_the_vote(right, pool)
            print(f"{gain:>6}  {counts['pairwise']:>10}  {counts['readings']:>10}")
        return
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
