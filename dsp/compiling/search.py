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
evaluations spent on those still in contention. An option the space declares free (`Space.free`: it
changes no LM call, as the extractive vote) is read, not raced: every candidate is scored under each of
its values from the calls already cached, and the value is decided on the evidence of all candidates
together. Candidates left tied are settled by a declared rule
(the program as written if it is among them, else the cheapest), so seeds that see a tie choose alike.
The chosen one becomes a `Compiled` program; the table of candidates (scores, intervals, the evidence
that dropped each) goes with it. Nothing outside the training set reaches the LM.

What is searched and what it may spend is one `CompileConfig`; the body is four named phases, each a
function: `prepare` (the inputs and the program's contract checked, the split, the candidates: before
any LM call), `_bootstrap`, `_race` and `_choose`. A candidate whose examples raise is reported as
failing (its errors counted, its score over the examples that ran), never scored as wrong answers.
`compile`'s docstring has a small runnable example; `dsp.compiling.plan` projects a compile's cost
without calling the LM.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass, replace
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
from ..utils import is_int
from .bootstrap import Wrap, bootstrap_runs, demos_of_rows
from .compiled import Compiled, program_name
from .config import CompileConfig
from .contract import check_contract, signature_defaults
from .racing import CandidateFailed, Race, doubling_sizes, race
from .scratch import kept_for_the_compile
from .space import Candidate, Space
from .table import table_order

__all__ = ["compile", "split_train", "fixed_demos", "Search", "prepare", "evaluate_candidate",
           "BOOTSTRAPPED_KINDS"]

BOOTSTRAPPED_KINDS = ("augmented", "gold")  # demo kinds drawn from the bootstrap's traces


