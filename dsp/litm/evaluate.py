"""Run and score the Lost in the Middle settings: closed-book, oracle, multi-document QA, KV retrieval
and the passage-reordering experiment; per-position tables and the accuracy-vs-position plot.

A setting becomes a `Run`: one dsp Example per (question, gold position) holding the rendered prompt,
its gold answers, the curve it belongs to and the gold position. `run_setting` sends every prompt to
the LM through `dsp.evaluate` (parallel when asked, disk-cached, resumable JSONL), greedy with
max_tokens=100 as the paper, scores it as the paper's evaluation scripts do, and writes:

- ``<out>/<setting>.jsonl``: dsp.evaluate's per-example rows (the resumable record of the run);
- ``<out>/<setting>.predictions.jsonl.gz``: the paper's scored prediction format (input example,
  model_prompt, model_documents or model_ordered_kv_records, model_answer, metric_*);
- ``<out>/<setting>.summary.json``: accuracy per curve and gold position, timings, the model.

Items are ordered question by question with the gold position descending, so consecutive prompts
share their longest common prefix and LlamaCpp reuses its evaluated chunks.

>>> qa_score("Wilhelm Röntgen won it.\\nQuestion: ...", ["Wilhelm Röntgen"])
1.0
>>> qa_score("I think\\nWilhelm Röntgen", ["Wilhelm Röntgen"])   # only the first line counts
0.0
>>> kv_score('"9f0e1f1a-3c2b-4d5e-8f9a-0b1c2d3e4f5a"', "9F0E1F1A-3C2B-4D5E-8F9A-0B1C2D3E4F5A")
1.0
"""

from __future__ import annotations

import copy
import json
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..evaluation import LABEL_FIELDS, evaluate
from ..example import Example
from ..metrics import best_subspan_em, wilson_interval
from ..primitives.order import order_passages
from .data import kv_records_with_gold_at, randomize_distractors, relevance_ranked, write_records
from .prompts import Document, get_closedbook_qa_prompt, get_kv_retrieval_prompt, get_qa_prompt

__all__ = [
    "qa_score", "kv_score", "first_line", "Run", "PromptTooLongError",
    "closedbook_run", "oracle_run", "qa_run", "kv_run", "reorder_run", "qa_setting_name",
    "check_prompts_fit", "mcnemar_exact", "run_setting", "summarize", "wilson_interval",
    "load_summaries", "results_markdown", "plot_positions",
]

DEFAULT_MAX_TOKENS = 100  # the paper's max_new_tokens


# -- scoring ----------------------------------------------------------------------------------------

def first_line(model_answer: str) -> str:
    """The answer up to its first newline, stripped (the paper scores only this, so that copying the
    context, which contains the gold answer, earns nothing).

    >>> first_line(" Paris\\nQuestion: who")
    'Paris'
    """
    if not isinstance(model_answer, str):
        raise TypeError(f"a model answer must be text, got {type(model_answer).__name__}: {model_answer!r:.80}")
    return model_answer.split("\n")[0].strip()


def qa_score(model_answer: str, answers: Sequence[str]) -> float:
    """The paper's QA metric: best_subspan_em of the answer's first line against the gold answers.

    >>> qa_score(" The Beatles, in 1962.", ["beatles"])
    1.0
    """
    return best_subspan_em(first_line(model_answer), answers)


def kv_score(model_answer: str, value: str) -> float:
    """The paper's KV accuracy: 1.0 when the gold value occurs in the whole answer (case-insensitive).

    >>> kv_score('The value is "abc-1"', "ABC-1")
    1.0
    """
    if not isinstance(model_answer, str) or not isinstance(value, str):
        raise TypeError("kv_score needs the model answer and the gold value as text")
    return 1.0 if value.lower() in model_answer.lower() else 0.0


qa_score.__name__ = "best_subspan_em"
kv_score.__name__ = "kv_accuracy"


# -- runs -------------------------------------------------------------------------------------------

