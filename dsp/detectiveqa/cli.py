"""`dsp detectiveqa`: run the DetectiveQA suite from the command line.

    dsp detectiveqa --data-dir tests/fixtures/detectiveqa --lang en --anno-part human_anno \\
        --lm llamacpp --q-len 1500 --program truncate,retrieve --judge-lm same

For every program x language x annotation part it writes ``<out>/<program>-<lang>-<anno_part>.jsonl``
(one row per question: answer, alignment path, reasoning, paragraphs shown, clue recall, judge score, or
the error naming the file and question) next to dsp.evaluate's resumable ``.eval.jsonl`` log, then
``<out>/summary.md`` and ``<out>/summary.json``, and prints the summary table. Rerunning the same
command resumes: finished questions and every LM call come from the log and the cache.

With the embedded model (``--lm llamacpp``) the context window is sized to fit q_len, the longest
question and the reply unless ``--n-ctx`` (or ``llamacpp:...,n_ctx=N``) fixes it; ``--lm-threads 1``
is often faster on cores that other work keeps busy.

>>> main(["--data-dir", "/nonexistent", "--lm", "llamacpp"])
Traceback (most recent call last):
...
SystemExit: DetectiveQA data directory /nonexistent does not exist
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .data import ANNO_PARTS, DetectiveQASet, load_detectiveqa
from .judge import ReasoningJudge
from .model import DEFAULT_MAX_TOKENS, LMModel
from .program import FUSIONS, RETRIEVERS, SCOPES, RetrieveProgram, TruncateProgram
from .prompt import CUTS, ApproxTokenizer, question_block
from .run import run_program, summarize, summary_markdown

__all__ = ["main", "build_parser", "load_lm"]

PROGRAMS = ("truncate", "retrieve")
_ANSWER_ROOM = 32  # tokens for "\nSo the correct option is" and a letter (the logprob fallback) and slack


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsp detectiveqa", description="DetectiveQA: multiple-choice questions "
                                     "on detective novels, by truncation or by retrieving paragraphs")
    parser.add_argument("--data-dir", required=True, help="the folder holding novel_data_<lang>/ and anno_data_<lang>/")
    parser.add_argument("--lang", default="en", help="language(s), comma-separated: en, zh")
    parser.add_argument("--anno-part", default="human_anno",
                        help=f"annotation part(s), comma-separated: {', '.join(ANNO_PARTS)}")
    parser.add_argument("--lm", default=None, help="LM spec (default $DSP_LM or llamacpp), e.g. openai:gpt-4o-mini")
    parser.add_argument("--q-len", type=int, default=3000, help="token budget of the novel content (default 3000)")
    parser.add_argument("--program", default="truncate", help="truncate, retrieve, or both comma-separated")
    parser.add_argument("--cut", choices=CUTS, default="answer",
                        help="truncation: keep the start, the text up to the answer position, or both ends")
    parser.add_argument("--k", type=int, default=8, help="retrieve: paragraphs to show (default 8)")
    parser.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    parser.add_argument("--fuse", choices=FUSIONS, default="combsum", help="retrieve: how the five queries are fused")
    parser.add_argument("--scope", choices=SCOPES, default="before_answer",
                        help="retrieve: search the paragraphs before the answer position, or all")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="tokens of the model's reply")
    parser.add_argument("--judge-lm", default=None,
                        help="LM spec of the reasoning judge, or 'same' for the answering LM (default: no judge)")
    parser.add_argument("--novels", default=None, help="only these novel ids, comma-separated")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions of each part")
    parser.add_argument("--threads", type=int, default=1, help="questions in parallel")
    parser.add_argument("--n-ctx", type=int, default=None, help="llamacpp: context window (default: sized to fit)")
    parser.add_argument("--lm-threads", type=int, default=None, help="llamacpp: CPU threads (default: all cores)")
    parser.add_argument("--out", default="runs/detectiveqa", help="output folder (default runs/detectiveqa)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def load_lm(spec: str | None, n_ctx: int | None = None, n_threads: int | None = None) -> Any:
    """The LM named by `spec`; a llamacpp spec honours `n_ctx` / `n_threads` (the spec's own n_ctx wins)."""
    from ..clients.specs import lm_from_spec, parse_spec

    spec = spec or os.environ.get("DSP_LM") or "llamacpp"
    kind, argument, options = parse_spec(spec)
    if kind != "llamacpp":
        return lm_from_spec(spec)
    from ..clients.llamacpp import LlamaCpp

    size = int(options["n_ctx"]) if "n_ctx" in options else n_ctx
    lm = LlamaCpp(argument or None, **({"n_ctx": size} if size else {}), n_threads=n_threads)
    lm.spec = spec.strip()
    return lm


def _needed_context(sets: Sequence[DetectiveQASet], q_len: int, max_tokens: int) -> int:
    # Before the LM exists its tokenizer is not at hand: the estimate errs high, which is the safe side.
    longest = max((ApproxTokenizer().count(question_block(q)) for s in sets for q in s.questions), default=0)
    return q_len + longest + max_tokens + _ANSWER_ROOM


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    programs = _split(args.program)
    unknown = [p for p in programs if p not in PROGRAMS]
    if unknown or not programs:
        raise SystemExit(f"unknown program(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(PROGRAMS)}")
    for name in ("q_len", "k", "max_tokens", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    novel_ids = _split(args.novels) if args.novels else None
    sets: list[DetectiveQASet] = []
    combos = [(lang, part) for lang in _split(args.lang) for part in _split(args.anno_part)]
    missing = []
    for lang, part in combos:
        try:
            sets.append(load_detectiveqa(args.data_dir, lang, part, novel_ids=novel_ids))
        except FileNotFoundError as error:
            missing.append(str(error))
    if missing and (len(combos) == 1 or not sets):
        raise SystemExit("\n".join(missing))
    for message in missing:  # e.g. --lang en,zh --anno-part human_anno,AIsup_anno where zh has no AIsup part
        print(f"skipped: {message}")
    for dataset in sets:
        print(f"{dataset.lang}/{dataset.anno_part}: {len(dataset.questions)} question(s) from "
              f"{len(dataset.novels)} novel(s), {len(dataset.errors)} error(s), {len(dataset.warnings)} warning(s)")
        for error in dataset.errors:
            print(f"  error: {error}")
        for warning in dataset.warnings[:5]:
            print(f"  warning: {warning}")

    needed = _needed_context(sets, args.q_len, args.max_tokens)
    n_ctx = args.n_ctx or -(-max(needed, 2048) // 256) * 256
    lm = load_lm(args.lm, n_ctx=n_ctx, n_threads=args.lm_threads)
    if hasattr(lm, "n_ctx") and lm.n_ctx < needed:
        raise SystemExit(f"--q-len {args.q_len} plus the question and --max-tokens {args.max_tokens} needs about "
                         f"{needed} tokens but {lm!r} has n_ctx={lm.n_ctx}: lower --q-len or raise --n-ctx")
    judge = None
    if args.judge_lm:
        judge = ReasoningJudge(lm if args.judge_lm == "same" else load_lm(args.judge_lm, n_threads=args.lm_threads))
    model = LMModel(lm, max_tokens=args.max_tokens)
    out_dir = Path(args.out)
    rows: list[dict[str, Any]] = []
    try:
        for name in programs:
            for dataset in sets:
                if name == "truncate":
                    program: Any = TruncateProgram(dataset.novels, model, args.q_len, cut=args.cut)
                else:
                    program = RetrieveProgram(dataset.novels, model, args.q_len, k=args.k, retriever=args.retriever,
                                              fuse=args.fuse, scope=args.scope)
                print(f"== {name} on {dataset.lang}/{dataset.anno_part} with {model.get_name()}: {program.config()}")
                result = run_program(program, dataset, out=out_dir / f"{name}-{dataset.lang}-{dataset.anno_part}",
                                     threads=args.threads, judge=judge, display_progress=not args.quiet,
                                     limit=args.limit)
                rows.extend(result.rows)
                print(f"   {sum(r['correct'] for r in result.rows)} / {len(result.rows)} correct; rows in {result.out}")
    except KeyboardInterrupt:
        print("\ninterrupted: finished questions are saved; run the same command again to resume", file=sys.stderr)
        return 130
    table = summarize(rows)
    text = summary_markdown(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.md").write_text(text + "\n", encoding="utf-8")
    (out_dir / "summary.json").write_text(json.dumps({"args": vars(args), "model": model.get_name(),
                                                      "judge": judge.get_name() if judge else None, "table": table},
                                                     indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(text)
    print(f"per-question rows and summary in {out_dir}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
