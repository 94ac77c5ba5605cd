"""Evaluate a program on a dev set: parallel, resumable, every example written as it finishes.

Each example runs in its own settings context (its own stage trace and token count) on a copy of the
caller's context, so `with dsp.settings.context(lm=...)` around `evaluate` reaches every worker
thread. Results stream into a JSONL file, one line per finished example; a rerun with the same file
skips the finished examples and returns the same results, so a killed evaluation resumes where it
stopped. The gold fields are removed from what the program sees.

With ``backend="ray"`` the examples run in batches as Ray tasks on a cluster (see
`dsp.backends.ray`); the workers rebuild the LM and RM from their specs, rows stream back to this
process, which writes the same JSONL, shows the same progress bar and resumes the same way.

>>> result = dsp.evaluate(program, dev, metric=dsp.EM, num_threads=8, out="runs/rtr.jsonl")  # doctest: +SKIP
Answered 51 / 300 (17.0%) correctly.
>>> result.df.head()                                                                         # doctest: +SKIP
>>> dsp.evaluate(program, dev, backend="ray", ray_address="auto", num_threads=4)             # doctest: +SKIP
"""

from __future__ import annotations

import contextvars
import inspect
import json
import logging
import math
import os
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .cache import flush as flush_cache
from .clients.lm import Usage
from .example import Example
from .metrics import EM, wilson_interval
from .settings import settings

__all__ = ["evaluate", "EvaluationResult", "summarize_seeds", "example_fingerprint", "run_example", "failed_row",
           "metric_caller", "LABEL_FIELDS", "BACKENDS"]

# Gold fields of the bundled datasets: never shown to the program under evaluation.
LABEL_FIELDS = ("answer", "answers", "gold", "label", "labels", "gold_passage", "gold_passage_id", "gold_titles",
                "nq_annotated_gold", "Answer", "Rewrite")
BACKENDS = ("threads", "ray")
log = logging.getLogger("dsp.evaluate")


def example_fingerprint(example: Mapping[str, Any]) -> str:
    """A short stable hash of an example's content: a resumed run only reuses rows of the same example."""
    text = json.dumps(example, sort_keys=True, ensure_ascii=False, default=str)
    return sha256(text.encode("utf-8")).hexdigest()[:16]


