"""Run a DetectiveQA program over a loaded set with `dsp.evaluate`, judge the reasoning, summarise.

Every question, and every load error, becomes one row: a load error is run as a question whose program
raises it, so `dsp.evaluate` records it (naming the file and question) next to the questions that ran,
and a failing question never costs the others. The program is given only the fields in `INPUTS` (an
allow-list: never the gold letter, the annotated reasoning, the clue positions or the distractions).
`dsp.evaluate` writes its resumable log as it goes (``<stem>.eval.jsonl``, headed by the run's identity:
the program's config and the model's, so a killed run resumes there and a run with other settings is
refused with `dsp.RunMismatch` rather than mixed in); the final rows (``<stem>.jsonl``) add the gold
answer, correctness, clue recall and the judge's score.

>>> rows = [{"program": "truncate", "lang": "en", "anno_part": "human_anno", "correct": True, "path": "json",
...          "error": None, "clue_recall": 0.5, "judge_normalized": 0.75},
...         {"program": "truncate", "lang": "en", "anno_part": "human_anno", "correct": False, "path": "logprob",
...          "error": None, "clue_recall": 1.0, "judge_normalized": None}]
>>> table = summarize(rows)
>>> [(t["group"], t["n"], t["accuracy"], t["clue_recall"], t["judge"]) for t in table]
[('en/human_anno', 2, 0.5, 0.75, 0.75), ('all', 2, 0.5, 0.75, 0.75)]
"""

from __future__ import annotations

import json
import inspect
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from dsp import Example, Fields, evaluate
from dsp.evaluation import describe
from .align import PATHS
from .data import DetectiveQAError, DetectiveQASet, Question
from .judge import ReasoningJudge
from .model import LMModel
from .program import INPUT_FIELDS, DetectiveQAProgram

__all__ = ["INPUTS", "FIELDS", "examples_for", "run_identity", "accuracy", "run_program", "summarize",
           "summary_markdown", "clue_recall", "RunResult"]

# The program's fields, plus the load error its guard raises (None for a question that loaded).
INPUTS = INPUT_FIELDS + ("load_error",)
FIELDS = Fields(inputs=INPUTS, gold="answer", prediction="prediction")


def clue_recall(clues: Sequence[int], shown: Iterable[int]) -> float | None:
    """The share of clue paragraphs among those shown to the model (None when a question has no clues).

    >>> clue_recall([8, 15], [3, 8, 40]), clue_recall([], [1])
    (0.5, None)
    """
    clues = set(clues)
    if not clues:
        return None
    return len(clues & set(shown)) / len(clues)


def accuracy(prediction: Any, gold: Any) -> float:
    """1.0 when the aligned letter is the gold letter.

    >>> accuracy({"answer": "B"}, "B"), accuracy(None, "B")
    (1.0, 0.0)
    """
    return 1.0 if isinstance(prediction, Mapping) and prediction.get("answer") == gold else 0.0


def _order(file: str, index: int) -> tuple[int, str, int]:
    stem = Path(file).stem
    return (len(stem), stem, index)  # as the loader reads files: 2.json before 10.json


def examples_for(dataset: DetectiveQASet) -> list[Example]:
    """One Example per question and per load error, in file order. Each has every field of `INPUTS` (a
    load error's are None where it has none) and the gold `answer` ("" for a load error); settings are
    not in them (they are the run's identity), so a question's fingerprint depends on its data alone.

    >>> from programs.detectiveqa import load_detectiveqa
    >>> fixture = Path(__file__).parents[2] / "tests" / "fixtures" / "detectiveqa"  # the repository's fixture
    >>> examples = examples_for(load_detectiveqa(fixture))
    >>> len(examples), all(name in examples[0] for name in INPUTS), examples[0]["load_error"]
    (12, True, None)
    """
    items: list[tuple[tuple[int, str, int], Example]] = []
    for q in dataset.questions:
        example = q.to_example(dataset.novels.get(q.novel_id))
        example["load_error"] = None
        items.append((_order(q.source, q.index), example))
    for error in dataset.errors:
        qid = error.qid or f"{dataset.lang}/{dataset.anno_part}/{Path(error.file).stem}"
        example = Example({name: None for name in INPUTS})
        example.update(id=qid, qid=qid, lang=dataset.lang, anno_part=dataset.anno_part,
                       novel_id=Path(error.file).stem, index=error.question or 0, answer="", source=error.file,
                       load_error=error.message)
        items.append((_order(error.file, error.question or 0), example))
    items.sort(key=lambda item: item[0])
    return [example for _, example in items]


