"""`dsp litm ...`: the Lost in the Middle study from the command line.

    dsp litm closedbook --limit 200
    dsp litm oracle --limit 200
    dsp litm qa --total-docs 20 --gold-positions 0,4,9,14,19 --limit 200 [--lm SPEC] [--n-ctx 4096]
    dsp litm qa --total-docs 20 --random-order --seed 0             the paper's random distractor order
    dsp litm qa --total-docs 20 --order lost_in_the_middle          reordered contexts (x = gold's rank)
    dsp litm qa --total-docs 20 --data 'qa_data/20_total_documents/nq-open-20_total_documents_gold_at_{gold_index}.jsonl.gz'
    dsp litm kv --keys 75 --gold-positions 0,17,36,55,74 --limit 200 [--n-ctx 8192]
    dsp litm reorder --total-docs 20 --strategies relevance,lost_in_the_middle,reverse --limit 200
    dsp litm data qa --total-docs 20 --gold-positions 0,4,9 --out-dir qa_data/   the paper's data files
    dsp litm data kv --keys 300 --examples 500 --out kv-retrieval-300_keys.jsonl.gz
    dsp litm report --out runs/litm                                 tables (markdown) and the plot
    dsp litm all --n 200 --out runs/litm                            the whole RESULTS set, resumable

Results go to ``<out>/<model tag>/<setting>.{jsonl,predictions.jsonl.gz,summary.json}``; generated
QA data to ``<out>/data/``. Every LM call is cached and every run resumes, so an interrupted command
continues where it stopped when run again. The embedded model (``--lm llamacpp``, the default) gets
the raw prompt; a chat model (``--lm openai:gpt-4o-mini``) gets it as its user message.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ..primitives.order import ORDER_STRATEGIES
from .data import (
    KV_FILE_PATTERN, QA_FILE_PATTERN, evenly_spaced_positions, make_kv_records, make_qa_data, randomize_distractors,
    read_kv_records, read_qa_records, write_records,
)
from .evaluate import (
    DEFAULT_MAX_TOKENS, PromptTooLongError, Run, closedbook_run, kv_run, load_summaries, oracle_run, plot_positions, qa_run,
    reorder_run, results_markdown, run_setting,
)

__all__ = ["main", "build_lm", "model_tag", "paper_positions", "results_plan"]

ORACLE_FILE = "litm/nq-open-oracle.jsonl.gz"
CORPUS_FILE = "wiki2018/passages.jsonl.gz"
QA_N_CTX = 4096   # the 20-document prompts are ~3k Gemma tokens
KV_N_CTX = 8192   # the 75-pair prompts are ~5.3k Gemma tokens


def paper_positions(total_docs: int) -> list[int]:
    """The paper's gold positions: the first document and every fifth (10 -> 0,4,9; 20 -> 0,4,9,14,19).

    >>> paper_positions(20), paper_positions(10)
    ([0, 4, 9, 14, 19], [0, 4, 9])
    """
    return sorted({0, total_docs - 1, *range(4, total_docs, 5)})


def model_tag(spec: str) -> str:
    """A directory name for an LM spec.

    >>> model_tag("openai-compatible:http://127.0.0.1:8765/v1")
    'openai-compatible_http_127.0.0.1_8765_v1'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("_") or "lm"


def build_lm(spec: str | None, n_ctx: int | None = None, n_threads: int | None = None) -> Any:
    """The LM of `spec`; the embedded llamacpp model gets `n_ctx` and `n_threads`.

    >>> build_lm("llamacpp", n_ctx=8192, n_threads=1)                         # doctest: +SKIP
    LlamaCpp(model='gemma-3-270m-q4_k_m.gguf', n_ctx=8192)
    """
    from ..clients.specs import DEFAULT_LM, llamacpp_options, lm_from_spec, parse_spec

    spec = spec or os.environ.get("DSP_LM") or DEFAULT_LM
    kind, argument, options = parse_spec(spec)
    if kind != "llamacpp":
        if n_threads is not None:
            raise SystemExit(f"--n-threads applies to the embedded llamacpp model, not to {spec!r}")
        return lm_from_spec(spec)
    from ..clients.llamacpp import LlamaCpp

    kwargs = llamacpp_options(options)
    kwargs["n_ctx"] = n_ctx or kwargs.get("n_ctx") or QA_N_CTX
    kwargs["n_threads"] = n_threads or kwargs.get("n_threads")
    lm = LlamaCpp(argument or None, **kwargs)
    lm.spec = spec
    return lm


