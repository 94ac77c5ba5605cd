"""DEMONSTRATE by bootstrapping: run the program zero-shot on training examples and keep the traces that pass.

Each training example is answered by the program with raw demonstrations drawn from the *other*
training examples (never itself); an answer the metric accepts (and, if asked, whose retrieved context
holds a gold answer) makes the example an augmented demonstration carrying the stage records of its
trace, as DSP's `annotate` does. With ``label="gold"``, a trace whose retrieved context holds a gold
answer makes a demonstration whatever the program answered, labelled with the gold answer (the fields
the LM wrote on the way to its own answer, e.g. a rationale, are dropped): a model too weak to answer
its training questions still shows how the search found the evidence. The runs go through
`dsp.evaluate`, so they are parallel, cached and resumable, and their rows keep the traces; one run
gives both labellings (`bootstrap_runs` then `demos_of_rows`).

>>> import dsp
>>> qa = dsp.Template("Answer.", question=dsp.Type(prefix="Question:", desc="${q}"),
...                   answer=dsp.Type(prefix="Answer:", desc="${a}", format=dsp.format_answers))
>>> class Oracle(dsp.LM):  # right on the even questions only
...     def _request(self, request):
...         asked = request["prompt"].rsplit("Question: ", 1)[1].split("\\n")[0]
...         text = f" a{asked[1:]}" if int(asked[1:]) % 2 == 0 else " ?"
...         return {"choices": [{"text": text, "finish_reason": "stop"}]}
>>> def reader(question, demos):
...     _, completions = dsp.generate(qa)(dsp.Example(question=question, demos=demos), stage="qa")
...     return dsp.Example(answer=completions.answer)
>>> pool = [dsp.Example(question=f"q{i}", answer=[f"a{i}"]) for i in range(4)]
>>> with dsp.settings.context(lm=Oracle("oracle"), cache=False):
...     found = bootstrap(reader, pool, dsp.EM, CompileConfig(bootstrap_limit=None, progress=False))
>>> [d.question for d in found["predicted"]], found["predicted"][0].qa.answer, found["gold"]
(['q0', 'q2'], 'a0', [])
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..evaluation import QA_FIELDS, Fields, Runner, describe, evaluate
from ..example import Example
from ..metrics import answer_match, normalize_text, passage_match
from ..primitives.demonstrate import all_but, sample
from ..template import format_answers
from .config import CompileConfig

__all__ = ["bootstrap", "bootstrap_runs", "demos_of_rows", "demo_from_row", "question_of", "Bootstrapping", "LABELS"]

LABELS = ("predicted", "gold")

Wrap = Callable[[Callable[..., Any], list[Example]], Callable[..., Any]]


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


def _gold_record(entry: Mapping[str, Any], field_name: str, gold: Any) -> dict[str, Any]:
    """The stage record labelled with the gold answer: a completion that gave it if any, else the first
    without the fields the LM wrote (they argued for another answer)."""
    completions = entry.get("completions") or []
    for completion in completions:
        value = completion.get(field_name)
        if isinstance(value, str) and answer_match(value, gold):
            return {**completion, field_name: format_answers(gold)}
    written = set(entry.get("written") or ()) - {field_name}
    return {**{k: v for k, v in completions[0].items() if k not in written}, field_name: format_answers(gold)}


def demo_from_row(example: Mapping[str, Any], row: Mapping[str, Any], fields: Fields = QA_FIELDS,
                  label: str = "predicted") -> Example | None:
    """The augmented demonstration a row makes: the training example plus, for each stage of its trace,
    the stage's record (its last call, the completion behind the program's answer). With label="gold",
    the stage that wrote the answer shows the gold one instead."""
    if label not in LABELS:
        raise ValueError(f"label must be one of {', '.join(LABELS)}, got {label!r}")
    stages: dict[str, Example] = {}
    for entry in row.get("trace") or []:
        stage, completions = entry.get("stage"), entry.get("completions") or []
        if not stage or not completions:
            continue
        if label == "gold" and any(fields.prediction in c for c in completions):
            record: Mapping[str, Any] = _gold_record(entry, fields.prediction, example[fields.gold])
        else:
            record = _chosen(completions, fields.prediction, row.get("prediction"))
        stages[str(stage)] = Example({k: v for k, v in record.items() if v is not None})
    if not stages:
        return None
    return Example(example, **stages, augmented=True)


def bootstrap_runs(program: Callable[..., Any], pool: Sequence[Example], metric: Callable[..., Any],
                   config: CompileConfig | None = None, *, fields: Fields = QA_FIELDS,
                   options: Mapping[str, Any] | None = None, runner: Runner | int = 1,
                   out: str | os.PathLike | None = None, wrap: Wrap | None = None
                   ) -> tuple[list[Example], list[dict[str, Any]]]:
    """(examples attempted, their rows): the program run on the first `config.bootstrap_limit` pool examples
    (None: all), each with `config.bootstrap_demos` raw demos from the rest of the pool (drawn with
    `config.seed`). `wrap(program, examples)` adapts it to what `dsp.evaluate` calls (e.g. turn-by-turn
    conversations); `config.progress` shows a "bootstrap" bar.

    >>> from dsp import EM
    >>> pool = [Example(question=f"q{i}", answer=f"a{i}") for i in range(5)]
    >>> echo = lambda question, demos: Example(answer=f"a{question[1:]}" if demos else "?")
    >>> attempted, rows = bootstrap_runs(echo, pool, EM, CompileConfig(bootstrap_limit=2, progress=False))
    >>> [e.question for e in attempted], [r["score"] for r in rows]
    (['q0', 'q1'], [1.0, 1.0])
    """
    config = config or CompileConfig()
    examples = [e if isinstance(e, Example) else Example(e) for e in pool]
    limit, n_raw, seed = config.bootstrap_limit, config.bootstrap_demos, config.seed
    attempted = examples[:limit] if limit is not None else examples
    runnable: Callable[..., Any] = Bootstrapping(program, examples, n_raw, dict(options or {}), seed)
    if wrap is not None:
        runnable = wrap(runnable, attempted)
    # The run's identity is what it was before CompileConfig: a bootstrap file written then resumes.
    result = evaluate(runnable, attempted, metric, fields=fields, runner=runner, out=out,
                      run={"stage": "bootstrap", "n_raw": n_raw, "options": describe(dict(options or {})), "seed": seed,
                           "pool": describe(examples)},
                      progress="bootstrap" if config.progress else False, display=False)
    return attempted, result.rows


def demos_of_rows(attempted: Sequence[Example], rows: Sequence[Mapping[str, Any]], *, fields: Fields = QA_FIELDS,
                  label: str = "predicted", require_context: bool = False, passing: float = 1.0) -> list[Example]:
    """The demonstrations bootstrapped rows make, in pool order: rows scoring at least `passing` (and, with
    `require_context`, whose context holds a gold answer); with label="gold", every row whose context
    holds a gold answer, labelled with it."""
    if label not in LABELS:
        raise ValueError(f"label must be one of {', '.join(LABELS)}, got {label!r}")
    demos = []
    for example, row in zip(attempted, rows):
        if row.get("error") is not None:
            continue
        found = passage_match(row.get("context") or [], example[fields.gold])
        if label == "gold" and not found:
            continue
        if label == "predicted" and (float(row.get("score") or 0.0) < passing or (require_context and not found)):
            continue
        demo = demo_from_row(example, row, fields, label)
        if demo is not None:
            demos.append(demo)
    return demos


def bootstrap(program: Callable[..., Any], pool: Sequence[Example], metric: Callable[..., Any],
              config: CompileConfig | None = None, *, fields: Fields = QA_FIELDS,
              options: Mapping[str, Any] | None = None, runner: Runner | int = 1,
              out: str | os.PathLike | None = None, wrap: Wrap | None = None) -> dict[str, list[Example]]:
    """The demonstrations one bootstrap run makes, by label (`LABELS`): "predicted", from the pool examples
    whose program answer scores at least `config.passing` (and, with `config.require_context`, whose context
    holds a gold answer); "gold", from those whose context holds a gold answer, labelled with it.

    `program(input, demos=..., **options)` is the program to bootstrap (see `bootstrap_runs` for the rest).
    Order follows the pool.

    >>> from dsp import EM
    >>> pool = [Example(question=f"q{i}", answer=f"a{i}") for i in range(4)]
    >>> no_lm = lambda question, demos: Example(answer=f"a{question[1:]}")  # right, but no stage to show
    >>> bootstrap(no_lm, pool, EM, CompileConfig(progress=False))
    {'predicted': [], 'gold': []}
    """
    config = config or CompileConfig()
    attempted, rows = bootstrap_runs(program, pool, metric, config, fields=fields, options=options, runner=runner,
                                     out=out, wrap=wrap)
    return {label: demos_of_rows(attempted, rows, fields=fields, label=label, require_context=config.require_context,
                                 passing=config.passing) for label in LABELS}
