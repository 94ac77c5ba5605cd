"""`dsp litm ...`: the Lost in the Middle study from the command line (a subcommand of `dsp`).

    dsp litm closedbook --n 200
    dsp litm oracle --n 200
    dsp litm qa --total-docs 20 --gold-positions 0,4,9,14,19 --n 200 [--lm SPEC] [--n-ctx 4096]
    dsp litm qa --total-docs 20 --random-order --seed 0             the paper's random distractor order
    dsp litm qa --total-docs 20 --order lost_in_the_middle          reordered contexts (x = gold's rank)
    dsp litm qa --total-docs 20 --data 'qa_data/20_total_documents/nq-open-20_total_documents_gold_at_{gold_index}.jsonl.gz'
    dsp litm kv --keys 75 --gold-positions 0,17,36,55,74 --n 200    (n_ctx 8192 by default)
    dsp litm reorder --total-docs 20 --strategies relevance,lost_in_the_middle,reverse --n 200
    dsp litm data qa --total-docs 20 --gold-positions 0,4,9 --out qa_data/   the paper's data files
    dsp litm data kv --keys 300 --n 500 --out kv-retrieval-300_keys.jsonl.gz
    dsp litm report --out runs/litm                                 tables (markdown) and the plot
    dsp litm all --n 200 --out runs/litm                            the whole RESULTS set, resumable

Results go to ``<out>/<model tag>/<setting>.{jsonl,predictions.jsonl.gz,summary.json}``; generated
QA data to ``<out>/data/``. Every LM call is cached and every run resumes, so an interrupted command
continues where it stopped when run again; the same --out with another LM, --max-tokens or
--full-answers is refused (write to another --out or --tag). The embedded model (``--lm llamacpp``,
the default) gets the raw prompt; a chat model (``--lm openai:gpt-4o-mini``) gets it as its user message.
Every argument is checked before a model loads; a prompt that does not fit n_ctx stops the run with
the --n-ctx it needs (prompts are never truncated).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import dsp
from dsp.clients.retry import redact_urls
from dsp import ORDER_STRATEGIES
from dsp.clients.specs import check_lm_spec
from dsp.datasets import data_path, local_path
from programs.cli.options import (
    Parser, UsageError, add_lm, add_n, add_out, add_rm, add_seed, add_threads, existing_path, lm_spec,
    nonnegative_int, positive_int, rm_spec,
)

from .data import (
    KV_FILE_PATTERN, QA_FILE_PATTERN, evenly_spaced_positions, make_kv_records, make_qa_data, randomize_distractors,
    read_kv_records, read_qa_records, write_records,
)
from .execute import DEFAULT_MAX_TOKENS, first_error, results_path, run_setting
from .report import PlotUnavailable, load_summaries, plot_positions, results_markdown
from .runs import Run, closedbook_run, kv_run, oracle_run, qa_run, reorder_run

__all__ = [
    "add_parser", "model_tag", "paper_positions", "results_plan", "cmd_closedbook", "cmd_oracle", "cmd_qa",
    "cmd_reorder", "cmd_kv", "cmd_data", "cmd_report", "cmd_all", "SHARED_OPTIONS", "QA_N_CTX",
    "KV_N_CTX",
]

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
    """A directory name for an LM spec (its URL credentials blanked first: a folder name is written too).

    >>> model_tag("openai-compatible:http://127.0.0.1:8765/v1")
    'openai-compatible_http_127.0.0.1_8765_v1'
    >>> model_tag("openai-compatible:http://me:pw@host/v1")
    'openai-compatible_http_host_v1'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", redact_urls(spec).replace("***@", "")).strip("_") or "lm"


# -- argument checks (all before anything loads) ------------------------------------------------------

def _positions(text: str | None, default: list[int], limit: int) -> list[int]:
    if not text:
        return default
    try:
        positions = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise UsageError(f"--gold-positions takes comma-separated integers, got {text!r}") from None
    bad = [p for p in positions if not 0 <= p < limit]
    if bad or not positions:
        raise UsageError(f"--gold-positions must be in 0..{limit - 1}, got {text!r}")
    return positions


