"""`dsp.evaluate`: run a program on a dev set, score it, record every example as it finishes.

Each example runs in its own settings context (its own stage trace and token count). The dataset's
`Fields` say what the program sees (only the declared inputs: no gold label reaches a prompt), which
field is the gold label and which output field is the prediction. The `runner` says how examples run
(`Threads(n)` here, `Ray(...)` on a cluster); `out` is the results file (`RunLog`): one JSONL row per
finished example under a header naming the run's identity, so a rerun of the same run resumes and a
rerun with other settings is refused instead of reporting old rows as new.

>>> result = dsp.evaluate(program, dev, metric=dsp.EM, runner=8, out="runs/rtr.jsonl")   # doctest: +SKIP
Answered 51 / 300 (17.0%) correctly.
>>> result.df.head()                                                                   # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Mapping, Sequence

from ..cache import flush as flush_cache
from ..clients.lm import Usage
from ..example import Example
from ..metrics import EM
from ..settings import settings
from .fields import QA_FIELDS, Fields
from .log import RunLog, describe
from .result import EvaluationResult
from .rows import example_fingerprint
from .runners import Job, Runner, Threads

__all__ = ["evaluate", "run_identity"]

_USAGE_KEYS = ("requests", "cached_requests", "prompt_tokens", "completion_tokens")


def run_identity(program: Callable[..., Any], metric: Callable[..., Any], fields: Fields = QA_FIELDS,
                 seed: int | None = None, run: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything that decides an evaluation's rows: the program (function, bound options, training
    set digest), metric, fields, seed, the LM and RM of the current settings, and the caller's `run`
    entries (dataset, split, preset, ...), which take precedence.

    >>> run_identity(len, EM, seed=0)["program"], run_identity(len, EM)["metric"]
    ('builtins.len', 'dsp.metrics.EM')
    """
    identity: dict[str, Any] = {
        "program": describe(program), "metric": describe(metric), "fields": fields.as_dict(), "seed": seed,
        "lm": describe(settings.lm), "rm": describe(settings.rm),
    }
    if settings.lm_overrides:
        identity["lm_overrides"] = describe(dict(settings.lm_overrides))
    identity.update(run or {})
    return identity


def evaluate(
    program: Callable[..., Any],
    devset: Sequence[Mapping[str, Any]],
    metric: Callable[..., Any] = EM,
    *,
    fields: Fields = QA_FIELDS,
    runner: Runner | int = 1,
    out: str | os.PathLike | RunLog | None = None,
    run: Mapping[str, Any] | None = None,
    seed: int | None = None,
    progress: bool | str = True,
    display: bool = True,
) -> EvaluationResult:
    """Run `program` on every dev example and score it with ``metric(prediction, example[fields.gold])``
    (a metric with an `example` parameter also receives the example, e.g. nF1 needs the history).

    - `fields`: what the program is called with and what is scored (see `Fields`; default: DSP v1's
      ``program(example.question)`` scored against ``example.answer``). A program may return the
      prediction or an Example whose `fields.prediction` field holds it.
    - `runner`: `Threads(n)` (an int n means the same) or `Ray(address=, threads=, batch_size=,
      global_concurrency=)`.
    - `out`: the results file (a path, or a `RunLog`); `run`: identity entries the caller adds to it.
    - `seed`: recorded in the rows and used as `settings.branch_idx`, so `dsp.sample` draws this seed's
      demonstrations.
    - `progress`: a progress bar (a text names it, e.g. "bootstrap"); `display`: print the summary line
      (and how many rows were resumed).
    """
    if not callable(program):
        raise TypeError(f"evaluate needs a callable program, got {type(program).__name__}")
    if not isinstance(fields, Fields):
        raise TypeError(f"fields must be a dsp.evaluation.Fields, got {type(fields).__name__}")
    if isinstance(runner, int) and not isinstance(runner, bool):
        runner = Threads(runner)
    if not isinstance(runner, Runner):
        raise TypeError(f"runner must be Threads(n), Ray(...) or a number of threads, got {runner!r}")
    examples = [e if isinstance(e, Example) else Example(e) for e in devset]
    for i, example in enumerate(examples):
        fields.check(example, i)
    metric_name = getattr(metric, "__name__", type(metric).__name__)
    if isinstance(out, RunLog):
        log = out
    elif out is not None:
        log = RunLog(out, run_identity(program, metric, fields, seed, run), before_write=flush_cache)
    else:
        log = None
    done: dict[int, dict[str, Any]] = {}
    if log is not None:
        # Held until the run ends (the finally below): a second writer of this file is refused (FileInUse).
        done = {i: row for i, row in log.open().items()
                if i < len(examples) and row.get("fingerprint") == example_fingerprint(examples[i])}
        if done and (display or progress):
            print(f"resumed {len(done)} rows from {log.path}")
    try:
        rows: dict[int, dict[str, Any]] = dict(done)
        usage = Usage()
        lock = threading.Lock()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            name = progress if isinstance(progress, str) else "evaluate"
            bar = tqdm(total=len(examples), initial=len(done), desc=f"{name} ({metric_name})", unit="ex")

        def on_row(row: dict[str, Any]) -> None:
            """Count a finished example's usage, write its row, show it (called in this thread)."""
            with lock:
                counted = row.get("usage") or {}
                for key in _USAGE_KEYS:
                    setattr(usage, key, getattr(usage, key) + int(counted.get(key) or 0))
                usage.cost += float(counted.get("cost") or 0.0)
            if log is not None:
                log.append(row)
            rows[row["index"]] = row
            if bar is not None:
                scored = [r["score"] for r in rows.values()]
                bar.set_postfix_str(f"{metric_name}={100 * sum(scored) / len(scored):.1f}")
                bar.update(1)

        todo = [i for i in range(len(examples)) if i not in done]
        try:
            runner.run(Job(program, metric, examples, seed, fields), todo, on_row)
        finally:
            if bar is not None:
                bar.close()
        result = EvaluationResult([rows[i] for i in sorted(rows)], metric_name, str(log.path) if log else None, seed,
                                  usage, resumed=len(done))
        if display:
            print(result.summary())
        return result
    finally:
        if log is not None:
            log.close()
