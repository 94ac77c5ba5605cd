"""A setting's summary: accuracy per curve and per (curve, gold position) with Wilson 95% intervals
(`dsp.stats.wilson_interval`), seconds per prompt, prompt token counts, and every pair of conditions
compared on the same questions with the exact McNemar test (`dsp.stats.paired`).

>>> from programs.litm.runs import closedbook_run
>>> run = closedbook_run([{"question": "q?", "answers": ["a"]}, {"question": "r?", "answers": ["b"]}])
>>> summarize(run, [{"score": 1.0, "usage": {}}, {"score": 0.0, "usage": {}}])["curves"]["closed-book"]["ci95"]
[0.0945, 0.9055]
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from dsp.stats import paired, wilson_interval

from .runs import Run

__all__ = ["summarize", "question_id"]


def question_id(item: Mapping[str, Any]) -> str:
    """The question an item asks, shared by its positions (``q3@9``) and orders (``q3/reverse``).

    >>> question_id({"id": "q3@9"}), question_id({"id": "q3/reverse"})
    ('q3', 'q3')
    """
    return item["id"].split("@")[0].split("/")[0]


def _pairs(groups: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """Every pair of conditions compared on the questions both were run on: who got which right."""
    names = list(groups)
    return [{"a": a, "b": b, **paired(groups[a], groups[b])} for i, a in enumerate(names) for b in names[i + 1:]]


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


def _curves(run: Run, rows: Sequence[Mapping[str, Any]], token_counts: Sequence[int] | None) -> dict[str, Any]:
    groups: dict[tuple[str, Any], tuple[list[float], list[float], list[int]]] = {}
    for k, (item, row) in enumerate(zip(run.items, rows)):
        # Only prompts the LM really evaluated are timed: a cache hit or a failure says nothing of speed.
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
    return curves


def _outcomes(run: Run, rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """{group: {condition: {question: score}}}: positions within a curve, or the orders of `reorder`."""
    outcomes: dict[str, dict[str, dict[str, float]]] = {}
    for item, row in zip(run.items, rows):
        if run.kind in ("positions", "kv"):
            group, condition = item["curve"], str(item["position"])
        elif run.kind == "reorder":
            group, condition = "orders", item["curve"]
        else:
            continue
        outcomes.setdefault(group, {}).setdefault(condition, {})[question_id(item)] = float(row.get("score") or 0.0)
    if run.kind in ("positions", "kv"):
        for group in outcomes:
            outcomes[group] = dict(sorted(outcomes[group].items(), key=lambda kv: int(kv[0])))
    return outcomes


def summarize(run: Run, rows: Sequence[Mapping[str, Any]], token_counts: Sequence[int] | None = None) -> dict[str, Any]:
    """Accuracy per curve and per (curve, gold position), with Wilson 95% intervals, seconds per prompt
    (over prompts the LM really evaluated, not cache hits) and prompt token counts; `rows` are
    dsp.evaluate's rows in the order of `run.items`.

    >>> from programs.litm.runs import closedbook_run
    >>> run = closedbook_run([{"question": "q?", "answers": ["a"]}])
    >>> summarize(run, [{"score": 1.0, "usage": {}}])["curves"]["closed-book"]["accuracy"]
    1.0
    """
    if len(rows) != len(run.items):
        raise ValueError(f"{run.setting}: {len(rows)} result rows for {len(run.items)} items")
    errors = sum(1 for row in rows if row.get("error"))
    # The same questions under every position (or order): compare conditions pair by pair, exactly.
    outcomes = _outcomes(run, rows)
    summary: dict[str, Any] = {"setting": run.setting, "task": run.task, "kind": run.kind,
                               "description": run.description, "items": len(run.items),
                               "questions": len({question_id(item) for item in run.items}),
                               "errors": errors, "metric": "best_subspan_em" if run.task == "qa" else "accuracy",
                               "curves": _curves(run, rows, token_counts)}
    if outcomes:
        summary["paired"] = {group: _pairs(conditions) for group, conditions in outcomes.items()}
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
