"""The main job, `dsp demo`: the embedded Gemma model and BM25 answer NQ questions three ways.

Vanilla LM (16 demos), retrieve-then-read and the DSP open-QA program run on the first N questions of
the Lost-in-the-Middle NQ oracle file, with BM25 over the Wikipedia-2018 sample when DSP_DATA_DIR has
it (else over the NQ gold passages, downloaded and verified). Everything is cached: a second run is
instant, an interrupted one resumes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

__all__ = ["run_demo", "demo_corpus"]


def demo_corpus() -> tuple[str, object]:
    """(description, passages): the Wikipedia-2018 sample if local, else the oracle's gold passages."""
    from .datasets import load_litm_oracle, local_path

    wiki = local_path("wiki2018/passages.jsonl.gz")
    if wiki is not None:
        return f"Wikipedia-2018 sample ({wiki})", wiki
    gold = {}
    for i, x in enumerate(load_litm_oracle()):
        key = (x.gold_passage["title"], x.gold_passage["text"])
        gold.setdefault(key, {"id": f"nq-gold-{i}", "title": key[0], "text": key[1]})
    return f"{len(gold)} NQ gold passages (LitM oracle)", list(gold.values())


def run_demo(n: int = 30, programs: Sequence[str] = ("vanilla", "retrieve_then_read", "dsp"),
             out: str = "runs/demo", threads: int = 1, lm_spec: str | None = None) -> list:
    import dsp
    from dsp.clients.bm25 import BM25
    from dsp.clients.specs import lm_from_spec
    from dsp.datasets import few_shot_train, load_litm_oracle
    from programs import open_qa

    started = time.perf_counter()
    questions = load_litm_oracle()
    dev, train = questions[:n], few_shot_train(questions[2000:], k=16, seeds=[0])[0]
    description, passages = demo_corpus()
    print(f"loading the LM and indexing {description} ...")
    lm = lm_from_spec(lm_spec)
    rm = BM25(passages)
    rows = []
    with dsp.settings.context(lm=lm, rm=rm):
        for name in programs:
            if name not in open_qa.PROGRAMS:
                raise SystemExit(f"unknown program {name!r}; choose from {', '.join(open_qa.PROGRAMS)}")
            t0, requests = time.perf_counter(), lm.usage.requests
            # The DSP program runs with the preset for small models (the paper's needs GPT-3 scale).
            config = open_qa.PRESETS["small"] if name == "dsp" and lm_spec in (None, "llamacpp") else {}
            result = dsp.evaluate(partial_program(open_qa.PROGRAMS[name], train, **config), dev, num_threads=threads,
                                  out=Path(out) / f"nq-{name}.jsonl", seed=0, display=False)
            low, high = result.confidence_interval()
            rows.append((name, result.score, low, high, time.perf_counter() - t0, lm.usage.requests - requests,
                         result.out))
    print(f"\nNQ (first {n} questions of the LitM oracle file), LM {lm!r}, RM BM25 over {description}")
    print(f"{'program':<20}{'EM %':>7}{'95% CI':>16}{'seconds':>9}{'LM calls':>10}")
    for name, score, low, high, seconds, calls, _ in rows:
        print(f"{name:<20}{score:>7.1f}{f'[{max(low, 0):.0f}, {min(high, 100):.0f}]':>16}{seconds:>9.1f}{calls:>10}")
    print(f"\nper-example results (question, gold, prediction, traces, tokens): {Path(out).resolve()}/nq-*.jsonl")
    print(f"total {time.perf_counter() - started:.0f} s; tokens {lm.usage.prompt_tokens} in, "
          f"{lm.usage.completion_tokens} out (cache hits: {lm.usage.cached_requests})")
    return rows


def partial_program(program, train, **config):
    """`program` with its training set (and options) bound: a callable question -> Example."""
    def run(question: str):
        return program(question, train=train, **config)

    run.__name__ = getattr(program, "__name__", "program")
    return run
