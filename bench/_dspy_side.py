"""The DSPy side of bench/bench_overhead.py and bench/bench_parallel.py: run in DSPy's own venv.

Not a benchmark by itself. `bench_overhead.py` starts it as a long-lived child
(`.venv-dspy/bin/python bench/_dspy_side.py serve DATA.json`) and sends it one command per line on
stdin; each command runs a timed repetition and answers one JSON line on stdout, so the driver can
alternate our repetitions with DSPy's in one run. `bench_parallel.py` runs it once per thread count
(`... evaluate URL N THREADS`).

The zero-latency LM is a `dspy.LM` whose engine is a custom no-network object implementing
`complete(Request) -> Response` (DSPy 3.4's engine contract): DSPy's whole LM layer, including its
cache (memory + disk), runs as for a real provider; only the network is gone. (`dspy.DummyLM` would
bypass the cache.)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage

# What the model "answers": ChatAdapter's output format for the two signatures below.
_ANSWERS = {
    "predict": "[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]",
    "cot": "[[ ## reasoning ## ]]\nThe context says so.\n\n[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]",
}


class ZeroLatencyEngine:
    """A custom DSPy engine that answers at once with a canned completion (no network, no sleep)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def complete(self, request: Any) -> Response:
        return Response(id=None, model="zero", message=Message.assistant([TextPart(self.text)]),
                        finish_reason="stop", usage=Usage(input_tokens=1, output_tokens=1, total_tokens=2))

    def stream(self, request: Any) -> Any:
        raise NotImplementedError("streaming is not benchmarked")

    def close(self) -> None:
        pass


def _programs(data: dict[str, Any]) -> dict[str, Any]:
    """Predict (question -> answer, 7 demos) and ChainOfThought (context, question -> answer, 7 demos)."""
    demos = [dspy.Example(question=d["question"], answer=d["answer"][0]).with_inputs("question")
             for d in data["demos"]]
    predict = dspy.Predict(dspy.Signature("question -> answer", data["instructions"]))
    predict.demos = demos
    cot = dspy.ChainOfThought(dspy.Signature("context, question -> answer", data["instructions"]))
    cot.predict.demos = demos
    return {"predict": predict, "cot": cot}


def _configure(kind: str, cache: str, cache_dir: str) -> None:
    lm = dspy.LM("openai/zero", engine=ZeroLatencyEngine(_ANSWERS[kind]), cache=cache != "off")
    if cache == "off":
        dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    else:
        dspy.configure_cache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=cache_dir)
    dspy.configure(lm=lm)


def _run(program: Any, kind: str, questions: list[str], context: list[str]) -> str:
    answer = ""
    for question in questions:
        if kind == "cot":
            answer = program(context=context, question=question).answer
        else:
            answer = program(question=question).answer
    return answer


def timed_repetition(data: dict[str, Any], kind: str, cache: str) -> dict[str, Any]:
    """One repetition: len(questions) calls in a fresh configuration.

    cache "off": no cache; "cold": empty cache (every call a miss, then written); "warm": the same
    calls again after a cold pass (every call a hit, DSPy's memory layer included).
    """
    programs = _programs(data)
    program = programs[kind]
    questions, context = data["questions"], data["context"]
    with tempfile.TemporaryDirectory() as cache_dir:
        _configure(kind, cache, cache_dir)
        if cache == "warm":
            _run(program, kind, questions, context)
        started = time.perf_counter()
        cpu = time.process_time()
        answer = _run(program, kind, questions, context)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)  # release the directory
    if answer != "Paris":
        raise RuntimeError(f"DSPy parsed {answer!r}, expected 'Paris'")
    return {"calls": len(questions), "wall_s": wall, "cpu_s": cpu}


def serve(data_path: str) -> None:
    data = json.loads(open(data_path, encoding="utf-8").read())
    print(json.dumps({"ready": True, "dspy": dspy.__version__}), flush=True)
    for line in sys.stdin:
        command = line.split()
        if not command:
            continue
        if command[0] == "quit":
            break
        kind, cache = command
        print(json.dumps(timed_repetition(data, kind, cache)), flush=True)


def evaluate(url: str, n: int, threads: int, calls: int) -> None:
    """dspy.Evaluate of a `calls`-step program on n questions against an OpenAI-compatible server."""
    lm = dspy.LM("openai/slow", api_base=url, api_key="none", model_type="chat", cache=False, num_retries=0,
                 max_tokens=16)
    dspy.configure(lm=lm)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)

    class Steps(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.steps = [dspy.Predict("question -> answer") for _ in range(calls)]

        def forward(self, question: str) -> Any:
            prediction = None
            for i, step in enumerate(self.steps):
                prediction = step(question=f"{question} (step {i})")
            return prediction

    dev = [dspy.Example(question=f"question {i}?", answer="Paris").with_inputs("question") for i in range(n)]
    evaluator = dspy.Evaluate(devset=dev, metric=lambda gold, pred, trace=None: gold.answer == pred.answer,
                              num_threads=threads, display_progress=False, provide_traceback=True)
    started = time.perf_counter()
    result = evaluator(Steps())
    wall = time.perf_counter() - started
    score = getattr(result, "score", result)
    print(json.dumps({"seconds": wall, "score": float(score), "threads": threads, "n": n}), flush=True)


def main() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network look-up of prices
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "evaluate":
        evaluate(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
