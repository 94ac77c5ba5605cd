"""Put results files side by side: each run's score with its interval on the examples all of them share,
the runs that differ only by seed summarised (mean, spread, best), and every run paired with the first.

The paired test is the exact McNemar test for right/wrong metrics (EM) and the exact sign test for
graded ones (F1): both count the examples one run scored higher on than the other (`dsp.stats.paired`).
Runs are compared only when their metric, task and dev split agree; each file's own header says so.

For example, on two results files (shown, not run as a doctest; `format_comparison`'s own example
prints such a table)::

    table = compare_runs(["runs/nq-dsp-compiled-seed0.jsonl", "runs/nq-retrieve_then_read-seed0.jsonl"],
                         n=300)
    print(format_comparison(table))
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..stats import paired, score_interval
from ..utils import check_positive_int, is_int, is_number
from .log import BadRow, RunMismatch, _flatten, finished_by_index, identity_diff, read_run
from .rows import canonical

__all__ = ["compare_runs", "format_comparison", "Comparison", "RunScore", "SeedGroup", "IncompleteRun"]

# What makes two runs comparable: the same metric on the same examples (identity keys of `dsp run`).
_SAME = ("metric", "task", "split", "dev", "test")
# Identity keys a training seed decides: runs that differ only there are one setting over seeds.
_SEEDED = ("seed", "program.keywords.train.items", "program.keywords.train.sha256", "lm.defaults.seed")


class IncompleteRun(ValueError):
    """A results file lacks some of the examples it is to be compared on."""


@dataclass(frozen=True)
class RunScore:
    """One run on the compared examples: its score (percent), 95% interval, and against the first run
    (`paired`: n, a_only = examples only the first scored higher on, b_only = only this one, p)."""

    name: str
    path: str
    seed: Any
    n: int
    score: float
    low: float
    high: float
    errors: int
    paired: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class SeedGroup:
    """Runs whose identity differs only by seed: their mean, sample standard deviation and best."""

    name: str
    members: tuple[str, ...]
    seeds: tuple[Any, ...]
    mean: float
    sd: float
    best: str
    best_score: float


@dataclass
class Comparison:
    """What `compare_runs` found; `format_comparison` prints it."""

    runs: list[RunScore]
    groups: list[SeedGroup] = field(default_factory=list)
    n: int = 0
    binary: bool = True
    notes: list[str] = field(default_factory=list)


def _load(path: Path, n: int | None, skip: int = 0) -> tuple[dict[str, Any], dict[int, dict[str, Any]], list[int]]:
    if path.is_dir():
        raise FileNotFoundError(f"{path}: a directory; give its results files (e.g. {path}/*.jsonl)")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file")
    identity, rows = read_run(path)
    if identity is None:
        raise RunMismatch(f"{path}: not a results file of dsp.evaluate / dsp run (it has no header line)")
    # The rule resume reads rows by (the last finished row of an example), duplicates named in a warning.
    every, duplicated = finished_by_index(rows, path)
    by_index = {index: row for index, row in every.items()
                if index >= skip and (n is None or index < n)}
    for index, row in sorted(by_index.items()):
        row["score"] = _checked_score(path, index, row)
    if n is not None:
        missing = [i for i in range(skip, n) if i not in by_index]
        if missing:
            what = f"the first {n} examples" if not skip else f"examples {skip} to {n - 1}"
            raise IncompleteRun(f"{path}: has {n - skip - len(missing)} of {what} (first missing: index "
                                f"{missing[0]}): finish it with the command that made it, or compare fewer")
    return identity, by_index, [index for index in duplicated if index in by_index]


def _checked_score(path: Path, index: int, row: Mapping[str, Any]) -> float:
    """The row's score, refused (`BadRow`, naming file and row) unless a number in [0, 1]: every metric
    here scores an example between 0 and 1, and a NaN, an infinity, a 5 or a text would make a table
    of impossible figures. A failed example's row scores 0 as written."""
    score = row.get("score")
    if not is_number(score) or not math.isfinite(score) \
            or not 0.0 <= score <= 1.0:
        shown = json.dumps(score)[:40]  # as the file has it: NaN, Infinity, "abc", {...}
        raise BadRow(f"{path}: the row of example {index} (id {row.get('id')!r}) has score {shown}: "
                     f"not a number between 0 and 1")
    return float(score)