def _positions(text: str | None, default: list[int], limit: int) -> list[int]:
    if not text:
        return default
    try:
        positions = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise SystemExit(f"--gold-positions takes comma-separated integers, got {text!r}") from None
    bad = [p for p in positions if not 0 <= p < limit]
    if bad or not positions:
        raise SystemExit(f"--gold-positions must be in 0..{limit - 1}, got {text!r}")
    return positions


def _oracle(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ..datasets import data_path

    path = Path(args.oracle) if getattr(args, "oracle", None) else data_path(ORACLE_FILE)
    return read_qa_records(path, limit=args.limit)


def _rm(spec: str | None) -> Any:
    from ..clients.specs import rm_from_spec
    from ..datasets import data_path

    return rm_from_spec(spec or os.environ.get("DSP_RM") or f"bm25:{data_path(CORPUS_FILE)}")


def _qa_data(args: argparse.Namespace, positions: list[int]) -> dict[int, list[dict[str, Any]]]:
    """{gold index: examples}: read from the paper's (or earlier) files when --data names them, else
    generated from the oracle questions and the retriever, and saved under <out>/data/."""
    if args.data:
        if "{gold_index}" not in args.data:
            raise SystemExit("--data must contain {gold_index}, e.g. nq-open-20_total_documents_gold_at_{gold_index}.jsonl.gz")
        return {g: read_qa_records(args.data.format(gold_index=g, total_docs=args.total_docs), limit=args.limit)
                for g in positions}
    oracle = _oracle(args)
    data = make_qa_data(oracle, _rm(args.rm), args.total_docs, positions, depth=args.depth)
    for gold_index, examples in data.items():
        write_records(Path(args.out) / "data" / QA_FILE_PATTERN.format(total_docs=args.total_docs, gold_index=gold_index),
                      examples)
    return data


def _run(args: argparse.Namespace, run: Run, lm: Any | None = None, n_ctx: int = QA_N_CTX) -> int:
    spec = args.lm or os.environ.get("DSP_LM") or "llamacpp"
    own = lm is None
    lm = lm or build_lm(spec, args.n_ctx or n_ctx, args.n_threads)
    out_dir = Path(args.out) / (args.tag or model_tag(spec))
    stop = None if (run.task == "kv" or args.full_answers) else ["\n"]
    print(f"== {run.setting}: {run.description}; {len(run.items)} prompts, {lm!r} -> {out_dir}/", flush=True)
    try:
        summary = run_setting(lm, run, out_dir, max_tokens=args.max_tokens, stop=stop, threads=args.threads,
                              display_progress=not args.quiet)
    finally:
        if own and hasattr(lm, "close"):
            lm.close()
    for curve, cell in summary["curves"].items():
        per = ", ".join(f"{int(p) + 1}: {100 * c['accuracy']:.1f}" for p, c in cell["positions"].items())
        by = "by the gold passage's relevance rank" if run.kind == "reorder" else "by gold position"
        print(f"   {curve}: {100 * cell['accuracy']:.1f}% of {cell['n']}" + (f"  ({by} {per})" if per else ""))
    if summary["errors"]:
        print(f"   {summary['errors']} prompt(s) failed (see 'error' in {out_dir / (run.setting + '.jsonl')}); "
              f"run the command again to retry them", file=sys.stderr)
    return 1 if summary["errors"] else 0


# -- commands ---------------------------------------------------------------------------------------

def cmd_closedbook(args: argparse.Namespace) -> int:
    return _run(args, closedbook_run(_oracle(args)))


def cmd_oracle(args: argparse.Namespace) -> int:
    return _run(args, oracle_run(_oracle(args), query_aware_contextualization=args.query_aware))


def cmd_qa(args: argparse.Namespace) -> int:
    if args.total_docs < 2:
        raise SystemExit("--total-docs must be at least 2 (use `dsp litm oracle` for the gold passage alone)")
    if args.mention_random_ordering and args.query_aware:
        raise SystemExit("--mention-random-ordering and --query-aware cannot be combined (no such template)")
    positions = _positions(args.gold_positions, paper_positions(args.total_docs), args.total_docs)
    data = _qa_data(args, positions)
    run = qa_run(data, args.total_docs, random_order=args.random_order, seed=args.seed,
                 mention_random_ordering=args.mention_random_ordering,
                 query_aware_contextualization=args.query_aware, order=args.order)
    return _run(args, run)


def cmd_reorder(args: argparse.Namespace) -> int:
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in ORDER_STRATEGIES]
    if unknown or not strategies:
        raise SystemExit(f"--strategies: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ORDER_STRATEGIES)}")
    args.data = None
    data = _qa_data(args, [0])
    return _run(args, reorder_run(data[0], strategies))