@dataclass
class Run:
    """One setting ready to evaluate: `items` (dsp Examples: id, question, prompt, curve, position,
    gold `answers` or `value`) and, per item, `sources`: the paper-format record the prompt came from
    plus what the model saw (model_documents / model_ordered_kv_records).

    >>> run = closedbook_run([{"question": "q?", "answers": ["a"]}])
    >>> run.setting, run.items[0].id, run.items[0].answers
    ('closedbook', 'q0', ['a'])
    """

    setting: str
    task: str  # "qa" or "kv"
    kind: str  # "closedbook", "oracle", "positions", "kv" or "reorder"
    description: str
    items: list[Example] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)

    def add(self, item: Example, source: dict[str, Any]) -> None:
        self.items.append(item)
        self.sources.append(source)


def _documents(ctxs: Sequence[Mapping[str, Any]]) -> list[Document]:
    return [Document.from_dict({k: v for k, v in ctx.items() if k in _DOC_FIELDS}) for ctx in ctxs]


_DOC_FIELDS = ("title", "text", "id", "score", "hasanswer", "isgold", "original_retrieval_index")


def _qid(index: int) -> str:
    return f"q{index}"


def closedbook_run(records: Sequence[Mapping[str, Any]]) -> Run:
    """Closed-book QA: the question alone (the paper's closed-book setting over the oracle questions).

    >>> closedbook_run([{"question": "who wrote hamlet", "answers": ["Shakespeare"]}]).items[0].prompt
    'Question: who wrote hamlet\\nAnswer:'
    """
    run = Run("closedbook", "qa", "closedbook", "closed-book: the question alone")
    for i, record in enumerate(records):
        prompt = get_closedbook_qa_prompt(record["question"])
        run.add(Example(id=_qid(i), question=record["question"], prompt=prompt, curve="closed-book", position=None,
                        answers=list(record["answers"])),
                {"record": record, "model_documents": []})
    return run


def oracle_run(records: Sequence[Mapping[str, Any]], query_aware_contextualization: bool = False) -> Run:
    """The oracle setting: each question with its gold passage only (the records' own ctxs).

    >>> run = oracle_run([{"question": "q?", "answers": ["a"], "ctxs": [{"title": "T", "text": "a.", "isgold": True}]}])
    >>> run.items[0].prompt.splitlines()[2]
    'Document [1](Title: T) a.'
    """
    setting = "oracle-qac" if query_aware_contextualization else "oracle"
    run = Run(setting, "qa", "oracle", "oracle: the gold passage alone")
    for i, record in enumerate(records):
        documents = _documents(record["ctxs"])
        prompt = get_qa_prompt(record["question"], documents,
                               query_aware_contextualization=query_aware_contextualization)
        run.add(Example(id=_qid(i), question=record["question"], prompt=prompt, curve="oracle", position=None,
                        answers=list(record["answers"])),
                {"record": record, "model_documents": [d.to_dict() for d in documents]})
    return run


def qa_setting_name(total_docs: int, random_order: bool = False, mention_random_ordering: bool = False,
                    query_aware_contextualization: bool = False, order: str | None = None) -> str:
    """The file stem of a multi-document setting, e.g. ``qa-20docs``, ``qa-20docs-random``.

    >>> qa_setting_name(20, order="lost_in_the_middle")
    'qa-20docs-order_lost_in_the_middle'
    """
    name = f"qa-{total_docs}docs"
    if random_order:
        name += "-random"
    if mention_random_ordering:
        name += "-mention"
    if query_aware_contextualization:
        name += "-qac"
    if order:
        name += f"-order_{order}"
    return name


def _gold_index(ctxs: Sequence[Mapping[str, Any]], question: str) -> int:
    golds = [i for i, ctx in enumerate(ctxs) if ctx.get("isgold") is True]
    if len(golds) != 1:
        raise ValueError(f"question {question!r:.80}: expected exactly one isgold document, found {len(golds)}")
    return golds[0]


