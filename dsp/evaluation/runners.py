"""How an evaluation runs its examples: `Threads` in this process, or `Ray` batches on a cluster.

A runner gets the job (program, metric, examples, seed, fields) and the indices still to run, and
calls `on_row(row)` in the caller's thread as each example finishes; rows are built by
`dsp.evaluation.rows.run_example` whichever runner runs them, so both record an example identically.

For example (`dsp.evaluate`'s own example runs one; Ray needs the [scale] extra and a cluster)::

    dsp.evaluate(program, dev, runner=Threads(8))
    dsp.evaluate(program, dev, runner=Ray(address="auto", threads=4, global_concurrency=32))
"""

from __future__ import annotations

import contextvars
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..example import Example
from ..utils import check_positive_int
from .fields import Fields
from .rows import metric_caller, run_example

__all__ = ["Runner", "Threads", "Ray", "Job"]


@dataclass(frozen=True)
class Job:
    """What every runner runs: `program` on `examples`, scored by `metric`, with `seed` and `fields`."""

    program: Callable[..., Any]
    metric: Callable[..., Any]
    examples: Sequence[Example]
    seed: int | None
    fields: Fields

    def row(self, index: int, score_of: Callable[..., float]) -> dict[str, Any]:
        return run_example(self.program, self.examples[index], index, score_of, seed=self.seed, fields=self.fields)


class Runner(ABC):
    """Runs a job's examples; `threads` is how many examples run at once (per worker, for Ray)."""

    threads: int

    @abstractmethod
    def run(self, job: Job, todo: Sequence[int], on_row: Callable[[dict[str, Any]], Any]) -> None:
        """Run `job.examples[i]` for every i in `todo`, calling `on_row(row)` in this thread for each."""


@dataclass(frozen=True)
class Threads(Runner):
    """`threads` examples at a time in this process, each in a copy of the caller's settings context
    (so ``with dsp.settings.context(lm=...)`` around `evaluate` reaches every worker thread).

    >>> Threads(0)
    Traceback (most recent call last):
    ...
    ValueError: threads must be a positive integer, got 0
    """

    threads: int = 1

    def __post_init__(self) -> None:
        check_positive_int(self.threads, "threads")

    def run(self, job: Job, todo: Sequence[int], on_row: Callable[[dict[str, Any]], Any]) -> None:
        score_of = metric_caller(job.metric)
        if self.threads == 1:
            for i in todo:
                on_row(job.row(i, score_of))
            return
        with ThreadPoolExecutor(self.threads) as pool:
            pending = {pool.submit(contextvars.copy_context().run, job.row, i, score_of) for i in todo}
            try:
                while pending:
                    complete, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in complete:
                        on_row(future.result())
            finally:
                for future in pending:  # interrupted: do not start what has not started
                    future.cancel()


@dataclass(frozen=True)
class Ray(Runner):
    """Batches of `batch_size` examples (default `threads`) as Ray tasks on the cluster at `address`
    (default: the one this process is connected to, $RAY_ADDRESS, else a local one); each task runs
    `threads` examples at a time, and `global_concurrency` caps the LM requests in flight across all
    workers. The program and metric travel by cloudpickle (importable functions and partials of plain
    data; never a live client); the LM and RM are rebuilt on the workers from their `.spec`. See
    `dsp.evaluation.ray`.
    """

    address: str | None = None
    threads: int = 1
    batch_size: int | None = None
    global_concurrency: int | None = None

    def __post_init__(self) -> None:
        check_positive_int(self.threads, "threads")
        check_positive_int(self.batch_size, "batch_size", optional=True)
        check_positive_int(self.global_concurrency, "global_concurrency", optional=True)

    def run(self, job: Job, todo: Sequence[int], on_row: Callable[[dict[str, Any]], Any]) -> None:
        if not todo:
            return
        from .ray import run_on_ray  # imported here: importing dsp never imports ray

        run_on_ray(job, todo, on_row=on_row, num_threads=self.threads, address=self.address,
                   batch_size=self.batch_size, global_concurrency=self.global_concurrency)
