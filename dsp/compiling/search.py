"""`dsp.compile`: tune a program by search on its training data, not by hand.

The training set is split (seeded) into a *pool* and a *validation* part. DEMONSTRATE candidates come
from the pool: raw examples, or augmented traces bootstrapped by running the program itself on pool
examples (`bootstrap`: those that passed, or those whose context held the answer, gold-labelled); each
candidate also sets the program's own options (k, n, temperature, chain of thought, passage order, ...)
and may name a retriever. Every candidate is scored on the validation part
only, by `dsp.evaluate` (parallel, every call cached, each candidate's rows in a resumable file of its
own), with successive halving: all candidates on the first quarter, the best third on half, the best
of those on all of it, and the program as written on every rung beside them (a tie goes to it). The
best becomes a `Compiled` program; the table of candidates, with their scores and intervals, goes
with it. Nothing outside the training set reaches the LM.

>>> compiled = dsp.compile(partial(open_qa.dsp_program), pool, dsp.EM,                    # doctest: +SKIP
...                        space=Space(options={"k": [1, 3]}), candidates=8, out="runs/compile/nq-dsp")
>>> print(report(compiled.table))                                                          # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import math
import os
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..clients.lm import LM, Usage
from ..clients.rm import RM
from ..evaluation import QA_FIELDS, EvaluationResult, Fields, Runner, describe, evaluate
from ..example import Example
from ..metrics import EM
from ..primitives.demonstrate import sample
from ..settings import settings
from ..stats import paired
from .bootstrap import bootstrap_runs, demos_of_rows
from .compiled import Compiled, program_name
from .space import Candidate, Space

__all__ = ["compile", "split_train", "fixed_demos", "report"]

Wrap = Callable[[Callable[..., Any], list[Example]], Callable[..., Any]]


def split_train(trainset: Sequence[Example], val: int | None = None, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """(pool, validation): `val` examples (default a third, 10 to 100) held out by a seeded draw, the rest
    the pool demonstrations come from; both keep the training set's order.

    >>> pool, val = split_train([Example(question=str(i), answer=str(i)) for i in range(30)], val=10)
    >>> len(pool), len(val), {e.question for e in pool} & {e.question for e in val}
    (20, 10, set())
    """
    examples = [e if isinstance(e, Example) else Example(e) for e in trainset]
    size = max(10, min(100, len(examples) // 3)) if val is None else val
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"val must be a positive integer, got {val!r}")
    if size >= len(examples):
        raise ValueError(f"a validation part of {size} leaves no pool: the training set has {len(examples)} examples")
    held = set(random.Random(f"compile-val-{seed}").sample(range(len(examples)), size))
    return ([e for i, e in enumerate(examples) if i not in held], [e for i, e in enumerate(examples) if i in held])


def fixed_demos(kind: str, k: int, seed: int, augmented: list[Example], pool: list[Example]) -> list[Example]:
    """k demonstrations: raw ones drawn with `seed`, or (any other kind) bootstrapped ones first, then raw
    ones up to k.

    >>> pool = [Example(question=str(i)) for i in range(9)]
    >>> [d.question for d in fixed_demos("augmented", 3, 0, [Example(question="7", augmented=True)], pool)]
    ['7', '5', '1']
    """
    if kind == "raw":
        return sample(pool, k, seed=seed)
    chosen = sample(augmented, min(k, len(augmented)), seed=seed)
    taken = {d.get("question") for d in chosen}
    rest = [d for d in sample(pool, len(pool), seed=seed) if d.get("question") not in taken]
    return chosen + rest[:k - len(chosen)]


def _rungs(size: int, halving: bool) -> list[int]:
    if not halving or size < 12:
        return [size]
    return sorted({math.ceil(size / 4), math.ceil(size / 2), size})


def _client_spec(client: Any) -> str | None:
    return client.spec if isinstance(client, (LM, RM)) else None


def report(table: Sequence[Mapping[str, Any]]) -> str:
    """The search table as text, best first: candidate, examples scored, score and its 95% interval, the
    rung it reached, and against the program as written (examples only it / only the baseline scored
    higher on, and the exact paired p-value, on the validation examples both ran).

    >>> print(report([{"key": "baseline", "n": 10, "score": 30.0, "low": 10.8, "high": 60.3, "rung": 1},
    ...               {"key": "gold8-knn", "n": 10, "score": 60.0, "low": 31.3, "high": 83.2, "rung": 1,
    ...                "vs_baseline": {"n": 10, "a_only": 4, "b_only": 1, "p": 0.375}}]))
    candidate                                            n   score          95% CI  rung   vs baseline
    gold8-knn                                           10    60.0    [31.3, 83.2]     1  +4 -1 p=0.38
    baseline                                            10    30.0    [10.8, 60.3]     1
    """
    lines = [f"{'candidate':<48}{'n':>6}{'score':>8}{'95% CI':>16}{'rung':>6}{'vs baseline':>14}"]
    for row in sorted(table, key=lambda r: (-r["rung"], -r["score"])):
        interval = f"[{row['low']:.1f}, {row['high']:.1f}]"
        pair = row.get("vs_baseline")
        versus = f"+{pair['a_only']} -{pair['b_only']} p={pair['p']:.2g}" if pair else ""
        lines.append(f"{row['key'][:47]:<48}{row['n']:>6}{row['score']:>8.1f}{interval:>16}{row['rung']:>6}"
                     f"{versus:>14}".rstrip())
    return "\n".join(lines)


def compile(
    program: Callable[..., Any],
    trainset: Sequence[Mapping[str, Any]],
    metric: Callable[..., Any] = EM,
    *,
    space: Space | None = None,
    candidates: int = 8,
    fields: Fields = QA_FIELDS,
    val: int | None = None,
    bootstrap_limit: int | None = 40,
    require_context: bool = False,
    passing: float = 1.0,
    options: Mapping[str, Any] | None = None,
    rms: Mapping[str, Any] | None = None,
    runner: Runner | int = 1,
    out: str | os.PathLike | None = None,
    seed: int = 0,
    wrap: Wrap | None = None,
    vectorizer: str = "hashing",
    halving: bool = True,
    progress: bool = True,
) -> Compiled:
    """Search `space` for the best `candidates` of `program` on `trainset` and return the compiled program.

    `program(input, train=..., demos=..., **options)` is a DSP program that takes chosen demonstrations
    (the bundled programs do); `options` are where every candidate starts (e.g. a preset); a candidate's
    searched options override them.
    `rms` names the retrievers a candidate may choose besides the current one (`space.rms`; the compiled
    program keeps the one chosen, saved by its spec). `out` is a directory: the bootstrap
    and each candidate's rows go there, so a killed compile resumes without repeating what finished.
    `wrap(program, examples)` adapts a candidate to what `dsp.evaluate` calls (conversations turn by turn).
    A bootstrapped trace becomes an augmented demo when its score reaches `passing` (1.0: right; lower
    for graded metrics such as F1, where a good answer rarely scores 1).
    """
    if not callable(program):
        raise TypeError(f"compile needs a callable program, got {type(program).__name__}")
    space = space or Space()
    unknown = [name for name in space.rms if name not in (rms or {})]
    if unknown:
        raise ValueError(f"the search space names retrievers {unknown} that were not given in rms=")
    base_options = dict(options or {})
    # Where each candidate starts: the program's own values of the searched options, then `options`.
    start = {**_defaults(program, space.options), **base_options}
    started = time.perf_counter()
    pool, heldout = split_train(trainset, val, seed)
    for i, example in enumerate(heldout):
        fields.check(example, i)
    folder = Path(out) if out is not None else None
    chosen = space.candidates(candidates, seed, fixed=start)
    usage_before = _usage()

    # One bootstrap run gives both labellings: traces that passed, and traces whose context held the answer.
    bootstrapped: dict[str, list[Example]] = {"augmented": [], "gold": []}
    made: dict[str, list[dict[str, Any]]] = {}  # the rows behind the table: their cost, whichever call ran them
    if any(c.demos.get("kind") in bootstrapped for c in chosen):
        attempted, rows = bootstrap_runs(_with_train(program, pool), pool, metric, fields=fields, options=base_options,
                                         limit=bootstrap_limit, runner=runner, seed=seed,
                                         out=folder / "bootstrap.jsonl" if folder else None, wrap=wrap,
                                         progress=progress)
        bootstrapped = {"augmented": demos_of_rows(attempted, rows, fields=fields, require_context=require_context,
                                                   passing=passing),
                        "gold": demos_of_rows(attempted, rows, fields=fields, label="gold")}
        made["bootstrap"] = rows
        # A kind the bootstrap found no trace of would only repeat raw candidates under its name: drop it
        # and choose again from the kinds that have demos.
        empty = [kind for kind, found in bootstrapped.items() if not found and kind in space.demos.kinds]
        kept = tuple(kind for kind in space.demos.kinds if kind not in empty)
        if empty and kept:
            space = replace(space, demos=replace(space.demos, kinds=kept))
            chosen = space.candidates(candidates, seed, fixed=start)
    augmented = bootstrapped["augmented"]

    def candidate_program(candidate: Candidate) -> Compiled:
        demos, knn_pool = _demos_of(candidate, bootstrapped, pool)
        return Compiled(program, {**base_options, **candidate.options}, pool, demos, knn_pool,
                        int(candidate.demos.get("k") or 0) if knn_pool else 0, vectorizer, candidate.as_dict())

    def run(candidate: Candidate, size: int) -> EvaluationResult:
        runnable: Callable[..., Any] = candidate_program(candidate)
        examples = heldout[:size]
        if wrap is not None:
            runnable = wrap(runnable, examples)
        context = {"rm": _rm(rms, candidate.rm)} if candidate.rm else {}
        # The bootstrapped demos a candidate draws from are part of its identity and, by digest, of its file
        # name: a changed bootstrap rescores it in a new file (the old rows stay); raw ones do not depend on it.
        kind = candidate.demos.get("kind")
        drawn = {"bootstrapped": describe(bootstrapped[kind])} if kind in bootstrapped else {}
        name = candidate.key + (f"-{drawn['bootstrapped']['sha256'][:8]}" if drawn and bootstrapped[kind] else "")
        with settings.context(**context):
            return evaluate(runnable, examples, metric, fields=fields, runner=runner,
                            out=folder / "candidates" / f"{name}.jsonl" if folder else None,
                            run={"compile": {"program": program_name(program), "candidate": candidate.as_dict(),
                                             "options": describe(base_options), "seed": seed,
                                             "pool": describe(pool), **drawn}},
                            seed=seed, progress=False, display=False)

    table: dict[str, dict[str, Any]] = {}
    alive = list(chosen)
    bar = None
    rungs = _rungs(len(heldout), halving)
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=_rung_runs(len(chosen), rungs), desc="compile", unit="candidate")
    per_example: dict[str, dict[str, float]] = {}  # candidate -> {validation index: score}
    try:
        for rung, size in enumerate(rungs, start=1):
            scored = []
            for order, candidate in enumerate(alive):
                t0 = time.perf_counter()
                result = run(candidate, size)
                per_example[candidate.key] = {str(r["index"]): float(r.get("score") or 0.0) for r in result.rows}
                made[candidate.key] = result.rows
                low, high = result.confidence_interval()
                table[candidate.key] = {**candidate.as_dict(), "n": len(result.rows), "score": result.score,
                                        "low": low, "high": high, "rung": rung, "errors": len(result.errors),
                                        "seconds": round(time.perf_counter() - t0, 1)}
                scored.append((-result.score, order, candidate))
                if bar is not None:
                    bar.set_postfix_str(f"{candidate.key[:30]}={result.score:.1f}")
                    bar.update(1)
            scored.sort(key=lambda item: (item[0], item[1]))
            keep = 1 if rung == len(rungs) else max(2, math.ceil(len(scored) / 3))
            alive = [candidate for _, _, candidate in scored[:keep]]
            if rung < len(rungs):
                # The program as written runs every rung, first (a tie goes to it): a candidate is chosen
                # only after beating it on the whole validation part, not on a lucky quarter.
                alive = [chosen[0]] + [candidate for candidate in alive if candidate is not chosen[0]]
                if bar is not None:
                    bar.total = bar.n + _rung_runs(len(alive), rungs[rung:])
                    bar.refresh()
    finally:
        if bar is not None:
            bar.close()
    # Each candidate paired with the program as written on the validation examples both ran: whether a
    # gain is more than noise (the intervals alone overlap long before a paired test says so).
    baseline = per_example.get(chosen[0].key)
    for key, row in table.items():
        if baseline is not None and key != chosen[0].key:
            row["vs_baseline"] = paired(per_example[key], baseline)
    best = alive[0]
    final = candidate_program(best)
    after = _usage()
    usage = {key: after[key] - usage_before.get(key, 0) for key in after}
    meta = {"lm": _client_spec(settings.lm), "lm_name": settings.lm.name if isinstance(settings.lm, LM) else None,
            "rm": _client_spec(_rm(rms, best.rm)) if best.rm else _client_spec(settings.rm), "seed": seed,
            "pool": len(pool), "val": len(heldout), "augmented": len(augmented),
            "gold": len(bootstrapped["gold"]), "candidates": len(chosen), "demo_kinds": list(space.demos.kinds),
            "rungs": rungs, "trainset": describe(list(trainset)), "seconds": round(time.perf_counter() - started, 1),
            "lm_usage": usage, "rows_usage": _rows_cost(made)}
    # The candidate as it was scored (its options on top of the fixed ones, its retriever), with the search.
    chosen_rm = _rm(rms, best.rm) if best.rm else None
    return replace(final, table=sorted(table.values(), key=lambda r: (-r["rung"], -r["score"])), meta=meta,
                   rm=chosen_rm, rm_spec=_client_spec(chosen_rm) if chosen_rm is not None else None)


def _rung_runs(n: int, rungs: list[int]) -> int:
    """At most how many candidate runs the halving makes from `n` candidates: all of them, then on each later
    rung the best third (at least 2) plus the program as written (one fewer when it is among them).

    >>> _rung_runs(12, [20, 40, 80]), _rung_runs(3, [20, 40, 80]), _rung_runs(5, [60])
    (20, 9, 5)
    """
    total, alive = 0, n
    for rung in range(len(rungs)):
        total += alive
        alive = min(n, max(2, math.ceil(alive / 3)) + 1)
    return total


def _rows_cost(made: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, float]:
    """What the rows behind the search cost when they ran (a resumed compile reuses them for free): LM
    requests, tokens and seconds summed over the bootstrap's and every candidate's rows.

    >>> _rows_cost({"a": [{"usage": {"requests": 2, "prompt_tokens": 90}, "seconds": 1.5}], "b": [{"seconds": 0.5}]})
    {'requests': 2, 'cached_requests': 0, 'prompt_tokens': 90, 'completion_tokens': 0, 'seconds': 2.0}
    """
    total = {"requests": 0, "cached_requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    seconds = 0.0
    for rows in made.values():
        for row in rows:
            for key in total:
                total[key] += int((row.get("usage") or {}).get(key) or 0)
            seconds += float(row.get("seconds") or 0.0)
    return {**total, "seconds": round(seconds, 1)}


def _usage() -> dict[str, float]:
    lm = settings.lm
    usage = lm.usage if isinstance(lm, LM) else Usage()
    return usage.as_dict()


def _defaults(program: Callable[..., Any], names: Sequence[str]) -> dict[str, Any]:
    """The program's default value of each of `names` that its signature gives one."""
    try:
        parameters = inspect.signature(program).parameters
    except (TypeError, ValueError):  # a callable whose signature Python cannot read: no defaults known
        return {}
    return {name: p.default for name, p in parameters.items()
            if name in names and p.default is not inspect.Parameter.empty}


def _with_train(program: Callable[..., Any], train: list[Example]) -> Callable[..., Any]:
    from functools import partial

    return partial(program, train=train)


def _rm(rms: Mapping[str, Any] | None, name: str | None) -> Any:
    if name is None:
        return settings.rm
    return (rms or {})[name]


def _demos_of(candidate: Candidate, bootstrapped: Mapping[str, list[Example]], pool: list[Example]
              ) -> tuple[list[Example] | None, list[Example] | None]:
    """(fixed demos, knn pool) of a candidate; a bootstrapped kind with nothing bootstrapped uses raw ones."""
    spec = candidate.demos
    if spec.get("kind") == "none":
        return None, None
    found = bootstrapped.get(spec["kind"]) or []
    kind = spec["kind"] if found else "raw"
    if spec["select"] == "knn":
        return None, found if kind != "raw" else pool
    return fixed_demos(kind, int(spec["k"]), int(spec.get("seed") or 0), found, pool), None
