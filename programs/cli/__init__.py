"""The `dsp` command: one parser, one set of shared options (see `programs.cli.options`).

    dsp demo                                   the main job: embedded Gemma + BM25, NQ questions
    dsp run dsp --dataset nq --n 300 --seed 0,1,2,3,4 --threads 2
    dsp run retrieve_then_read --dataset hotpotqa --lm openai:gpt-4o-mini
    dsp ask "Who wrote Hamlet?" --program dsp --dataset nq
    dsp compile dsp --dataset nq --candidates 8 --out runs/compiled/nq-dsp.json
    dsp run dsp --dataset nq --n 1000 --compiled runs/compiled/nq-dsp.json
    dsp compare runs/nq-dsp-compiled_nq-dsp-seed0.jsonl runs/nq-retrieve_then_read-seed*.jsonl --n 1000
    dsp index --passages passages.jsonl.gz --out index/ [--backend bm25|dense]
    dsp serve --index index/ --port 8893
    dsp recall --n 300 --rewrites 5
    dsp litm qa --total-docs 20 --gold-positions 0,4,9,14,19 --n 200
    dsp detectiveqa --data-dir ... --lang en

Every argument is checked before a model loads; a bad one is one line on stderr and exit status 2. A
run in which examples failed exits with status 1 after naming the first error.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from dsp import BadRow, ContextLengthExceeded, FileInUse, RunMismatch
from dsp.cache import CacheFileError
from dsp.compiling import CandidateFailed
from dsp.clients.specs import SpecError
from dsp.datasets import DataFileError
from dsp.evaluation.log import ResultsWriteError

from .options import Parser, UsageError

__all__ = ["main", "build_parser"]


def build_parser() -> Parser:
    """The whole `dsp` parser: every subcommand registers itself with the shared option groups."""
    from programs import demo, recall
    from programs.detectiveqa import cli as detectiveqa_cli
    from programs.litm import cli as litm_cli

    from . import compare, compile as compile_, index, run

    parser = Parser(prog="dsp", description="Demonstrate-Search-Predict: programs over a frozen LM and RM.",
                    epilog=__doc__.split("\n\n")[1] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (demo, run, compile_, compare, index, recall, litm_cli, detectiveqa_cli):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `dsp` command with `argv` (default: sys.argv[1:]); returns the exit status."""
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as done:  # --help (0), or a bad argument already reported in one line (2)
        return done.code if isinstance(done.code, int) else 2
    prog = f"dsp {args.command}"
    try:
        return int(args.handler(args) or 0)
    # Faults of the input the user can fix: one line, no traceback (a bug elsewhere keeps its traceback).
    except (UsageError, SpecError, RunMismatch, BadRow, FileInUse, CandidateFailed, DataFileError,
            FileNotFoundError, ContextLengthExceeded, ResultsWriteError, CacheFileError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted; finished examples are saved: run the same command again to resume",
              file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output went away (`dsp compare ... | head`): stop quietly, as Unix tools do;
        # stdout goes to /dev/null so the interpreter's last flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
