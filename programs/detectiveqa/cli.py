"""`dsp detectiveqa`: run the DetectiveQA suite from the command line.

    dsp detectiveqa --data-dir tests/fixtures/detectiveqa --lang en --anno-part human_anno \\
        --lm llamacpp --q-len 1500 --program truncate,retrieve --judge-lm same [--n 20] [--threads 2]

For every program x language x annotation part it writes ``<out>/<program>-<lang>-<anno_part>.jsonl``
(one row per question: answer, alignment path, reasoning, paragraphs shown, clue recall, judge score, or
the error naming the file and question) next to dsp.evaluate's resumable ``.eval.jsonl`` log, then
``<out>/summary.md`` and ``<out>/summary.json``, and prints the summary table. Rerunning the same
command resumes: finished questions and every LM call come from the log and the cache; the same
``--out`` with other settings (``--q-len``, ``--cut``, the model, ...) is refused with a line naming
what changed.

With the embedded model (``--lm llamacpp``) the context window is sized to fit q_len, the longest
question and the reply unless ``--n-ctx`` (or ``llamacpp:...,n_ctx=N``) fixes it; ``--lm-threads 1``
is often faster on cores that other work keeps busy. Every argument is checked before a model loads;
a run in which questions failed exits with status 1 after naming the first error.

>>> from programs.cli.options import Parser
>>> sub = Parser(prog="dsp").add_subparsers(dest="command")
>>> add_parser(sub)
>>> args = sub.choices["detectiveqa"].parse_args(["--data-dir", "data/detectiveqa", "--n", "5"])
>>> args.n, args.q_len, args.threads, args.program, args.out
(5, 3000, 1, 'truncate', 'runs/detectiveqa')
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import dsp
from dsp.clients.specs import SpecError, check_lm_spec, parse_spec, with_options
from programs.cli.options import UsageError, add_lm, add_n, add_out, add_threads, lm_spec, positive_int
from .data import ANNO_PARTS, DetectiveQASet, annotation_ids, load_detectiveqa
from .judge import ReasoningJudge
from .model import DEFAULT_MAX_TOKENS, LMModel
from .program import FUSIONS, RETRIEVERS, SCOPES, DetectiveQAProgram, RetrieveProgram, TruncateProgram
from .prompt import CUTS, ApproxTokenizer, question_block
from .run import run_program, summarize, summary_markdown

__all__ = ["add_parser", "cmd_detectiveqa", "PROGRAMS", "context_needed"]

PROGRAMS = ("truncate", "retrieve")
_ANSWER_ROOM = 32  # tokens for "\nSo the correct option is" and a letter (the logprob fallback) and slack
_MIN_N_CTX = 2048  # the sized-to-fit window never goes below this, and is rounded up to a multiple of 256


def add_parser(sub: Any) -> None:
    """Register ``dsp detectiveqa`` on the `dsp` command's subparsers `sub` (see the module example).

    >>> from programs.cli.options import Parser
    >>> sub = Parser(prog="dsp").add_subparsers(dest="command")
    >>> add_parser(sub)
    >>> sub.choices["detectiveqa"].parse_args(["--data-dir", "d"]).handler is cmd_detectiveqa
    True
    """
    p = sub.add_parser("detectiveqa", help="DetectiveQA: multiple-choice questions on detective novels",
                       description="DetectiveQA: multiple-choice questions on detective novels, answered from the "
                                   "novel cut to a token budget (truncate) or from retrieved paragraphs (retrieve).")
    p.add_argument("--data-dir", default=None,
                   help="the folder holding novel_data_<lang>/ and anno_data_<lang>/ (required)")
    p.add_argument("--lang", default="en", help="language(s), comma-separated: en, zh")
    p.add_argument("--anno-part", default="human_anno",
                   help=f"annotation part(s), comma-separated: {', '.join(ANNO_PARTS)}")
    p.add_argument("--novels", default=None, help="only these novel ids, comma-separated (default: all)")
    p.add_argument("--program", default="truncate", help=f"comma-separated, from {', '.join(PROGRAMS)}")
    p.add_argument("--q-len", type=positive_int, default=3000, help="token budget of the novel content")
    p.add_argument("--cut", choices=CUTS, default="answer",
                   help="truncate: keep the start, the text up to the answer position, or both ends")
    p.add_argument("--k", type=positive_int, default=8, help="retrieve: paragraphs to show at most")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25", help="retrieve: the paragraph index")
    p.add_argument("--fuse", choices=FUSIONS, default="combsum", help="retrieve: how the five queries are fused")
    p.add_argument("--scope", choices=SCOPES, default="before_answer",
                   help="retrieve: search the paragraphs before the answer position, or all")
    p.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS, help="tokens of the model's reply")
    p.add_argument("--judge-lm", default=None, metavar="SPEC",
                   help="LM spec of the reasoning judge, or 'same' for the answering LM (default: no judge)")
    add_lm(p, n_ctx_help="sized to fit --q-len, the longest question and --max-tokens")
    add_n(p, "questions of each language and annotation part (the first N)")
    add_threads(p)
    add_out(p, "runs/detectiveqa", "output folder")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_detectiveqa)


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def context_needed(sets: Sequence[DetectiveQASet], q_len: int, max_tokens: int) -> int:
    """Tokens a prompt and its reply may take: q_len, the longest question block, the reply and the room
    of the logprob fallback. Counted before any LM exists, with the estimate that errs high (the safe side).

    >>> context_needed([], 1000, 200)
    1232
    """
    longest = max((ApproxTokenizer().count(question_block(q)) for s in sets for q in s.questions), default=0)
    return q_len + longest + max_tokens + _ANSWER_ROOM


def _programs(text: str) -> list[str]:
    names = _split(text)
    unknown = [p for p in names if p not in PROGRAMS]
    if unknown or not names:
        raise UsageError(f"--program: unknown {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(PROGRAMS)}")
    return names


def _judge_spec(args: argparse.Namespace) -> str | None:
    """None (no judge), "same", or the judge's checked spec (with --lm-threads for a llamacpp judge)."""
    if args.judge_lm is None or args.judge_lm == "same":
        return args.judge_lm
    try:
        spec = check_lm_spec(args.judge_lm)
        if parse_spec(spec)[0] == "llamacpp":
            spec = check_lm_spec(with_options(spec, n_threads=args.lm_threads))
    except SpecError as error:
        raise UsageError(f"--judge-lm: {error}") from None
    return spec