def _at_least_two(option: str, value: int, hint: str = "") -> None:
    if value < 2:
        raise UsageError(f"{option} must be at least 2, got {value}{hint}")


def _rm_choice(args: argparse.Namespace) -> str:
    """The checked RM spec for distractors: --rm, else $DSP_RM, else BM25 over the shared Wikipedia."""
    return rm_spec(args.rm or os.environ.get("DSP_RM") or f"bm25:{data_path(CORPUS_FILE)}")


def _data_files(pattern: str, positions: list[int], total_docs: int) -> dict[int, Path]:
    """{gold index: file} of a --data pattern, every file checked to exist."""
    if "{gold_index}" not in pattern:
        raise UsageError("--data must contain {gold_index}, e.g. "
                         "nq-open-20_total_documents_gold_at_{gold_index}.jsonl.gz")
    try:
        files = {g: Path(pattern.format(gold_index=g, total_docs=total_docs)) for g in positions}
    except (KeyError, IndexError, ValueError) as error:
        raise UsageError(f"--data {pattern!r}: only {{gold_index}} and {{total_docs}} are filled in "
                         f"({error})") from None
    for path in files.values():
        if not path.is_file():
            raise UsageError(f"--data: {path}: no such file")
    return files


def _from_data(build: Callable[[], Run]) -> Run:
    """A run built from user-given data files: data that do not fit the arguments is a usage error."""
    try:
        return build()
    except ValueError as error:
        raise UsageError(f"--data: {error}") from None


# -- loading data ---------------------------------------------------------------------------------------

def _oracle(args: argparse.Namespace) -> list[dict[str, Any]]:
    return read_qa_records(Path(args.oracle) if args.oracle else data_path(ORACLE_FILE), limit=args.n)


def _generated_qa(args: argparse.Namespace, rm: str, positions: list[int]) -> dict[int, list[dict[str, Any]]]:
    """{gold index: examples} generated from the oracle questions and the retriever `rm`."""
    oracle = _oracle(args)
    try:
        return make_qa_data(oracle, dsp.rm_from_spec(rm), args.total_docs, positions, depth=args.depth)
    except ValueError as error:  # e.g. too few answer-free passages in the top --depth
        raise UsageError(f"{error} (--depth {args.depth})") from None


