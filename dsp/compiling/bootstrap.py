"""DEMONSTRATE by bootstrapping: run the program zero-shot on training examples and keep the traces that pass.

Each training example is answered by the program with raw demonstrations drawn from the *other*
training examples (never itself); an answer the metric accepts (and, if asked, whose retrieved context
holds a gold answer) makes the example an augmented demonstration carrying the stage records of its
trace, as DSP's `annotate` does. The runs go through `dsp.evaluate`, so they are parallel, cached and
resumable, and their rows keep the traces.

>>> demos = bootstrap(program, pool, metric=dsp.EM, out="runs/compile/bootstrap.jsonl")   # doctest: +SKIP
>>> demos[0].augmented, sorted(demos[0].qa)                                              # doctest: +SKIP
(True, ['answer', 'context', 'question'])
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..evaluation import QA_FIELDS, Fields, Runner, describe, evaluate
from ..example import Example
from ..metrics import normalize_text, passage_match
from ..primitives.demonstrate import all_but, sample

__all__ = ["bootstrap", "demo_from_row", "question_of", "Bootstrapping"]


def question_of(value: Any) -> str:
    """The question of a program input: the text itself, or an Example's `question`."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("question"), str):
        return value["question"]
    raise TypeError(f"cannot find the question of a program input {value!r:.80}")


@dataclass
class Bootstrapping:
    """The program run on one training example with `n_raw` raw demos from the rest of the pool."""

    program: Callable[..., Any]
    pool: Sequence[Example]
    n_raw: int = 3
    options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0

    def __call__(self, *args: Any) -> Any:
        question = question_of(args[0])
        others = all_but(self.pool, Example(question=question))
        # A draw of its own per question (seeded by it): the traces see varied demonstrations.
        seed = int(hashlib.sha256(f"{self.seed}|{question}".encode("utf-8", "surrogatepass")).hexdigest()[:8], 16)
        return self.program(*args, demos=sample(others, self.n_raw, seed=seed), **self.options)


def _chosen(completions: Sequence[Mapping[str, Any]], field_name: str, prediction: Any) -> Mapping[str, Any]:
    """The completion the program's answer came from (self-consistency samples several), else the first."""
    wanted = normalize_text(prediction) if isinstance(prediction, str) else None
    for completion in completions:
        value = completion.get(field_name)
        if wanted is not None and isinstance(value, str) and normalize_text(value) == wanted:
            return completion
    return completions[0]


def demo_from_row(example: Mapping[str, Any], row: Mapping[str, Any], fields: Fields = QA_FIELDS) -> Example | None:
    """The augmented demonstration a passing row makes: the training example plus, for each stage of
    its trace, the stage's record (its last call, the completion behind the program's answer)."""
    stages: dict[str, Example] = {}
    for entry in row.get("trace") or []:
        stage, completions = entry.get("stage"), entry.get("completions") or []
        if stage and completions:
            record = _chosen(completions, fields.prediction, row.get("prediction"))
            stages[str(stage)] = Example({k: v for k, v in record.items() if v is not None})
    if not stages:
        return None
    return Example(example, **stages, augmented=True)


def bootstrap(program: Callable[..., Any], pool: Sequence[Example], metric: Callable[..., Any], *,
              fields: Fields = QA_FIELDS, n_raw: int = 3, options: Mapping[str, Any] | None = None,
              limit: int | None = None, require_context: bool = False, passing: float = 1.0,
              runner: Runner | int = 1, out: str | os.PathLike | None = None, seed: int = 0,
              wrap: Callable[[Callable[..., Any], list[Example]], Callable[..., Any]] | None = None) -> list[Example]:
    """Augmented demonstrations from the first `limit` pool examples (all by default) whose program answer
    scores at least `passing` (and, with `require_context`, whose context holds a gold answer).

    `program(input, demos=..., **options)` is the program to bootstrap; `wrap(program, examples)` adapts
    it to what `dsp.evaluate` calls (e.g. turn-by-turn conversations). Order follows the pool.
    """
    examples = [e if isinstance(e, Example) else Example(e) for e in pool]
    attempted = examples[:limit] if limit is not None else examples
    runnable: Callable[..., Any] = Bootstrapping(program, examples, n_raw, dict(options or {}), seed)
    if wrap is not None:
        runnable = wrap(runnable, attempted)
    result = evaluate(runnable, attempted, metric, fields=fields, runner=runner, out=out,
                      run={"stage": "bootstrap", "n_raw": n_raw, "options": describe(dict(options or {})), "seed": seed,
                           "pool": describe(examples)},
                      progress=False, display=False)
    demos = []
    for example, row in zip(attempted, result.rows):
        if row.get("error") is not None or float(row.get("score") or 0.0) < passing:
            continue
        if require_context and not passage_match(row.get("context") or [], example[fields.gold]):
            continue
        demo = demo_from_row(example, row, fields)
        if demo is not None:
            demos.append(demo)
    return demos
