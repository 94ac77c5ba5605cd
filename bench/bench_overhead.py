"""Benchmark: per-call overhead of `dsp.generate` vs DSPy 3.x `Predict` / `ChainOfThought`, zero-latency LMs.

    .venv/bin/python bench/bench_overhead.py                    # 2,000 calls x 5 repetitions, ~6 min
    .venv/bin/python bench/bench_overhead.py --calls 500 --reps 3 --kinds cot --caches off,warm

Both sides answer the same 2,000 distinct questions with the same 7 demonstrations (question, answer)
and, for the chain-of-thought pair, the same 5 passages of ~100 words as context:

- predict: ours `dsp.generate(qa_template)` (the intro notebook's QA template) vs `dspy.Predict("question -> answer")`;
- cot: ours `dsp.generate(qa_template_with_CoT)` (the notebook's CoT template: context, question,
  rationale, answer) vs `dspy.ChainOfThought("context, question -> answer")`.

The LMs answer at once with a canned completion that both sides parse ("Paris"): ours is an `LM`
subclass whose `_request` returns it (cache, history, usage accounting all run); DSPy's is a
`dspy.LM` with a custom no-network engine (`bench/_dspy_side.py`), so DSPy's LM layer and cache run
as for a real provider. Cache modes: `off` (no cache), `cold` (an empty cache: every call misses and
is written), `warm` (every call hits, after a cold pass), and `cold-deferred` (ours cold with
`cache_write="deferred"`, its final commit timed; DSPy runs its ordinary cold pass there). Every
repetition uses a fresh cache directory.

Each side is a long-lived child process: ours (this script with `--side`), DSPy in its own venv
(`python3 -m venv .venv-dspy && .venv-dspy/bin/pip install dspy`), and with `--baseline-root DIR`
a third side running ours from another checkout (e.g. `git worktree add /tmp/base HEAD`), to measure
a change before/after in the same run. Each repetition alternates the sides (which goes first
rotates too), so load from other processes falls on all alike. Reported: the median over
repetitions of wall and CPU (process) time per call, the ratio ours / DSPy (goal: <= 0.1), and the
load average. Wall-clock figures on this machine; nothing here is a pass/fail test.
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
# `--side ROOT` serves ours from another checkout (the before/after baseline): its code must come first.
_CODE_ROOT = sys.argv[sys.argv.index("--side") + 1] if "--side" in sys.argv else str(ROOT)
sys.path.insert(0, _CODE_ROOT)

import dsp  # noqa: E402  (path set up above)
from dsp.clients.lm import LM  # noqa: E402
from templates.intro import QA_INSTRUCTIONS, qa_template, qa_template_with_CoT  # noqa: E402

if not dsp.__file__.startswith(_CODE_ROOT):
    raise RuntimeError(f"imported dsp from {dsp.__file__}, not from {_CODE_ROOT}")
TEMPLATES = {"predict": qa_template, "cot": qa_template_with_CoT}
# What the zero-latency LM answers (a base model continues the prompt after the last field's name).
COMPLETIONS = {"predict": " Paris", "cot": " The context says so.\nAnswer: Paris"}
WORDS = ("river castle engine garden harbor violin glacier market lantern orchard station century built "
         "beside north south famous city village mountain bridge king queen war treaty island museum painter "
         "novel album song team season league").split()


class ZeroLatencyLM(LM):
    """An LM that answers every request at once with one canned completion."""

    provider = "zero-latency"

    def __init__(self, text: str) -> None:
        super().__init__("zero")
        self.text = text

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"choices": [{"text": self.text, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


def make_data(calls: int, seed: int = 0) -> dict[str, Any]:
    """The shared inputs: 5 passages of ~100 words, 7 demos, `calls` distinct questions."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    return {
        "instructions": QA_INSTRUCTIONS,
        "context": [f"Title {i} | {words(100)}" for i in range(5)],
        "demos": [{"question": f"which {words(6)} is number {i}?", "answer": [f"answer {i}"]} for i in range(7)],
        "questions": [f"question {i}: when was the {words(7)} built?" for i in range(calls)],
    }


