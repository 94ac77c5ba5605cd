"""`dsp.compile`: tune a program by search on its training data, not by hand.

The training set is split (seeded) into a *pool* and a *validation* part. DEMONSTRATE candidates come
from the pool: raw examples, or augmented traces bootstrapped by running the program itself on pool
examples (`bootstrap`: those that passed, or those whose context held the answer, gold-labelled); each
candidate also sets the program's own options (k, n, temperature, chain of thought, passage order, ...)
and may name a retriever. Every candidate is scored on the validation part
only, by `dsp.evaluate` (parallel, every call cached, each candidate's rows in a resumable file of its
own), in a race (`racing.py`): all candidates on the first 20 validation questions, then 40, 80, ...,
each dropped only when the leader beats it on paired evidence (an exact one-sided sign test whose
level bounds the chance that a leader ever drops a candidate as good as itself by `alpha`), the budget of
evaluations spent on those still in contention. Candidates left tied are settled by a declared rule
(the program as written if it is among them, else the cheapest), so seeds that see a tie choose alike.
The chosen one becomes a `Compiled` program; the table of candidates (scores, intervals, the evidence
that dropped each) goes with it. Nothing outside the training set reaches the LM.

>>> compiled = dsp.compile(partial(open_qa.dsp_program), pool, dsp.EM,                    # doctest: +SKIP
...                        space=Space(options={"k": [1, 3]}), candidates=8, out="runs/compile/nq-dsp")
>>> print(report(compiled.table))                                                          # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import os
import random
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..clients.lm import LM, Usage
from ..clients.rm import RM
from ..evaluation import QA_FIELDS, EvaluationResult, Fields, Runner, WriterLock, describe, evaluate
from ..example import Example
from ..metrics import EM
from ..primitives.demonstrate import sample
from ..settings import settings
from ..stats import paired
from .bootstrap import bootstrap_runs, demos_of_rows
from .compiled import Compiled, program_name
from .racing import CandidateFailed, doubling_sizes, race
from .space import Candidate, Space

__all__ = ["compile", "split_train", "fixed_demos", "report"]

Wrap = Callable[[Callable[..., Any], list[Example]], Callable[..., Any]]


def split_train(trainset: Sequence[Example], val: int | None = None, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """(pool, validation): `val` examples (default half, 10 to 400) held out by a seeded draw, the rest
    the pool demonstrations come from; both keep the training set's order.

    >>> pool, val = split_train([Example(question=str(i), answer=str(i)) for i in range(30)], val=10)
    >>> len(pool), len(val), {e.question for e in pool} & {e.question for e in val}
    (20, 10, set())
    """
    examples = [e if isinstance(e, Example) else Example(e) for e in trainset]
    # By default half the training set, 10 to 400: racing spends its budget on more questions as
    # candidates drop out, and cached calls make a larger validation part cheap to reuse.
    size = max(10, min(400, len(examples) // 2)) if val is None else val
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


def _budget(budget: int | None, candidates: int, val: int, racing: bool) -> int:
    """The evaluations (candidate x validation example) a search may spend: `budget`, or by default 200 per
    candidate (without racing, every candidate on the whole validation part).

    >>> _budget(None, 12, 400, True), _budget(None, 12, 400, False), _budget(500, 12, 400, True)
    (2400, 4800, 500)
    """
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"budget must be a positive number of evaluations, got {budget!r}")
        return budget
    return 200 * candidates if racing else candidates * val


def _client_spec(client: Any) -> str | None:
    return client.spec if isinstance(client, (LM, RM)) else None


def report(table: Sequence[Mapping[str, Any]], race: Mapping[str, Any] | None = None) -> str:
    """The search table as text, those still in the race first, then by examples scored and score:
    candidate, examples scored, score and its 95% interval, against the program as written (examples only
    it / only the baseline scored higher on, and the exact paired p-value, on the examples both ran), and
    for a dropped candidate the evidence that dropped it (the leader's wins / its own, the one-sided p).
    A candidate whose examples raised is "failed" (it left the race; never scored as wrong answers). With
    the race's summary (`Compiled.meta["race"]`), the last lines say why each failed and what was chosen.

    >>> print(report([{"key": "baseline", "n": 40, "score": 30.0, "low": 18.1, "high": 45.4, "alive": True},
    ...               {"key": "gold8-knn", "n": 20, "score": 5.0, "low": 0.9, "high": 23.6, "alive": False,
    ...                "vs_baseline": {"n": 20, "a_only": 0, "b_only": 6, "p": 0.031},
    ...                "dropped": {"rung": 1, "n": 20, "by": "baseline", "leader_only": 6, "this_only": 0,
    ...                            "p": 0.0156}}]))
    candidate   n  score  errors  95% CI        vs baseline    dropped
    baseline   40   30.0       0  [18.1, 45.4]
    gold8-knn  20    5.0       0  [0.9, 23.6]   +0 -6 p=0.031  at 20 by baseline: 6/0 p=0.016
    """
    header = ["candidate", "n", "score", "errors", "95% CI", "vs baseline", "dropped"]
    body = []
    for row in sorted(table, key=lambda r: (not r.get("alive", True), -r["n"], -r["score"])):
        pair, drop = row.get("vs_baseline"), row.get("dropped")
        why = (f"at {drop['n']} by {drop['by']}: {drop['leader_only']}/{drop['this_only']} p={drop['p']:.2g}"
               if drop else "failed" if row.get("failed") else "")
        body.append([row["key"], str(row["n"]), f"{row['score']:.1f}", str(row.get("errors", 0)),
                     f"[{row['low']:.1f}, {row['high']:.1f}]",
                     f"+{pair['a_only']} -{pair['b_only']} p={pair['p']:.2g}" if pair else "", why])
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    # Two spaces between every column, numbers right-aligned: no two columns can run together.
    lines = ["  ".join(cell.rjust(widths[c]) if c in (1, 2, 3) else cell.ljust(widths[c])
                       for c, cell in enumerate(r)).rstrip() for r in [header, *body]]
    lines += [f"failed: {why}" for why in (race or {}).get("failed", {}).values()]
    if race:
        lines.append(f"chosen: {race['chosen']} ({race['rule']}); the choice needed {race['needed']} validation "
                     f"questions; {race['spent']} of {race.get('budget')} evaluations spent; stopped: "
                     f"{race['stopped']}; each drop at p < {race['level']:.2g}")
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
    racing: bool = True,
    budget: int | None = None,
    alpha: float = 0.05,
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
    _check_contract(program, space.candidates(candidates, seed, fixed=start), base_options)
    folder = Path(out) if out is not None else None
    # One compile per folder at a time: a second would rerun and append the same candidates (FileInUse).
    writer = WriterLock(folder) if folder is not None else None
    if writer is not None:
        writer.acquire()
    try:
        chosen = space.candidates(candidates, seed, fixed=start)
        usage_before = _usage()

        # One bootstrap run gives both labellings: traces that passed, and traces whose context held the answer.
        bootstrapped: dict[str, list[Example]] = {"augmented": [], "gold": []}
        made: dict[str, list[dict[str, Any]]] = {}  # the rows behind the table: their cost, whichever call ran them
        if any(c.demos.get("kind") in bootstrapped for c in chosen):
            attempted, rows = bootstrap_runs(_with_train(program, pool), pool, metric, fields=fields,
                                             options=base_options, limit=bootstrap_limit, runner=runner, seed=seed,
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
        by_key = {candidate.key: candidate for candidate in chosen}
        per_example: dict[str, dict[str, float]] = {}  # candidate -> {validation index: score}
        sizes = doubling_sizes(len(heldout)) if racing else [len(heldout)]
        spend = _budget(budget, len(chosen), len(heldout), racing)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=spend, desc="compile", unit="eval")

        def score(key: str, size: int) -> dict[str, float]:
            """The candidate on the first `size` validation examples (its earlier rows resume from its file)."""
            candidate, t0 = by_key[key], time.perf_counter()
            before = table.get(key, {}).get("n", 0)
            result = run(candidate, size)
            per_example[key] = {str(r["index"]): float(r.get("score") or 0.0) for r in result.rows}
            made[key] = result.rows
            low, high = result.confidence_interval()
            failures = [row for row in result.rows if row.get("error") is not None]
            table[key] = {**candidate.as_dict(), "n": len(result.rows), "score": result.score, "low": low,
                          "high": high, "rung": table.get(key, {}).get("rung", 0) + 1, "errors": len(result.errors),
                          "seconds": round(table.get(key, {}).get("seconds", 0.0) + time.perf_counter() - t0, 1)}
            if bar is not None:
                bar.set_postfix_str(f"{key[:30]}={result.score:.1f}")
                bar.update(len(result.rows) - before)
            if failures:  # a program that raised is not a program that answered wrong: it leaves the race
                raise CandidateFailed(f"{key}: {len(failures)} of {len(result.rows)} examples failed "
                                      f"(the first: {failures[0]['error']})")
            return per_example[key]

        def cost(key: str) -> tuple[float, int]:
            """The tie rule's cost: LM calls per example (cached ones too: the same for every seed), then demos."""
            rows = made.get(key) or [{}]
            calls = sum(int((r.get("usage") or {}).get("requests") or 0)
                        + int((r.get("usage") or {}).get("cached_requests") or 0) for r in rows) / len(rows)
            return round(calls, 2), int(by_key[key].demos.get("k") or 0)

        try:
            outcome = race([c.key for c in chosen], score, sizes, baseline=chosen[0].key, alpha=alpha, budget=spend,
                           cost=cost)
        finally:
            if bar is not None:
                bar.close()
        # Each candidate paired with the program as written on the validation examples both ran: whether a
        # gain is more than noise (the intervals alone overlap long before a paired test says so).
        baseline = per_example.get(chosen[0].key)
        for key, row in table.items():
            if baseline is not None and key != chosen[0].key:
                row["vs_baseline"] = paired(per_example[key], baseline)
            row["alive"] = key in outcome.alive
            if key in outcome.drops:
                row["dropped"] = asdict(outcome.drops[key])
            if key in outcome.failed:
                row["failed"] = outcome.failed[key]
        best = by_key[outcome.chosen]
        final = candidate_program(best)
        after = _usage()
        usage = {key: after[key] - usage_before.get(key, 0) for key in after}
        meta = {"lm": _client_spec(settings.lm), "lm_name": settings.lm.name if isinstance(settings.lm, LM) else None,
                "rm": _client_spec(_rm(rms, best.rm)) if best.rm else _client_spec(settings.rm), "seed": seed,
                "pool": len(pool), "val": len(heldout), "augmented": len(augmented),
                "gold": len(bootstrapped["gold"]), "candidates": len(chosen), "demo_kinds": list(space.demos.kinds),
                "rungs": outcome.sizes, "race": {**outcome.as_dict(), "alpha": alpha, "budget": spend},
                "trainset": describe(list(trainset)),
                "seconds": round(time.perf_counter() - started, 1),
                "lm_usage": usage, "rows_usage": _rows_cost(made)}
        # The candidate as it was scored (its options on top of the fixed ones, its retriever), with the search.
        chosen_rm = _rm(rms, best.rm) if best.rm else None
        return replace(final, table=sorted(table.values(), key=lambda r: (not r["alive"], -r["n"], -r["score"])),
                       meta=meta,
                       rm=chosen_rm, rm_spec=_client_spec(chosen_rm) if chosen_rm is not None else None)
    finally:
        if writer is not None:
            writer.release()


def _check_contract(program: Callable[..., Any], chosen: Sequence[Candidate], options: Mapping[str, Any]) -> None:
    """Refuse, before any LM call, a search the program cannot take: it is called with ``train=``, with
    ``demos=`` by every candidate that chooses demonstrations, and with each option a candidate sets.

    >>> def reader(question, train=None, k=1): ...
    >>> _check_contract(reader, [Candidate({"kind": "raw", "k": 3, "select": "knn"})], {})
    Traceback (most recent call last):
        ...
    ValueError: the program reader takes no demos= parameter, but the search tries candidates with chosen demonstrations (raw3-knn); give it one, or search DemoSpace kinds it can use
    """
    try:
        parameters = inspect.signature(program).parameters
    except (TypeError, ValueError):  # a callable Python cannot read: it is called and its errors counted
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    name = getattr(program, "__qualname__", None) or type(program).__name__
    needs = {"train": "every candidate passes the training pool"}
    with_demos = [c.key for c in chosen if c.demos.get("kind") != "none"]
    if with_demos:
        needs["demos"] = f"the search tries candidates with chosen demonstrations ({', '.join(with_demos[:3])})"
    for candidate in chosen:
        for option in candidate.options:
            needs.setdefault(option, f"the search tries {option}= values ({candidate.key})")
    for option in options:
        needs.setdefault(option, f"options= fixes {option}")
    for parameter, why in needs.items():
        if parameter not in parameters:
            hint = ("give it one, or search DemoSpace kinds it can use" if parameter == "demos"
                    else "give it one" if parameter == "train" else "search or fix only options it takes")
            raise ValueError(f"the program {name} takes no {parameter}= parameter, but {why}; {hint}")


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
