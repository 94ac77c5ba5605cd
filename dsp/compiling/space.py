"""What `dsp.compile` searches: candidates that differ in their demonstrations and in the program's options.

A candidate is plain data: its demonstrations (`kind` "none": the program draws its own from the
training set, as written by hand, alone (the baseline) or with other option values; "raw": k training
examples as they are; "augmented": k bootstrapped traces that passed, then raw ones up to k; "gold": k
bootstrapped traces whose context held a gold answer, labelled with it, then raw ones; `select`
"random" with a seed, or "knn": the k nearest to each question), the program's option values, and the
name of the retriever. An option can be moot under another's value (`Space.moot`: passage order when
k=1): it is then left out, and the candidates it would have told apart are one.

An option can be *free* (`Space.free`): it changes no LM or RM call, only how the program reads its
completions (which sampled answers vote). It is no dimension of the candidates: each candidate is scored
under every *reading* (a value of each free option) from the same cached calls, and the race decides the
reading on the evidence of all candidates together (`racing.py`).

>>> space = Space(options={"k": [1, 3], "vote": ["all", "extractive"]}, free=("vote",),
...               demos=DemoSpace(kinds=("raw",), ks=(3,), selects=("knn",)))
>>> written = {"k": 1, "vote": "all"}   # where every candidate starts: the program as written
>>> [c.key for c in space.grid(written)], [space.reading_name(r) for r in space.readings(written)]
(['baseline', 'baseline-k3', 'raw3-knn-k1', 'raw3-knn-k3'], ['voteall', 'voteextractive'])
>>> for c in space.grid(written)[:3]:
...     print([space.read(c, r, written).key for r in space.readings(written)])
['baseline', 'baseline-voteextractive']
['baseline-k3', 'baseline-k3-voteextractive']
['raw3-knn-k1-voteall', 'raw3-knn-k1-voteextractive']

>>> space = Space(options={"k": [1, 3]}, demos=DemoSpace(kinds=("raw",), ks=(3,), selects=("random",)))
>>> [c.key for c in space.candidates(4, seed=0)]
['baseline', 'baseline-k3', 'raw3-random0-k3', 'raw3-random1-k1']
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..utils import is_int

__all__ = ["DemoSpace", "Space", "Candidate", "DEMO_KINDS", "SELECTIONS"]

DEMO_KINDS = ("raw", "augmented", "gold")
SELECTIONS = ("random", "knn")


@dataclass(frozen=True)
class DemoSpace:
    """The demonstrations to try: which kinds, how many (`ks`), chosen how (`selects`), and how many
    random draws (`seeds`) of each."""

    kinds: tuple[str, ...] = DEMO_KINDS
    ks: tuple[int, ...] = (3, 5, 8)
    selects: tuple[str, ...] = ("random", "knn")
    seeds: int = 2

    def __post_init__(self) -> None:
        for value, valid, name in ((self.kinds, DEMO_KINDS, "kinds"), (self.selects, SELECTIONS, "selects")):
            unknown = [v for v in value if v not in valid]
            if unknown or not value:
                raise ValueError(f"DemoSpace.{name}: choose from {', '.join(valid)}, got {value!r}")
        if not self.ks or any(not is_int(k) or k < 1 for k in self.ks):
            raise ValueError(f"DemoSpace.ks must be positive integers, got {self.ks!r}")
        if not is_int(self.seeds) or self.seeds < 1:
            raise ValueError(f"DemoSpace.seeds must be a positive integer, got {self.seeds!r}")

    def choices(self) -> list[dict[str, Any]]:
        out = []
        for kind, k, select in itertools.product(self.kinds, self.ks, self.selects):
            for seed in range(self.seeds if select == "random" else 1):
                out.append({"kind": kind, "k": k, "select": select, "seed": seed})
        return out


def _features(candidate: "Candidate") -> list[tuple[str, str]]:
    """The values a candidate picks, as (dimension, value) pairs: what `Space.candidates` balances."""
    demos = candidate.demos
    found = [("demos.kind", str(demos.get("kind"))), ("demos.k", str(demos.get("k"))),
             ("demos.select", str(demos.get("select")))]
    found += [(f"option.{name}", repr(value)) for name, value in sorted(candidate.options.items())]
    return found + [("rm", str(candidate.rm))]


def _same(a: Any, b: Any) -> bool:
    """Equal with their types: True is not the 1 of k=1."""
    return type(a) is type(b) and a == b


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "_", str(value)).strip("_") or "_"


@dataclass(frozen=True)
class Candidate:
    """One point of the search: demonstrations, option values, retriever name (None: the current RM)."""

    demos: Mapping[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    rm: str | None = None

    @property
    def key(self) -> str:
        """A short stable name, also the file name of its results."""
        if self.demos.get("kind") == "none":
            head = "baseline"
        else:
            head = f"{self.demos['kind']}{self.demos['k']}-{self.demos['select']}"
            head += str(self.demos["seed"]) if self.demos["select"] == "random" else ""
        parts = [head] + [f"{_slug(k)}{_slug(v)}" for k, v in sorted(self.options.items())]
        parts += [f"rm_{_slug(self.rm)}"] if self.rm else []
        return "-".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "demos": dict(self.demos), "options": dict(self.options), "rm": self.rm}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Candidate":
        return cls(dict(data["demos"]), dict(data.get("options") or {}), data.get("rm"))


@dataclass(frozen=True)
class Space:
    """The whole search space: option values (`options`: name -> values to try), demonstrations, and
    retrievers (`rms`: names of RMs given to `dsp.compile`, tried beside the current one)."""

    options: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    demos: DemoSpace = field(default_factory=DemoSpace)
    rms: Sequence[str] = ()
    # option -> {other option: its values under which this one has no effect}, e.g. {"order": {"k": [1]}}
    moot: Mapping[str, Mapping[str, Sequence[Any]]] = field(default_factory=dict)
    # options that change no LM or RM call, only how completions are read: readings, not candidates
    free: Sequence[str] = ()

    def __post_init__(self) -> None:
        for name, values in self.options.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
                raise ValueError(f"search space option {name!r}: give a non-empty list of values, got {values!r}")
        for name, when in self.moot.items():
            if not isinstance(when, Mapping) or not when or any(
                    isinstance(v, (str, bytes)) or not isinstance(v, Sequence) for v in when.values()):
                raise ValueError(f"search space moot[{name!r}]: give {{option: [values]}}, got {when!r}")
        if isinstance(self.free, (str, bytes)) or any(name not in self.options for name in self.free):
            raise ValueError(f"search space free: give a list of searched options, got {self.free!r} "
                             f"(searched: {sorted(self.options)})")

    def _relevant(self, options: Mapping[str, Any], fixed: Mapping[str, Any]) -> dict[str, Any]:
        """`options` without those made moot by another value (searched, or fixed for every candidate)."""
        values = {**fixed, **options}

        def moot(name: str) -> bool:
            return any(other in values and any(_same(v, values[other]) for v in moot_values)
                       for other, moot_values in self.moot.get(name, {}).items())

        return {name: value for name, value in options.items() if not moot(name)}

    def grid(self, fixed: Mapping[str, Any] | None = None) -> list[Candidate]:
        """Every distinct combination (the baseline first); `fixed` are the options every candidate
        starts from (the program's defaults and a preset), which can make a searched one moot. The
        program's own demonstrations are one of the demo choices: the program as written with another
        option value (its own demos and another k) is a candidate too; with the value it starts from,
        it is the baseline again and left out.

        >>> space = Space(options={"k": [1, 3], "order": ["relevance", "lost_in_the_middle"]},
        ...               demos=DemoSpace(kinds=("raw",), ks=(3,), selects=("knn",)), moot={"order": {"k": [1]}})
        >>> [c.key for c in space.grid(fixed={"k": 1})][:4]
        ['baseline', 'baseline-k3-orderrelevance', 'baseline-k3-orderlost_in_the_middle', 'raw3-knn-k1']
        >>> [c.key for c in Space(options={"order": ["relevance", "lost_in_the_middle"]},
        ...                       moot={"order": {"k": [1]}}, demos=space.demos).grid(fixed={"k": 1})]
        ['baseline', 'raw3-knn']
        """
        fixed = dict(fixed or {})
        names = sorted(n for n in self.options if n not in self.free)
        option_sets = [self._relevant(dict(zip(names, values)), fixed)
                       for values in itertools.product(*(self.options[n] for n in names))]
        rms: Sequence[str | None] = [None, *self.rms]  # None: the current RM, as the program was written for
        out = [Candidate({"kind": "none"}, {}, None)]
        seen: set[str] = {out[0].key}
        for demos, options, rm in itertools.product([{"kind": "none"}, *self.demos.choices()], option_sets, rms):
            if demos["kind"] == "none":  # a value the program already has changes nothing in it
                options = {name: value for name, value in options.items()
                           if not (name in fixed and _same(value, fixed[name]))}
            candidate = Candidate(demos, options, rm)
            if candidate.key not in seen:
                seen.add(candidate.key)
                out.append(candidate)
        return out

    def readings(self, fixed: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every combination of the free options' values, the program as written's first (a value in
        `fixed`, the options every candidate starts from, else the first listed); [{}] when none is free."""
        fixed = dict(fixed or {})
        names = sorted(self.free)
        values = []
        for name in names:
            written = fixed[name] if name in fixed else self.options[name][0]
            values.append([written, *(v for v in self.options[name] if not _same(v, written))])
        return [dict(zip(names, combination)) for combination in itertools.product(*values)]

    @staticmethod
    def reading_name(reading: Mapping[str, Any]) -> str:
        """A reading's short name, as in a candidate's key (`{}`: "as written")."""
        return "-".join(f"{_slug(k)}{_slug(v)}" for k, v in sorted(reading.items())) or "as written"

    def read(self, candidate: Candidate, reading: Mapping[str, Any], fixed: Mapping[str, Any] | None = None
             ) -> Candidate:
        """The candidate under a reading (a free value moot under its options is left out, and a value the
        program as written already has changes nothing in it, as in `grid`)."""
        fixed = dict(fixed or {})
        options = self._relevant({**candidate.options, **reading}, fixed)
        if candidate.demos.get("kind") == "none":
            options = {name: value for name, value in options.items()
                       if name in candidate.options or not (name in fixed and _same(value, fixed[name]))}
        return Candidate(candidate.demos, options, candidate.rm)

    def candidates(self, n: int, seed: int = 0, fixed: Mapping[str, Any] | None = None) -> list[Candidate]:
        """The baseline (the program as written) and n-1 others: all of them when the grid is that
        small, else a seeded sample that covers every value evenly, in the grid's order.

        Why even coverage: a plain random sample of a few points from a big grid can miss a whole
        value (five draws from 216 once all had demos without their passages, the value that mattered).
        Each pick is the candidate whose values (demo kind, k, selection, each option, retriever) have
        been picked least so far, ties broken by a seeded shuffle.

        >>> space = Space(options={"k": [1, 2, 3]}, demos=DemoSpace(kinds=("raw",), ks=(3, 5), selects=("random",),
        ...                                                         seeds=1))
        >>> sorted(c.options["k"] for c in space.candidates(4)[1:])  # 3 of 6: every k once
        [1, 2, 3]
        """
        if not is_int(n) or n < 1:
            raise ValueError(f"the number of candidates must be a positive integer, got {n!r}")
        grid = self.grid(fixed)
        if n >= len(grid):
            return grid
        order = list(range(1, len(grid)))
        random.Random(f"compile-{seed}").shuffle(order)
        rank = {index: position for position, index in enumerate(order)}
        features = {i: _features(grid[i]) for i in order}
        used: dict[tuple[str, str], int] = {}
        chosen: list[int] = []
        for _ in range(n - 1):
            best = min((i for i in order if i not in chosen),
                       key=lambda i: (sum(used.get(f, 0) for f in features[i]), rank[i]))
            chosen.append(best)
            for feature in features[best]:
                used[feature] = used.get(feature, 0) + 1
        return [grid[0]] + [grid[i] for i in sorted(chosen)]