def ours_repetition(data: dict[str, Any], kind: str, cache: str, cache_dir: str) -> dict[str, Any]:
    """One repetition of ours: len(questions) generate calls (see `_dspy_side.timed_repetition`)."""
    template = TEMPLATES[kind]
    lm = ZeroLatencyLM(COMPLETIONS[kind])
    generate = dsp.generate(template)
    demos = [dsp.Example(d) for d in data["demos"]]
    context = data["context"] if kind == "cot" else None

    def run() -> str:
        answer = ""
        for question in data["questions"]:
            x = dsp.Example(question=question, demos=demos)
            if context is not None:
                x.context = context
            _, completions = generate(x)
            answer = completions.answer
        return answer

    write = "deferred" if cache == "cold-deferred" else "durable"
    with dsp.settings.context(lm=lm, cache=cache != "off", cache_dir=cache_dir, cache_write=write):
        if cache == "warm":
            run()
        started, cpu = time.perf_counter(), time.process_time()
        answer = run()
        dsp.cache.flush()  # timed: in the deferred mode the commits are part of the cost
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if answer != "Paris":
        raise RuntimeError(f"ours parsed {answer!r}, expected 'Paris'")
    if cache.startswith("cold"):
        with dsp.settings.context(cache_dir=cache_dir):
            stored = len(dsp.cache.get_store())
        if stored != len(data["questions"]):
            raise RuntimeError(f"ours: {stored} entries stored in mode {cache}, expected {len(data['questions'])}")
    hits = lm.usage.cached_requests
    expected_hits = len(data["questions"]) if cache == "warm" else 0
    if hits != expected_hits:
        raise RuntimeError(f"ours: {hits} cache hits in mode {cache}, expected {expected_hits}")
    return {"calls": len(data["questions"]), "wall_s": wall, "cpu_s": cpu}


