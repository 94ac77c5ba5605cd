"""Evaluation: run a program on a dev set, score it, and keep every example's row in a results file
that knows what made it.

- `evaluate` (evaluate.py): the loop, small; `Fields` (fields.py): what the program sees and what is scored;
- `Threads` / `Ray` (runners.py, ray.py): how examples run;
- `RunLog` (log.py): the resumable JSONL with the run's identity; `RunMismatch` when it is another run's,
  `BadRow` for a row no run writes; `finished_by_index`, the one rule that reads its rows;
- `WriterLock` (lock.py): one writer per results file; `FileInUse` when another process holds it;
- `run_example`, `failed_row` (rows.py): one example's row, built the same way by every runner;
- `EvaluationResult`, `summarize_seeds` (result.py): scores, intervals (dsp.stats), usage;
- `compare_runs`, `format_comparison` (compare.py): results files side by side, paired.
"""

from .compare import IncompleteRun, compare_runs, format_comparison
from .evaluate import evaluate, run_identity
from .fields import QA_FIELDS, Fields
from .lock import FileInUse, WriterLock
from .log import BadRow, ResultsWriteError, RunLog, RunMismatch, describe, finished_by_index, identity_diff, read_run
from .result import EvaluationResult, summarize_seeds
from .rows import example_fingerprint, failed_row, metric_caller, run_example
from .runners import Job, Ray, Runner, Threads

__all__ = [
    "evaluate", "run_identity", "Fields", "QA_FIELDS", "RunLog", "RunMismatch", "describe", "identity_diff",
    "read_run", "EvaluationResult", "summarize_seeds", "example_fingerprint", "failed_row", "metric_caller",
    "run_example", "Job", "Ray", "Runner", "Threads", "compare_runs", "format_comparison", "IncompleteRun",
    "BadRow", "FileInUse", "WriterLock", "finished_by_index", "ResultsWriteError",
]