def _same_example(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two rows are of one example: by fingerprint when both have one, else by question text."""
    if a.get("fingerprint") is not None and b.get("fingerprint") is not None:
        return a["fingerprint"] == b["fingerprint"]
    if "question" in a and "question" in b:
        return a["question"] == b["question"]
    return True  # nothing to compare beyond index and id, which the key already holds


def _key(row: Mapping[str, Any]) -> str:
    return f"{row['index']}:{row.get('id')}"


def compare_runs(paths: Sequence[str | os.PathLike], n: int | None = None, skip: int = 0) -> Comparison:
    """Compare the runs in `paths` (results files of `dsp.evaluate` or `dsp run`) on the first `n`
    examples of each (all of them must have these), or without `n` on the examples every file has;
    `skip` leaves out the first examples (e.g. those a design decision was made on: the rest are a clean test).

    The first file is the one every other is paired with (e.g. the compiled program against the seeds
    of a baseline). Raises `FileNotFoundError`, `RunMismatch` (no header; another metric, task or dev
    split) or `IncompleteRun`, each naming the file.
    """
    if not paths:
        raise ValueError("compare_runs needs at least one results file")
    check_positive_int(n, "n", optional=True)
    if not is_int(skip) or skip < 0 or (n is not None and skip >= n):
        raise ValueError(f"skip must be a non-negative integer below n, got {skip!r}" + (f" with n={n}" if n else ""))
    loaded, incomplete = [], []
    for p in paths:
        try:
            loaded.append((Path(p), *_load(Path(p), n, skip)))
        except IncompleteRun as error:  # name every file that lacks examples, not just the first
            incomplete.append(str(error))
    if incomplete:
        raise IncompleteRun("; ".join(incomplete))
    duplicates = [f"{path.name}: examples {', '.join(map(str, found[:10]))}{' ...' if len(found) > 10 else ''} "
                  "have more than one finished row; the last of each is used" for path, _, _, found in loaded if found]
    loaded = [(path, identity, rows) for path, identity, rows, _ in loaded]
    first_path, first_identity, _ = loaded[0]
    for path, identity, _ in loaded[1:]:
        changed = identity_diff({k: first_identity.get(k) for k in _SAME}, {k: identity.get(k) for k in _SAME})
        if changed:
            raise RunMismatch(f"{path} and {first_path} were not scored alike ({'; '.join(changed)}): "
                              "compare runs of one metric on one dev set")
    names = [path.name.removesuffix(".jsonl") for path, _, _ in loaded]
    if len(set(names)) < len(names):
        names = [str(path) for path, _, _ in loaded]
    scores = [{_key(row): row["score"] for row in rows.values()} for _, _, rows in loaded]
    shared = set.intersection(*(set(s) for s in scores))
    if not shared:
        raise IncompleteRun(f"{', '.join(str(p) for p in paths)}: these runs share no example")
    # Rows paired by index and id must be of one question: a dev set drawn otherwise pairs strangers.
    first_rows = {_key(row): row for row in loaded[0][2].values()}
    for path, _, rows in loaded[1:]:
        for row in rows.values():
            key = _key(row)
            if key in shared and not _same_example(first_rows[key], row):
                raise RunMismatch(f"{path}: the row of example {row['index']} (id {row.get('id')!r}) is not the "
                                  f"question of that example in {first_path} (their fingerprints differ): "
                                  "compare runs on one dev set")
    notes = [f"{name}: {len(s)} examples, compared on the {len(shared)} every run has"
             for name, s in zip(names, scores) if len(s) > len(shared)]
    if skip:
        notes.insert(0, f"the first {skip} examples left out")
    notes += duplicates
    binary = all(v in (0.0, 1.0) for s in scores for key, v in s.items() if key in shared)
    first = {key: scores[0][key] for key in shared}
    runs: list[RunScore] = []
    for i, ((path, identity, rows), name, s) in enumerate(zip(loaded, names, scores)):
        values = [s[key] for key in sorted(shared)]
        low, high = score_interval(values)
        errors = sum(1 for row in rows.values() if _key(row) in shared and row.get("error") is not None)
        runs.append(RunScore(name, str(path), identity.get("seed"), len(values), 100 * sum(values) / len(values),
                             100 * low, 100 * high, errors,
                             paired(first, {key: s[key] for key in shared}) if i else None))
    return Comparison(runs, _seed_groups(loaded, runs), len(shared), binary, notes)


def _seed_groups(loaded: list, runs: list[RunScore]) -> list[SeedGroup]:
    """Runs with one identity but for the seed, in the order they were given (groups of two or more)."""
    groups: dict[str, list[int]] = {}
    for i, (_, identity, _) in enumerate(loaded):
        # What a seed decides (the seed, the training draw and the LM's sampling seed) and unset keys aside.
        rest = [(k, repr(v)) for k, v in sorted(_flatten(canonical(identity)).items())
                if k not in _SEEDED and v is not None]
        groups.setdefault(repr(rest), []).append(i)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        chosen = [runs[i] for i in members]
        best = max(chosen, key=lambda r: r.score)
        values = [r.score for r in chosen]
        out.append(SeedGroup(_common_name([r.name for r in chosen], [r.seed for r in chosen]),
                             tuple(r.name for r in chosen), tuple(r.seed for r in chosen), statistics.mean(values),
                             statistics.stdev(values), best.name, best.score))
    # Two groups can share a name prefix (one compiler's seeds that chose two programs): name their members
    # then, or the table shows one name with two means.
    stems = [group.name.rsplit(" (", 1)[0] for group in out]
    return [replace(group, name=_with_members(group)) if stems.count(stem) > 1 else group
            for group, stem in zip(out, stems)]


def _name_stem(names: Sequence[str]) -> str:
    """The names' common prefix, cut back to a separator where it ends inside a word: "c-small-" for
    "c-small-scored-seed0" and "c-small-seed0", not "c-small-s"."""
    stem = os.path.commonprefix(list(names))
    if all(len(name) == len(stem) or name[len(stem)] in "-_" for name in names):
        return stem
    return stem[:max(stem.rfind("-"), stem.rfind("_")) + 1]


def _with_members(group: SeedGroup) -> str:
    stem = _name_stem(group.members)
    stem = stem[:max(stem.rfind("-"), stem.rfind("_")) + 1]  # members' parts start after a separator
    parts = [member[len(stem):] or member for member in group.members]
    return f"{group.name.removesuffix(')')}: {stem}{{{', '.join(parts)}}})"


def _common_name(names: list[str], seeds: list[Any]) -> str:
    stem = _name_stem(names).rstrip("-_")
    # Files of one identity and one seed (one compiled program run from several compile seeds' files) are
    # repeats of one run, not seeds of it.
    texts = set(map(str, seeds))
    numeric = sorted((s for s in texts if s.isdigit()), key=int)  # seeds 2, 10: not "10, 2" as text sorts
    distinct = numeric + sorted(texts - set(numeric))
    if len(distinct) == len(seeds):
        counted = f"{len(names)} seeds"
    else:
        counted = f"{len(names)} runs, seed{'s' if len(distinct) > 1 else ''} {', '.join(distinct)}"
    return (stem.removesuffix("-seed") or names[0]) + f" ({counted})"


def format_comparison(table: Comparison, markdown: bool = False) -> str:
    """The comparison as a plain-text (or markdown) table, then the seed groups.

    >>> a = RunScore("compiled", "compiled.jsonl", 0, 300, 31.3, 26.3, 36.8, 0)
    >>> b = RunScore("rtr", "rtr.jsonl", 0, 300, 29.7, 24.8, 35.1, 0, {"a_only": 20, "b_only": 15, "p": 0.4996})
    >>> print(format_comparison(Comparison([a, b], n=300)))
    run         n  score  95% CI     first / this    p
    compiled  300   31.3  26.3–36.8
    rtr       300   29.7  24.8–35.1  20 / 15       0.5
    first / this: examples only the first run (compiled) / only this run scored higher on
    p: exact McNemar test on the 300 examples
    """
    test = "McNemar test" if table.binary else "sign test"
    first = table.runs[0].name
    header = ["run", "n", "score", "95% CI", "first / this", "p"]
    body = []
    for run in table.runs:
        pair = run.paired
        body.append([run.name, str(run.n), f"{run.score:.1f}", f"{run.low:.1f}–{run.high:.1f}"]
                    + ([f"{pair['a_only']} / {pair['b_only']}", f"{pair['p']:.2g}"] if pair else ["", ""]))
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
    else:
        widths = [max(len(row[c]) for row in [header, *body]) for c in range(len(header))]
        lines = ["  ".join(cell.ljust(widths[c]) if c in (0, 3, 4) else cell.rjust(widths[c])
                           for c, cell in enumerate(row)).rstrip() for row in [header, *body]]
    lines += [f"{g.name}: mean {g.mean:.1f}, sd {g.sd:.1f}, best {g.best_score:.1f} ({g.best})" for g in table.groups]
    lines += [f"{run.name}: {run.errors} of its examples failed (scored 0)" for run in table.runs if run.errors]
    lines += table.notes
    if len(table.runs) > 1:
        lines += [f"first / this: examples only the first run ({first}) / only this run scored higher on",
                  f"p: exact {test} on the {table.n} examples"]
    return "\n".join(lines)
