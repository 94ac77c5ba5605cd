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

- scored: the vote a reading of every candidate, decided on the evidence of every candidate scored
  (dropped ones too), the compile's rule;
- contention (the anchor: the rule before 2026-12-07): the same, on the candidates still in contention;
- pairwise (the rule before readings): the vote a searched option like any other, as in the SQuAD
  compile of seed 0: the program as written with and without it, and six others, three with it; chosen
  right when the choice votes.

All race over 400 validation questions at the default budget (200 evaluations a candidate). A second
table has unequal candidates, as a real pool's are (SmolLM2 on SQuAD: 9-22% right on validation), so
the race drops the weaker ones early: 8 candidates, right on 20% (the program as written), 22, 18, 15,
13, 12, 10 and 9%, at 100 evaluations a candidate (the SQuAD compiles' budget); there the two reading
rules part.

    python bench/bench_racing.py --readings --seeds 40 --gains 0,1,1.5,2,3.4,5
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


UNEQUAL = {"as_written": 0.20, **{f"weaker{i}": a for i, a in enumerate((0.22, 0.18, 0.15, 0.13, 0.12, 0.10, 0.09))}}


def _vote_right(gain: float, mix: float, reading_mix: float,
                accuracy: dict[str, float] | None = None) -> Callable[[str, str, int], float]:
    """right(program, reading, question): each program right on its `accuracy` as written (default 28%
    each); the vote a gain of `gain` points."""
    accuracy = accuracy or {key: 0.28 for key in PROGRAMS}
    plain = _right({key: _cut(a, mix) for key, a in accuracy.items()}, mix)
    # with no gain, as many turned right as wrong
    up_cuts = {key: _cut((gain / 100 + 0.003 * a) / (1 - a), reading_mix, "g") for key, a in accuracy.items()}

    def right(key: str, reading: str, q: int) -> float:
        was = plain(key, q)
        if reading == "plain":
            return was
        if was:
            return float(_unit("down", key, q) >= 0.003)
        return float(reading_mix * _unit("g", q) + (1 - reading_mix) * _unit("gc", key, q) < up_cuts[key])

    return right


def _cut(accuracy: float, mix: float, name: str = "u") -> float:
    draws = sorted(mix * _unit(name, i) + (1 - mix) * _unit("v", i) for i in range(20000))
    return draws[int(accuracy * len(draws))]


def readings_choose_the_vote(right: Callable[[str, str, int], float], questions: list[int], evidence: str,
                             programs: list[str] = PROGRAMS, each: int = 200) -> bool:
    def score(key: str, n: int) -> dict[str, dict[str, float]]:
        return {r: {str(q): right(key, r, q) for q in questions[:n]} for r in ("plain", "vote")}

    return race(programs, score, doubling_sizes(len(questions)), baseline="as_written", budget=each * len(programs),
                readings=["plain", "vote"], reading_evidence=evidence).reading == "vote"


def pairwise_chooses_the_vote(right: Callable[[str, str, int], float], questions: list[int]) -> bool:
    keys = ["as_written|plain", "as_written|vote", *(f"alike{i}|{'vote' if i % 2 else 'plain'}" for i in range(6))]

    def score(key: str, n: int) -> dict[str, float]:
        program, reading = key.split("|")
        return {str(q): right(program, reading, q) for q in questions[:n]}

    chosen = race(keys, score, doubling_sizes(len(questions)), baseline=keys[0], budget=200 * len(keys)).chosen
    return chosen.endswith("|vote")


def _ratio(new: int, anchor: int) -> str:
    """new / anchor, or "-" where the anchor is 0 (nothing to divide by)."""
    return f"{new / anchor:.2f}" if anchor else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--margins", default="0,0.06,0.08,0.1")
    parser.add_argument("--mix", type=float, default=0.8, help="the share of a question's difficulty all candidates share")
    parser.add_argument("--readings", action="store_true", help="measure the choice of a free option (the vote)")
    parser.add_argument("--gains", default="0,1,1.5,2,3.4,5", help="the vote's gain in EM points (with --readings)")
    parser.add_argument("--reading-mix", type=float, default=0.5,
                        help="the share of the vote's gain on questions all candidates share")
    args = parser.parse_args()
    if args.readings:
        gains = [float(g) for g in args.gains.split(",")]
        print(f"8 candidates alike (28% right), 200 evaluations each: the vote chosen, of {args.seeds} seeds")
        print(f"{'gain':>6}  {'pairwise':>10}  {'contention':>10}  {'scored':>10}  {'ratio':>6}")
        for gain in gains:
            right = _vote_right(gain, args.mix, args.reading_mix)
            counts = {"pairwise": 0, "contention": 0, "scored": 0}
            for seed in range(args.seeds):
                pool = random.Random(seed).sample(range(5000), 400)
                counts["pairwise"] += pairwise_chooses_the_vote(right, pool)
                for evidence in ("contention", "scored"):
                    counts[evidence] += readings_choose_the_vote(right, pool, evidence)
            print(f"{gain:>6}  {counts['pairwise']:>10}  {counts['contention']:>10}  {counts['scored']:>10}  "
                  f"{_ratio(counts['scored'], counts['contention']):>6}")
        print(f"\n8 candidates unequal (9-22% right), 100 evaluations each: the vote chosen, of {args.seeds} seeds")
        print(f"{'gain':>6}  {'contention':>10}  {'scored':>10}  {'ratio':>6}")
        for gain in gains:
            right = _vote_right(gain, args.mix, args.reading_mix, UNEQUAL)
            counts = {"contention": 0, "scored": 0}
            for seed in range(args.seeds):
                pool = random.Random(seed).sample(range(5000), 400)
                for evidence in counts:
                    counts[evidence] += readings_choose_the_vote(right, pool, evidence, list(UNEQUAL), 100)
            print(f"{gain:>6}  {counts['contention']:>10}  {counts['scored']:>10}  "
                  f"{_ratio(counts['scored'], counts['contention']):>6}")
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