def split_train(trainset: Sequence[Example], val: int | None = None, seed: int = 0, group: str | None = None
                ) -> tuple[list[Example], list[Example]]:
    """(pool, validation): `val` examples (default half, 10 to 400) held out by a seeded draw, the rest
    the pool demonstrations come from; both keep the training set's order.

    With `group` (a field, e.g. a conversation's number), examples sharing its value are held out together,
    never split between the two (a turn needs its conversation's earlier turns, and a pool demo of a later
    turn would show a validation turn's gold answer): whole groups are drawn until at least `val` are held.

    >>> pool, val = split_train([Example(question=str(i), answer=str(i)) for i in range(30)], val=10)
    >>> len(pool), len(val), {e.question for e in pool} & {e.question for e in val}
    (20, 10, set())
    >>> turns = [Example(chat=c, turn=t, question=f"{c}.{t}") for c in range(6) for t in (1, 2, 3)]
    >>> pool, val = split_train(turns, val=5, group="chat")
    >>> len(val), sorted({e.chat for e in val}), {e.chat for e in pool} & {e.chat for e in val}
    (6, [0, 4], set())
    """
    examples = [e if isinstance(e, Example) else Example(e) for e in trainset]
    # By default half the training set, 10 to 400: racing spends its budget on more questions as
    # candidates drop out, and cached calls make a larger validation part cheap to reuse.
    size = max(10, min(400, len(examples) // 2)) if val is None else val
    if not is_int(size) or size < 1:
        raise ValueError(f"val must be a positive integer, got {val!r}")
    if size >= len(examples):
        raise ValueError(f"a validation part of {size} leaves no pool: the training set has {len(examples)} examples")
    draw = random.Random(f"compile-val-{seed}")
    if group is None:
        held = set(draw.sample(range(len(examples)), size))
    else:
        held = _held_groups(examples, size, draw, group)
    return ([e for i, e in enumerate(examples) if i not in held], [e for i, e in enumerate(examples) if i in held])


def _held_groups(examples: list[Example], size: int, draw: random.Random, group: str) -> set[int]:
    """The indices of whole groups (by `group`'s value), drawn in a seeded order until `size` are held."""
    members: dict[Any, list[int]] = {}
    for i, example in enumerate(examples):
        if group not in example:
            raise ValueError(f"training example {i} has no {group!r} field to hold its group out by")
        members.setdefault(repr(example[group]), []).append(i)
    held: set[int] = set()
    for key in draw.sample(list(members), len(members)):
        if len(held) >= size:
            break
        held.update(members[key])
    if len(held) >= len(examples):
        raise ValueError(f"a validation part of {size} held out by {group!r} leaves no pool: the training set "
                         f"has {len(examples)} examples in {len(members)} groups")
    return held


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


def _client_spec(client: Any) -> str | None:
    return client.spec if isinstance(client, (LM, RM)) else None


@dataclass(frozen=True)
class Search:
    """A compile's checked inputs and its split, read by every phase (`prepare` makes it before any LM call).

    `options` are fixed for every candidate (a preset; a candidate's own override them); `start` is where
    each candidate starts (the program's defaults of the searched options, then `options`); `space` and
    `chosen` are the search space and its candidates (the bootstrap phase may narrow both)."""

    program: Callable[..., Any]
    metric: Callable[..., Any]
    config: CompileConfig
    options: dict[str, Any]
    start: dict[str, Any]
    rms: Mapping[str, Any]
    fields: Fields
    wrap: Wrap | None
    trainset: list[Any]
    pool: list[Example]
    heldout: list[Example]
    space: Space
    chosen: list[Candidate]

    def program_of(self, candidate: Candidate, bootstrapped: Mapping[str, list[Example]]) -> Compiled:
        """The candidate as a compiled program: its options on top of the fixed ones, its demonstrations."""
        demos, knn_pool = _demos_of(candidate, bootstrapped, self.pool)
        return Compiled(self.program, {**self.options, **candidate.options}, self.pool, demos, knn_pool,
                        int(candidate.demos.get("k") or 0) if knn_pool else 0, self.config.vectorizer,
                        candidate.as_dict())

    def retriever(self, name: str | None) -> Any:
        """The RM a candidate names (None: the current one)."""
        return settings.rm if name is None else self.rms[name]


def prepare(program: Callable[..., Any], trainset: Sequence[Mapping[str, Any]], metric: Callable[..., Any] = EM,
            config: CompileConfig | None = None, *, options: Mapping[str, Any] | None = None,
            rms: Mapping[str, Any] | None = None, fields: Fields = QA_FIELDS, wrap: Wrap | None = None) -> Search:
    """Phase 1 of `compile` (and all `plan` needs): the inputs checked, the training set split, the candidates
    drawn, and the program's contract checked against them, all before any LM call.

    >>> def reader(question, train, demos=None): ...
    >>> search = prepare(reader, [Example(question=f"q{i}", answer="a") for i in range(30)],
    ...                  config=CompileConfig(candidates=3, val=10))
    >>> len(search.pool), len(search.heldout), [c.key for c in search.chosen]
    (20, 10, ['baseline', 'raw5-knn', 'gold8-random0'])
    """
    if not callable(program):
        raise TypeError(f"compile needs a callable program, got {type(program).__name__}")
    if config is None:
        config = CompileConfig()
    if not isinstance(config, CompileConfig):
        raise TypeError(f"config must be a dsp.CompileConfig, got {type(config).__name__}")
    unknown = [name for name in config.space.rms if name not in (rms or {})]
    if unknown:
        raise ValueError(f"the search space names retrievers {unknown} that were not given in rms=")
    fixed = dict(options or {})
    start = {**signature_defaults(program, config.space.options), **fixed}
    pool, heldout = split_train(trainset, config.val, config.seed, config.group)
    for i, example in enumerate(heldout):
        fields.check(example, i)
    chosen = config.space.candidates(config.candidates, config.seed, fixed=start)
    # the readings too: a free option is no candidate's, but every candidate is called with it
    read = [config.space.read(chosen[0], r, start) for r in config.space.readings(start)[1:]]
    check_contract(program, [*chosen, *read], fixed)
    return Search(program, metric, config, fixed, start, dict(rms or {}), fields, wrap, list(trainset), pool, heldout,
                  config.space, chosen)


def _bootstrap(search: Search, runner: Runner | int, folder: Path | None
               ) -> tuple[Search, dict[str, list[Example]], list[dict[str, Any]] | None]:
    """Phase 2: (the search, its bootstrapped demos by kind, the bootstrap's rows or None when no candidate
    draws on it). One bootstrap run gives both labellings: traces that passed, and traces whose context held
    the answer. A kind it found nothing of would only repeat raw candidates under its name: it is dropped
    and the candidates drawn again from the kinds that have demos."""
    bootstrapped = _nothing_bootstrapped()
    if not any(c.demos.get("kind") in bootstrapped for c in search.chosen):
        return search, bootstrapped, None
    config, fields = search.config, search.fields
    attempted, rows = bootstrap_runs(_with_train(search.program, search.pool), search.pool, search.metric, config,
                                     fields=fields, options=search.options, runner=runner,
                                     out=folder / "bootstrap.jsonl" if folder else None, wrap=search.wrap)
    bootstrapped = {"augmented": demos_of_rows(attempted, rows, fields=fields, require_context=config.require_context,
                                               passing=config.passing),
                    "gold": demos_of_rows(attempted, rows, fields=fields, label="gold")}
    kinds = search.space.demos.kinds
    kept = tuple(kind for kind in kinds if kind not in bootstrapped or bootstrapped[kind])
    if kept and kept != kinds:
        space = replace(search.space, demos=replace(search.space.demos, kinds=kept))
        search = replace(search, space=space, chosen=space.candidates(config.candidates, config.seed, fixed=search.start))
    return search, bootstrapped, rows


def evaluate_candidate(search: Search, candidate: Candidate, size: int, bootstrapped: Mapping[str, list[Example]], *,
                       runner: Runner | int = 1, folder: Path | None = None) -> EvaluationResult:
    """The candidate on the first `size` validation examples, by `dsp.evaluate`: with a `folder`, its rows
    go to (and resume from) a file of its own under folder/candidates/."""
    runnable: Callable[..., Any] = search.program_of(candidate, bootstrapped)
    examples = search.heldout[:size]
    if search.wrap is not None:
        runnable = search.wrap(runnable, examples)
    context = {"rm": search.retriever(candidate.rm)} if candidate.rm else {}
    # The bootstrapped demos a candidate draws from are part of its identity and, by digest, of its file
    # name: a changed bootstrap rescores it in a new file (the old rows stay); raw ones do not depend on it.
    kind = candidate.demos.get("kind")
    drawn = {"bootstrapped": describe(bootstrapped[kind])} if kind in bootstrapped else {}
    name = candidate.key + (f"-{drawn['bootstrapped']['sha256'][:8]}" if drawn and bootstrapped[kind] else "")
    seed = search.config.seed
    with settings.context(**context):
        return evaluate(runnable, examples, search.metric, fields=search.fields, runner=runner,
                        out=folder / "candidates" / f"{name}.jsonl" if folder else None,
                        run={"compile": {"program": program_name(search.program), "candidate": candidate.as_dict(),
                                         "options": describe(search.options), "seed": seed,
                                         "pool": describe(search.pool), **drawn}},
                        seed=seed, progress=False, display=False)


class _Scorer:
    """Phase 3's bookkeeping: the race's `score` and `cost`, each candidate's table row (one per reading
    when the space has free options), its per-example scores (for the pairings) and the rows behind the
    search's cost."""

    def __init__(self, search: Search, bootstrapped: dict[str, list[Example]], runner: Runner | int,
                 folder: Path | None) -> None:
        self.search, self.bootstrapped, self.runner, self.folder = search, bootstrapped, runner, folder
        self.by_key = {candidate.key: candidate for candidate in search.chosen}
        self.readings = search.space.readings(search.start) if search.space.free else []
        self.names = [Space.reading_name(r) for r in self.readings]
        self.program_of: dict[str, str] = {}                 # table row -> the candidate it reads
        self.table: dict[str, dict[str, Any]] = {}
        self.per_example: dict[str, dict[str, float]] = {}  # table row -> {validation index: score}
        self.made: dict[str, list[dict[str, Any]]] = {}      # the rows behind the table, whichever call ran them
        self.bar: Any = None

    def under(self, key: str, name: str | None) -> Candidate:
        """The candidate `key` under the reading `name` (None, or no free option: as it is)."""
        if name is None or not self.readings:
            return self.by_key[key]
        return self.search.space.read(self.by_key[key], self.readings[self.names.index(name)], self.search.start)

    def score(self, key: str, size: int) -> dict[str, Any]:
        """The candidate on the first `size` validation examples (its earlier rows resume from its file);
        with free options, {reading: scores}: one evaluation per reading, all but the first from the
        calls the first cached (a reading moot under its options is the same row, scored once)."""
        if not self.readings:
            return self._score_row(self.by_key[key], key, size, count=True)
        out: dict[str, Any] = {}
        for i, name in enumerate(self.names):
            candidate = self.under(key, name)
            ran = self.table.get(candidate.key, {}).get("n") == size and candidate.key in self.program_of
            out[name] = (self.per_example[candidate.key] if ran and i
                         else self._score_row(candidate, key, size, count=i == 0, reading=name))
        return out

    def _score_row(self, candidate: Candidate, program: str, size: int, *, count: bool, reading: str | None = None
                   ) -> dict[str, float]:
        """One table row: `candidate` on the first `size` examples (`count`: its evaluations go to the bar)."""
        key, t0 = candidate.key, time.perf_counter()
        previous = self.table.get(key, {})
        result = evaluate_candidate(self.search, candidate, size, self.bootstrapped, runner=self.runner,
                                    folder=self.folder)
        self.made[key], self.program_of[key] = result.rows, program
        answered = [row for row in result.rows if row.get("error") is None]
        errors = len(result.rows) - len(answered)
        # An example that raised is no wrong answer: the score, its interval and the pairings are over the
        # examples that ran, and the errors are counted apart (a failing candidate leaves the race).
        self.per_example[key] = {str(r["index"]): float(r.get("score") or 0.0) for r in answered}
        scored = EvaluationResult(rows=answered, metric_name=result.metric_name) if errors else result
        low, high = scored.confidence_interval() if answered else (None, None)
        self.table[key] = {**candidate.as_dict(), "n": len(result.rows), "score": scored.score if answered else None,
                           "low": low, "high": high, "rung": previous.get("rung", 0) + 1, "errors": errors,
                           "seconds": round(previous.get("seconds", 0.0) + time.perf_counter() - t0, 1),
                           **({"reading": reading} if reading is not None else {})}
        if self.bar is not None and count:
            shown = f"{scored.score:.1f}" if answered else "failed"
            self.bar.set_postfix_str(f"{key[:30]}={shown}")
            self.bar.update(len(result.rows) - previous.get("n", 0))
        if errors:
            first = next(row for row in result.rows if row.get("error") is not None)
            raise CandidateFailed(f"{key}: {errors} of {len(result.rows)} examples failed (the first: {first['error']})")
        return self.per_example[key]

    def cost(self, key: str) -> tuple[float, int]:
        """The tie rule's cost: LM calls per example (cached ones too: the same for every seed), then demos."""
        rows = self.made.get(self.under(key, self.names[0] if self.names else None).key) or [{}]
        calls = sum(int((r.get("usage") or {}).get("requests") or 0)
                    + int((r.get("usage") or {}).get("cached_requests") or 0) for r in rows) / len(rows)
        return round(calls, 2), int(self.by_key[key].demos.get("k") or 0)


def _race(search: Search, scorer: _Scorer) -> Race:
    """Phase 3: the candidates raced on growing validation prefixes within the budget (without racing, all
    on the whole validation part at once), dropped on paired evidence (`race`)."""
    config, val = search.config, len(search.heldout)
    sizes = doubling_sizes(val) if config.racing else [val]
    spend = config.budget_for(len(search.chosen), val)
    if config.progress:
        from tqdm.auto import tqdm

        scorer.bar = tqdm(total=spend, desc="compile", unit="eval")
    try:
        return race([c.key for c in search.chosen], scorer.score, sizes, baseline=search.chosen[0].key,
                    alpha=config.alpha, budget=spend, cost=scorer.cost, readings=scorer.names or None)
    finally:
        if scorer.bar is not None:
            scorer.bar.close()


def _choose(search: Search, scorer: _Scorer, outcome: Race, started: float, usage_before: Mapping[str, float]
            ) -> Compiled:
    """Phase 4: the chosen candidate as the compiled program, with the table (each candidate paired with the
    program as written on the validation examples both ran: whether a gain is more than noise, which the
    intervals alone do not say) and the search's meta."""
    baseline_key = search.chosen[0].key
    baseline = scorer.per_example.get(baseline_key)
    for key, row in scorer.table.items():
        program = scorer.program_of[key]
        if baseline is not None and key != baseline_key:
            row["vs_baseline"] = paired(scorer.per_example[key], baseline)
        # with readings, a candidate in contention is alive under the reading chosen only (a reading moot
        # under its options is the same row)
        row["alive"] = program in outcome.alive and scorer.under(program, outcome.reading).key == key
        if program in outcome.drops:
            row["dropped"] = asdict(outcome.drops[program])
        if program in outcome.failed:
            row["failed"] = outcome.failed[program]
    best = scorer.under(outcome.chosen, outcome.reading)
    final = search.program_of(best, scorer.bootstrapped)
    if best.demos.get("kind") == "none":
        # It draws its own demonstrations from the `train` it is given: bound to the pool less this seed's
        # validation part, "the program as written" would be another program on every seed (NQ: two seeds'
        # draws shared 1 question of 16). The search is over, so it gets the whole training set the compile
        # was given: seeds that choose it choose the same program.
        final = replace(final, train=[e if isinstance(e, Example) else Example(e) for e in search.trainset])
    after = _usage()
    config = search.config
    bootstrap_rows = scorer.made.get("bootstrap") or []
    meta = {"lm": _client_spec(settings.lm), "lm_name": settings.lm.name if isinstance(settings.lm, LM) else None,
            "rm": _client_spec(search.retriever(best.rm)), "seed": config.seed,
            "pool": len(search.pool), "val": len(search.heldout), "augmented": len(scorer.bootstrapped["augmented"]),
            "gold": len(scorer.bootstrapped["gold"]), "candidates": len(search.chosen),
            "demo_kinds": list(search.space.demos.kinds), "rungs": outcome.sizes, "readings": scorer.names,
            "race": {**outcome.as_dict(), "alpha": config.alpha,
                     "budget": config.budget_for(len(search.chosen), len(search.heldout))},
            "trainset": describe(search.trainset), "train": len(final.train), "seconds": round(time.perf_counter() - started, 1),
            "lm_usage": {key: after[key] - usage_before.get(key, 0) for key in after},
            "rows_usage": _rows_cost(scorer.made),
            # the readings after the first: read from the calls the first cached, counted apart (no LM call)
            "readings_usage": _rows_cost({key: rows for key, rows in scorer.made.items()
                                          if key in scorer.program_of and scorer.readings
                                          and key != scorer.under(scorer.program_of[key], scorer.names[0]).key}),
            "bootstrap_errors": sum(1 for row in bootstrap_rows if row.get("error") is not None)}
    # The candidate as it was scored (its options on top of the fixed ones, its retriever), with the search.
    chosen_rm = search.retriever(best.rm) if best.rm else None
    return replace(final, table=sorted(scorer.table.values(), key=table_order), meta=meta, rm=chosen_rm,
                   rm_spec=_client_spec(chosen_rm) if chosen_rm is not None else None)


def compile(program: Callable[..., Any], trainset: Sequence[Mapping[str, Any]], metric: Callable[..., Any] = EM,
            config: CompileConfig | None = None, *, options: Mapping[str, Any] | None = None,
            rms: Mapping[str, Any] | None = None, fields: Fields = QA_FIELDS, wrap: Wrap | None = None,
            out: str | os.PathLike | None = None, runner: Runner | int = 1) -> Compiled:
    """Search `config.space` for the best of `config.candidates` candidates of `program` on `trainset`, and
    return the compiled program (`CompileConfig` says what is searched and what it may spend).

    `program(input, train=..., demos=..., **options)` is a DSP program that takes chosen demonstrations
    (the bundled programs do); `options` are where every candidate starts (e.g. a preset); a candidate's
    searched options override them. `rms` names the retrievers a candidate may choose besides the current
    one (`Space.rms`; the compiled program keeps the one chosen, saved by its spec). `out` is a directory:
    the bootstrap and each candidate's rows go there, so a killed compile resumes without repeating what
    finished. With the cache off, the compile keeps its own calls in an in-process cache until it ends,
    so its readings and rungs reuse them (`scratch`). `wrap(program, examples)` adapts a candidate to what `dsp.evaluate` calls (conversations turn
    by turn). The phases: `prepare` (checks, split, candidates, the program's contract, before any LM
    call), the bootstrap, the race, the choice. A chosen candidate that draws its own demonstrations is
    returned with the whole `trainset` (the race gave it the pool less the validation part), so seeds that
    choose it return the same program.

    >>> from dsp import DemoSpace
    >>> def reader(question, train, demos=None, know=False):  # no LM: right only when it knows
    ...     return Example(answer=f"a{question[1:]}" if know else "?")
    >>> train = [Example(question=f"q{i}", answer=f"a{i}") for i in range(30)]
    >>> config = CompileConfig(space=Space(options={"know": [True]}, demos=DemoSpace(kinds=("raw",), ks=(1,),
    ...                        selects=("random",), seeds=1)), candidates=3, val=10, progress=False)
    >>> compiled = compile(reader, train, EM, config)
    >>> [(row["key"], row["score"], row["alive"]) for row in compiled.table]
    [('baseline-knowTrue', 100.0, True), ('raw1-random0-knowTrue', 100.0, True), ('baseline', 0.0, False)]
    >>> compiled.candidate["key"], compiled.meta["race"]["rule"]  # a tie: the cheaper, with no demos
    ('baseline-knowTrue', '2 tied: the cheapest')
    """
    started = time.perf_counter()
    search = prepare(program, trainset, metric, config, options=options, rms=rms, fields=fields, wrap=wrap)
    folder = Path(out) if out is not None else None
    # One compile per folder at a time: a second would rerun and append the same candidates (FileInUse).
    writer = WriterLock(folder) if folder is not None else None
    if writer is not None:
        writer.acquire()
    try:
        with kept_for_the_compile():
            usage_before = _usage()
            search, bootstrapped, rows = _bootstrap(search, runner, folder)
            scorer = _Scorer(search, bootstrapped, runner, folder)
            if rows is not None:
                scorer.made["bootstrap"] = rows
            outcome = _race(search, scorer)
            return _choose(search, scorer, outcome, started, usage_before)
    finally:
        if writer is not None:
            writer.release()


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


def _with_train(program: Callable[..., Any], train: list[Example]) -> Callable[..., Any]:
    from functools import partial

    return partial(program, train=train)


def _nothing_bootstrapped() -> dict[str, list[Example]]:
    return {kind: [] for kind in BOOTSTRAPPED_KINDS}


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
