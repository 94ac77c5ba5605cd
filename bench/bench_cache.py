"""Benchmark: the dsp cache — cold vs warm re-run of an evaluation, hit latency at 10k and 1M entries, bytes/entry.

    .venv/bin/python bench/bench_cache.py                          # both parts (~6 min)
    .venv/bin/python bench/bench_cache.py --skip-sizes             # only the re-run
    .venv/bin/python bench/bench_cache.py --sizes 10000 --lookups 5000

1. Re-run: `dsp.evaluate` of a program making 3 `dsp.generate` calls per example (the intro QA
   template, through `dsp.OpenAI` to `tests/slow_lm_server.py` answering after --delay, 50 ms) on
   --n examples at --threads threads. Cold: an empty cache directory, every call reaches the server.
   Warm: the same evaluation again on the same directory, (a) in a new process (every call read from
   disk: a re-run of the same command) and (b) in the process that ran it cold (calls answered by the
   in-process layer). Goal: warm >= 20x faster than cold. No `out=` file: the re-run must not resume.
2. Size: a store filled with N entries (an LM request's key -> a ~400-byte completion response,
   written in batches of 10,000 per transaction through the store's diskcache), then for random
   requests already stored: `cached_call` when the process has not seen the request (key hashing +
   SQLite read), the same again (in-process layer), and `DiskStore.get` alone. Reported: build time,
   on-disk bytes per entry (cache.db + WAL), median and p99 latency in microseconds.

Wall-clock figures on this machine, reported with the load average; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from slow_lm_server import fetch_stats, spawn  # noqa: E402  (path set up above)

import dsp  # noqa: E402
from dsp import cache as dsp_cache  # noqa: E402
from templates.intro import qa_template  # noqa: E402

RESPONSE = {"choices": [{"text": " Paris is the capital and most populous city of France, on the Seine; it "
                         "has been a major centre of finance, diplomacy, commerce and culture since the 17th century.",
                         "finish_reason": "stop", "index": 0, "logprobs": None}],
            "usage": {"prompt_tokens": 412, "completion_tokens": 38, "total_tokens": 450},
            "model": "gpt-4o-mini-2024-07-18", "id": "cmpl-0000000000000000000000000000"}


# -- 1. cold vs warm re-run ----------------------------------------------------------------------------

def _evaluate_once(url: str, n: int, threads: int) -> float:
    lm = dsp.OpenAI("loop", base_url=url, api_key="none", model_type="text", max_retries=0)
    generate = dsp.generate(qa_template, max_tokens=16)

    def program(question: str) -> str:
        answer = ""
        for step in range(3):
            _, completions = generate(dsp.Example(question=f"{question} (step {step})", demos=[]))
            answer = completions.answer
        return answer

    dev = [dsp.Example(question=f"question {i}?", answer="Paris") for i in range(n)]
    with dsp.settings.context(lm=lm):
        started = time.perf_counter()
        result = dsp.evaluate(program, dev, runner=threads, progress=False, display=False)
        seconds = time.perf_counter() - started
    if result.errors or result.score != 100.0:
        raise RuntimeError(f"evaluation went wrong: score {result.score}, {len(result.errors)} errors")
    return seconds


def child_evaluate(url: str, cache_dir: str, n: int, threads: int, times: int) -> None:
    """Run the evaluation `times` times in this process on `cache_dir`; print the seconds of each."""
    seconds = []
    with dsp.settings.context(cache_dir=cache_dir, cache=True):
        for _ in range(times):
            seconds.append(_evaluate_once(url, n, threads))
    print(json.dumps({"seconds": seconds}))


def _server_requests(url: str, reset: bool = False) -> int:
    """Requests the server answered (since the last reset); with `reset`, zeroes them after reading."""
    return fetch_stats(url, reset=reset)["requests"]


def rerun(n: int, threads: int, delay: float, reps: int) -> None:
    rows = []
    with spawn(delay, answer="Paris") as url:  # the score must be 100: every answer is "Paris"
        for rep in range(reps):
            with tempfile.TemporaryDirectory(prefix="dsp-bench-cache-") as cache_dir:
                def child(times: int) -> list[float]:
                    proc = subprocess.run([sys.executable, __file__, "--child", url, cache_dir, str(n), str(threads),
                                           str(times)], capture_output=True, text=True)
                    if proc.returncode != 0:
                        raise RuntimeError(proc.stderr[-3000:])
                    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]

                load = os.getloadavg()[0]
                _server_requests(url, reset=True)
                cold, warm_same = child(2)  # cold, then warm in the same process
                cold_requests = _server_requests(url, reset=True)
                (warm_new,) = child(1)      # warm in a new process: from disk
                warm_requests = _server_requests(url)
                rows.append({"cold": cold, "warm_new": warm_new, "warm_same": warm_same, "load": load,
                             "cold_requests": cold_requests, "warm_requests": warm_requests})
                print(f"  rep {rep + 1}: cold {cold:.2f} s ({cold_requests} LM requests), warm new process "
                      f"{warm_new:.3f} s ({warm_requests} requests), warm same process {warm_same:.3f} s, "
                      f"load {load:.2f}", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in ("cold", "warm_new", "warm_same", "load")}
    print(f"\n| run | seconds (median of {reps}) | speed-up vs cold | goal ≥ 20× | load avg |")
    print("|---|---|---|---|---|")
    print(f"| cold (empty cache, {n * 3} LM calls of {delay * 1000:.0f} ms, {threads} threads) | {med['cold']:.2f} | 1× | | {med['load']:.2f} |")
    for key, name in (("warm_new", "warm, new process (from disk)"), ("warm_same", "warm, same process (in-process layer)")):
        ratio = med["cold"] / med[key]
        print(f"| {name} | {med[key]:.3f} | {ratio:.0f}× | {'met' if ratio >= 20 else 'missed'} | {med['load']:.2f} |")


# -- 2. hit latency by size ------------------------------------------------------------------------------

def _request(i: int) -> dict[str, Any]:
    """An LM request as dsp.OpenAI builds it (~1,000-character prompt), distinct per i."""
    prompt = (f"Answer questions with short factoid answers.\n\n---\n\nQuestion: question number {i}: "
              + "which river flows past the castle near the old market square " * 15 + "?\nAnswer:")
    return {"kind": "lm", "provider": "openai", "model": "gpt-4o-mini", "request": {
        "model": "gpt-4o-mini", "prompt": prompt, "temperature": 0.0, "max_tokens": 150, "n": 1}}


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def size_run(entries: int, lookups: int, directory: Path) -> dict[str, Any]:
    store = dsp_cache.get_store(directory)
    text = dsp_cache.encode_value(RESPONSE)
    started = time.perf_counter()
    batch = 10_000
    underlying = store._cache  # the diskcache.Cache: one transaction per batch instead of per entry
    for start in range(0, entries, batch):
        with underlying.transact(retry=True):
            for i in range(start, min(entries, start + batch)):
                underlying.add(dsp_cache.request_key(_request(i)), text, retry=True)
    build_s = time.perf_counter() - started
    stored = len(store)
    disk = _dir_bytes(directory)

    rng = random.Random(entries)
    sample = rng.sample(range(entries), min(lookups, entries))
    requests = [_request(i) for i in sample]
    keys = [dsp_cache.request_key(r) for r in requests]

    def must_not_run() -> Any:
        raise RuntimeError("a stored request was computed again")

    first, again, raw = [], [], []
    with dsp.settings.context(cache_dir=str(directory), cache=True):
        for request in requests:  # never seen by this process: key hashing + SQLite read
            t = time.perf_counter()
            value, cached = dsp_cache.cached_call(request, must_not_run)
            first.append(time.perf_counter() - t)
            if not cached or value != RESPONSE:
                raise RuntimeError("a stored entry was not returned")
        for request in requests:  # seen: the in-process layer
            t = time.perf_counter()
            dsp_cache.cached_call(request, must_not_run)
            again.append(time.perf_counter() - t)
        for key in keys:
            t = time.perf_counter()
            store.get(key)
            raw.append(time.perf_counter() - t)
    store.close()

    def us(values: list[float]) -> tuple[float, float]:
        return statistics.median(values) * 1e6, _percentile(values, 0.99) * 1e6

    return {"entries": stored, "build_s": build_s, "bytes_per_entry": disk / stored, "disk_mb": disk / 1e6,
            "first": us(first), "again": us(again), "raw": us(raw), "value_bytes": len(text.encode()),
            "load": os.getloadavg()[0]}


def sizes(entry_counts: list[int], lookups: int) -> None:
    results = []
    for count in entry_counts:
        directory = Path(tempfile.mkdtemp(prefix=f"dsp-bench-cache-{count}-"))
        try:
            result = size_run(count, lookups, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        results.append(result)
        print(f"  {count:,} entries: built in {result['build_s']:.1f} s, {result['bytes_per_entry']:.0f} bytes/entry",
              flush=True)
    print(f"\nvalue: a {results[0]['value_bytes']}-byte JSON completion response; key: SHA-256 of the request "
          f"(~1,000-character prompt); {lookups:,} random stored requests per size")
    print("\n| entries | build s | on disk MB | bytes/entry | cached_call, first time in process µs (median / p99) | "
          "cached_call, again (in-process layer) µs | DiskStore.get alone µs | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['entries']:,} | {r['build_s']:.1f} | {r['disk_mb']:.0f} | {r['bytes_per_entry']:.0f} | "
              f"{r['first'][0]:.0f} / {r['first'][1]:.0f} | {r['again'][0]:.1f} / {r['again'][1]:.0f} | "
              f"{r['raw'][0]:.0f} / {r['raw'][1]:.0f} | {r['load']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--lookups", type=int, default=5000)
    parser.add_argument("--skip-rerun", action="store_true")
    parser.add_argument("--skip-sizes", action="store_true")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, cache_dir, n, threads, times = args.child
        child_evaluate(url, cache_dir, int(n), int(threads), int(times))
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    if not args.skip_rerun:
        print(f"\n== cold vs warm re-run: {args.n} examples x 3 calls, loopback LM {args.delay * 1000:.0f} ms, "
              f"{args.threads} threads", flush=True)
        rerun(args.n, args.threads, args.delay, args.reps)
    if not args.skip_sizes:
        print("\n== hit latency by cache size", flush=True)
        sizes([int(s) for s in args.sizes.split(",")], args.lookups)


if __name__ == "__main__":
    main()