def qa_run(examples_by_position: Mapping[int, Sequence[Mapping[str, Any]]], total_docs: int,
           random_order: bool = False, seed: int = 0, mention_random_ordering: bool = False,
           query_aware_contextualization: bool = False, order: str | None = None) -> Run:
    """Multi-document QA at several gold positions ({gold index: paper-format examples}, the same
    questions in the same order at every position).

    `random_order` shuffles the distractors (gold kept in place, seeded); `order` rearranges the whole
    list with `dsp.order_passages` treating it as a relevance ranking, so the gold passage's position
    becomes its *rank* and the curve shows what reordering does to an answer retrieved at that rank.

    >>> data = make_qa_data(oracle[:200], rm, total_docs=20, gold_indices=[0, 4, 9, 14, 19])   # doctest: +SKIP
    >>> run = qa_run(data, total_docs=20)                                                     # doctest: +SKIP
    >>> [item.id for item in run.items[:3]]                                                   # doctest: +SKIP
    ['q0@19', 'q0@14', 'q0@9']
    """
    setting = qa_setting_name(total_docs, random_order, mention_random_ordering, query_aware_contextualization, order)
    curve = f"{total_docs} docs"
    if random_order:
        curve += ", random distractor order"
    if query_aware_contextualization:
        curve += ", query-aware"
    if order:
        curve += f", {order} order (x = rank)"
    run = Run(setting, "qa", "positions", f"{total_docs}-document QA" + (f", reordered with {order}" if order else ""))
    positions = sorted(examples_by_position, reverse=True)
    sizes = {len(examples_by_position[p]) for p in positions}
    if len(sizes) > 1:
        raise ValueError(f"every gold position needs the same questions; got {sorted(sizes)} examples per position")
    count = sizes.pop() if sizes else 0
    for i in range(count):
        for position in positions:
            example = examples_by_position[position][i]
            ctxs = example["ctxs"]
            if len(ctxs) != total_docs:
                raise ValueError(f"question {example['question']!r:.80} at gold position {position} has "
                                 f"{len(ctxs)} documents, expected {total_docs}")
            if _gold_index(ctxs, example["question"]) != position:
                raise ValueError(f"question {example['question']!r:.80}: its gold document is not at index {position}")
            if example["question"] != examples_by_position[positions[0]][i]["question"]:
                raise ValueError(f"example {i} is not the same question at every gold position")
            if random_order:
                ctxs = randomize_distractors(example, seed=seed)["ctxs"]
            if order:
                ctxs = order_passages(list(ctxs), strategy=order)
            documents = _documents(ctxs)
            prompt = get_qa_prompt(example["question"], documents, mention_random_ordering=mention_random_ordering,
                                   query_aware_contextualization=query_aware_contextualization)
            run.add(Example(id=f"{_qid(i)}@{position}", question=example["question"], prompt=prompt, curve=curve,
                            position=position, gold_at=_gold_index(ctxs, example["question"]),
                            answers=list(example["answers"])),
                    {"record": example, "model_documents": [d.to_dict() for d in documents],
                     "model_prompt_mention_random_ordering": mention_random_ordering,
                     "model_use_random_ordering": random_order})
    return run


def kv_run(records: Sequence[Mapping[str, Any]], positions: Sequence[int],
           query_aware_contextualization: bool = False) -> Run:
    """Key-value retrieval with the gold pair moved to each of `positions` (the paper's procedure).

    >>> run = kv_run([{"ordered_kv_records": [["a", "1"], ["b", "2"]], "key": "b", "value": "2"}], [0, 1])
    >>> run.setting, [item.id for item in run.items]
    ('kv-2keys', ['q0@1', 'q0@0'])
    """
    num_keys = {len(r["ordered_kv_records"]) for r in records}
    if len(num_keys) > 1:
        raise ValueError(f"the KV records have different sizes: {sorted(num_keys)}")
    keys = num_keys.pop() if num_keys else 0
    setting = f"kv-{keys}keys" + ("-qac" if query_aware_contextualization else "")
    run = Run(setting, "kv", "kv", f"KV retrieval, {keys} pairs")
    curve = f"{keys} key-value pairs" + (", query-aware" if query_aware_contextualization else "")
    for i, record in enumerate(records):
        for position in sorted(set(positions), reverse=True):
            pairs = kv_records_with_gold_at(record, position)
            prompt = get_kv_retrieval_prompt(pairs, record["key"], query_aware_contextualization)
            run.add(Example(id=f"{_qid(i)}@{position}", question=record["key"], prompt=prompt, curve=curve,
                            position=position, value=record["value"]),
                    {"record": record, "model_ordered_kv_records": pairs})
    return run