def _load_sets(args: argparse.Namespace) -> tuple[list[DetectiveQASet], list[str]]:
    """(sets, skipped): every language x annotation part asked for; a part missing from one language is
    skipped (the reason is returned) unless nothing is left. Unknown --novels ids are an error."""
    combos = [(lang, part) for lang in _split(args.lang) for part in _split(args.anno_part)]
    if not combos:
        raise UsageError("--lang and --anno-part each need at least one value")
    novel_ids = _split(args.novels) if args.novels is not None else None
    if novel_ids is not None and not novel_ids:
        raise UsageError("--novels needs at least one novel id")
    sets: list[DetectiveQASet] = []
    missing: list[str] = []
    known: set[str] = set()
    for lang, part in combos:
        try:
            known.update(annotation_ids(args.data_dir, lang, part))
            sets.append(load_detectiveqa(args.data_dir, lang, part, novel_ids=novel_ids))
        except FileNotFoundError as error:
            missing.append(str(error))
    if missing and (len(combos) == 1 or not sets):
        raise FileNotFoundError("; ".join(missing))
    unknown = [n for n in novel_ids or [] if n not in known]
    if unknown:
        shown = ", ".join(sorted(known, key=lambda n: (len(n), n))[:20]) or "none"
        raise UsageError(f"--novels: no annotation file for novel id(s) {', '.join(unknown)}; "
                         f"the annotated ids are: {shown}")
    return sets, missing


