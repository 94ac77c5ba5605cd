"""The search table as text (`report`), and its order: those still in the race first.

A row is one candidate: its key, examples run (`n`), score and 95% interval (over the examples that ran
without an error; None when none did), `errors`, whether it is `alive`, and, when set, its pairing with
the program as written (`vs_baseline`), the evidence that `dropped` it, or why it `failed`. With free
options (`Space.free`), a row is a candidate under one `reading`: only the reading chosen is alive.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["report", "table_order"]


def table_order(row: Mapping[str, Any]) -> tuple[bool, int, float]:
    """Those still in the race first, then by examples scored, then by score (one with no score last)."""
    score = row.get("score")
    return (not row.get("alive", True), -row["n"], -score if score is not None else math.inf)


def report(table: Sequence[Mapping[str, Any]], race: Mapping[str, Any] | None = None) -> str:
    """The search table as text, those still in the race first, then by examples scored and score:
    candidate, examples scored, score and its 95% interval, against the program as written (examples only
    it / only the baseline scored higher on, and the exact paired p-value, on the examples both ran), and
    for a dropped candidate the evidence that dropped it (the leader's wins / its own, the one-sided p).
    A candidate whose examples raised is "failed" (it left the race): `errors` counts them, and its score
    and interval are over the examples that ran ("-" when none did), never with the errors scored as wrong
    answers. With the race's summary (`Compiled.meta["race"]`), the last lines say why each failed and
    what was chosen.

    >>> print(report([{"key": "baseline", "n": 40, "score": 30.0, "low": 18.1, "high": 45.4, "alive": True},
    ...               {"key": "gold8-knn", "n": 20, "score": 5.0, "low": 0.9, "high": 23.6, "alive": False,
    ...                "vs_baseline": {"n": 20, "a_only": 0, "b_only": 6, "p": 0.031},
    ...                "dropped": {"rung": 1, "n": 20, "by": "baseline", "leader_only": 6, "this_only": 0,
    ...                            "p": 0.0156}},
    ...               {"key": "raw3-knn", "n": 20, "score": None, "low": None, "high": None, "errors": 20,
    ...                "alive": False, "failed": "raw3-knn: 20 of 20 examples failed"}]))
    candidate   n  score  errors  95% CI        vs baseline    dropped
    baseline   40   30.0       0  [18.1, 45.4]
    gold8-knn  20    5.0       0  [0.9, 23.6]   +0 -6 p=0.031  at 20 by baseline: 6/0 p=0.016
    raw3-knn   20      -      20  -                            failed
    """
    header = ["candidate", "n", "score", "errors", "95% CI", "vs baseline", "dropped"]
    body = []
    for row in sorted(table, key=table_order):
        pair, drop, score = row.get("vs_baseline"), row.get("dropped"), row.get("score")
        why = (f"at {drop['n']} by {drop['by']}: {drop['leader_only']}/{drop['this_only']} p={drop['p']:.2g}"
               if drop else "failed" if row.get("failed")
               else "another reading" if "reading" in row and not row.get("alive", True) else "")
        body.append([row["key"], str(row["n"]), "-" if score is None else f"{score:.1f}", str(row.get("errors", 0)),
                     "-" if row.get("low") is None else f"[{row['low']:.1f}, {row['high']:.1f}]",
                     f"+{pair['a_only']} -{pair['b_only']} p={pair['p']:.2g}" if pair else "", why])
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    # Two spaces between every column, numbers right-aligned: no two columns can run together.
    lines = ["  ".join(cell.rjust(widths[c]) if c in (1, 2, 3) else cell.ljust(widths[c])
                       for c, cell in enumerate(r)).rstrip() for r in [header, *body]]
    lines += [f"failed: {why}" for why in (race or {}).get("failed", {}).values()]
    if race and race.get("reading") is not None:
        lines.append(_reading_line(race))
    if race:
        read = f", read as {race['reading']}" if race.get("reading") is not None else ""
        lines.append(f"chosen: {race['chosen']}{read} ({race['rule']}); the choice needed {race['needed']} validation "
                     f"questions; {race['spent']} of {race.get('budget')} evaluations spent; stopped: "
                     f"{race['stopped']}; each drop at p < {race['level']:.2g}")
    return "\n".join(lines)


def _reading_line(race: Mapping[str, Any]) -> str:
    """How the reading was decided: the test that switched to it, else the last look at each other one.
    Whose scores were summed follows the race's `reading_evidence` (a compile before 2026-12-07 records
    none: it summed the candidates in contention).

    >>> print(_reading_line({"reading": "voteTrue", "reading_evidence": "scored", "reading_tests": [
    ...     {"rung": 1, "n": 20, "incumbent": "voteFalse", "challenger": "voteTrue", "wins": 9, "losses": 0,
    ...      "p": 0.002, "level": 0.01, "switched": True}]}))
    reading: voteTrue, chosen over voteFalse at 20 questions: ahead on 9 examples, behind on 0 (summed over
      every candidate scored, dropped ones too), p=0.002 < 0.01
    """
    tests = race.get("reading_tests") or []
    switched = [t for t in tests if t["switched"]]
    whose = ("every candidate scored, dropped ones too" if race.get("reading_evidence") == "scored"
             else "the candidates in contention")
    if switched:
        t = switched[-1]
        return (f"reading: {race['reading']}, chosen over {t['incumbent']} at {t['n']} questions: ahead on {t['wins']} "
                f"examples, behind on {t['losses']} (summed over\n  {whose}), p={t['p']:.2g} "
                f"< {t['level']:.2g}")
    last = {t["challenger"]: t for t in tests}
    looks = "; ".join(f"{name} +{t['wins']} -{t['losses']} p={t['p']:.2g} at {t['n']}" for name, t in last.items())
    return (f"reading: {race['reading']} (as written; no other was ahead on enough examples, summed over {whose}: "
            f"{looks or 'none looked at'})")
