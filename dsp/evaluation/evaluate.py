"""`dsp.evaluate`: run a program on a dev set, score it, record every example as it finishes.

Each example runs in its own settings context (its own stage trace and token count). The dataset's
`Fields` say what the program sees (only the declared inputs: no gold label reaches a prompt), which
field is the gold label and which output field is the prediction. The `runner` says how examples run
(`Threads(n)` here, `Ray(...)` on a cluster); `out` is the results file (`RunLog`): one JSONL row per
finished example under a header naming the run's identity, so a rerun of the same run resumes and a
rerun with other settings is refused instead of reporting old rows as new.

>>> import tempfile
>>> from pathlib import Path
>>> import dsp
>>> def program(question):  # a stand-in for a program that asks an LM
...     return dsp.Example(answer="Paris" if "France" in question else "?")
>>> dev = [dsp.Example(question="What is the capital of France?", answer=["Paris"]),
...        dsp.Example(question="What is the capital of Peru?", answer=["Lima"])]
>>> with tempfile.TemporaryDirectory() as tmp, dsp.settings.context(cache=False):
...     result = dsp.evaluate(program, dev, metric=dsp.EM, runner=2, out=Path(tmp) / "rtr.jsonl")
Answered 1 / 2 (50.0%) correctly.
>>> result.score, result.df["prediction"].tolist()
(50.0, ['Paris', '?'])
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable, Mapping, Sequence

from ..cache import flush as flush_cache
from ..clients.lm import Usage
from ..example import Example
from ..metrics import EM
from ..settings import settings
from ..utils import is_int
from .fields import QA_FIELDS, Fields
from .log import RunLog, RunMismatch, describe
from .result import EvaluationResult
from .rows import example_fingerprint, jsonable
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
    runner, examples = _checked(program, devset, fields, runner)
    metric_name = getattr(metric, "__name__", type(metric).__name__)
    if isinstance(out, RunLog):
        log = out
    elif out is not None:
        log = RunLog(out, run_identity(program, metric, fields, seed, run), before_write=flush_cache)
    else:
        log = None
    # The log is held from here until the run ends (the finally below): a second writer is refused.
    done = _resumed(log, examples, display or bool(progress))
    try:
        name = progress if isinstance(progress, str) else _program_name(program)
        collect = _Collector(done, log, metric_name, len(examples), name if progress else None)
        todo = [i for i in range(len(examples)) if i not in done]
        try:
            runner.run(Job(program, metric, examples, seed, fields), todo, collect.on_row)
        finally:
            collect.close()
        rows = collect.rows
        result = EvaluationResult([rows[i] for i in sorted(rows)], metric_name, str(log.path) if log else None, seed,
                                  collect.usage, resumed=len(done))
        if display:
            print(result.summary())
        return result
    finally:
        if log is not None:
            log.close()


def _checked(program: Callable[..., Any], devset: Sequence[Mapping[str, Any]], fields: Fields,
             runner: Runner | int) -> tuple[Runner, list[Example]]:
    """`evaluate`'s arguments checked: the runner (an int n is Threads(n)) and the examples as Examples."""
    if not callable(program):
        raise TypeError(f"evaluate needs a callable program, got {type(program).__name__}")
    if not isinstance(fields, Fields):
        raise TypeError(f"fields must be a dsp.evaluation.Fields, got {type(fields).__name__}")
    if is_int(runner):
        runner = Threads(runner)
    if not isinstance(runner, Runner):
        raise TypeError(f"runner must be Threads(n), Ray(...) or a number of threads, got {runner!r}")
    examples = [e if isinstance(e, Example) else Example(e) for e in devset]
    for i, example in enumerate(examples):
        fields.check(example, i)
    return runner, examples


def _program_name(program: Callable[..., Any]) -> str:
    """What a progress bar calls the program: its function's name, through partials.

    >>> import functools
    >>> _program_name(functools.partial(functools.partial(max, key=len), default=0))
    'max'
    """
    while isinstance(program, functools.partial):
        program = program.func
    return getattr(program, "__name__", None) or type(program).__name__


def _resumed(log: RunLog | None, examples: list[Example], say: bool) -> dict[int, dict[str, Any]]:
    """Open the log (taking its writer lock) and keep its finished rows whose example is unchanged.

    An edited example (its id the same, its content not) runs again. A row whose id is another example's
    means the file was made on another set or order of examples (a --n or seed the identity does not
    hold): resuming would leave each position two questions' rows, so it is a `RunMismatch`."""
    if log is None:
        return {}
    rows = log.open()
    ids = [jsonable(example.get("id")) for example in examples]
    moved = [(i, row["id"], ids[i]) for i, row in rows.items()
             if i < len(ids) and None not in (row.get("id"), ids[i]) and row["id"] != ids[i]]
    if moved:
        log.close()
        i, was, now = min(moved, key=lambda m: m[0])
        raise RunMismatch(f"{log.path} holds other examples' rows at these positions ({len(moved)} of "
                          f"{len(rows)}; the first, {i}: id {was!r} there, {now!r} now): it was made on another "
                          f"set or order of examples (another --n or seed?); write to another file or move it away")
    done = {i: row for i, row in rows.items()
            if i < len(examples) and row.get("fingerprint") == example_fingerprint(examples[i])}
    if done and say:
        print(f"resumed {len(done)} rows from {log.path}")
    return done


class _Collector:
    """Where finished rows go, in the caller's thread: the usage total, the log, the progress bar."""

    def __init__(self, done: dict[int, dict[str, Any]], log: RunLog | None, metric_name: str, total: int,
                 name: str | None) -> None:
        self.rows: dict[int, dict[str, Any]] = dict(done)
        self.usage = Usage()
        self._lock = threading.Lock()
        self._log = log
        self._metric_name = metric_name
        self._bar = None
        if name is not None:
            from tqdm.auto import tqdm

            # The program's name leads the bar, so a demo's several runs are told apart.
            self._bar = tqdm(total=total, initial=len(done), desc=f"{name} ({metric_name})", unit="ex")

    def on_row(self, row: dict[str, Any]) -> None:
        """Count a finished example's usage, write its row, show it."""
        with self._lock:
            counted = row.get("usage") or {}
            for key in _USAGE_KEYS:
                setattr(self.usage, key, getattr(self.usage, key) + int(counted.get(key) or 0))
            self.usage.cost += float(counted.get("cost") or 0.0)
        if self._log is not None:
            self._log.append(row)
        self.rows[row["index"]] = row
        if self._bar is not None:
            scored = [r["score"] for r in self.rows.values()]
            self._bar.set_postfix_str(f"{self._metric_name}={100 * sum(scored) / len(scored):.1f}")
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