def _qa_data(args: argparse.Namespace, rm: str, positions: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Generated examples, saved under <out>/data/ in the paper's file names."""
    data = _generated_qa(args, rm, positions)
    for gold_index, examples in data.items():
        name = QA_FILE_PATTERN.format(total_docs=args.total_docs, gold_index=gold_index)
        write_records(Path(args.out) / "data" / name, examples)
    return data


def _kv_records(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.data:
        return read_kv_records(args.data, limit=args.n)
    name = f"litm/{KV_FILE_PATTERN.format(num_keys=args.keys)}"
    found = local_path(name)
    if found is not None:
        return read_kv_records(found, limit=args.n)
    print(f"   {name} is not in DSP_DATA_DIR: generating {args.n or 500} examples (seed {args.seed})")
    return make_kv_records(args.keys, args.n or 500, seed=args.seed)


# -- running a setting ----------------------------------------------------------------------------------

def _run(args: argparse.Namespace, run: Run, spec: str) -> int:
    if not run.items:
        raise UsageError(f"{run.setting}: no examples to run")
    out_dir = Path(args.out) / (args.tag or model_tag(check_lm_spec(args.lm)))
    stop = None if (run.task == "kv" or args.full_answers) else ["\n"]
    lm = dsp.lm_from_spec(spec)  # the first thing that loads a model: every argument is checked
    print(f"== {run.setting}: {run.description}; {len(run.items)} prompts, {lm!r} -> {out_dir}/", flush=True)
    try:
        summary = run_setting(lm, run, out_dir, max_tokens=args.max_tokens, stop=stop, threads=args.threads,
                              progress=not args.quiet, spec=lm.spec)
    except dsp.RunMismatch as error:  # another LM or --max-tokens/--full-answers: never mix their rows
        raise dsp.RunMismatch(f"{error} (or pass another --out or --tag)") from None
    for curve, cell in summary["curves"].items():
        per = ", ".join(f"{int(p) + 1}: {100 * c['accuracy']:.1f}" for p, c in cell["positions"].items())
        by = "by the gold passage's relevance rank" if run.kind == "reorder" else "by gold position"
        print(f"   {curve}: {100 * cell['accuracy']:.1f}% of {cell['n']}" + (f"  ({by} {per})" if per else ""))
    if summary["errors"]:
        print(f"{summary['errors']} prompt(s) failed; the first: {first_error(out_dir, run)} (rows in "
              f"{results_path(out_dir, run)}). Fix the cause and run the same command again: finished prompts "
              f"are kept.", file=sys.stderr)
        return 1
    return 0


def cmd_closedbook(args: argparse.Namespace) -> int:
    spec = lm_spec(args, n_ctx=QA_N_CTX)
    return _run(args, closedbook_run(_oracle(args)), spec)


def cmd_oracle(args: argparse.Namespace) -> int:
    spec = lm_spec(args, n_ctx=QA_N_CTX)
    return _run(args, oracle_run(_oracle(args), query_aware_contextualization=args.query_aware), spec)


def cmd_qa(args: argparse.Namespace) -> int:
    _at_least_two("--total-docs", args.total_docs, " (use `dsp litm oracle` for the gold passage alone)")
    if args.mention_random_ordering and args.query_aware:
        raise UsageError("--mention-random-ordering and --query-aware cannot be combined (no such template)")
    positions = _positions(args.gold_positions, paper_positions(args.total_docs), args.total_docs)

    def build(data: dict[int, list[dict[str, Any]]]) -> Run:
        return qa_run(data, args.total_docs, random_order=args.random_order, seed=args.seed,
                      mention_random_ordering=args.mention_random_ordering,
                      query_aware_contextualization=args.query_aware, order=args.order)

    if args.data:  # the paper's (or earlier) files: no retriever
        files = _data_files(args.data, positions, args.total_docs)
        spec = lm_spec(args, n_ctx=QA_N_CTX)
        data = {g: read_qa_records(path, limit=args.n) for g, path in files.items()}
        return _run(args, _from_data(lambda: build(data)), spec)
    spec = lm_spec(args, n_ctx=QA_N_CTX)
    rm = _rm_choice(args)
    return _run(args, build(_qa_data(args, rm, positions)), spec)


def cmd_reorder(args: argparse.Namespace) -> int:
    _at_least_two("--total-docs", args.total_docs)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in ORDER_STRATEGIES]
    if unknown or not strategies:
        raise UsageError(f"--strategies: unknown {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(ORDER_STRATEGIES)}")
    spec = lm_spec(args, n_ctx=QA_N_CTX)
    rm = _rm_choice(args)
    return _run(args, reorder_run(_qa_data(args, rm, [0])[0], strategies), spec)


def cmd_kv(args: argparse.Namespace) -> int:
    _at_least_two("--keys", args.keys)
    positions = _positions(args.gold_positions, evenly_spaced_positions(args.keys, 5), args.keys)
    spec = lm_spec(args, n_ctx=KV_N_CTX)
    records = _kv_records(args)
    keys = {len(r["ordered_kv_records"]) for r in records}
    if keys and keys != {args.keys}:
        raise UsageError(f"--keys {args.keys}, but the data has {', '.join(map(str, sorted(keys)))} pairs per example")
    return _run(args, _from_data(lambda: kv_run(records, positions, query_aware_contextualization=args.query_aware)),
                spec)


def cmd_data(args: argparse.Namespace) -> int:
    if args.task == "qa":
        _at_least_two("--total-docs", args.total_docs)
        positions = _positions(args.gold_positions, paper_positions(args.total_docs), args.total_docs)
        for gold_index, examples in _generated_qa(args, _rm_choice(args), positions).items():
            if args.random_order:
                examples = [randomize_distractors(e, seed=args.seed) for e in examples]
            path = write_records(Path(args.out) / QA_FILE_PATTERN.format(total_docs=args.total_docs,
                                                                         gold_index=gold_index), examples)
            print(f"wrote {len(examples)} examples to {path}")
        return 0
    _at_least_two("--keys", args.keys)
    if args.gold_index is not None and not 0 <= args.gold_index < args.keys:
        raise UsageError(f"--gold-index must be in 0..{args.keys - 1}, got {args.gold_index}")
    records = make_kv_records(args.keys, args.n, seed=args.seed, gold_index=args.gold_index)
    out = args.out.replace("{num_keys}", str(args.keys))
    print(f"wrote {len(records)} examples to {write_records(out, records)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    try:
        summaries = load_summaries(args.out)
    except ValueError as error:  # a summary file that is not JSON: name it, no traceback
        raise UsageError(str(error)) from None
    if not summaries:
        raise UsageError(f"no *.summary.json under {args.out}: run some settings first")
    markdown = results_markdown(summaries)
    md_path = Path(args.markdown or Path(args.out) / "litm-results.md")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(markdown, encoding="utf-8")
    print(markdown)
    print(f"tables: {md_path}")
    try:
        print(f"plot: {plot_positions(summaries, args.plot or Path(args.out) / 'litm-positions.png')}")
    except PlotUnavailable as error:
        # The tables are written; the plot is what is missing: one line saying how to get it.
        print(f"dsp litm report: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"no plot: {error}")
    return 0


def results_plan(n: int) -> list[tuple[str, list[str]]]:
    """The RESULTS.md settings as `dsp litm` argument lists, cheapest first (kv gets its own n_ctx
    default, 8192, so the plan also runs on a server LM, where --n-ctx does not apply).

    >>> [name for name, _ in results_plan(200)][2:]
    ['qa-10docs', 'qa-20docs', 'qa-20docs-order_lost_in_the_middle', 'reorder-20docs', 'kv-75keys']
    >>> results_plan(200)[0]
    ('closedbook', ['closedbook', '--n', '200'])
    """
    count = ["--n", str(n)]
    return [
        ("closedbook", ["closedbook", *count]),
        ("oracle", ["oracle", *count]),
        ("qa-10docs", ["qa", "--total-docs", "10", "--gold-positions", "0,4,9", *count]),
        ("qa-20docs", ["qa", "--total-docs", "20", "--gold-positions", "0,4,9,14,19", *count]),
        ("qa-20docs-order_lost_in_the_middle",
         ["qa", "--total-docs", "20", "--gold-positions", "0,4,9,14,19", "--order", "lost_in_the_middle", *count]),
        ("reorder-20docs", ["reorder", "--total-docs", "20", "--strategies", "relevance,lost_in_the_middle,reverse",
                            *count]),
        ("kv-75keys", ["kv", "--keys", "75", "--gold-positions", "0,17,36,55,74", *count]),
    ]


# What `dsp litm all` hands on to every setting as given (the rest comes from the setting's own arguments).
SHARED_OPTIONS = ("out", "lm", "n_ctx", "lm_threads", "tag", "threads")


def _settings_parser() -> argparse.ArgumentParser:
    """The `dsp litm` parser: it turns a setting's arguments into that setting's namespace, defaults and all."""
    sub = Parser(prog="dsp").add_subparsers(dest="command")
    add_parser(sub)
    return sub.choices["litm"]


def cmd_all(args: argparse.Namespace) -> int:
    lm_spec(args)  # --lm, --n-ctx and --lm-threads are checked once, before any setting runs
    plan = results_plan(args.n)
    names = [name for name, _ in plan]
    for option in (args.only, args.skip):
        unknown = [s for s in (option or "").split(",") if s and s not in names]
        if unknown:
            raise UsageError(f"unknown setting(s) {', '.join(unknown)}; the settings are {', '.join(names)}")
    only = set(filter(None, (args.only or "").split(",")))
    skip = set(filter(None, (args.skip or "").split(",")))
    shown = ["--out", args.out]  # the equivalent command of each setting, for the log (and --dry-run)
    for option, value in (("--lm", args.lm), ("--n-ctx", args.n_ctx), ("--lm-threads", args.lm_threads),
                          ("--tag", args.tag), ("--threads", args.threads if args.threads != 1 else None)):
        if value is not None:
            shown += [option, str(value)]
    settings = _settings_parser()
    status = 0
    for name, argv in plan:
        if (only and name not in only) or name in skip:
            continue
        print(f"\n### dsp litm {' '.join([*argv, *shown])}", flush=True)
        if args.dry_run:
            continue
        setting = settings.parse_args(argv)
        for option in SHARED_OPTIONS:
            setattr(setting, option, getattr(args, option))
        started = time.perf_counter()
        # A fault (a usage error, Ctrl-C) ends the whole plan: `dsp` reports it once; a rerun resumes.
        status = max(status, int(setting.handler(setting) or 0))
        print(f"### {name} done in {time.perf_counter() - started:.0f} s", flush=True)
    if not args.dry_run:
        status = max(status, cmd_report(argparse.Namespace(out=args.out, markdown=None, plot=None)))
    return status


# -- the parser ------------------------------------------------------------------------------------------

def _run_options(p: argparse.ArgumentParser, n_ctx: int, what: str) -> None:
    """The options every setting shares: the LM group, how many, threads, where results go, generation."""
    add_lm(p, f"{n_ctx}; a prompt that does not fit stops the run with the n_ctx it needs")
    add_n(p, what)
    add_threads(p)
    add_out(p, "runs/litm", "results directory: <out>/<model tag>/<setting>.*")
    p.add_argument("--tag", help="the model's results subdirectory (default: from --lm)")
    p.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS,
                   help="tokens to generate (paper: 100)")
    p.add_argument("--full-answers", action="store_true",
                   help="QA: generate all max-tokens instead of stopping at the first newline (same scores: only the "
                        "first line is scored)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _oracle_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--oracle", type=existing_path,
                   help="the oracle QA file (default: DSP_DATA_DIR/litm/nq-open-oracle.jsonl.gz)")


def _retrieval(p: argparse.ArgumentParser) -> None:
    add_rm(p, "BM25 over DSP_DATA_DIR/wiki2018/passages.jsonl.gz")
    p.add_argument("--depth", type=positive_int, default=100,
                   help="passages retrieved per question to find distractors")


def add_parser(sub: Any) -> None:
    """Register ``dsp litm`` and its subcommands on the `dsp` subparsers `sub`.

    >>> from programs.cli.options import Parser
    >>> sub = Parser(prog="dsp").add_subparsers(dest="command")
    >>> add_parser(sub)
    >>> args = sub.choices["litm"].parse_args(["qa", "--total-docs", "20", "--n", "5"])
    >>> args.handler.__name__, args.n, args.n_ctx
    ('cmd_qa', 5, None)
    """
    litm = sub.add_parser("litm", help="Lost in the Middle (Liu et al., 2023): accuracy by the position of the "
                                       "answer in a long context", description=__doc__.split("\n\n")[0] if __doc__
                          else None, epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    commands = litm.add_subparsers(dest="litm_command", required=True, metavar="SETTING")

    p = commands.add_parser("closedbook", help="closed-book QA (question only)")
    _run_options(p, QA_N_CTX, "questions (the first N of the oracle file)")
    _oracle_option(p)
    p.set_defaults(handler=cmd_closedbook)

    p = commands.add_parser("oracle", help="oracle QA (the gold passage only)")
    _run_options(p, QA_N_CTX, "questions (the first N of the oracle file)")
    _oracle_option(p)
    p.add_argument("--query-aware", action="store_true", help="question before and after the documents")
    p.set_defaults(handler=cmd_oracle)

    p = commands.add_parser("qa", help="multi-document QA at several gold positions")
    _run_options(p, QA_N_CTX, "questions per gold position")
    _oracle_option(p)
    _retrieval(p)
    p.add_argument("--total-docs", type=positive_int, required=True, help="documents per prompt (paper: 10, 20, 30)")
    p.add_argument("--gold-positions", help="0-based gold indices (default: 0 and every fifth, as the paper)")
    p.add_argument("--random-order", action="store_true", help="shuffle the distractors (gold stays in place)")
    add_seed(p, help="seed of --random-order")
    p.add_argument("--mention-random-ordering", action="store_true",
                   help="the prompt says results are ordered randomly")
    p.add_argument("--query-aware", action="store_true", help="question before and after the documents")
    p.add_argument("--order", choices=ORDER_STRATEGIES,
                   help="rearrange each document list with dsp.order_passages (the gold position becomes its rank)")
    p.add_argument("--data", help="read examples from files instead: a pattern with {gold_index} (the paper's files "
                                  "load)")
    p.set_defaults(handler=cmd_qa)

    p = commands.add_parser("reorder", help="passage order on retrieval-ranked contexts (dsp.order_passages)")
    _run_options(p, QA_N_CTX, "questions")
    _oracle_option(p)
    _retrieval(p)
    p.add_argument("--total-docs", type=positive_int, default=20, help="documents per prompt")
    p.add_argument("--strategies", default="relevance,lost_in_the_middle,reverse",
                   help=f"comma-separated, from {', '.join(ORDER_STRATEGIES)}")
    p.set_defaults(handler=cmd_reorder)

    p = commands.add_parser("kv", help="key-value retrieval at several gold positions")
    _run_options(p, KV_N_CTX, "KV examples per gold position")
    p.add_argument("--keys", type=positive_int, default=75, help="pairs per example (the shared data has 75 and 140)")
    p.add_argument("--gold-positions", help="0-based indices of the key to retrieve (default: 5 evenly spaced)")
    p.add_argument("--data", type=existing_path,
                   help="a KV file (default: DSP_DATA_DIR/litm/kv-retrieval-<keys>_keys.jsonl.gz, else generated)")
    add_seed(p, help="seed when the data is generated")
    p.add_argument("--query-aware", action="store_true", help="key before and after the records")
    p.set_defaults(handler=cmd_kv)

    p = commands.add_parser("data", help="write data files in the paper's formats")
    data = p.add_subparsers(dest="task", required=True, metavar="TASK")
    q = data.add_parser("qa", help="multi-document QA files, one per gold position")
    _retrieval(q)
    _oracle_option(q)
    q.add_argument("--total-docs", type=positive_int, required=True, help="documents per example")
    q.add_argument("--gold-positions", help="0-based gold indices (default: 0 and every fifth, as the paper)")
    add_n(q, "questions (the first N of the oracle file)")
    q.add_argument("--random-order", action="store_true", help="shuffle the distractors (gold stays in place)")
    add_seed(q, help="seed of --random-order")
    add_out(q, "qa_data", "directory for the files (the paper's names)")
    q.set_defaults(handler=cmd_data)
    k = data.add_parser("kv", help="a key-value retrieval file")
    k.add_argument("--keys", type=positive_int, required=True, help="pairs per example")
    add_n(k, "examples to generate", default=500)
    add_seed(k, help="seed of the keys, values and gold pairs")
    k.add_argument("--gold-index", type=nonnegative_int, default=None,
                   help="place the gold pair here (default: random, as the paper)")
    add_out(k, KV_FILE_PATTERN, "the KV file ({num_keys} becomes --keys)")
    k.set_defaults(handler=cmd_data)

    p = commands.add_parser("report", help="markdown tables and the accuracy-vs-position plot of finished runs")
    add_out(p, "runs/litm", "the results directory to report on")
    p.add_argument("--markdown", help="the tables' file (default: <out>/litm-results.md)")
    p.add_argument("--plot", help="the plot's file (default: <out>/litm-positions.png)")
    p.set_defaults(handler=cmd_report)

    p = commands.add_parser("all", help="every RESULTS.md setting, resumable, then the report")
    add_n(p, "questions (and KV examples) per position", default=200)
    add_out(p, "runs/litm", "results directory")
    add_lm(p, f"{QA_N_CTX} for QA, {KV_N_CTX} for kv")
    add_threads(p)
    p.add_argument("--tag", help="the model's results subdirectory (default: from --lm)")
    p.add_argument("--only", help="comma-separated settings to run")
    p.add_argument("--skip", help="comma-separated settings to leave out")
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.set_defaults(handler=cmd_all)
