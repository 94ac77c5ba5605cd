"""Retrieval recall of the gold passage on NQ: one query (the question) vs fused queries.

For the first N questions of the Lost-in-the-Middle NQ oracle file, whose gold passages are part of
the Wikipedia-2018 sample, report recall@1/5/20 of BM25 with the question alone, and with CombSUM
fusion of the question and n LM-written search queries (the DSP rewrite template, sampled).

    dsp recall --n 300 --rewrites 5 [--lm llamacpp]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import dsp
from dsp.datasets import data_path, few_shot_train
from programs.cli.options import UsageError, add_lm, add_n, add_out, add_rm, lm_spec, nonnegative_int, rm_spec
from programs.tasks import TASKS
from templates.qa import rewrite

__all__ = ["gold_ids", "recall_at", "rewrites_for", "add_parser", "cmd_recall"]

KS = (1, 5, 20)


def gold_ids(questions: list[dsp.Example], corpus: list[dict]) -> list[str]:
    """The corpus id of each question's gold passage, matched by (title, text)."""
    by_content = {}
    for p in corpus:
        by_content.setdefault((p["title"], p["text"]), p["id"])
    missing = [i for i, q in enumerate(questions) if (q.gold_passage["title"], q.gold_passage["text"]) not in by_content]
    if missing:
        raise ValueError(f"{len(missing)} gold passages are not in the corpus (first: question {missing[0]})")
    return [by_content[(q.gold_passage["title"], q.gold_passage["text"])] for q in questions]


def recall_at(ranked: list[list[str]], gold: list[str]) -> dict[str, float]:
    return {f"R@{k}": sum(g in r[:k] for r, g in zip(ranked, gold)) / len(gold) for k in KS}


def rewrites_for(question: str, train: list[dsp.Example], n: int) -> list[str]:
    """n sampled search queries for the question (plus the question itself).

    Each demo shows a training question whose missing information is the title of its gold article
    and whose query names that article: a query that only repeats the question teaches the model to
    copy it (measured: all 1,500 samples of 300 questions were copies, so fusion changed nothing).
    Training labels only; the dev question's own gold passage is never seen.
    """
    demos = []
    for d in dsp.sample(train, k=4):
        title = d.gold_passage["title"]
        demos.append(d.copy(rationale=f"the Wikipedia article on {title}", query=f"{title} {d.question}",
                            augmented=True))
    x = dsp.Example(question=question, demos=demos)
    _, completions = dsp.generate(rewrite, n=n, temperature=0.7, max_tokens=40, stop="auto")(x)
    return [c.get("query") or "" for c in completions] + [question]


def add_parser(sub: Any) -> None:
    recall = sub.add_parser("recall", help="gold-passage recall@1/5/20 of BM25 on NQ: the question alone vs "
                                           "fused LM-written queries")
    add_n(recall, "NQ dev questions (the first N of the oracle file, at most 1000)", default=300)
    recall.add_argument("--rewrites", type=nonnegative_int, default=5,
                        help="LM-written queries per question (0: the question alone, no LM)")
    add_lm(recall)
    add_rm(recall, "BM25 over DSP_DATA_DIR/wiki2018/passages.jsonl.gz")
    add_out(recall, "runs/results/nq-recall.json", "the JSON report")
    recall.set_defaults(handler=cmd_recall)


def cmd_recall(args: argparse.Namespace) -> int:
    spec = lm_spec(args) if args.rewrites else None
    chosen_rm = rm_spec(args.rm) if args.rm else None
    corpus = data_path("wiki2018/passages.jsonl.gz")
    # NQ's dev questions only (lines 0-999 of the oracle file; the test split follows them, never looked at).
    try:
        pool, dev = TASKS["nq"].load(n=args.n)
    except ValueError as error:
        raise UsageError(f"--n {args.n}: {error}") from None
    train = few_shot_train(pool, k=16, seeds=[0])[0]
    gold = gold_ids(dev, dsp.datasets.read_passages(corpus))
    rm = dsp.rm_from_spec(chosen_rm) if chosen_rm else dsp.BM25(corpus)
    started = time.perf_counter()
    single = [[p["id"] for p in rm(q.question, k=20)] for q in dev]
    report: dict[str, Any] = {"n": len(dev), "rm": chosen_rm or "bm25", "single": recall_at(single, gold)}
    if args.rewrites:
        lm = dsp.lm_from_spec(spec)
        with dsp.settings.context(lm=lm, rm=rm):
            fused = []
            for q in dev:
                queries = rewrites_for(q.question, train, args.rewrites)
                fused.append([p["id"] for p in dsp.fused_retrieval(queries, k=20, return_passages=True)])
        report["fused"] = recall_at(fused, gold)
        report["rewrites"] = args.rewrites
    report["seconds"] = round(time.perf_counter() - started, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0
