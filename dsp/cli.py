"""The `dsp` command: run the bundled programs, build and serve indexes, ask one question, the demo.

    dsp demo                                   the main job: embedded Gemma + BM25, NQ questions
    dsp run dsp --dataset nq --n 300 --seeds 0,1,2,3,4 --threads 2
    dsp run retrieve_then_read --dataset hotpotqa --lm openai:gpt-4o-mini
    dsp run dsp --dataset nq --backend ray --ray-address auto --threads 4 --global-concurrency 32
    dsp ask "Who wrote Hamlet?" --program dsp --dataset nq
    dsp index --passages passages.jsonl.gz --out index/ [--backend bm25|dense]
    dsp serve --index index/ --port 8893
    dsp litm qa --total-docs 20 --gold-positions 0,4,9,14,19      (see dsp.litm)
    dsp detectiveqa --data-dir ... --lang en                        (see dsp.detectiveqa)

LM and RM come from `--lm` / `--rm` specs (see dsp.clients.specs) or $DSP_LM / $DSP_RM; each
dataset has a default RM over its local corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["main", "DATASETS", "load_task", "Task"]


@dataclass
class Task:
    """A dataset prepared for the programs: its family of programs, train pool, dev set, metric, RM spec."""

    name: str
    family: Any
    pool: list
    dev: list
    metric: Callable[..., float]
    rm_spec: str | None
    conversational: bool = False


def _nq_oracle(n: int | None, seed: int) -> Task:
    from . import datasets
    from .metrics import EM
    from programs import open_qa

    questions = datasets.load_litm_oracle()
    # Lines 2000+ are the training pool; evaluation takes the first n questions, as the anchor figures
    # in the benchmark notes did, so results compare line for line.
    pool, dev = questions[2000:], questions[:2000]
    corpus = datasets.local_path("wiki2018/passages.jsonl.gz")
    return Task("nq", open_qa, pool, dev[:n], EM, f"bm25:{corpus}" if corpus else None)


def _nq_open(n: int | None, seed: int) -> Task:
    from . import datasets
    from .metrics import EM
    from programs import open_qa

    pool, dev = datasets.split_pool(datasets.load_nq_open(), 500, seed=0)
    corpus = datasets.local_path("wiki2018/passages.jsonl.gz")
    return Task("nq-open", open_qa, pool, datasets.downsample(dev, n, seed), EM, f"bm25:{corpus}" if corpus else None)


def _squad(n: int | None, seed: int) -> Task:
    from . import datasets
    from .metrics import EM
    from programs import open_qa

    pool, dev = datasets.split_pool(datasets.load_squad(), 1000, seed=0)
    return Task("squad", open_qa, pool, datasets.downsample(dev, n, seed), EM, "squad-corpus")


def _hotpotqa(n: int | None, seed: int) -> Task:
    from . import datasets
    from .metrics import EM
    from programs import multihop

    pool = datasets.load_hotpotqa_csv("train")
    dev = datasets.load_hotpotqa()
    # Retrieval over the pooled distractor contexts (see datasets.hotpotqa_corpus): the abstracts sample
    # alone holds none of these questions' supporting pages.
    return Task("hotpotqa", multihop, pool, datasets.downsample(dev, n, seed), EM, "hotpotqa-corpus")


def _qrecc(n: int | None, seed: int) -> Task:
    from . import datasets
    from .metrics import nF1
    from programs import conversational

    turns = datasets.load_qrecc()
    # Conversations 1 and 18 (the longest) are evaluated; the other conversations' turns are the pool.
    dev = [t for t in turns if t.Conversation_no in (1, 18)]
    pool = [t for t in turns if t.Conversation_no not in (1, 18)]

    def metric(prediction: str, gold: Any, example: Any) -> float:
        return nF1(" ".join([*example.get("history", []), example.question]), prediction, gold)

    metric.__name__ = "nF1"
    # Retrieval over the QReCC passages cut into 200-word pieces (datasets.qrecc_corpus): whole web
    # pages overflow a small model's context.
    corpus = datasets.local_path("qrecc/passages.jsonl.gz")
    return Task("qrecc", conversational, pool, dev if n is None else dev[:n], metric,
                "qrecc-corpus" if corpus else None, conversational=True)


DATASETS: dict[str, Callable[[int | None, int], Task]] = {
    "nq": _nq_oracle, "nq-open": _nq_open, "squad": _squad, "hotpotqa": _hotpotqa, "qrecc": _qrecc,
}


def load_task(name: str, n: int | None = None, seed: int = 0) -> Task:
    if name not in DATASETS:
        raise SystemExit(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")
    return DATASETS[name](n, seed)


def _rm_for(task: Task, spec: str | None) -> Any:
    from .clients.specs import rm_from_spec

    spec = spec or os.environ.get("DSP_RM") or task.rm_spec
    built = {"squad-corpus": "squad_corpus", "hotpotqa-corpus": "hotpotqa_corpus", "qrecc-corpus": "qrecc_corpus"}
    if spec in built:
        from . import datasets
        from .clients.bm25 import BM25

        return BM25(getattr(datasets, built[spec])())
    if not spec:
        raise SystemExit(f"dataset {task.name}: no local corpus found in DSP_DATA_DIR; pass --rm")
    return rm_from_spec(spec)


def _program(task: Task, name: str, train: list, **config: Any) -> Callable[..., Any]:
    programs = task.family.PROGRAMS
    if name not in programs:
        raise SystemExit(f"dataset {task.name} has no program {name!r}; choose one of: {', '.join(programs)}")
    fn = partial(programs[name], train=train, **config)
    if task.conversational:
        from programs.conversational import Conversations

        return Conversations(task.dev, lambda q, h: fn(q, h))
    return fn


def _check_fields(task: Task, name: str) -> None:
    needed = ("Conversation_no", "Turn_no", "question") if task.conversational else ("question",)
    for i, example in enumerate(task.dev):
        missing = [f for f in needed if f not in example]
        if missing:
            raise SystemExit(f"program {name!r} needs field(s) {', '.join(missing)}, which dev example {i} "
                             f"of dataset {task.name} lacks (it has: {', '.join(example)})")


def _parse_config(items: Sequence[str]) -> dict[str, Any]:
    config = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"--set takes key=value, got {item!r}")
        try:
            config[key] = json.loads(value)
        except ValueError:
            config[key] = value
    return config


def cmd_run(args: argparse.Namespace) -> int:
    import dsp

    task = load_task(args.dataset, args.n, args.dev_seed)
    _check_fields(task, args.program)
    from .clients.specs import lm_from_spec

    lm = lm_from_spec(args.lm)
    rm = _rm_for(task, args.rm)
    seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    out_dir = Path(args.out)
    results = []
    with dsp.settings.context(lm=lm, rm=rm):
        for seed in seeds:
            train = dsp.datasets.few_shot_train(task.pool, k=args.shots, seeds=[seed])[seed]
            preset = getattr(task.family, "PRESETS", {}).get(args.preset, {}) if args.preset else {}
            if args.preset and args.preset not in getattr(task.family, "PRESETS", {}):
                raise SystemExit(f"no preset {args.preset!r} for {task.name}; presets: "
                                 f"{', '.join(getattr(task.family, 'PRESETS', {})) or 'none'}")
            program = _program(task, args.program, train, **{**preset, **_parse_config(args.set)})
            out = out_dir / f"{task.name}-{args.program}-seed{seed}.jsonl"
            print(f"== {args.program} on {task.name}: {len(task.dev)} examples, seed {seed}, {lm!r}, {rm!r}")
            result = dsp.evaluate(program, task.dev, metric=task.metric, num_threads=args.threads,
                                  out=out, seed=seed, inputs=None if task.conversational else "question",
                                  **_backend_options(args, task))
            low, high = result.confidence_interval()
            print(f"{result.metric_name} {result.score:.1f} (95% CI {low:.1f} to {high:.1f}), n={len(result.rows)}")
            results.append(result)
    table = dsp.summarize_seeds(results)
    print(table.to_string(index=False))
    print(f"{args.program} on {task.name}: {table.attrs['text']}; per-example results in {out_dir}/")
    if args.backend == "ray":  # the workers made the calls: their per-example counts are the totals
        usage = dsp.Usage()
        for result in results:
            for key in ("requests", "cached_requests", "prompt_tokens", "completion_tokens", "cost"):
                setattr(usage, key, getattr(usage, key) + getattr(result.usage, key))
        print(f"LM usage (all workers): {usage.as_dict()}")
    else:
        print(f"LM usage: {lm.usage.as_dict()}")
    return 0


def _backend_options(args: argparse.Namespace, task: Task) -> dict[str, Any]:
    """dsp.evaluate's backend arguments from `dsp run`'s flags."""
    if args.backend != "ray":
        if args.ray_address or args.batch_size or args.global_concurrency:
            raise SystemExit("--ray-address, --batch-size and --global-concurrency need --backend ray")
        return {}
    if task.conversational:
        # Turns see the program's own earlier answers, held in one process: conversations are not split.
        raise SystemExit(f"dataset {task.name} is evaluated autoregressively in one process; use --backend threads")
    return {"backend": "ray", "ray_address": args.ray_address, "batch_size": args.batch_size,
            "global_concurrency": args.global_concurrency}


def cmd_ask(args: argparse.Namespace) -> int:
    import dsp

    task = load_task(args.dataset, 1, 0)
    from .clients.specs import lm_from_spec

    lm = lm_from_spec(args.lm)
    rm = _rm_for(task, args.rm)
    train = dsp.datasets.few_shot_train(task.pool, k=args.shots, seeds=[0])[0]
    if task.conversational:
        raise SystemExit("dsp ask answers single questions; use dsp run for conversations")
    trace: list = []
    with dsp.settings.context(lm=lm, rm=rm, trace=trace):
        out = task.family.PROGRAMS[args.program](args.question, train=train)
    for step in trace:
        print(f"--- stage {step['stage']}: {len(step['completions'])} completion(s)")
        print(step["prompt"][-1500:])
        print(f"\x1b[32m{step['completions'][0]}\x1b[0m")
    print(f"\nanswer: {out.answer}")
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from .clients.bm25 import BM25
    from .clients.dense import DenseRM

    started = time.perf_counter()
    rm = BM25(args.passages) if args.backend == "bm25" else DenseRM(args.passages)
    rm.save(args.out)
    print(f"{args.backend} index of {args.passages} written to {args.out} in {time.perf_counter() - started:.1f} s")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(n=args.n, programs=args.programs.split(","), out=args.out, threads=args.threads, lm_spec=args.lm)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsp", description="Demonstrate-Search-Predict programs")
    sub = parser.add_subparsers(dest="command", required=True)

    def lm_rm(p: argparse.ArgumentParser) -> None:
        p.add_argument("--lm", help="LM spec (default $DSP_LM or llamacpp), e.g. openai:gpt-4o-mini, "
                                    "openai-compatible:http://127.0.0.1:8765/v1")
        p.add_argument("--rm", help="RM spec (default $DSP_RM or the dataset's corpus), e.g. bm25:passages.jsonl.gz, "
                                    "colbertv2:http://host:8893/api/search")

    run = sub.add_parser("run", help="evaluate a program on a dataset")
    run.add_argument("program", help="vanilla | retrieve_then_read | self_ask | dsp")
    run.add_argument("--dataset", default="nq", help=f"one of {', '.join(DATASETS)}")
    lm_rm(run)
    run.add_argument("--n", type=int, default=None, help="dev examples (downsampled, seeded); default all")
    run.add_argument("--seeds", default="0", help="comma-separated seeds, one 16-shot training set each")
    run.add_argument("--shots", type=int, default=16, help="training examples per seed (paper: 16)")
    run.add_argument("--threads", type=int, default=1, help="examples at a time (per Ray worker with --backend ray)")
    run.add_argument("--backend", choices=("threads", "ray"), default="threads",
                     help="threads in this process, or batches as Ray tasks on a cluster")
    run.add_argument("--ray-address", help="the Ray cluster (auto, host:6379, ray://host:10001); default: "
                                           "$RAY_ADDRESS, else a local cluster")
    run.add_argument("--batch-size", type=int, help="examples per Ray task (default: --threads)")
    run.add_argument("--global-concurrency", type=int,
                     help="LM requests in flight across all Ray workers (default: no limit)")
    run.add_argument("--dev-seed", type=int, default=0, help="seed of the dev downsampling")
    run.add_argument("--out", default="runs", help="directory for the per-example JSONL files")
    run.add_argument("--set", nargs="*", metavar="KEY=VALUE", help="program options, e.g. k=5 n=10")
    run.add_argument("--preset", help="a named set of program options, e.g. small (for the embedded model)")

    ask = sub.add_parser("ask", help="answer one question with a program, printing its trace")
    ask.add_argument("question")
    ask.add_argument("--program", default="dsp")
    ask.add_argument("--dataset", default="nq", help="which training pool and default RM to use")
    ask.add_argument("--shots", type=int, default=16)
    lm_rm(ask)

    index = sub.add_parser("index", help="build a BM25 or dense index from a passage file")
    index.add_argument("--passages", required=True)
    index.add_argument("--out", required=True)
    index.add_argument("--backend", choices=("bm25", "dense"), default="bm25")

    sub.add_parser("serve", help="serve an index with the ColBERTv2 API (dsp serve --help)", add_help=False)
    sub.add_parser("litm", help="the Lost in the Middle study (dsp litm --help)", add_help=False)
    sub.add_parser("detectiveqa", help="DetectiveQA long-context evaluation (dsp detectiveqa --help)", add_help=False)

    demo = sub.add_parser("demo", help="the main job: embedded Gemma + BM25 on NQ questions")
    demo.add_argument("--n", type=int, default=30, help="questions (default 30)")
    demo.add_argument("--programs", default="vanilla,retrieve_then_read,dsp")
    demo.add_argument("--threads", type=int, default=1)
    demo.add_argument("--lm", default=None, help="LM spec (default: the embedded model)")
    demo.add_argument("--out", default="runs/demo")
    return parser


# Suites with their own command-line parsers: `dsp <name> ...` runs `<module>.main(argv)`.
SUITES = {"serve": "dsp.serve", "litm": "dsp.litm.cli", "detectiveqa": "dsp.detectiveqa.cli"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUITES:
        from importlib import import_module

        return import_module(SUITES[argv[0]]).main(argv[1:]) or 0
    args = _parser().parse_args(argv)
    try:
        return {"run": cmd_run, "ask": cmd_ask, "index": cmd_index, "demo": cmd_demo}[args.command](args)
    except KeyboardInterrupt:
        print("\ninterrupted: finished examples are saved; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
