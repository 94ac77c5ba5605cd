"""Racing: candidates dropped on paired evidence, not on their rank in a small rung.

Every candidate still in the race is scored on the same first n validation examples, n doubling from
rung to rung. After each rung, the leader (the best score; a tie goes to the program as written) is
paired with every other candidate on those examples, and a candidate is dropped only when the leader
scored higher on significantly more of them: the exact one-sided sign test (McNemar's for right/wrong
scores) at level ``alpha / rungs``. Over the whole race, then, a candidate truly as good as a given
leader is dropped by it with probability at most `alpha` (0.05 by default; Bonferroni over the rungs,
the repeated looks). Candidates that stay indistinguishable stay in; the budget (in candidate-example
evaluations: a rung costs only the examples a candidate has not run yet) goes to the ones still in
contention: when the next rung would not fit, a last, shorter rung spends what is left on them (every
one the same examples). The race stops when one is left, when the validation part is used up, or when
the budget is spent.

Why not successive halving: keeping the best third of a 20-question rung drops candidates on noise (a
20-question score has a 95% interval of about +-20 points), so two seeds choose different programs.
Measured on simulated candidates (`bench/bench_racing.py`: 12 candidates, all 40% right but two, 40
seeds): when all are alike (any choice is noise), halving at 80 validation questions chose the program
as written on 11 seeds, the race on 35; with two candidates 10 points better, halving found one on 34
seeds, the race on 40 (8 points: 33 and 40; 6 points: 27 and 37). The race spends more (up to 200
evaluations a candidate, against about 40 for halving at 80 questions).

When more than one is left, they are tied, and the choice follows a declared rule, so that two seeds
that see a tie choose alike: the program as written if it is among them, else the cheapest (fewest
LM calls per example, then fewest demonstrations), then the best score, then the candidates' order.

Readings: an option that changes no LM call, only how a program reads its completions (which sampled
answers vote), can be scored for every candidate from the same cached calls, at no cost to the budget.
`race(..., readings=[...])` takes such readings (the first: the program as written's), `score` then
gives each candidate's scores under every reading, and a reading is decided on the evidence of every
candidate scored so far together, not of one pair: on each example, the challenger's scores summed over
the candidates that ran it against the current reading's; the challenger replaces it when it is ahead on
significantly more examples (the same one-sided sign test, at the rung's level shared among the
challengers). Where the candidates gain on different examples, their evidence adds up: a gain one pair
would need hundreds of questions to show, eight candidates show on far fewer. The candidates dropped
count too (`reading_evidence="scored"`, the default): their completions, read both ways, cost nothing,
and a reading is a way of reading completions, not a property of one program. The rule before
2026-12-07 summed only the candidates still in contention (`reading_evidence="contention"`, kept to
compare and to read older compiles by): it threw away the dropped ones' evidence, so a search that drops
its weaker candidates early (as a real pool's do) saw a small gain on 3 candidates where it had scored 8.
The candidates are then compared with each other under the current reading. Measured on simulated candidates (`bench/bench_racing.py
--readings`: 8 candidates 28% right, an extractive vote adding GAIN points to each, 40 seeds): at gains
of 2, 3.4 and 5 points the vote was chosen on 40, 40 and 40 seeds, against 7, 20 and 32 when searched
as an option like any other; with no gain, on none either way (with 90% of the gain on questions all
candidates share: 27 and 34 of 40 at 2 and 3.4 points, against 8 and 21). With 8 unequal candidates
(9-22% right, 100 evaluations each, so the weaker are dropped early), at gains of 1, 1.5 and 2 points:
13, 28 and 32 seeds summed over every candidate scored, against 8, 20 and 29 over those in contention;
with no gain, none either way.

>>> truth = {"a": 0.3, "b": 0.8}   # b right on 80% of the examples, a on 30%, in a fixed pattern
>>> scores = lambda key, n: {str(i): float((i * 7) % 10 < 10 * truth[key]) for i in range(n)}
>>> result = race(["a", "b"], scores, [20, 40, 80], baseline="a")
>>> result.chosen, result.rule, result.needed, result.drops["a"].rung
('b', 'the only candidate left', 20, 1)

Two readings, "plain" (as written) and "vote": three candidates alike, each right on 3 examples in
10 as written and on one more, a different one for each, under the vote. One pair would show that
gain on 80 examples; the three together show it on the first 20.

>>> def read(key, n):
...     gain = 3 + "abc".index(key)
...     return {r: {str(i): float(i % 10 < 3 or (r == "vote" and i % 10 == gain)) for i in range(n)}
...             for r in ("plain", "vote")}
>>> result = race(["a", "b", "c"], read, [20, 40, 80], baseline="a", readings=["plain", "vote"])
>>> result.chosen, result.reading, result.rule
('a', 'vote', '3 tied: the program as written')
>>> [(t.n, t.challenger, t.wins, t.losses, t.switched) for t in result.reading_tests]
[(20, 'vote', 6, 0, True), (40, 'plain', 0, 12, False), (80, 'plain', 0, 24, False)]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from ..stats import sign_test_greater
from ..utils import is_int

__all__ = ["race", "Race", "Drop", "ReadingTest", "CandidateFailed", "doubling_sizes"]

Scores = Mapping[str, float]


def doubling_sizes(total: int, first: int = 20) -> list[int]:
    """The rung sizes: `first`, doubling, ending with the whole validation part.

    >>> doubling_sizes(400), doubling_sizes(80), doubling_sizes(12)
    ([20, 40, 80, 160, 320, 400], [20, 40, 80], [12])
    """
    if not is_int(total) or total < 1:
        raise ValueError(f"the validation part must hold at least one example, got {total!r}")
    sizes, n = [], min(first, total)
    while n < total:
        sizes.append(n)
        n *= 2
    return sizes + [total]


class CandidateFailed(RuntimeError):
    """Raised by a race's `score` for a candidate whose examples failed (its program raised): the race
    drops it as failing, never as scoring 0."""


@dataclass(frozen=True)
class Drop:
    """Why a candidate left the race: on the first `n` examples of rung `rung`, the leader `by` scored
    higher on `leader_only` of them and this candidate on `this_only`; `p` is the one-sided exact p-value."""

    rung: int
    n: int
    by: str
    leader_only: int
    this_only: int
    p: float


@dataclass(frozen=True)
class ReadingTest:
    """One look at a reading: on the first `n` examples of rung `rung`, summed over the candidates that
    ran each example (`Race.reading_evidence` says which: every one scored, or those in contention), the
    `challenger` reading was ahead of the `incumbent` on `wins` examples and behind on
    `losses`; `p` is the one-sided exact p-value, `level` the one it had to pass, `switched` whether the
    challenger became the reading."""

    rung: int
    n: int
    incumbent: str
    challenger: str
    wins: int
    losses: int
    p: float
    level: float
    switched: bool


@dataclass
class Race:
    """The outcome: the candidate `chosen` by `rule`, those still `alive` (more than one: `tied`), the
    `drops` with their evidence, the rung sizes run, the validation size the choice `needed`, the
    evaluations `spent`, the test `level`, and why the race `stopped`."""

    chosen: str
    rule: str
    alive: list[str]
    drops: dict[str, Drop]
    sizes: list[int]
    needed: int
    spent: int
    level: float
    stopped: str
    leader: str
    scores: dict[str, float] = field(default_factory=dict)  # mean score (percent) on the last rung each ran
    failed: dict[str, str] = field(default_factory=dict)    # candidates whose examples failed: why
    reading: str | None = None                               # the reading chosen (with `readings`)
    reading_tests: list[ReadingTest] = field(default_factory=list)
    reading_evidence: str | None = None                      # whose scores decided it (with `readings`)

    @property
    def tied(self) -> bool:
        return len(self.alive) > 1

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tied"] = self.tied
        return out


def _mean(scores: Scores) -> float:
    return 100 * sum(scores.values()) / len(scores) if scores else 0.0


READING_EVIDENCE = ("scored", "contention")


def _check_race(keys: Sequence[str], sizes: Sequence[int], alpha: float, budget: int | None,
                readings: Sequence[str] | None = None, reading_evidence: str = "scored") -> None:
    """Refuse a race that cannot run, naming the argument."""
    if reading_evidence not in READING_EVIDENCE:
        raise ValueError(f"race: reading_evidence must be one of {READING_EVIDENCE}, got {reading_evidence!r}")
    if readings is not None and (not readings or len(set(readings)) != len(readings)):
        raise ValueError(f"race: readings must be distinct names, the program as written's first, got {readings!r}")
    if not keys:
        raise ValueError("race needs at least one candidate")
    if len(set(keys)) != len(keys):
        raise ValueError(f"race: candidate keys must be distinct, got {list(keys)}")
    if not sizes or any(not is_int(n) or n < 1 for n in sizes) \
            or list(sizes) != sorted(set(sizes)):
        raise ValueError(f"race: rung sizes must be increasing positive integers, got {list(sizes)}")
    if not 0 < alpha < 1:
        raise ValueError(f"race: alpha must be between 0 and 1, got {alpha!r}")
    if budget is not None and (not is_int(budget) or budget < 1):
        raise ValueError(f"race: budget must be a positive number of evaluations, got {budget!r}")


def _decide_reading(readings: Sequence[str], current: str, by_reading: Mapping[str, Mapping[str, Scores]],
                    scored: Sequence[str], rung: int, n: int, level: float) -> tuple[str, list[ReadingTest]]:
    """(the reading after this rung, the tests made): every other reading against `current`, on every
    example a candidate in `scored` ran under both, the differences summed over the candidates that ran it
    (the candidates in contention ran the same first n examples; a dropped one, the first n of its last rung)."""
    tests, ahead = [], {}
    for challenger in (r for r in readings if r != current):
        by_example: dict[str, float] = {}
        for key in scored:
            mine, theirs = by_reading[key][current], by_reading[key][challenger]
            for example in mine.keys() & theirs.keys():
                by_example[example] = by_example.get(example, 0.0) + theirs[example] - mine[example]
        sums = list(by_example.values())
        wins, losses = sum(1 for d in sums if d > 0), sum(1 for d in sums if d < 0)
        p, each = sign_test_greater(wins, losses), level / (len(readings) - 1)
        if p < each:
            ahead[challenger] = sum(sums)
        tests.append(ReadingTest(rung, n, current, challenger, wins, losses, p, each, False))
    if not ahead:
        return current, tests
    best = max(ahead, key=lambda r: (ahead[r], -readings.index(r)))
    return best, [replace(t, switched=True) if t.challenger == best else t for t in tests]


def _drop_beaten(alive: list[str], leader: str, latest: Mapping[str, Scores], rung: int, n: int, level: float,
                 drops: dict[str, Drop]) -> bool:
    """Drop (from `alive`, into `drops`) every candidate the leader beats on paired evidence; whether any was."""
    dropped = False
    for key in [k for k in alive if k != leader]:
        mine, theirs = latest[leader], latest[key]
        shared = mine.keys() & theirs.keys()
        leader_only = sum(1 for e in shared if mine[e] > theirs[e])
        this_only = sum(1 for e in shared if theirs[e] > mine[e])
        p = sign_test_greater(leader_only, this_only)
        if p < level:
            drops[key] = Drop(rung, n, leader, leader_only, this_only, p)
            alive.remove(key)
            dropped = True
    return dropped


def _next_rung(n: int, ran: Sequence[int], budget: int | None, spent: int, new: int,
               contention: int) -> tuple[int, bool, str | None]:
    """(the rung's size, whether it is the last, why the race stops before it or None): a rung that would
    pass the budget becomes a last, shorter one for the `contention` candidates still in the race (one
    look in place of the planned one, so the level still holds), or none if not one example fits."""
    if not ran or budget is None or spent + new <= budget:
        return n, False, None
    fits = ran[-1] + (budget - spent) // contention
    if fits <= ran[-1]:
        return n, False, f"the next rung ({n} examples, {new} evaluations) would pass the budget of {budget}"
    return fits, True, None


def _settle(alive: Sequence[str], baseline: str | None, cost: Callable[[str], tuple[float, ...]] | None,
            rank: Callable[[str], tuple], ran: Sequence[int], tests: Sequence[ReadingTest],
            needed: int) -> tuple[str, str, int]:
    """(the candidate chosen, the rule that chose it, the validation size the choice needed): the one left,
    or among those tied the program as written, else the cheapest (with `cost`) or the best score; a tie
    needs every example run, and a reading switched at rung n needs n."""
    if len(alive) == 1:
        chosen, rule = alive[0], "the only candidate left"
    else:
        needed = ran[-1]
        if baseline in alive:
            chosen, rule = baseline, f"{len(alive)} tied: the program as written"
        else:
            chosen = min(alive, key=lambda k: ((cost(k) if cost else ()), *rank(k)))
            rule = f"{len(alive)} tied: the cheapest" if cost else f"{len(alive)} tied: the best score"
    switched = [t.n for t in tests if t.switched]
    if switched:
        needed = max(needed, max(switched))
    return chosen, rule, needed


def race(keys: Sequence[str], score: Callable[[str, int], Any], sizes: Sequence[int], *,
         baseline: str | None = None, alpha: float = 0.05, budget: int | None = None,
         cost: Callable[[str], tuple[float, ...]] | None = None, readings: Sequence[str] | None = None,
         reading_evidence: str = "scored") -> Race:
    """Race the candidates `keys` (see the module docstring).

    `score(key, n)` scores a candidate on the first n validation examples ({example: score in [0, 1]};
    with `readings`, {reading: {example: score}} for every reading), or raises `CandidateFailed` (the
    candidate leaves the race as failing; if every one fails, the race raises it); it is called with
    growing n, and is expected to reuse what it scored before (cached rows). `sizes` are the rungs
    (`doubling_sizes`); `baseline` the key of the program as written; `budget` the most candidate-example
    evaluations to spend (None: no limit; the first rung always runs; a candidate's readings count once);
    `cost(key)` a sortable cost for the tie rule (default: none, so the best score decides); `readings`
    the ways of reading a candidate's completions, the program as written's first; `reading_evidence`
    whose scores decide a reading: "scored" (every candidate scored, dropped ones too) or "contention"
    (those still in the race: the rule before 2026-12-07).
    """
    _check_race(keys, sizes, alpha, budget, readings, reading_evidence)
    order = {key: i for i, key in enumerate(keys)}
    level = alpha / len(sizes)
    alive = list(keys)
    done = {key: 0 for key in keys}
    by_reading: dict[str, Mapping[str, Scores]] = {}
    latest: dict[str, Scores] = {}
    drops: dict[str, Drop] = {}
    failed: dict[str, str] = {}
    tests: list[ReadingTest] = []
    ran: list[int] = []
    spent, needed, stopped = 0, 0, "the validation part is used up"
    leader, reading = keys[0], (readings[0] if readings else None)

    def rank(key: str) -> tuple:
        return (-_mean(latest[key]), key != baseline, order[key])

    for rung, n in enumerate(sizes, start=1):
        n, last, over = _next_rung(n, ran, budget, spent, sum(n - done[key] for key in alive), len(alive))
        if over:
            stopped = over
            break
        for key in list(alive):
            spent += n - done[key]
            done[key] = n
            try:
                by_reading[key] = score(key, n) if readings else {None: score(key, n)}
            except CandidateFailed as error:
                failed[key] = str(error)
                alive.remove(key)
        ran.append(n)
        if not alive:
            raise CandidateFailed("every candidate failed; the first: " + next(iter(failed.values())))
        if readings and len(readings) > 1:
            voters = alive if reading_evidence == "contention" else [key for key in by_reading if key not in failed]
            reading, looked = _decide_reading(readings, reading, by_reading, voters, rung, n, level)
            tests += looked
        latest = {key: scores[reading] for key, scores in by_reading.items()}
        leader = min(alive, key=rank)
        if _drop_beaten(alive, leader, latest, rung, n, level, drops):
            needed = n
        if len(alive) == 1:
            stopped = "one candidate is left"
            break
        if last:
            stopped = f"the budget of {budget} is spent (a last rung of {n} examples for the {len(alive)} in contention)"
            break
    chosen, rule, needed = _settle(alive, baseline, cost, rank, ran, tests, needed)
    return Race(chosen, rule, alive, drops, ran, needed or ran[-1], spent, level, stopped, leader,
                {key: round(_mean(s), 2) for key, s in latest.items()}, failed, reading, tests,
                reading_evidence if readings else None)