def _checked_spec(args: argparse.Namespace, needed: int) -> str:
    """The answering LM's spec, its llamacpp window sized to fit `needed` unless --n-ctx or the spec sets
    one; a window that is set and too small is refused here, before the model loads."""
    spec = lm_spec(args, n_ctx=-(-max(needed, _MIN_N_CTX) // 256) * 256)
    kind, _, options = parse_spec(spec)
    if kind == "llamacpp" and int(options.get("n_ctx", needed)) < needed:
        raise UsageError(f"--q-len {args.q_len} plus the question and --max-tokens {args.max_tokens} needs about "
                         f"{needed} tokens but the context window is n_ctx={options['n_ctx']}: lower --q-len or "
                         f"raise --n-ctx")
    return spec


def _build(name: str, dataset: DetectiveQASet, model: LMModel, args: argparse.Namespace) -> DetectiveQAProgram:
    if name == "truncate":
        return TruncateProgram(dataset.novels, model, args.q_len, cut=args.cut)
    return RetrieveProgram(dataset.novels, model, args.q_len, k=args.k, retriever=args.retriever, fuse=args.fuse,
                           scope=args.scope)


def cmd_detectiveqa(args: argparse.Namespace) -> int:
    """The `dsp detectiveqa` command: check everything, load the LM(s), run, summarise; the exit status
    (0; 1 when questions failed). A bad argument raises `UsageError` (or FileNotFoundError) before any
    model loads; `programs.cli.main` shows it in one line and exits 2.

    For example (it loads the embedded model, so it is not run as a doctest)::

        from programs.cli import main
        main(["detectiveqa", "--data-dir", "tests/fixtures/detectiveqa", "--n", "2"])    # 0
    """
    if not args.data_dir:
        raise UsageError("--data-dir is required: the folder holding novel_data_<lang>/ and anno_data_<lang>/")
    programs = _programs(args.program)
    judge_spec = _judge_spec(args)
    sets, skipped = _load_sets(args)
    needed = context_needed(sets, args.q_len, args.max_tokens)
    spec = _checked_spec(args, needed)
    # Every check is done: only now is anything printed.
    for message in skipped:  # e.g. --lang en,zh --anno-part human_anno,AIsup_anno where zh has no AIsup part
        print(f"skipped: {message}")
    for dataset in sets:
        print(f"{dataset.lang}/{dataset.anno_part}: {len(dataset.questions)} question(s) from "
              f"{len(dataset.novels)} novel(s), {len(dataset.errors)} error(s), {len(dataset.warnings)} warning(s)")
        for error in dataset.errors:
            print(f"  error: {error}")
        for warning in dataset.warnings[:5]:
            print(f"  warning: {warning}")

    lm = dsp.lm_from_spec(spec)  # the first thing that loads a model: every check is done
    if isinstance(lm, dsp.CountsTokens) and lm.n_ctx < needed:
        raise UsageError(f"--q-len {args.q_len} plus the question and --max-tokens {args.max_tokens} needs about "
                         f"{needed} tokens but {lm.name} has n_ctx={lm.n_ctx}: lower --q-len or raise --n-ctx")
    judge = None
    if judge_spec is not None:
        judge = ReasoningJudge(lm if judge_spec == "same" else dsp.lm_from_spec(judge_spec))
    model = LMModel(lm, max_tokens=args.max_tokens)
    out_dir = Path(args.out)
    rows: list[dict[str, Any]] = []
    failed: list[tuple[str, dict[str, Any]]] = []
    for name in programs:
        for dataset in sets:
            program = _build(name, dataset, model, args)
            print(f"== {name} on {dataset.lang}/{dataset.anno_part} with {model.get_name()}: {program.config()}")
            result = run_program(program, dataset, out=out_dir / f"{name}-{dataset.lang}-{dataset.anno_part}",
                                 threads=args.threads, judge=judge, progress=not args.quiet, n=args.n)
            rows.extend(result.rows)
            failed.extend((str(result.out), row) for row in result.rows if row["error"])
            print(f"   {sum(r['correct'] for r in result.rows)} / {len(result.rows)} correct; rows in {result.out}")
    table = summarize(rows)
    text = summary_markdown(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.md").write_text(text + "\n", encoding="utf-8")
    shown_args = {key: value for key, value in vars(args).items() if key != "handler"}  # a function: not JSON
    (out_dir / "summary.json").write_text(json.dumps({"args": shown_args, "model": model.get_name(),
                                                      "judge": judge.get_name() if judge else None, "table": table},
                                                     indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(text)
    print(f"per-question rows and summary in {out_dir}/")
    if not failed:
        return 0
    where, row = failed[0]
    print(f"{len(failed)} question(s) failed; the first ({row['qid']} in {where}): {row['error']}. Fix the cause "
          f"and run the same command again: finished questions are kept.", file=sys.stderr)
    return 1
