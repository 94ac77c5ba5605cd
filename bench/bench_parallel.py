"""Benchmark: parallel evaluation against a loopback LM that answers after 200 ms, ours vs DSPy's Evaluate.

    .venv/bin/python bench/bench_parallel.py                         # 300 examples, threads 1,4,16,32 (~15 min)
    .venv/bin/python bench/bench_parallel.py --threads 4,16 --reps 1 --n 96

The LM is `tests/slow_lm_server.py --answer Paris`, an OpenAI-compatible server in its own process
(ThreadingHTTPServer, TCP_NODELAY, one write per response, listen backlog 1024) that answers every
request after --delay.
Each example runs a program of 3 sequential LM calls:

- ours: `dsp.evaluate(program, dev, runner=T)` where the program makes 3 `dsp.generate` calls
  through `dsp.OpenAI(model_type="text", base_url=...)`, with the cache off;
- DSPy: `dspy.Evaluate(devset=dev, num_threads=T)` of a module with 3 `dspy.Predict` calls through
  `dspy.LM("openai/slow", api_base=...)` (DSPy's default engine selection), caches off; run in DSPy's
  venv by `bench/_dspy_side.py evaluate`.

With T examples in flight, each a chain of 3 calls of `delay` seconds, the ideal is ceil(N / T) waves
of 3 x delay: ideal seconds = ceil(N / T) * 3 * delay; achieved = ideal seconds / measured seconds
(= achieved / ideal throughput; goal >= 0.9 at 16 threads). Ours and DSPy alternate per thread count
and repetition; the median is reported with the load average. Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from slow_lm_server import fetch_stats, spawn  # noqa: E402  (path set up above)

import dsp  # noqa: E402
from templates.intro import qa_template  # noqa: E402

CALLS = 3


def make_program(calls: int):
    generate = dsp.generate(qa_template, max_tokens=16)

    def program(question: str) -> str:
        answer = ""
        for step in range(calls):  # sequential calls, each its own prompt
            _, completions = generate(dsp.Example(question=f"{question} (step {step})", demos=[]))
            answer = completions.answer
        return answer

    return program


def run_ours(url: str, n: int, threads: int) -> dict[str, Any]:
    lm = dsp.OpenAI("slow", base_url=url, api_key="none", model_type="text", max_retries=0)
    dev = [dsp.Example(question=f"question {i}?", answer="Paris") for i in range(n)]
    program = make_program(CALLS)
    with dsp.settings.context(lm=lm, cache=False):
        started = time.perf_counter()
        result = dsp.evaluate(program, dev, runner=threads, progress=False, display=False)
        seconds = time.perf_counter() - started
    if result.errors:
        raise RuntimeError(f"ours: {len(result.errors)} examples failed, e.g. {result.errors[0]['error']}")
    return {"seconds": seconds, "score": result.score}


def run_dspy(python: str, url: str, n: int, threads: int) -> dict[str, Any]:
    proc = subprocess.run([python, str(ROOT / "bench" / "_dspy_side.py"), "evaluate", url, str(n), str(threads),
                           str(CALLS)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    if proc.returncode != 0:
        raise RuntimeError(f"the DSPy side failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--threads", default="1,4,16,32")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per thread count (1 thread: always 1)")
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--dspy-python", default=str(ROOT / ".venv-dspy" / "bin" / "python"))
    parser.add_argument("--skip-dspy", action="store_true")
    args = parser.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    use_dspy = not args.skip_dspy and Path(args.dspy_python).exists()

    figures: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with spawn(args.delay, answer="Paris") as url:  # both sides' programs parse "Paris"
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; server {url}, delay {args.delay} s; "
              f"{args.n} examples x {CALLS} calls; load average {os.getloadavg()[0]:.2f}", flush=True)
        for threads in thread_counts:
            reps = 1 if threads == 1 else args.reps
            for rep in range(reps):
                sides = ["ours", "dspy"] if use_dspy else ["ours"]
                if rep % 2:
                    sides.reverse()
                for side in sides:
                    fetch_stats(url, reset=True)
                    load = os.getloadavg()[0]
                    result = run_ours(url, args.n, threads) if side == "ours" else \
                        run_dspy(args.dspy_python, url, args.n, threads)
                    stats = fetch_stats(url)
                    result.update(load=load, requests=stats["requests"], peak=stats["peak"])
                    figures.setdefault((side, threads), []).append(result)
                    print(f"  {side:4} threads {threads:2} rep {rep + 1}: {result['seconds']:.2f} s, "
                          f"{stats['requests']} requests, peak in flight {stats['peak']}, score {result['score']:.0f}, "
                          f"load {load:.2f}", flush=True)

    print("\n| side | threads | seconds (median) | ideal s | LM calls/s | ideal calls/s | achieved / ideal | "
          "peak in flight | requests | load avg | reps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for threads in thread_counts:
        ideal = math.ceil(args.n / threads) * CALLS * args.delay
        for side in ("ours", "dspy"):
            runs = figures.get((side, threads))
            if not runs:
                continue
            seconds = statistics.median(r["seconds"] for r in runs)
            calls = args.n * CALLS
            print(f"| {'dsp.evaluate' if side == 'ours' else 'dspy.Evaluate'} | {threads} | {seconds:.2f} | {ideal:.2f} | "
                  f"{calls / seconds:.1f} | {calls / ideal:.1f} | {ideal / seconds:.3f} | "
                  f"{max(r['peak'] for r in runs)} | {runs[0]['requests']} | "
                  f"{statistics.median(r['load'] for r in runs):.2f} | {len(runs)} |")


if __name__ == "__main__":
    main()