def _kv_records(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ..datasets import local_path

    if args.data:
        return read_kv_records(args.data, limit=args.limit)
    name = f"litm/{KV_FILE_PATTERN.format(num_keys=args.keys)}"
    found = local_path(name)
    if found is not None:
        return read_kv_records(found, limit=args.limit)
    print(f"   {name} is not in DSP_DATA_DIR: generating {args.limit or 500} examples (seed {args.seed})")
    return make_kv_records(args.keys, args.limit or 500, seed=args.seed)


def cmd_kv(args: argparse.Namespace) -> int:
    records = _kv_records(args)
    keys = len(records[0]["ordered_kv_records"]) if records else args.keys
    if keys != args.keys:
        raise SystemExit(f"--keys {args.keys}, but the data has {keys} pairs per example")
    positions = _positions(args.gold_positions, evenly_spaced_positions(keys, 5), keys)
    return _run(args, kv_run(records, positions, query_aware_contextualization=args.query_aware), n_ctx=KV_N_CTX)


def cmd_data(args: argparse.Namespace) -> int:
    if args.task == "qa":
        positions = _positions(args.gold_positions, paper_positions(args.total_docs), args.total_docs)
        args.data = None
        data = make_qa_data(_oracle(args), _rm(args.rm), args.total_docs, positions, depth=args.depth)
        for gold_index, examples in data.items():
            if args.random_order:
                examples = [randomize_distractors(e, seed=args.seed) for e in examples]
            path = write_records(Path(args.out_dir) / QA_FILE_PATTERN.format(total_docs=args.total_docs,
                                                                             gold_index=gold_index), examples)
            print(f"wrote {len(examples)} examples to {path}")
    else:
        gold_index = args.gold_index
        if gold_index is not None and not 0 <= gold_index < args.keys:
            raise SystemExit(f"--gold-index must be in 0..{args.keys - 1}")
        records = make_kv_records(args.keys, args.examples, seed=args.seed, gold_index=gold_index)
        out = args.out or KV_FILE_PATTERN.format(num_keys=args.keys)
        print(f"wrote {len(records)} examples to {write_records(out, records)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    summaries = load_summaries(args.out)
    if not summaries:
        raise SystemExit(f"no *.summary.json under {args.out}: run some settings first")
    markdown = results_markdown(summaries)
    md_path = Path(args.markdown or Path(args.out) / "litm-results.md")
    md_path.write_text(markdown, encoding="utf-8")
    print(markdown)
    print(f"tables: {md_path}")
    try:
        print(f"plot: {plot_positions(summaries, args.plot or Path(args.out) / 'litm-positions.png')}")
    except ValueError as error:
        print(f"no plot: {error}")
    return 0


def results_plan(n: int) -> list[tuple[str, list[str]]]:
    """The RESULTS.md settings as `dsp litm` argument lists, cheapest first.

    >>> [name for name, _ in results_plan(200)]
    ['closedbook', 'oracle', 'qa-10docs', 'qa-20docs', 'qa-20docs-order_lost_in_the_middle', 'reorder-20docs', 'kv-75keys']
    """
    limit = ["--limit", str(n)]
    return [
        ("closedbook", ["closedbook", *limit]),
        ("oracle", ["oracle", *limit]),
        ("qa-10docs", ["qa", "--total-docs", "10", "--gold-positions", "0,4,9", *limit]),
        ("qa-20docs", ["qa", "--total-docs", "20", "--gold-positions", "0,4,9,14,19", *limit]),
        ("qa-20docs-order_lost_in_the_middle",
         ["qa", "--total-docs", "20", "--gold-positions", "0,4,9,14,19", "--order", "lost_in_the_middle", *limit]),
        ("reorder-20docs", ["reorder", "--total-docs", "20", "--strategies", "relevance,lost_in_the_middle,reverse", *limit]),
        ("kv-75keys", ["kv", "--keys", "75", "--gold-positions", "0,17,36,55,74", "--n-ctx", str(KV_N_CTX), *limit]),
    ]


def cmd_all(args: argparse.Namespace) -> int:
    plan = results_plan(args.n)
    names = [name for name, _ in plan]
    for option in (args.only, args.skip):
        unknown = [s for s in (option or "").split(",") if s and s not in names]
        if unknown:
            raise SystemExit(f"unknown setting(s) {', '.join(unknown)}; the settings are {', '.join(names)}")
    only = set(filter(None, (args.only or "").split(",")))
    skip = set(filter(None, (args.skip or "").split(",")))
    shared = ["--out", args.out]
    for option, value in (("--lm", args.lm), ("--n-threads", args.n_threads), ("--tag", args.tag),
                          ("--threads", args.threads)):
        if value is not None:
            shared += [option, str(value)]
    status = 0
    for name, argv in plan:
        if (only and name not in only) or name in skip:
            continue
        command = ["dsp", "litm", *argv, *shared]
        print(f"\n### {' '.join(command)}", flush=True)
        if args.dry_run:
            continue
        started = time.perf_counter()
        code = main([*argv, *shared])
        if code == 130:  # interrupted: stop here (the finished prompts are saved), not at the next setting
            return code
        status |= code
        print(f"### {name} done in {time.perf_counter() - started:.0f} s", flush=True)
    if not args.dry_run:
        status |= cmd_report(argparse.Namespace(out=args.out, markdown=None, plot=None))
    return status


# -- parser -----------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsp litm", description="Lost in the Middle (Liu et al., 2023) on dsp LMs",
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, n_ctx_default: int = QA_N_CTX) -> None:
        p.add_argument("--lm", help="LM spec (default $DSP_LM or llamacpp), e.g. openai:gpt-4o-mini, "
                                    "openai-compatible:http://127.0.0.1:8765/v1,type=chat")
        p.add_argument("--n-ctx", type=int, default=None,
                       help=f"context window of the embedded model (default {n_ctx_default}); a prompt that does not "
                            f"fit stops the run with the n_ctx it needs")
        p.add_argument("--n-threads", type=int, default=None,
                       help="llama.cpp threads (default: all cores; 1 is faster when the cores are busy)")
        p.add_argument("--limit", type=int, default=None, help="first N questions (default: all)")
        p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="tokens to generate (paper: 100)")
        p.add_argument("--full-answers", action="store_true",
                       help="QA: generate all max-tokens instead of stopping at the first newline (same scores: "
                            "only the first line is scored)")
        p.add_argument("--threads", type=int, default=1, help="parallel requests (useful for servers)")
        p.add_argument("--out", default="runs/litm", help="results directory (default runs/litm)")
        p.add_argument("--tag", help="results subdirectory for this model (default: from --lm)")
        p.add_argument("--oracle", help="the oracle QA file (default: DSP_DATA_DIR/litm/nq-open-oracle.jsonl.gz)")
        p.add_argument("--quiet", action="store_true", help="no progress bar")

    def retrieval(p: argparse.ArgumentParser) -> None:
        p.add_argument("--rm", help="retriever for distractors (default: BM25 over DSP_DATA_DIR/wiki2018/passages.jsonl.gz)")
        p.add_argument("--depth", type=int, default=100, help="passages retrieved per question to find distractors")

    p = sub.add_parser("closedbook", help="closed-book QA (question only)")
    common(p)
    p.set_defaults(func=cmd_closedbook)

    p = sub.add_parser("oracle", help="oracle QA (the gold passage only)")
    common(p)
    p.add_argument("--query-aware", action="store_true", help="question before and after the documents")
    p.set_defaults(func=cmd_oracle)

    p = sub.add_parser("qa", help="multi-document QA at several gold positions")
    common(p)
    retrieval(p)
    p.add_argument("--total-docs", type=int, required=True, help="documents per prompt (paper: 10, 20, 30)")
    p.add_argument("--gold-positions", help="0-based gold indices (default: 0 and every fifth, as the paper)")
    p.add_argument("--random-order", action="store_true", help="shuffle the distractors (gold stays in place)")
    p.add_argument("--seed", type=int, default=0, help="seed of --random-order")
    p.add_argument("--mention-random-ordering", action="store_true", help="the prompt says results are ordered randomly")
    p.add_argument("--query-aware", action="store_true", help="question before and after the documents")
    p.add_argument("--order", choices=ORDER_STRATEGIES,
                   help="rearrange each document list with dsp.order_passages (the gold position becomes its rank)")
    p.add_argument("--data", help="read examples from files instead, a pattern with {gold_index} (the paper's files load)")
    p.set_defaults(func=cmd_qa)

    p = sub.add_parser("reorder", help="passage order on retrieval-ranked contexts (dsp.order_passages)")
    common(p)
    retrieval(p)
    p.add_argument("--total-docs", type=int, default=20)
    p.add_argument("--strategies", default="relevance,lost_in_the_middle,reverse",
                   help=f"comma-separated, from {', '.join(ORDER_STRATEGIES)}")
    p.set_defaults(func=cmd_reorder)

    p = sub.add_parser("kv", help="key-value retrieval at several gold positions")
    common(p, KV_N_CTX)
    p.add_argument("--keys", type=int, default=75, help="pairs per example (the shared data has 75 and 140)")
    p.add_argument("--gold-positions", help="0-based indices of the key to retrieve (default: 5 evenly spaced)")
    p.add_argument("--data", help="a KV file (default: DSP_DATA_DIR/litm/kv-retrieval-<keys>_keys.jsonl.gz, else generated)")
    p.add_argument("--seed", type=int, default=0, help="seed when the data is generated")
    p.add_argument("--query-aware", action="store_true", help="key before and after the records")
    p.set_defaults(func=cmd_kv)

    p = sub.add_parser("data", help="write data files in the paper's formats")
    data_sub = p.add_subparsers(dest="task", required=True)
    q = data_sub.add_parser("qa", help="multi-document QA files, one per gold position")
    retrieval(q)
    q.add_argument("--total-docs", type=int, required=True)
    q.add_argument("--gold-positions")
    q.add_argument("--limit", type=int, default=None)
    q.add_argument("--oracle")
    q.add_argument("--random-order", action="store_true")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out-dir", required=True)
    q.set_defaults(func=cmd_data)
    k = data_sub.add_parser("kv", help="a key-value retrieval file")
    k.add_argument("--keys", type=int, required=True)
    k.add_argument("--examples", type=int, default=500)
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--gold-index", type=int, default=None, help="place the gold pair here (default: random, as the paper)")
    k.add_argument("--out")
    k.set_defaults(func=cmd_data)

    p = sub.add_parser("report", help="markdown tables and the accuracy-vs-position plot of finished runs")
    p.add_argument("--out", default="runs/litm")
    p.add_argument("--markdown", help="default <out>/litm-results.md")
    p.add_argument("--plot", help="default <out>/litm-positions.png")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("all", help="every RESULTS.md setting, resumable, then the report")
    p.add_argument("--n", type=int, default=200, help="questions (and KV examples) per position")
    p.add_argument("--out", default="runs/litm")
    p.add_argument("--lm")
    p.add_argument("--n-threads", type=int, default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--tag")
    p.add_argument("--only", help="comma-separated settings to run")
    p.add_argument("--skip", help="comma-separated settings to leave out")
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.set_defaults(func=cmd_all)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `dsp litm` with `argv` (default: sys.argv[1:]); returns the exit status.

    >>> main(["closedbook", "--limit", "200"])                                  # doctest: +SKIP
    0
    """
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    for name in ("limit", "n", "depth", "max_tokens", "threads", "n_ctx", "n_threads", "total_docs", "keys", "examples"):
        value = getattr(args, name, None)
        if value is not None and value < (0 if name == "limit" else 1):
            raise SystemExit(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'limit' else 'positive'}, got {value}")
    try:
        return args.func(args)
    except PromptTooLongError as error:
        # A setting that cannot run as asked: say so plainly (no traceback) and stop, never truncate.
        raise SystemExit(f"dsp litm: {error}") from None
    except KeyboardInterrupt:
        print("\ninterrupted: finished prompts are saved; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
