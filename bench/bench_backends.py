"""Benchmark: dsp.evaluate's thread backend vs its Ray backend against a loopback LM with 200 ms latency.

The LM is `tests/slow_lm_server.py` (an OpenAI-compatible completions server in its own process that
answers every request after --delay seconds); the program makes 3 sequential LM calls per example
(`tests/ray_programs.three_calls`), so with C examples in flight the ideal throughput is C / (3 x delay)
examples per second. Every run starts from an empty cache (every call reaches the server).

    .venv/bin/python bench/bench_backends.py                       # 96 examples, threads 1/4/16/32, Ray 2 x 1/2/8/16
    .venv/bin/python bench/bench_backends.py --n 64 --threads 1,8 --ray 2x4 --global-limit 4 --markdown
    .venv/bin/python bench/bench_backends.py --threads 1 --ray-batches 1 --ray-windows 2,all --global-limit 0

The Ray side starts a local cluster of --ray-cpus CPUs (one task per CPU = one "worker"); its start-up
time is reported apart and the workers are warmed (clients built) before timing. Figures are
wall-clock on this machine; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
sys.path[:0] = [str(ROOT), str(TESTS)]

import ray_programs  # noqa: E402
from slow_lm_server import fetch_stats, spawn  # noqa: E402

import dsp  # noqa: E402
from dsp.clients.specs import lm_from_spec  # noqa: E402
from dsp.evaluation import Ray  # noqa: E402
from dsp.evaluation import ray as ray_runner  # noqa: E402


def _run(url: str, dev: list, backend: str, threads: int, batch_size: int | None = None,
         global_concurrency: int | None = None) -> dict:
    fetch_stats(url, reset=True)
    lm = lm_from_spec(f"openai-compatible:{url},model=slow")
    with tempfile.TemporaryDirectory() as cache, dsp.settings.context(lm=lm, cache_dir=cache):
        started = time.perf_counter()
        runner = (Ray(threads=threads, batch_size=batch_size, global_concurrency=global_concurrency)
                  if backend == "ray" else threads)
        result = dsp.evaluate(ray_programs.three_calls, dev, metric=lambda p, g: 0.0, runner=runner,
                              display=False, progress=False)
        seconds = time.perf_counter() - started
    after = fetch_stats(url)
    if result.errors:
        raise RuntimeError(f"{len(result.errors)} examples failed: {result.errors[0]['error']}")
    return {"seconds": seconds, "requests": after["requests"], "peak": after["peak"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=96, help="examples per run")
    parser.add_argument("--delay", type=float, default=0.2, help="LM latency in seconds")
    parser.add_argument("--threads", default="1,4,16,32", help="thread-backend concurrencies")
    parser.add_argument("--ray", default="2x1,2x2,2x8,2x16", help="Ray runs as WORKERSxTHREADS (workers = --ray-cpus)")
    parser.add_argument("--ray-cpus", type=int, default=2)
    parser.add_argument("--ray-batches", default="1,4", help="Ray batch sizes as multiples of the threads per worker")
    parser.add_argument("--ray-windows", default="",
                        help="compare the driver's tasks in flight per CPU: e.g. 2,all (all: every task submitted at "
                             "once, as before 2026-12-05); default: dsp's WINDOW_PER_CPU only")
    parser.add_argument("--global-limit", type=int, default=8,
                        help="one more Ray run: the last --ray layout under this global LM concurrency limit (0: none)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    asked_windows = [w for w in args.ray_windows.split(",") if w]
    if any(w != "all" and not (w.isdigit() and int(w) > 0) for w in asked_windows):
        raise SystemExit(f"--ray-windows {args.ray_windows!r}: give positive integers or all, comma-separated")
    dev = [dsp.Example(question=f"question {i}", answer="-") for i in range(args.n)]
    per_example = 3 * args.delay
    rows = []
    with spawn(args.delay) as url:
        for threads in [int(t) for t in args.threads.split(",") if t]:
            rows.append(("threads", threads, threads, None, _run(url, dev, "threads", threads)))
            print(f"threads x{threads}: {rows[-1][-1]}", file=sys.stderr)
        if args.ray:
            import ray

            started = time.perf_counter()
            ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)])}})
            startup = time.perf_counter() - started
            _run(url, dev[: 4 * args.ray_cpus], "ray", 2)  # warm: worker processes up, clients built
            print(f"ray start-up {startup:.1f} s", file=sys.stderr)
            default_window = ray_runner.WINDOW_PER_CPU
            windows = asked_windows or [str(default_window)]
            for item in args.ray.split(","):
                workers, threads = (int(x) for x in item.lower().split("x"))
                if workers != args.ray_cpus:
                    raise SystemExit(f"--ray {item}: workers must equal --ray-cpus ({args.ray_cpus})")
                for batch in [int(b) * threads for b in args.ray_batches.split(",") if b]:
                    for window in windows:
                        # the driver reads the module's value at each run (a knob for this comparison only)
                        ray_runner.WINDOW_PER_CPU = args.n if window == "all" else int(window)
                        shown = f"{workers}x{threads}" + (f", window {window}/CPU" if asked_windows else "")
                        rows.append(("ray", workers * threads, shown, batch, _run(url, dev, "ray", threads, batch)))
                        print(f"ray {shown} batch {batch}: {rows[-1][-1]}", file=sys.stderr)
            ray_runner.WINDOW_PER_CPU = default_window
            if args.global_limit:
                rows.append(("ray", args.global_limit, f"{workers}x{threads}, global {args.global_limit}", threads,
                             _run(url, dev, "ray", threads, threads, args.global_limit)))
                print(f"ray global {args.global_limit}: {rows[-1][-1]}", file=sys.stderr)
            ray.shutdown()

    header = ["backend", "concurrency", "layout", "batch", "seconds", "ideal s", "ex/s", "ideal ex/s", "achieved",
              "LM req/s", "peak in flight"]
    table = []
    for backend, concurrency, layout, batch, m in rows:
        ideal = math.ceil(args.n / concurrency) * per_example  # waves of `concurrency` examples, 3 calls each
        batch_shown = batch if batch is not None else "-"
        table.append([backend, concurrency, layout, batch_shown, f"{m['seconds']:.2f}", f"{ideal:.2f}",
                      f"{args.n / m['seconds']:.1f}", f"{args.n / ideal:.1f}", f"{100 * ideal / m['seconds']:.0f}%",
                      f"{m['requests'] / m['seconds']:.1f}", m["peak"]])
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in table:
            print("| " + " | ".join(str(x) for x in line) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
        for line in [header, *table]:
            print("  ".join(str(x).rjust(w) for x, w in zip(line, widths)))
    if args.ray:
        print(f"\nRay start-up (ray.init, local cluster of {args.ray_cpus} CPUs): {startup:.1f} s, not in the figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
