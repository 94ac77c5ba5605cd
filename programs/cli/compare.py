"""`dsp compare`: results files side by side, paired on the examples they share (see `dsp.compare_runs`).

    dsp compare runs/results/nq-dsp-compiled_nq-dsp-seed0.jsonl runs/results/nq-retrieve_then_read-seed*.jsonl --n 1000

Each run's score and 95% interval, the runs that differ only by seed as one setting (mean, spread, best),
and every run paired with the first (exact McNemar test; the sign test for graded metrics such as F1).
Runs of another metric, task or dev split are refused, as is a file lacking some of the first --n examples;
--skip S leaves out the first S (compare on examples S to N-1).
"""

from __future__ import annotations

import argparse
from typing import Any

from dsp.evaluation.compare import IncompleteRun, compare_runs, format_comparison

from .options import UsageError, add_n, nonnegative_int

__all__ = ["add_parser", "cmd_compare"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="results files side by side: scores, intervals, seed means, paired tests",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="FILE.jsonl",
                   help="results files of dsp run or dsp.evaluate; the first is paired with each other")
    add_n(p, "examples: the first N of each file (default: those every file has)")
    p.add_argument("--skip", type=nonnegative_int, default=0, metavar="S",
                   help="leave out the first S examples (e.g. those a design choice was made on)")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    p.set_defaults(handler=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    if args.n is not None and args.skip >= args.n:
        raise UsageError(f"--skip {args.skip} leaves none of the first --n {args.n} examples")
    try:
        table = compare_runs(args.files, n=args.n, skip=args.skip)
    except IncompleteRun as error:
        raise UsageError(str(error)) from error
    print(format_comparison(table, markdown=args.markdown))
    return 0