def _jsonable(value: Any) -> Any:
    """The JSON-safe form of a prediction or trace (Examples are dicts; anything else becomes text)."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return str(value)


@dataclass
class EvaluationResult:
    """Per-example rows (in dev-set order) and the aggregate score (mean metric × 100)."""

    rows: list[dict[str, Any]]
    metric_name: str
    out: str | None = None
    seed: int | None = None
    usage: Usage = field(default_factory=Usage)

    @property
    def scores(self) -> list[float]:
        return [float(r["score"]) for r in self.rows if r.get("error") is None]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("error") is not None]

    @property
    def score(self) -> float:
        """Mean score × 100 over all examples (an errored example scores 0)."""
        return 100.0 * sum(self.scores) / len(self.rows) if self.rows else 0.0

    @property
    def df(self) -> Any:
        """The rows as a pandas DataFrame (traces left out)."""
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in r.items() if k != "trace"} for r in self.rows])

    def confidence_interval(self, z: float = 1.96) -> tuple[float, float]:
        """95% interval of the score (× 100): Wilson's for a right/wrong metric (EM), else the normal
        approximation kept within the scores' range (nF1, F1), failed examples counted as 0.

        >>> result = EvaluationResult(rows=[{"score": s} for s in (1.0, 0.0, 0.0, 0.0)], metric_name="EM")
        >>> [round(x, 1) for x in result.confidence_interval()]
        [4.6, 69.9]
        """
        n = len(self.rows)
        if n == 0:
            return (0.0, 0.0)
        values = self.scores + [0.0] * len(self.errors)
        if all(v in (0.0, 1.0) for v in values):
            low, high = wilson_interval(sum(values), n, z)
            return (100 * low, 100 * high)
        mean = self.score / 100
        var = sum((v - mean) ** 2 for v in values) / max(n - 1, 1)
        half = z * math.sqrt(var / n)
        return (100 * max(min(values), mean - half), 100 * min(max(values), mean + half))

    def summary(self) -> str:
        correct = sum(self.scores)
        shown = int(correct) if float(correct).is_integer() else round(correct, 2)
        text = f"Answered {shown} / {len(self.rows)} ({round(self.score, 1)}%) correctly."
        if self.errors:
            text += f" {len(self.errors)} example(s) failed (see 'error' in {self.out or 'the rows'}); a rerun retries them."
        return text

    def __repr__(self) -> str:
        return f"EvaluationResult({self.metric_name}={self.score:.1f}, n={len(self.rows)}, out={self.out!r})"


def metric_caller(metric: Callable[..., Any]) -> Callable[[Any, Any, Example], float]:
    """`metric` as f(prediction, gold, example): the example is passed only to a metric that asks for it.

    >>> metric_caller(lambda p, g: p == g)("a", "a", None)
    1.0
    """
    try:
        params = inspect.signature(metric).parameters
    except (TypeError, ValueError):
        params = {}
    takes_example = "example" in params

    def call(prediction: Any, gold: Any, example: Example) -> float:
        value = metric(prediction, gold, example=example) if takes_example else metric(prediction, gold)
        return float(value)

    return call


def _row_head(example: Mapping[str, Any], index: int, seed: int | None, gold: str) -> dict[str, Any]:
    return {
        "index": index, "id": example.get("id"), "seed": seed, "fingerprint": example_fingerprint(example),
        "question": example.get("question"), "gold": _jsonable(example.get(gold)),
    }


def failed_row(example: Mapping[str, Any], index: int, error: str, *, seed: int | None = None,
               gold: str = "answer") -> dict[str, Any]:
    """The row of an example that never ran to the end (e.g. its Ray worker died for good): it scores 0,
    carries `error`, and a rerun retries it, as it does an example whose program raised.

    >>> failed_row({"question": "q", "answer": "a"}, 3, "WorkerCrashedError: gone")["error"]
    'WorkerCrashedError: gone'
    """
    return {**_row_head(example, index, seed, gold), "prediction": None, "score": 0.0, "error": error,
            "trace": [], "usage": Usage().as_dict(), "seconds": 0.0}


def run_example(
    program: Callable[..., Any],
    example: Example,
    index: int,
    score_of: Callable[[Any, Any, Example], float],
    *,
    seed: int | None = None,
    inputs: str | None = "question",
    gold: str = "answer",
    field: str = "answer",
    labels: Sequence[str] = LABEL_FIELDS,
) -> dict[str, Any]:
    """Run `program` on one dev example in its own settings context and return its JSONL row.

    Every backend builds rows here, so a thread and a Ray worker record an example identically.

    >>> run_example(str.upper, Example(question="q", answer="Q"), 0, metric_caller(EM))["score"]
    1.0
    """
    trace: list[dict[str, Any]] = []
    usage = Usage()
    started = time.perf_counter()
    row = _row_head(example, index, seed, gold)
    overrides: dict[str, Any] = {"trace": trace, "usage": usage}
    if seed is not None:
        overrides["branch_idx"] = seed
    try:
        with settings.context(**overrides):
            arg = example[inputs] if inputs is not None else example.without(*labels)
            output = program(arg)
        prediction = output.get(field) if isinstance(output, Mapping) else output
        row.update(prediction=_jsonable(prediction), score=score_of(prediction, example[gold], example),
                   error=None)
        if isinstance(output, Mapping) and output.get("context") is not None:
            row["context"] = _jsonable(output["context"])  # what the program read: for retrieval recall
    except Exception as error:  # one failing example must not lose the others; it is recorded
        row.update(prediction=None, score=0.0,
                   error=f"{type(error).__name__}: {error}",
                   traceback="".join(traceback.format_exception(error))[-4000:])
    row.update(trace=_jsonable(trace), usage=usage.as_dict(), seconds=round(time.perf_counter() - started, 3))
    return row


def _read_done(path: Path) -> dict[int, dict[str, Any]]:
    """Finished rows of an earlier run; a half-written last line (a kill mid-write) is dropped."""
    done: dict[int, dict[str, Any]] = {}
    if not path.exists():
        return done
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                log.warning("%s:%d is incomplete (an interrupted write); that example runs again", path, number)
                continue
            if isinstance(row, dict) and isinstance(row.get("index"), int) and row.get("error") is None:
                done[row["index"]] = row
    return done


def evaluate(
    program: Callable[..., Any],
    devset: Sequence[Mapping[str, Any]],
    metric: Callable[..., Any] = EM,
    num_threads: int = 1,
    out: str | os.PathLike | None = None,
    inputs: str | None = "question",
    gold: str = "answer",
    field: str = "answer",
    labels: Iterable[str] = LABEL_FIELDS,
    seed: int | None = None,
    display_progress: bool = True,
    display: bool = True,
    backend: str = "threads",
    ray_address: str | None = None,
    batch_size: int | None = None,
    global_concurrency: int | None = None,
) -> EvaluationResult:
    """Run `program` on every dev example, score it with `metric(prediction, example[gold])`.

    - `inputs="question"` calls `program(example.question)` (DSP v1's convention); `inputs=None`
      calls `program(example)` with the gold `labels` removed. A program may return the prediction
      or an Example, whose `field` is the prediction.
    - A metric with an `example` parameter also receives the example (e.g. nF1 needs the history).
    - `out`: the JSONL file of per-example rows (index, id, question, gold, prediction, score,
      trace, usage, seconds, error). Finished rows already there are reused: a rerun resumes.
    - `seed`: recorded in the rows and used as `settings.branch_idx`, so `dsp.sample` draws this
      seed's demonstrations.
    - An example whose program raises is recorded with its error and scores 0; a rerun retries it.
    - `backend="threads"` runs `num_threads` examples at a time in this process. `backend="ray"` sends
      batches of `batch_size` examples (default num_threads) as Ray tasks to the cluster at
      `ray_address` (default: the one this process is connected to, else a local one); each task runs
      `num_threads` examples at a time, and `global_concurrency` caps the LM requests in flight across
      all workers. The program and metric travel by cloudpickle (importable functions and partials of
      plain data; never a live client); the LM and RM are rebuilt on the workers from their `.spec`.
    """
    if not callable(program):
        raise TypeError(f"evaluate needs a callable program, got {type(program).__name__}")
    examples = [e if isinstance(e, Example) else Example(e) for e in devset]
    for i, example in enumerate(examples):
        if gold not in example:
            raise ValueError(f"dev example {i} has no gold field {gold!r} (its fields: {', '.join(example)})")
        if inputs is not None and inputs not in example:
            raise ValueError(f"dev example {i} has no input field {inputs!r} (its fields: {', '.join(example)})")
    if not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer, got {num_threads!r}")
    for name, value in (("batch_size", batch_size), ("global_concurrency", global_concurrency)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if backend != "ray" and (ray_address is not None or global_concurrency is not None):
        raise ValueError("ray_address and global_concurrency apply to backend='ray' only")
    labels = tuple(labels)
    score_of = metric_caller(metric)
    metric_name = getattr(metric, "__name__", type(metric).__name__)
    path = Path(out) if out is not None else None
    done: dict[int, dict[str, Any]] = {}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        earlier = _read_done(path)
        done = {i: row for i, row in earlier.items()
                if i < len(examples) and row.get("fingerprint") == example_fingerprint(examples[i])
                and row.get("seed") == seed}
    write_lock = threading.Lock()
    total_usage = Usage()

    def record(row: dict[str, Any]) -> dict[str, Any]:
        """Count a finished example's usage and append its row to the JSONL (from any thread)."""
        with write_lock:
            usage = row.get("usage") or {}
            for key in ("requests", "cached_requests", "prompt_tokens", "completion_tokens"):
                setattr(total_usage, key, getattr(total_usage, key) + int(usage.get(key) or 0))
            total_usage.cost += float(usage.get("cost") or 0.0)
            if path is not None:
                flush_cache()  # in the "deferred" write mode: a recorded row's LM and RM calls are stored first
                with path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
        return row

    def run_one(i: int) -> dict[str, Any]:
        return record(run_example(program, examples[i], i, score_of, seed=seed, inputs=inputs, gold=gold,
                                  field=field, labels=labels))

    todo = [i for i in range(len(examples)) if i not in done]
    rows: dict[int, dict[str, Any]] = dict(done)
    progress = None
    if display_progress:
        from tqdm.auto import tqdm

        progress = tqdm(total=len(examples), initial=len(done), desc=f"evaluate ({metric_name})", unit="ex")

    def finished(row: dict[str, Any]) -> None:
        rows[row["index"]] = row
        if progress is not None:
            scored = [r["score"] for r in rows.values()]
            progress.set_postfix_str(f"{metric_name}={100 * sum(scored) / len(scored):.1f}")
            progress.update(1)

    try:
        if backend == "ray" and todo:
            # Imported here: importing dsp never imports ray.
            from .backends.ray import run_on_ray

            run_on_ray(program, metric, examples, todo, on_row=lambda row: finished(record(row)), seed=seed,
                       inputs=inputs, gold=gold, field=field, labels=labels, num_threads=num_threads,
                       address=ray_address, batch_size=batch_size, global_concurrency=global_concurrency)
        elif num_threads == 1:
            for i in todo:
                finished(run_one(i))
        else:
            with ThreadPoolExecutor(num_threads) as pool:
                # Each task runs in a copy of the caller's context: its settings reach the workers.
                pending = {pool.submit(contextvars.copy_context().run, run_one, i) for i in todo}
                while pending:
                    complete, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in complete:
                        finished(future.result())
    finally:
        if progress is not None:
            progress.close()
    result = EvaluationResult([rows[i] for i in sorted(rows)], metric_name, str(path) if path else None, seed,
                              total_usage)
    if display:
        print(result.summary())
    return result


def summarize_seeds(results: Sequence[EvaluationResult]) -> Any:
    """A pandas table of per-seed scores plus their mean ± sample standard deviation."""
    import pandas as pd

    if not results:
        raise ValueError("summarize_seeds needs at least one EvaluationResult")
    table = pd.DataFrame([{"seed": r.seed, "n": len(r.rows), "score": r.score, "errors": len(r.errors)}
                          for r in results])
    mean = table["score"].mean()
    std = table["score"].std(ddof=1) if len(table) > 1 else 0.0
    table.attrs["mean"], table.attrs["std"] = float(mean), float(std)
    table.attrs["text"] = f"{mean:.1f} ± {std:.1f} over {len(table)} seed(s)"
    return table
