"""Run a Lost in the Middle setting on an LM: check every prompt fits, evaluate, write the results.

`run_setting` sends every prompt of a `Run` to the LM through `dsp.evaluate` (parallel when asked,
disk-cached, resumable), greedy with max_tokens=100 as the paper, scores it as the paper's evaluation
scripts do, and writes under `out_dir`:

- ``<setting>.jsonl``: dsp.evaluate's results file: a header naming the run (the LM, its generation
  parameters, the setting), then one row per prompt. A rerun resumes it; a rerun with another LM,
  max_tokens or stop is refused (`dsp.RunMismatch`) instead of reporting the old answers as new;
- ``<setting>.predictions.jsonl.gz``: the paper's scored prediction format (input example,
  model_prompt, model_documents or model_ordered_kv_records, model_answer, metric_*);
- ``<setting>.summary.json``: accuracy per curve and gold position, timings, the model.

`run_setting`'s example runs a closed-book setting end to end with an LM that always answers the same;
with the embedded model it reads (a model load, so shown, not run)::

    summary = run_setting(dsp.LlamaCpp(), closedbook_run(records), "runs/litm/llamacpp")
    summary["curves"]["closed-book"]["accuracy"]
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dsp import LM, ContextLengthExceeded, CountsTokens, Fields, evaluate
from dsp.clients.retry import redact_urls
from dsp.evaluation import describe, read_run
from dsp.utils import check_positive_int

from .data import write_records
from .runs import Run
from .scoring import kv_score, qa_score
from .summary import summarize

__all__ = ["DEFAULT_MAX_TOKENS", "check_prompts_fit", "run_setting", "results_path", "first_error"]

DEFAULT_MAX_TOKENS = 100  # the paper's max_new_tokens


def check_prompts_fit(lm: LM, run: Run, max_tokens: int) -> list[int] | None:
    """Token counts of every prompt (BOS included) when the LM counts tokens (`dsp.CountsTokens`, e.g.
    LlamaCpp), else None. Raises `dsp.ContextLengthExceeded` naming the longest prompt and the n_ctx it
    needs before anything is sent: prompts are never truncated.

    >>> from programs.litm.runs import closedbook_run
    >>> run = closedbook_run([{"question": "who wrote hamlet", "answers": ["Shakespeare"]}])
    >>> print(check_prompts_fit(LM("a-server-model"), run, max_tokens=100))   # it cannot count
    None

    With LlamaCpp (a model load, so not run here), ``check_prompts_fit(dsp.LlamaCpp(n_ctx=4096), run,
    max_tokens=100)`` is the list of the prompts' token counts.
    """
    if not isinstance(lm, CountsTokens):
        return None  # a server LM cannot count: the server itself refuses a prompt that does not fit
    counts = [len(lm.tokenize(item["prompt"], add_bos=True)) for item in run.items]
    if not counts:
        return counts
    longest = max(range(len(counts)), key=counts.__getitem__)
    needed = counts[longest] + max_tokens
    if needed > lm.n_ctx:
        suggestion = -(-needed // 1024) * 1024
        raise ContextLengthExceeded(
            f"{run.setting}: the prompt of {run.items[longest]['id']} ({run.items[longest]['question']!r:.60}) has "
            f"{counts[longest]} tokens; with max_tokens={max_tokens} it needs n_ctx >= {needed}, but the model has "
            f"n_ctx={lm.n_ctx}. Rerun with --n-ctx {suggestion} (prompts are never truncated).",
            prompt_tokens=counts[longest], requested=max_tokens, limit=lm.n_ctx)
    return counts


def results_path(out_dir: str | os.PathLike, run: Run) -> Path:
    """The setting's resumable results file (dsp.evaluate's JSONL).

    >>> results_path("runs/litm/llamacpp", Run("qa-20docs", "qa", "positions", "")).as_posix()
    'runs/litm/llamacpp/qa-20docs.jsonl'
    """
    return Path(out_dir) / f"{run.setting}.jsonl"


def run_setting(lm: LM, run: Run, out_dir: str | os.PathLike, max_tokens: int = DEFAULT_MAX_TOKENS,
                stop: Sequence[str] | None = None, threads: int = 1, progress: bool = True,
                spec: str | None = None) -> dict[str, Any]:
    """Evaluate every prompt of `run` with `lm` (greedy), write the rows, predictions and summary under
    `out_dir`, and return the summary. A rerun resumes: finished rows are reused.

    `stop=["\\n"]` ends QA answers at their first newline; since only the first line is scored, the
    scores are the same as generating all max_tokens, for a fraction of the time. `spec` is the spec
    the LM was built from (`lm.spec`), recorded as the summary's `model` (else `lm.name`).

    >>> import tempfile
    >>> import dsp
    >>> from programs.litm.runs import closedbook_run
    >>> class Shakespeare(LM):  # answers every prompt the same
    ...     provider = "example"
    ...     def _request(self, request):
    ...         return {"choices": [{"text": " Shakespeare", "finish_reason": "stop"}]}
    >>> records = [{"question": "who wrote hamlet", "answers": ["Shakespeare"]},
    ...            {"question": "who wrote faust", "answers": ["Goethe"]}]
    >>> with tempfile.TemporaryDirectory() as tmp, dsp.settings.context(cache=False):
    ...     summary = run_setting(Shakespeare("example"), closedbook_run(records), tmp)
    ...     sorted(path.name for path in Path(tmp).glob("closedbook*"))
    ['closedbook.jsonl', 'closedbook.predictions.jsonl.gz', 'closedbook.summary.json']
    >>> summary["curves"]["closed-book"]["n"], summary["curves"]["closed-book"]["accuracy"]
    (2, 0.5)
    """
    if not run.items:
        raise ValueError(f"{run.setting}: nothing to run (no examples)")
    check_positive_int(max_tokens, "max_tokens")
    out_dir = Path(out_dir)
    token_counts = check_prompts_fit(lm, run, max_tokens)
    params: dict[str, Any] = {"temperature": 0.0, "max_tokens": max_tokens}
    if stop:
        params["stop"] = list(stop)

    def answer(prompt: str) -> str:
        # The raw prompt for a completion model; a chat client sends it as the user message.
        return lm(prompt, **params)[0]

    metric: Callable[..., float] = qa_score if run.task == "qa" else kv_score
    # Only the prompt reaches the program; the gold answers (or value) are what it is scored against.
    fields = Fields(inputs="prompt", gold="answers" if run.task == "qa" else "value", prediction="answer")
    # The LM is a closure, not dsp.settings.lm: name it (and its parameters) in the run's identity, so
    # resuming with another model, max_tokens or stop is refused rather than mixed.
    identity = {"setting": run.setting, "lm": describe(lm), "params": params}
    started = time.perf_counter()
    result = evaluate(answer, run.items, metric=metric, fields=fields, runner=threads, out=results_path(out_dir, run),
                      run=identity, progress=progress, display=False)
    elapsed = time.perf_counter() - started
    model = redact_urls(spec) if spec else lm.name  # a summary file is written: no URL credential in it
    _write_predictions(out_dir / f"{run.setting}.predictions.jsonl.gz", run, result.rows, model, params)
    summary = summarize(run, result.rows, token_counts)
    summary.update(model=model, model_name=lm.name, model_repr=repr(lm), model_identity=lm.cache_identity(),
                   max_tokens=max_tokens, stop=params.get("stop"), wall_seconds=round(elapsed, 1),
                   n_ctx=lm.n_ctx if isinstance(lm, CountsTokens) else None,
                   finished=time.strftime("%Y-%m-%d %H:%M:%S"))
    path = out_dir / f"{run.setting}.summary.json"
    path.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary


def first_error(out_dir: str | os.PathLike, run: Run) -> str | None:
    """"<item id>: <error>" of the first item of `run` whose latest row in the results file failed, or
    None. Rows are appended as prompts finish, so an item's last row is its current one.

    >>> first_error("/nonexistent", Run("qa-20docs", "qa", "positions", ""))   # no results yet
    """
    path = results_path(out_dir, run)
    if not path.exists():
        return None
    _, rows = read_run(path)  # the header line is the run's identity, not a row
    latest: dict[int, Mapping[str, Any]] = {}
    for row in rows:
        index = row.get("index")
        if isinstance(index, int) and 0 <= index < len(run.items):
            latest[index] = row
    for index in sorted(latest):
        if latest[index].get("error"):
            return f"{run.items[index]['id']}: {latest[index]['error']}"
    return None


def _write_predictions(path: Path, run: Run, rows: Sequence[Mapping[str, Any]], model: str,
                       params: Mapping[str, Any]) -> None:
    """The paper's prediction records: the input example, what the model saw and answered, the metric."""
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
