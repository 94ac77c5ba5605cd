"""The main job, `dsp demo`: the embedded Gemma model and BM25 answer NQ questions three ways.

Vanilla LM (16 demos), retrieve-then-read and the DSP open-QA program run on the first N questions of
the Lost-in-the-Middle NQ oracle file, with BM25 over the Wikipedia-2018 sample when DSP_DATA_DIR has
it (else over the NQ gold passages, downloaded and verified). Everything is cached: a second run is
instant, an interrupted one resumes.

    dsp demo [--n 30] [--programs vanilla,retrieve_then_read,dsp] [--lm SPEC]
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import dsp
from dsp.datasets import few_shot_train, load_litm_oracle, local_path
from dsp.utils import check_positive_int
from programs import open_qa
from programs.cli.options import UsageError, add_lm, add_n, add_out, add_threads, lm_spec

__all__ = ["run_demo", "demo_corpus", "add_parser"]

DEFAULT_PROGRAMS = ("vanilla", "retrieve_then_read", "dsp")
FAMILY = open_qa.FAMILY  # NQ's programs, presets and the small-model choice


def add_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="the main job: embedded Gemma + BM25 on NQ questions, three programs")
    add_n(demo, "NQ questions", default=30)
    demo.add_argument("--programs", default=",".join(DEFAULT_PROGRAMS),
                      help=f"comma-separated, from {', '.join(FAMILY.programs)}")
    add_lm(demo)
    add_threads(demo)
    add_out(demo, "runs/demo")
    demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    names = [p.strip() for p in args.programs.split(",") if p.strip()]
    unknown = [p for p in names if p not in FAMILY.programs]
    if unknown or not names:
        raise UsageError(f"--programs: unknown {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(FAMILY.programs)}")
    rows = run_demo(n=args.n, programs=names, out=args.out, threads=args.threads, lm_spec=lm_spec(args))
    failed = [name for name, *_rest, errors in rows if errors]
    return 1 if failed else 0


def demo_corpus() -> tuple[str, object]:
    """(description, passages): the Wikipedia-2018 sample if local, else the oracle's gold passages."""
    wiki = local_path("wiki2018/passages.jsonl.gz")
    if wiki is not None:
        return f"Wikipedia-2018 sample ({wiki})", wiki
    gold = {}
    for i, x in enumerate(load_litm_oracle()):
        key = (x.gold_passage["title"], x.gold_passage["text"])
        gold.setdefault(key, {"id": f"nq-gold-{i}", "title": key[0], "text": key[1]})
    return f"{len(gold)} NQ gold passages (LitM oracle)", list(gold.values())


def run_demo(n: int = 30, programs: Sequence[str] = DEFAULT_PROGRAMS, out: str = "runs/demo", threads: int = 1,
             lm_spec: str | None = None) -> list[tuple]:
    """Run the demo; returns (program, EM, low, high, seconds, LM calls, results file, failed examples) rows.

    For example, ``rows = run_demo(n=2)`` (the embedded model and DSP_DATA_DIR, so not run as a doctest).
    """
    check_positive_int(n, "n")
    started = time.perf_counter()
    questions = load_litm_oracle()
    dev, train = questions[:n], few_shot_train(questions[2000:], k=16, seeds=[0])[0]
    description, passages = demo_corpus()
    print(f"loading the LM and indexing {description} ...")
    lm = dsp.lm_from_spec(lm_spec)
    rm = dsp.BM25(passages)
    rows = []
    with dsp.settings.context(lm=lm, rm=rm):
        for name in programs:
            if name not in FAMILY.programs:
                raise ValueError(f"unknown program {name!r}; choose from {', '.join(FAMILY.programs)}")
            t0, requests = time.perf_counter(), lm.usage.requests
            # A small LM (declared: `dsp.LM.small`) runs the family's small-model preset; the paper's
            # settings need GPT-3 scale (with them the 270M model rambles and answers nothing).
            preset = FAMILY.default_preset(name, lm.small)
            config = dict(FAMILY.presets[preset]) if preset else {}
            program = partial(FAMILY.programs[name], train=train, **config)
            result = dsp.evaluate(program, dev, runner=threads, out=Path(out) / f"nq-{name}.jsonl", seed=0,
                                  run={"task": "nq", "program_name": name, "options": config}, display=False,
                                  progress=name)  # the bar names the program: "dsp (EM)", not "evaluate (EM)"
            low, high = result.confidence_interval()
            rows.append((name, result.score, low, high, time.perf_counter() - t0, lm.usage.requests - requests,
                         result.out, len(result.errors)))
    print(f"\nNQ (first {n} questions of the LitM oracle file), LM {lm.name}, RM BM25 over {description}")
    print(f"{'program':<20}{'EM %':>7}{'95% CI':>16}{'seconds':>9}{'LM calls':>10}")
    for name, score, low, high, seconds, calls, _, _ in rows:
        print(f"{name:<20}{score:>7.1f}{f'[{max(low, 0):.0f}, {min(high, 100):.0f}]':>16}{seconds:>9.1f}{calls:>10}")
    print(f"\nper-example results (question, gold, prediction, traces, tokens): {Path(out).resolve()}/nq-*.jsonl")
    print(f"total {time.perf_counter() - started:.0f} s; tokens {lm.usage.prompt_tokens} in, "
          f"{lm.usage.completion_tokens} out (cache hits: {lm.usage.cached_requests})")
    for name, *_rest, errors in rows:
        if errors:
            print(f"{name}: {errors} example(s) failed (see 'error' in {_rest[-1]})")
    return rows