def serve_ours(data_path: str) -> None:
    """The child-process side of ours: one repetition per "KIND CACHE" line on stdin."""
    data = json.loads(Path(data_path).read_text(encoding="utf-8"))
    print(json.dumps({"ready": True, "version": f"dsp from {Path(dsp.__file__).parent.parent}"}), flush=True)
    work = Path(tempfile.mkdtemp(prefix="dsp-bench-ours-"))
    try:
        for number, line in enumerate(sys.stdin):
            command = line.split()
            if not command or command[0] == "quit":
                break
            kind, cache = command
            print(json.dumps(ours_repetition(data, kind, cache, str(work / f"cache-{number}"))), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


class Side:
    """One side's child process, answering one timed repetition per request line."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        hello = json.loads(self._line())
        self.version = hello.get("dspy") or hello.get("version")

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} side exited (code {self.proc.wait()}); see its stderr above")
        return line

    def run(self, kind: str, cache: str) -> dict[str, Any]:
        if self.name == "dspy" and cache == "cold-deferred":
            cache = "cold"  # DSPy has no such mode: its cold cache is the anchor
        self.proc.stdin.write(f"{kind} {cache}\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--kinds", default="predict,cot")
    parser.add_argument("--caches", default="off,cold,cold-deferred,warm")
    parser.add_argument("--dspy-python", default=str(ROOT / ".venv-dspy" / "bin" / "python"))
    parser.add_argument("--json", help="also write the raw figures to this file")
    parser.add_argument("--baseline-root", help="also measure ours from this checkout (before/after)")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--side-data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        serve_ours(args.side_data)
        return
    kinds, caches = args.kinds.split(","), args.caches.split(",")
    if not Path(args.dspy_python).exists():
        sys.exit(f"no DSPy venv at {args.dspy_python}: python3 -m venv .venv-dspy && .venv-dspy/bin/pip install dspy")

    data = make_data(args.calls)
    work = Path(tempfile.mkdtemp(prefix="dsp-bench-overhead-"))
    data_path = work / "data.json"
    data_path.write_text(json.dumps(data), encoding="utf-8")
    here = Path(__file__).resolve()
    sides = [Side("ours", [sys.executable, str(here), "--side", str(ROOT), "--side-data", str(data_path)]),
             Side("dspy", [args.dspy_python, str(ROOT / "bench" / "_dspy_side.py"), "serve", str(data_path)],
                  env={**os.environ, "PYTHONPATH": ""})]  # nothing of ours on DSPy's path
    if args.baseline_root:
        baseline = str(Path(args.baseline_root).resolve())
        sides.append(Side("baseline", [sys.executable, str(here), "--side", baseline, "--side-data", str(data_path)]))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; "
          + "; ".join(f"{s.name}: {s.version}" for s in sides)
          + f"; {args.calls} calls x {args.reps} repetitions; load average at start {os.getloadavg()[0]:.2f}")
    figures: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    loads: list[float] = []
    try:
        for rep in range(args.reps):
            for kind in kinds:
                for cache in caches:
                    shift = rep % len(sides)
                    for side in sides[shift:] + sides[:shift]:
                        figures.setdefault((side.name, kind, cache), []).append(side.run(kind, cache))
                    loads.append(os.getloadavg()[0])
            print(f"  repetition {rep + 1}/{args.reps} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for side in sides:
            side.close()
        shutil.rmtree(work, ignore_errors=True)

    def per_call(side: str, kind: str, cache: str, what: str) -> float:
        return statistics.median(r[what] / r["calls"] for r in figures[(side, kind, cache)]) * 1e6

    print(f"\nload average during the run: median {statistics.median(loads):.2f} "
          f"(min {min(loads):.2f}, max {max(loads):.2f}) on {os.cpu_count()} cores")
    print("\n| pair | cache | ours µs/call (wall) | DSPy µs/call (wall) | ratio (wall) | "
          "ours µs/call (CPU) | DSPy µs/call (CPU) | ratio (CPU) | goal ≤ 0.1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    baseline_lines = []
    names = {"predict": "generate(qa_template) vs Predict", "cot": "generate(qa_template_with_CoT) vs ChainOfThought"}
    rows = []
    for kind in kinds:
        for cache in caches:
            ours_w, dspy_w = per_call("ours", kind, cache, "wall_s"), per_call("dspy", kind, cache, "wall_s")
            ours_c, dspy_c = per_call("ours", kind, cache, "cpu_s"), per_call("dspy", kind, cache, "cpu_s")
            ratio_w, ratio_c = ours_w / dspy_w, ours_c / dspy_c
            met = "met" if max(ratio_w, ratio_c) <= 0.1 else "missed"
            print(f"| {names[kind]} | {cache} | {ours_w:.0f} | {dspy_w:.0f} | {ratio_w:.3f} | "
                  f"{ours_c:.0f} | {dspy_c:.0f} | {ratio_c:.3f} | {met} |")
            rows.append({"kind": kind, "cache": cache, "ours_wall_us": ours_w, "dspy_wall_us": dspy_w,
                         "ours_cpu_us": ours_c, "dspy_cpu_us": dspy_c})
            if args.baseline_root:
                base_w, base_c = per_call("baseline", kind, cache, "wall_s"), per_call("baseline", kind, cache, "cpu_s")
                rows[-1].update(baseline_wall_us=base_w, baseline_cpu_us=base_c)
                baseline_lines.append(f"| {names[kind]} | {cache} | {base_w:.0f} | {ours_w:.0f} | {ours_w / base_w:.2f} | "
                                      f"{base_c:.0f} | {ours_c:.0f} | {ours_c / base_c:.2f} | "
                                      f"{base_w / dspy_w:.3f} / {base_c / dspy_c:.3f} |")
    if baseline_lines:
        print(f"\nbefore ({args.baseline_root}) vs after (this checkout), same run:\n")
        print("| pair | cache | before µs (wall) | after µs (wall) | after/before | before µs (CPU) | after µs (CPU) | "
              "after/before | before / DSPy (wall / CPU) |")
        print("|---|---|---|---|---|---|---|---|---|")
        print("\n".join(baseline_lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "loads": loads, "versions": {s.name: s.version for s in sides},
                                               "raw": {"|".join(k): v for k, v in figures.items()}}, indent=1))


if __name__ == "__main__":
    main()