@dataclass
class RunResult:
    """The final rows (one per question or load error) and the summary table."""

    rows: list[dict[str, Any]]
    table: list[dict[str, Any]]
    out: str | None = None


def _guarded(program: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def run(x: Mapping[str, Any]) -> Any:
        if x["load_error"]:  # recorded by dsp.evaluate as this question's error, naming file and question
            raise DetectiveQAError(x["source"] or "?", x["load_error"], question=x["index"] or None, qid=x["qid"])
        return program(x)
    return run


def _program_name(program: Any) -> str:
    if isinstance(program, DetectiveQAProgram):
        return program.name
    # A plain function or callable object: named by its function or class.
    return program.__name__ if inspect.isroutine(program) else type(program).__name__


def run_identity(program: Any, dataset: DetectiveQASet) -> dict[str, Any]:
    """What decides a run's rows besides the questions: the program's config and its model's (for an
    `LMModel`, the LM's identity and the generation settings). A program that is not a
    `DetectiveQAProgram` is identified by its name alone.

    >>> from programs.detectiveqa import DetectiveQASet
    >>> run_identity(len, DetectiveQASet("en", "human_anno", {}, [], [], []))["config"]
    {'program': 'len'}
    """
    name = _program_name(program)
    identity: dict[str, Any] = {"task": "detectiveqa", "lang": dataset.lang, "anno_part": dataset.anno_part}
    if isinstance(program, DetectiveQAProgram):
        model = program.model
        identity.update(config=program.config(), model=program.model_name(),
                        model_config=model.config() if isinstance(model, LMModel) else describe(model))
    else:
        identity.update(config={"program": name}, model="?")
    return identity


def run_program(program: Any, dataset: DetectiveQASet, out: str | os.PathLike | None = None, threads: int = 1,
                judge: ReasoningJudge | None = None, progress: bool = False, n: int | None = None) -> RunResult:
    """Run `program` on every question of `dataset` (the first `n`), judge, summarise, write the rows.

    `out` is a path stem: ``<out>.eval.jsonl`` (dsp.evaluate's resumable log, headed by `run_identity`)
    and ``<out>.jsonl`` (final rows) are written next to each other. `threads`: questions at a time.

    For example (a model load, so not run as a doctest)::

        program = TruncateProgram(ds.novels, LMModel(dsp.LlamaCpp()), q_len=1000)
        result = run_program(program, ds, out="runs/dqa/truncate-en-human_anno")
        print(summary_markdown(result.table))
    """
    identity = run_identity(program, dataset)
    name, model = _program_name(program), identity["model"]
    examples = examples_for(dataset)
    if n is not None:
        examples = examples[:n]
    stem = Path(out) if out is not None else None
    if stem is not None:
        stem.parent.mkdir(parents=True, exist_ok=True)
    result = evaluate(_guarded(program), examples, metric=accuracy, fields=FIELDS, runner=threads,
                      out=stem.with_name(stem.name + ".eval.jsonl") if stem else None, run=identity,
                      progress=progress, display=False)
    questions: dict[str, Question] = {q.qid: q for q in dataset.questions}
    rows = []
    for example, row in zip(examples, result.rows, strict=True):
        rows.append(_final_row(name, model, example, row, questions.get(example["qid"]), dataset, judge))
    if stem is not None:
        with stem.with_name(stem.name + ".jsonl").open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return RunResult(rows, summarize(rows), str(stem.with_name(stem.name + ".jsonl")) if stem else None)


def _final_row(program: str, model: str, example: Mapping[str, Any], row: Mapping[str, Any],
               question: Question | None, dataset: DetectiveQASet, judge: ReasoningJudge | None) -> dict[str, Any]:
    prediction = row.get("prediction") if isinstance(row.get("prediction"), Mapping) else {}
    shown = prediction.get("paragraphs") or []
    clues = list(example.get("clue_position") or [])
    final: dict[str, Any] = {
        "qid": example["qid"], "lang": example.get("lang"), "anno_part": example.get("anno_part"),
        "novel_id": example.get("novel_id"), "index": example.get("index"), "program": program, "model": model,
        "question": example.get("question"), "gold": example.get("answer") or None,
        "answer": prediction.get("answer"), "correct": bool(row.get("score")) and row.get("error") is None,
        "path": prediction.get("path") if row.get("error") is None else None,
        "reasoning": prediction.get("reasoning"), "raw": prediction.get("raw"), "scores": prediction.get("scores"),
        "paragraphs": shown, "retrieved": prediction.get("retrieved"),
        "context_tokens": prediction.get("context_tokens"), "clue_position": clues,
        "answer_position": example.get("answer_position"),
        "clue_recall": clue_recall(clues, shown) if row.get("error") is None else None,
        "judge_score": None, "judge_normalized": None, "judge_raw": None, "judge_path": None,
        "error": row.get("error"), "seconds": row.get("seconds"),
    }
    if judge is not None and row.get("error") is None and question is not None:
        try:
            verdict = judge.judge(question, dataset.novels.get(question.novel_id), prediction.get("answer"),
                                  prediction.get("reasoning") or "")
            final.update(verdict.as_dict())
        except (ValueError, RuntimeError, OSError) as error:  # a judge failure costs the score, not the row
            final.update(judge_path="error", judge_raw=f"{type(error).__name__}: {error}")
    return final


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Accuracy by program, language and annotation part (then per program over all), with alignment-path
    counts, mean clue recall and mean normalized judge score (over the rows that have one)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        program = str(row.get("program", ""))
        groups.setdefault((program, f"{row.get('lang')}/{row.get('anno_part')}"), []).append(row)
        groups.setdefault((program, "all"), []).append(row)
    table = []
    for (program, group), members in groups.items():
        n = len(members)
        correct = sum(1 for r in members if r.get("correct"))
        paths = Counter(r.get("path") for r in members if r.get("error") is None)
        recalls = [r["clue_recall"] for r in members if r.get("clue_recall") is not None]
        judged = [r["judge_normalized"] for r in members if r.get("judge_normalized") is not None]
        table.append({
            "program": program, "group": group, "n": n, "errors": sum(1 for r in members if r.get("error")),
            "correct": correct, "accuracy": correct / n if n else 0.0,
            **{f"path_{p}": paths.get(p, 0) for p in PATHS},
            "clue_recall": sum(recalls) / len(recalls) if recalls else None,
            "judge": sum(judged) / len(judged) if judged else None, "judged": len(judged),
        })
    # "all" last within each program, programs in first-seen order.
    order = {program: i for i, (program, _) in enumerate(groups)}
    table.sort(key=lambda t: (order[t["program"]], t["group"] == "all", t["group"]))
    return table


def _fmt(value: Any, percent: bool = False) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.1f}" if percent else str(value)


def summary_markdown(table: Sequence[Mapping[str, Any]]) -> str:
    """The summary as a markdown table (accuracy, clue recall and judge score in percent)."""
    header = ("| program | lang/part | n | errors | accuracy % | json | lenient | logprob | none | clue recall % "
              "| judge % (n) |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for t in table:
        judge = f"{_fmt(t['judge'], True)} ({t['judged']})" if t.get("judged") else "–"
        lines.append(f"| {t['program']} | {t['group']} | {t['n']} | {t['errors']} | {_fmt(t['accuracy'], True)} | "
                     f"{t['path_json']} | {t['path_lenient']} | {t['path_logprob']} | {t['path_none']} | "
                     f"{_fmt(t['clue_recall'], True)} | {judge} |")
    return "\n".join(lines)