def reorder_run(examples: Sequence[Mapping[str, Any]], strategies: Sequence[str]) -> Run:
    """The passage-order experiment on retrieval-ranked contexts: each example's documents ranked by
    the retriever (the gold passage at the rank the retriever itself gave it), then arranged by each
    of `strategies` with `dsp.order_passages`. An item's position is the gold passage's relevance rank
    (0 = ranked first); `gold_at` is where the strategy put it.

    >>> run = reorder_run(data[0], ["relevance", "lost_in_the_middle", "reverse"])   # doctest: +SKIP
    """
    if not examples:
        raise ValueError("reorder_run needs examples")
    total_docs = len(examples[0]["ctxs"])
    run = Run(f"reorder-{total_docs}docs", "qa", "reorder",
              f"{total_docs} retrieval-ranked documents arranged by " + ", ".join(strategies))
    for i, example in enumerate(examples):
        ranked = relevance_ranked(example)
        rank = _gold_index(ranked, example["question"])
        for strategy in strategies:
            ctxs = order_passages(ranked, strategy=strategy)
            documents = _documents(ctxs)
            prompt = get_qa_prompt(example["question"], documents)
            run.add(Example(id=f"{_qid(i)}/{strategy}", question=example["question"], prompt=prompt, curve=strategy,
                            position=rank, gold_at=_gold_index(ctxs, example["question"]),
                            answers=list(example["answers"])),
                    {"record": example, "model_documents": [d.to_dict() for d in documents],
                     "model_prompt_mention_random_ordering": False, "model_use_random_ordering": False})
    return run


# -- running ----------------------------------------------------------------------------------------

class PromptTooLongError(ValueError):
    """A prompt (plus the tokens to generate) does not fit the model's context window.

    >>> issubclass(PromptTooLongError, ValueError)
    True
    """


