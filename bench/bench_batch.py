"""Benchmark: batched decoding in dsp.LlamaCpp (issue 16): n samples in one batch, threads sharing a model.

    .venv/bin/python bench/bench_batch.py samples  [--rounds 3] [--n 20] [--max-tokens 48] [--threads N]
    .venv/bin/python bench/bench_batch.py evaluate [--questions 40] [--reps 2] [--program rtr|small]
    .venv/bin/python bench/bench_batch.py paper    [--questions 5]
    .venv/bin/python bench/bench_batch.py all --quick          # every part, tiny sizes: checks the script

1. samples: n=20 seeded samples (temperature 0.7, 48 tokens, no stop) of one ~1,200-token prompt, from
   a cold KV cache each round: through `dsp.LlamaCpp` (batched, the default), through
   `dsp.LlamaCpp(n_seq=1)` (one at a time: the code path before batching) and through raw
   llama-cpp-python drawing them one by one (`create_completion` with seeds, its own prefix reuse).
   The three sides alternate within each round (order rotating) so load from other processes hits
   all alike. Prints generated tokens/s (completion tokens / wall seconds of the whole call) and the
   ratios (goal: batched / raw >= 2.5x), then the limits: prompt evaluation speed (logits of the last
   token only) and the speed of the same tokens with logits for every token (what sampling needs:
   each sampled token pays the 262k-word output layer, which prompt evaluation skips).
2. evaluate: `dsp.evaluate` of retrieve-then-read with n=5 self-consistency (rtr: generate(qa_with_context,
   n=5, temperature=0.7) + dsp.majority; or `--program small`: `dsp_program` with the small preset) on
   the first N NQ questions, BM25 over DSP_DATA_DIR/wiki2018/passages.jsonl.gz, 1 vs 4 threads on one
   embedded model; a fresh temporary cache per side and repetition, the KV cache emptied, order
   alternating. Prints wall seconds, the ratio (goal: 4 threads >= 1.5x faster) and whether both
   sides predicted the same answers (they must: batching changes no completion).
3. paper: the DSP paper preset (`dsp_program`, n=20 at temperature 0.7, chain of thought) on the first
   N NQ questions: seconds per question with `LlamaCpp(n_seq=1)` (before) and `LlamaCpp()` (after),
   alternating per question, a fresh cache per side; and whether the answers agree.

Timings on a shared 2-core machine are noisy: compare figures from one run, not across runs.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dsp  # noqa: E402  (path set up above)
from dsp.clients.llamacpp import LlamaCpp  # noqa: E402
from dsp.clients.llamacpp.native import NativeModel, load_llama  # noqa: E402

WORDS = ["river", "castle", "engine", "garden", "harbor", "violin", "glacier", "market", "lantern", "orchard"]


def long_prompt(lm: LlamaCpp, tokens: int) -> str:
    """A question over deterministic filler facts, grown to about `tokens` tokens."""
    facts = []
    text = ""
    while len(lm.tokenize(text)) < tokens - 20:
        i = len(facts)
        facts.append(f"The {WORDS[i * 7 % 10]} near station {i} was built in {1700 + i * 37 % 300} "
                     f"beside the {WORDS[(i * 3 + 1) % 10]}.")
        text = " ".join(facts)
    return f"Document: {text}\n\nQuestion: When was the castle near station 1 built?\nAnswer:"


def timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds of this process: all its threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


# -- 1. samples ----------------------------------------------------------------------------------------

def part_samples(args: argparse.Namespace) -> None:
    batched = LlamaCpp(n_ctx=2048, n_threads=args.threads, n_seq=args.n_seq)
    single = LlamaCpp(n_ctx=2048, n_threads=args.threads, n_seq=1)
    raw = load_llama(batched.model_path, 2048, batched.n_threads, 512, verbose=False, extra_buffers=False)
    prompt = long_prompt(batched, args.prompt_tokens)
    n_prompt = len(batched.tokenize(prompt)) + 1
    params = dict(n=args.n, temperature=0.7, max_tokens=args.max_tokens, seed=0)
    print(f"samples: n={args.n} draws of {args.max_tokens} tokens, temperature 0.7, of a {n_prompt}-token prompt; "
          f"{batched.n_threads} threads; dsp runs up to n_seq={batched.n_seq} sequences, {batched.batch_width} per "
          f"llama.cpp batch (the widest that changes no sequence's numbers here)")

    def through_dsp(lm: LlamaCpp) -> tuple[int, list[str]]:
        lm._forget_kv()  # cold: every side evaluates the prompt once per round
        before = lm.usage.completion_tokens
        texts = lm(prompt, cache=False, only_completed=False, **params)
        return lm.usage.completion_tokens - before, texts

    def through_raw() -> tuple[int, list[str]]:
        raw.reset()
        raw._ctx.kv_cache_clear()
        made, texts = 0, []
        for i in range(args.n):
            out = raw.create_completion(prompt, temperature=0.7, top_k=0, top_p=1.0, min_p=0.0,
                                        max_tokens=args.max_tokens, seed=i)
            made += out["usage"]["completion_tokens"]
            texts.append(out["choices"][0]["text"])
        return made, texts

    sides: dict[str, Callable[[], tuple[int, list[str]]]] = {
        "dsp batched": lambda: through_dsp(batched),
        "dsp n_seq=1": lambda: through_dsp(single),
        "raw one by one": through_raw,
    }
    totals = {name: [0, 0.0, 0.0] for name in sides}
    outputs: dict[str, list[list[str]]] = {name: [] for name in sides}
    names = list(sides)
    for round_ in range(args.rounds):
        order = names[round_ % 3:] + names[:round_ % 3]
        for name in order:
            (made, texts), wall, cpu = timed(sides[name])
            totals[name][0] += made
            totals[name][1] += wall
            totals[name][2] += cpu
            outputs[name].append(texts)
    rate = {}
    for name, (made, wall, cpu) in totals.items():
        rate[name] = made / wall
        print(f"  {name:15s} {made:6d} generated tokens in {wall:7.2f} s = {made / wall:6.1f} tok/s "
              f"({cpu:.1f} CPU-s, {made / cpu:.1f} tok/CPU-s)")
    same = all(a == b for a, b in zip(outputs["dsp batched"], outputs["dsp n_seq=1"]))
    print(f"batched / raw one by one: {rate['dsp batched'] / rate['raw one by one']:.2f}x (goal >= 2.5x); "
          f"batched / n_seq=1: {rate['dsp batched'] / rate['dsp n_seq=1']:.2f}x; "
          f"batched and n_seq=1 completions {'identical' if same else 'DIFFERENT'}")

    # The limits: prompt evaluation (last token's logits only), then the same with every token's logits.
    native = NativeModel(batched.model_path, 2048, batched.n_threads, 512)
    ids = batched.tokenize(prompt, add_bos=True)
    speeds = {}
    for outputs_, step in (("last", 256), ("all", 32)):
        best = 0.0
        for _ in range(2):
            native.kv_clear()

            def evaluate(outputs_: str = outputs_, step: int = step) -> None:
                for start in range(0, len(ids), step):
                    part = ids[start:start + step]
                    native.decode(part, start, outputs_ if start + len(part) < len(ids) else "last")

            _, wall, _ = timed(evaluate)
            best = max(best, len(ids) / wall)
        speeds[outputs_] = best
    native.close()
    print(f"  prompt evaluation: {speeds['last']:.0f} tok/s (logits of the last token only); with every token's "
          f"logits: {speeds['all']:.0f} tok/s")
    print(f"batched generation reaches {rate['dsp batched'] / speeds['last']:.0%} of prompt-evaluation speed and "
          f"{rate['dsp batched'] / speeds['all']:.0%} of the every-token-logits speed")
    for lm in (batched, single):
        lm.close()
    raw.close()


# -- 2. evaluate ---------------------------------------------------------------------------------------

def nq(questions: int) -> tuple[list, list, Any]:
    from programs.tasks import TASKS
    pool, dev = TASKS["nq"].load(n=questions)
    passages = Path(os.environ.get("DSP_DATA_DIR", ROOT.parent / "shared" / "data")) / "wiki2018" / "passages.jsonl.gz"
    return pool, dev, dsp.BM25(str(passages))


def rtr_reader(question: str, train: list) -> dsp.Example:
    """Retrieve-then-read with self-consistency: 5 demos with their passage, the top passage, n=5 at 0.7."""
    from templates.qa import qa_with_context
    demos = [d.copy(context=dsp.retrieve(d.question, k=1)) for d in dsp.sample(train, k=5)]
    x = dsp.Example(question=question, demos=demos, context=dsp.retrieve(question, k=1))
    _, completions = dsp.generate(qa_with_context, n=5, temperature=0.7, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=dsp.majority(completions).answer)


def run_side(lm: LlamaCpp, rm: Any, program: Callable, dev: list, threads: int) -> tuple[float, list[str]]:
    lm._forget_kv()
    with tempfile.TemporaryDirectory(prefix="bench-batch-cache-") as cache_dir, \
            dsp.settings.context(lm=lm, rm=rm, cache_dir=cache_dir, cache=True):
        started = time.perf_counter()
        result = dsp.evaluate(program, dev, runner=threads, progress=False, display=False)
        seconds = time.perf_counter() - started
    if result.errors:
        raise RuntimeError(f"{len(result.errors)} examples failed, e.g. {result.errors[0]['error']}")
    return seconds, [str(row.get("prediction")) for row in result.rows]


def part_evaluate(args: argparse.Namespace) -> None:
    from programs.open_qa import PRESETS, dsp_program
    pool, dev, rm = nq(args.questions)
    program = (functools.partial(dsp_program, train=pool, **PRESETS["small"]) if args.program == "small"
               else functools.partial(rtr_reader, train=pool))
    lm = LlamaCpp(n_threads=args.threads)
    print(f"evaluate: {args.program} (n=5 self-consistency) on {len(dev)} NQ questions, 1 vs 4 threads on one "
          f"LlamaCpp (n_seq={lm.n_seq}, {lm.n_threads} llama.cpp threads)")
    seconds: dict[int, list[float]] = {1: [], 4: []}
    predictions: dict[int, list[str]] = {}
    for rep in range(args.reps):
        for threads in ((1, 4) if rep % 2 == 0 else (4, 1)):
            wall, predicted = run_side(lm, rm, program, dev, threads)
            seconds[threads].append(wall)
            predictions.setdefault(threads, predicted)
            print(f"  rep {rep}, {threads} thread(s): {wall:.1f} s ({wall / len(dev):.2f} s/question)")
    one, four = statistics.median(seconds[1]), statistics.median(seconds[4])
    same = sum(a == b for a, b in zip(predictions[1], predictions[4]))
    print(f"4 threads / 1 thread: {one / four:.2f}x faster (goal >= 1.5x; medians {one:.1f} s vs {four:.1f} s); "
          f"same predictions on {same} of {len(dev)}")
    lm.close()


# -- 3. paper ------------------------------------------------------------------------------------------

def part_paper(args: argparse.Namespace) -> None:
    from programs.open_qa import PRESETS, dsp_program
    pool, dev, rm = nq(args.questions)
    program = functools.partial(dsp_program, train=pool, **PRESETS["paper"])
    sides = {"before (n_seq=1)": LlamaCpp(n_threads=args.threads, n_seq=1),
             "after (batched)": LlamaCpp(n_threads=args.threads)}
    caches = {name: tempfile.TemporaryDirectory(prefix="bench-batch-paper-") for name in sides}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    answers: dict[str, list[str]] = {name: [] for name in sides}
    print(f"paper: dsp_program with the paper preset (n=20, temperature 0.7, k=7, chain of thought) on "
          f"{len(dev)} NQ question(s), one at a time, alternating sides; a fresh cache per side (the first "
          f"question also annotates the demonstrations: greedy calls, one after another, cached for the rest)")
    names = list(sides)
    for i, example in enumerate(dev):
        for name in (names if i % 2 == 0 else names[::-1]):
            with dsp.settings.context(lm=sides[name], rm=rm, cache_dir=caches[name].name, cache=True):
                prediction, wall, _ = timed(functools.partial(program, example.question))
            seconds[name].append(wall)
            answers[name].append(prediction.answer)
    for name, walls in seconds.items():
        later = f", later questions {sum(walls[1:]) / len(walls[1:]):.1f} s each" if len(walls) > 1 else ""
        print(f"  {name:17s} {sum(walls) / len(walls):6.1f} s/question (first {walls[0]:.1f} s{later})")
    before, after = sum(seconds[names[0]]), sum(seconds[names[1]])
    same = sum(a == b for a, b in zip(*answers.values()))
    print(f"speed-up: {before / after:.2f}x; same answers on {same} of {len(dev)}")
    for name, lm in sides.items():
        lm.close()
        caches[name].cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["samples", "evaluate", "paper", "all"])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check that the script works")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the usable cores)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=20, help="samples per call (part samples)")
    parser.add_argument("--n-seq", type=int, default=None, help="LlamaCpp(n_seq=) of the batched side (default: its default)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--prompt-tokens", type=int, default=1200)
    parser.add_argument("--questions", type=int, default=None, help="NQ questions (default: 40 evaluate, 5 paper)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--program", choices=["rtr", "small"], default="rtr")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.n, args.max_tokens, args.prompt_tokens, args.reps = 1, 4, 8, 300, 1
    parts = ["samples", "evaluate", "paper"] if args.part == "all" else [args.part]
    for part in parts:
        questions = args.questions
        if questions is None:
            questions = (2 if args.quick else 40) if part == "evaluate" else 1 if args.quick else 5
        started = time.perf_counter()
        {"samples": part_samples, "evaluate": part_evaluate, "paper": part_paper}[part](
            argparse.Namespace(**{**vars(args), "questions": questions}))
        print(f"({part}: {time.perf_counter() - started:.0f} s)\n")


if __name__ == "__main__":
    main()