def check_prompts_fit(lm: Any, run: Run, max_tokens: int) -> list[int] | None:
    """Token counts of every prompt (BOS included) when the LM can count them (LlamaCpp); raises
    PromptTooLongError naming the longest prompt and the n_ctx it needs. Nothing is ever truncated.

    >>> counts = check_prompts_fit(dsp.LlamaCpp(n_ctx=4096), run, max_tokens=100)   # doctest: +SKIP
    """
    if not (hasattr(lm, "tokenize") and isinstance(getattr(lm, "n_ctx", None), int)):
        return None
    counts = [len(lm.tokenize(item["prompt"], add_bos=True)) for item in run.items]
    if not counts:
        return counts
    longest = max(range(len(counts)), key=counts.__getitem__)
    needed = counts[longest] + max_tokens
    if needed > lm.n_ctx:
        suggestion = -(-needed // 1024) * 1024
        raise PromptTooLongError(
            f"{run.setting}: the prompt of {run.items[longest]['id']} ({run.items[longest]['question']!r:.60}) has "
            f"{counts[longest]} tokens; with max_tokens={max_tokens} it needs n_ctx >= {needed}, but the model has "
            f"n_ctx={lm.n_ctx}. Rerun with --n-ctx {suggestion} (prompts are never truncated).")
    return counts


def _lm_name(lm: Any) -> str:
    return getattr(lm, "spec", None) or getattr(lm, "model", None) or type(lm).__name__


def run_setting(lm: Any, run: Run, out_dir: str | os.PathLike, max_tokens: int = DEFAULT_MAX_TOKENS,
                stop: Sequence[str] | None = None, threads: int = 1, display_progress: bool = True) -> dict[str, Any]:
    """Evaluate every prompt of `run` with `lm` (greedy), write the rows, predictions and summary under
    `out_dir`, and return the summary. A rerun resumes: finished rows are reused.

    `stop=["\\n"]` ends QA answers at their first newline; since only the first line is scored, the
    scores are the same as generating all max_tokens, for a fraction of the time.

    >>> summary = run_setting(dsp.LlamaCpp(), closedbook_run(records), "runs/litm/llamacpp")   # doctest: +SKIP
    >>> summary["curves"]["closed-book"]["accuracy"]                                           # doctest: +SKIP
    """
    if not run.items:
        raise ValueError(f"{run.setting}: nothing to run (no examples)")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    out_dir = Path(out_dir)
    token_counts = check_prompts_fit(lm, run, max_tokens)
    params: dict[str, Any] = {"temperature": 0.0, "max_tokens": max_tokens}
    if stop:
        params["stop"] = list(stop)

    def answer(example: Example) -> str:
        # The raw prompt for a completion model; a chat client sends it as the user message.
        return lm(example["prompt"], **params)[0]

    metric: Callable[..., float] = qa_score if run.task == "qa" else kv_score
    started = time.perf_counter()
    result = evaluate(answer, run.items, metric=metric, num_threads=threads, out=out_dir / f"{run.setting}.jsonl",
                      inputs=None, gold="answers" if run.task == "qa" else "value",
                      labels=(*LABEL_FIELDS, "value"), display_progress=display_progress, display=False)
    elapsed = time.perf_counter() - started
    _write_predictions(out_dir / f"{run.setting}.predictions.jsonl.gz", run, result.rows, _lm_name(lm), params)
    summary = summarize(run, result.rows, token_counts)
    identity = lm.cache_identity() if callable(getattr(lm, "cache_identity", None)) else None
    summary.update(model=_lm_name(lm), model_repr=repr(lm), model_identity=identity, max_tokens=max_tokens,
                   stop=params.get("stop"), wall_seconds=round(elapsed, 1), n_ctx=getattr(lm, "n_ctx", None),
                   finished=time.strftime("%Y-%m-%d %H:%M:%S"))
    path = out_dir / f"{run.setting}.summary.json"
    path.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary


def _write_predictions(path: Path, run: Run, rows: Sequence[Mapping[str, Any]], model: str,
                       params: Mapping[str, Any]) -> None:
    metric_key = "metric_best_subspan_em" if run.task == "qa" else "metric_accuracy"
    out = []
    for item, source, row in zip(run.items, run.sources, rows):
        record = copy.deepcopy(dict(source["record"]))
        for key, value in source.items():
            if key != "record":
                record[key] = value
        record.update(model_prompt=item["prompt"], model_answer=row.get("prediction"), model=model,
                      model_temperature=params["temperature"], model_top_p=1.0,
                      model_max_new_tokens=params["max_tokens"], model_stop=params.get("stop"))
        record[metric_key] = row.get("score")
        record.update(litm_setting=run.setting, litm_curve=item["curve"], litm_position=item["position"])
        if item.get("gold_at") is not None:
            record["litm_gold_at"] = item["gold_at"]
        if row.get("error"):
            record["model_error"] = row["error"]
        out.append(record)
    write_records(path, out)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value for paired right/wrong outcomes: `a_only` items right under A
    only, `b_only` under B only (the items both got right or wrong carry no information).

    >>> round(mcnemar_exact(16, 1), 4), mcnemar_exact(3, 3)
    (0.0003, 1.0)
    """
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def _paired(groups: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """Every pair of conditions compared on the questions both were run on: who got which right."""
    names = list(groups)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = groups[a].keys() & groups[b].keys()
            a_only = sum(1 for q in shared if groups[a][q] >= 1.0 > groups[b][q])
            b_only = sum(1 for q in shared if groups[b][q] >= 1.0 > groups[a][q])
            out.append({"a": a, "b": b, "n": len(shared), "a_only": a_only, "b_only": b_only,
                        "p": mcnemar_exact(a_only, b_only)})
    return out


def _question(item: Mapping[str, Any]) -> str:
    return item["id"].split("@")[0].split("/")[0]


def _cell(scores: list[float], seconds: list[float], tokens: list[int]) -> dict[str, Any]:
    n = len(scores)
    correct = sum(scores)
    low, high = wilson_interval(correct, n)
    cell: dict[str, Any] = {"n": n, "correct": correct, "accuracy": correct / n if n else 0.0,
                            "ci95": [round(low, 4), round(high, 4)]}
    if seconds:
        cell["seconds_per_prompt"] = round(statistics.mean(seconds), 2)
        cell["timed_prompts"] = len(seconds)
    if tokens:
        cell["prompt_tokens_mean"] = round(statistics.mean(tokens), 1)
        cell["prompt_tokens_max"] = max(tokens)
    return cell


def summarize(run: Run, rows: Sequence[Mapping[str, Any]], token_counts: Sequence[int] | None = None) -> dict[str, Any]:
    """Accuracy per curve and per (curve, gold position), with Wilson 95% intervals, seconds per prompt
    (over prompts the LM really evaluated, not cache hits) and prompt token counts.

    >>> run = closedbook_run([{"question": "q?", "answers": ["a"]}])
    >>> summarize(run, [{"score": 1.0, "usage": {}}])["curves"]["closed-book"]["accuracy"]
    1.0
    """
    if len(rows) != len(run.items):
        raise ValueError(f"{run.setting}: {len(rows)} result rows for {len(run.items)} items")
    groups: dict[tuple[str, Any], tuple[list[float], list[float], list[int]]] = {}
    errors = 0
    for k, (item, row) in enumerate(zip(run.items, rows)):
        if row.get("error"):
            errors += 1
        timed = (row.get("usage") or {}).get("requests", 0) > 0 and row.get("error") is None
        keys = [(item["curve"], None)] + ([(item["curve"], item["position"])] if item["position"] is not None else [])
        for key in keys:
            scores, seconds, tokens = groups.setdefault(key, ([], [], []))
            scores.append(float(row.get("score") or 0.0))
            if timed:
                seconds.append(float(row.get("seconds") or 0.0))
            if token_counts is not None:
                tokens.append(token_counts[k])
    curves: dict[str, Any] = {}
    for (curve, position), values in groups.items():
        entry = curves.setdefault(curve, {"positions": {}})
        if position is None:
            entry.update(_cell(*values))
        else:
            entry["positions"][str(position)] = _cell(*values)
    for entry in curves.values():
        entry["positions"] = dict(sorted(entry["positions"].items(), key=lambda kv: int(kv[0])))
    # The same questions under every position (or order): compare conditions pair by pair, exactly.
    outcomes: dict[str, dict[str, dict[str, float]]] = {}
    for item, row in zip(run.items, rows):
        if run.kind in ("positions", "kv"):
            group, condition = item["curve"], str(item["position"])
        elif run.kind == "reorder":
            group, condition = "orders", item["curve"]
        else:
            continue
        outcomes.setdefault(group, {}).setdefault(condition, {})[_question(item)] = float(row.get("score") or 0.0)
    if run.kind in ("positions", "kv"):
        for group in outcomes:
            outcomes[group] = dict(sorted(outcomes[group].items(), key=lambda kv: int(kv[0])))
    summary: dict[str, Any] = {"setting": run.setting, "task": run.task, "kind": run.kind,
                               "description": run.description, "items": len(run.items),
                               "questions": len({_question(item) for item in run.items}),
                               "errors": errors, "metric": "best_subspan_em" if run.task == "qa" else "accuracy",
                               "curves": curves}
    if outcomes:
        summary["paired"] = {group: _paired(conditions) for group, conditions in outcomes.items()}
    if run.kind == "reorder":
        summary["gold_at"] = _gold_at_table(run, rows)
    return summary


def _gold_at_table(run: Run, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Reordering: accuracy when the retriever ranked the gold first vs. lower, and where each strategy
    put the gold passage."""
    table: dict[str, Any] = {}
    for item, source, row in zip(run.items, run.sources, rows):
        entry = table.setdefault(item["curve"], {"rank1": [], "rank2+": [], "gold_at": [], "at_end": []})
        entry["rank1" if item["position"] == 0 else "rank2+"].append(float(row.get("score") or 0.0))
        entry["gold_at"].append(item["gold_at"])
        entry["at_end"].append(item["gold_at"] in (0, len(source["model_documents"]) - 1))
    out = {}
    for curve, entry in table.items():
        out[curve] = {bucket: _cell(entry[bucket], [], []) for bucket in ("rank1", "rank2+")}
        out[curve]["gold_at_mean"] = round(statistics.mean(entry["gold_at"]), 2)
        out[curve]["gold_at_first_or_last"] = round(sum(entry["at_end"]) / len(entry["at_end"]), 3)
    return out


# -- reporting --------------------------------------------------------------------------------------

def load_summaries(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every ``*.summary.json`` under `out_dir` (one directory per model), each tagged with its model
    directory name as ``model_dir``.

    >>> [s["setting"] for s in load_summaries("runs/litm")]                        # doctest: +SKIP
    ['closedbook', 'kv-75keys', 'oracle', 'qa-10docs', 'qa-20docs', ...]
    """
    root = Path(out_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no run directory {root}")
    summaries = []
    for path in sorted(root.rglob("*.summary.json")):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from None
        summary["model_dir"] = path.parent.name
        summaries.append(summary)
    return summaries


def _pct(cell: Mapping[str, Any]) -> str:
    return f"{100 * cell['accuracy']:.1f}"


def _paired_markdown(pairs: Sequence[Mapping[str, Any]], name: Any) -> list[str]:
    if not pairs:
        return []
    lines = ["Paired on the same questions (exact McNemar test):", "",
             "| A | B | questions | right under A only | right under B only | p |", "|---|---|---|---|---|---|"]
    for pair in pairs:
        p = pair["p"]
        shown = f"{p:.2g}" if p < 0.001 else f"{p:.3f}"
        lines.append(f"| {name(pair['a'])} | {name(pair['b'])} | {pair['n']} | {pair['a_only']} | {pair['b_only']} "
                     f"| {shown} |")
    return lines + [""]


def results_markdown(summaries: Sequence[Mapping[str, Any]]) -> str:
    """Markdown tables: reference settings, accuracy per gold position for each curve, the reordering
    experiment, and timings. Accuracies are percentages; brackets are Wilson 95% intervals.

    >>> print(results_markdown(load_summaries("runs/litm")))                        # doctest: +SKIP
    """
    lines: list[str] = []
    for model in sorted({s["model_dir"] for s in summaries}):
        mine = [s for s in summaries if s["model_dir"] == model]
        lines += [f"#### {model}", ""]
        refs = [s for s in mine if s["kind"] in ("closedbook", "oracle")]
        if refs:
            lines += ["| setting | n | accuracy (%) | 95% CI | s / prompt | prompt tokens (mean) |", "|---|---|---|---|---|---|"]
            for s in refs:
                for curve, cell in s["curves"].items():
                    lines.append(f"| {curve} | {cell['n']} | {_pct(cell)} | {100 * cell['ci95'][0]:.1f}–"
                                 f"{100 * cell['ci95'][1]:.1f} | {cell.get('seconds_per_prompt', '–')} | "
                                 f"{cell.get('prompt_tokens_mean', '–')} |")
            lines.append("")
        for s in (s for s in mine if s["kind"] in ("positions", "kv")):
            for curve, cell in s["curves"].items():
                positions = cell["positions"]
                header = " | ".join(f"gold at {int(p) + 1}" for p in positions)
                lines += [f"{curve} (`{s['setting']}`, {s['questions']} questions per position):", "",
                          f"| {header} | mean | s / prompt | prompt tokens (mean) |",
                          "|" + "---|" * (len(positions) + 3)]
                values = " | ".join(f"{_pct(c)} [{100 * c['ci95'][0]:.0f}–{100 * c['ci95'][1]:.0f}]"
                                    for c in positions.values())
                lines += [(f"| {values} | {_pct(cell)} | {cell.get('seconds_per_prompt', '–')} | "
                           f"{cell.get('prompt_tokens_mean', '–')} |"), ""]
                lines += _paired_markdown(s.get("paired", {}).get(curve, []), lambda p: f"gold at {int(p) + 1}")
        for s in (s for s in mine if s["kind"] == "reorder"):
            lines += [f"Passage order on retrieval-ranked contexts (`{s['setting']}`, {s['questions']} questions):", "",
                      ("| order | accuracy (%) | 95% CI | gold ranked 1st: acc. (n) | gold ranked lower: acc. (n) | "
                       "mean gold index | gold first or last |"), "|---|---|---|---|---|---|---|"]
            for curve, cell in s["curves"].items():
                extra = s.get("gold_at", {}).get(curve, {})
                r1, r2 = extra.get("rank1", {"accuracy": 0, "n": 0}), extra.get("rank2+", {"accuracy": 0, "n": 0})
                lines.append(f"| {curve} | {_pct(cell)} | {100 * cell['ci95'][0]:.1f}–{100 * cell['ci95'][1]:.1f} | "
                             f"{_pct(r1) if r1['n'] else '–'} ({r1['n']}) | {_pct(r2) if r2['n'] else '–'} ({r2['n']}) | "
                             f"{extra.get('gold_at_mean', '–')} | {extra.get('gold_at_first_or_last', '–')} |")
            lines.append("")
            lines += _paired_markdown(s.get("paired", {}).get("orders", []), str)
    return "\n".join(lines).rstrip() + "\n"


def plot_positions(summaries: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str | None = None) -> Path:
    """Accuracy (%) vs. gold position (1-based), one line per model and curve; closed-book and oracle
    as horizontal reference lines. QA and KV get one panel each when both are present. Writes a PNG.

    >>> plot_positions(load_summaries("runs/litm"), "runs/litm/litm-positions.png")   # doctest: +SKIP
    """
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state is touched

    models = sorted({s.get("model_dir", "") for s in summaries})
    label_model = len(models) > 1
    panels = [(task, [s for s in summaries if s["task"] == task and s["kind"] in ("positions", "kv")])
              for task in ("qa", "kv")]
    panels = [(task, group) for task, group in panels if group]
    if not panels:
        raise ValueError("nothing to plot: no summary has per-position results")
    fig = Figure(figsize=(6.5 * len(panels), 4.6), dpi=120)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (task, group) in zip(axes, panels):
        xs_all: list[int] = []
        ys_all: list[float] = [0.0]
        for s in group:
            for curve, cell in s["curves"].items():
                xs = [int(p) + 1 for p in cell["positions"]]
                ys = [100 * c["accuracy"] for c in cell["positions"].values()]
                xs_all += xs
                ys_all += ys
                label = f"{s['model_dir']}: {curve}" if label_model else curve
                ax.plot(xs, ys, marker="o", label=label)
        if task == "qa":
            styles = {"closedbook": ("dashed", "tab:gray"), "oracle": ("dotted", "black")}
            for s in summaries:
                if s["kind"] in styles:
                    for curve, cell in s["curves"].items():
                        style, color = styles[s["kind"]]
                        label = f"{s['model_dir']}: {curve}" if label_model else curve
                        ys_all.append(100 * cell["accuracy"])
                        ax.axhline(100 * cell["accuracy"], linestyle=style, color=color,
                                   label=f"{label} ({100 * cell['accuracy']:.1f})")
            ax.set_title("Multi-document QA (NQ-open)")
            ax.set_xlabel("Position of the document with the answer (1 = first)")
            ax.set_ylabel("Accuracy (best subspan EM, %)")
        else:
            ax.set_title("Key-value retrieval")
            ax.set_xlabel("Position of the key to retrieve (1 = first)")
            ax.set_ylabel("Accuracy (%)")
        if xs_all:
            ax.set_xticks(sorted(set(xs_all)))
        # Room above the highest point; at least 0-10 so an all-zero panel still reads as percentages.
        ax.set_ylim(0, min(100.0, max(10.0, 1.15 * max(ys_all))))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
