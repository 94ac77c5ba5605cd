"""Benchmark: dsp.LlamaCpp against raw llama_cpp.Llama, and the gain from prompt-prefix reuse.

    .venv/bin/python bench/bench_llamacpp.py [--rounds 3] [--max-tokens 48] [--threads N]

1. Throughput: the same distinct prompts, greedy, same max_tokens and threads, through
   `dsp.LlamaCpp` (disk cache off) and through `llama_cpp.Llama.create_completion`; tokens/s
   (prompt + completion) and the ratio dsp/raw (goal >= 0.95), by wall time and by this process's
   CPU time. The two alternate prompt by prompt so that load from other processes hits both alike.
2. Self-consistency: one ~1,000-token prompt, n=20 draws at temperature 0.7, with prefix reuse (the
   normal path: the prompt evaluated once, the draws decoded together) and as 20 one-draw calls with
   the KV cache cleared before each; prints both times, the speed-up and whether the draws agree.
   (bench/bench_batch.py measures batched sampling itself.)
3. Long prompts (Lost in the Middle's KV-75 size, ~5,300 tokens): prompt evaluation with llama.cpp's
   fused attention (`LlamaCpp(flash_attn=True)`) against the default kernels, alternating, and
   whether the greedy answers agree. `--long-only` runs just this part.

Both models are loaded the same way (llama.cpp's extra weight buffers off, see dsp.clients.llamacpp.native).
Timings on a shared 2-core machine are noisy: compare figures from one run, not across runs; with
other processes busy, --threads 1 gives steadier numbers (llama.cpp's threads spin-wait for each other).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsp.clients.llamacpp import LlamaCpp  # noqa: E402  (path set up above)
from dsp.clients.llamacpp.native import load_llama  # noqa: E402


def passage(seed: int, sentences: int) -> str:
    """Deterministic filler text: distinct facts so prompts do not share a prefix by accident."""
    words = ["river", "castle", "engine", "garden", "harbor", "violin", "glacier", "market", "lantern", "orchard"]
    out = []
    for i in range(sentences):
        a, b = words[(seed * 7 + i) % 10], words[(seed * 3 + 2 * i + 1) % 10]
        out.append(f"The {a} near station {seed * 100 + i} was built in {1700 + (seed * 37 + i * 11) % 300} beside the {b}.")
    return " ".join(out)


def prompts(count: int, sentences: int) -> list[str]:
    return [f"Document {k}: {passage(k, sentences)}\n\nQuestion: When was the {['river', 'castle'][k % 2]} built?\nAnswer:"
            for k in range(count)]


def dsp_once(lm: LlamaCpp, text: str, max_tokens: int) -> int:
    before = lm.usage.total_tokens
    lm(text, cache=False, temperature=0.0, max_tokens=max_tokens, only_completed=False)
    return lm.usage.total_tokens - before


def raw_once(llm, text: str, max_tokens: int) -> int:
    return llm.create_completion(text, temperature=0.0, max_tokens=max_tokens)["usage"]["total_tokens"]


def timed(call, *args, **kwargs) -> tuple[object, float, float]:
    """(result, wall seconds, CPU seconds of this process: all its threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--long-rounds", type=int, default=2)
    parser.add_argument("--long-only", action="store_true", help="only part 3 (long prompts, flash attention)")
    args = parser.parse_args()
    if not args.long_only:
        short_prompts(args)
    long_prompts(args)


def long_prompts(args: argparse.Namespace) -> None:
    """Prompt evaluation of ~5,300 tokens with fused attention vs the default kernels."""
    # One sequence each: this part measures prompt evaluation, and 8k-token streams are large.
    models = {"default": LlamaCpp(n_ctx=8192, n_threads=args.threads, n_seq=1),
              "flash_attn": LlamaCpp(n_ctx=8192, n_threads=args.threads, flash_attn=True)}
    texts = [f"Document: {passage(200 + k, 250)}\n\nQuestion: When was the castle built?\nAnswer:"
             for k in range(args.long_rounds)]
    sizes = [len(models["default"].tokenize(t)) + 1 for t in texts]
    seconds = {name: 0.0 for name in models}
    answers: dict[str, list[str]] = {name: [] for name in models}
    for k, text in enumerate(texts):
        for name in (["default", "flash_attn"] if k % 2 == 0 else ["flash_attn", "default"]):
            lm = models[name]
            lm._forget_kv()
            out, wall, _ = timed(lm, text, cache=False, temperature=0.0, max_tokens=8, only_completed=False)
            seconds[name] += wall
            answers[name].append(out[0])
    tokens = sum(sizes)
    for name, wall in seconds.items():
        print(f"  long prompts, {name}: {len(texts)} prompts of {min(sizes)}-{max(sizes)} tokens (+8 generated) "
              f"in {wall:.1f} s = {tokens / wall:.0f} prompt tok/s")
    same = sum(a == b for a, b in zip(answers["default"], answers["flash_attn"]))
    print(f"flash_attn / default speed: {seconds['default'] / seconds['flash_attn']:.2f}x "
          f"(greedy answers equal on {same} of {len(texts)})")
    for lm in models.values():
        lm.close()


def short_prompts(args: argparse.Namespace) -> None:
    """Parts 1 and 2: throughput against raw llama_cpp, and prefix reuse for n draws."""

    lm = LlamaCpp(n_ctx=2048, n_threads=args.threads)
    raw = load_llama(lm.model_path, 2048, lm.n_threads, 512, verbose=False, extra_buffers=False)
    texts = prompts(args.prompts, 40)
    sizes = [len(lm.tokenize(t)) + 1 for t in texts]
    print(f"model {lm.model} ({lm.model_bytes / 1e6:.0f} MB), threads {lm.n_threads}, "
          f"{len(texts)} prompts of {min(sizes)}-{max(sizes)} tokens, greedy, max_tokens {args.max_tokens}")

    # Per prompt, one side then the other (order alternating), so that load from other processes on
    # this shared machine falls on both alike. Neither side reuses a prefix: the prompts differ from
    # their second token on.
    totals = {"dsp": [0, 0.0, 0.0], "raw": [0, 0.0, 0.0]}
    sides = {"dsp": (dsp_once, lm), "raw": (raw_once, raw)}
    for round_ in range(args.rounds):
        for i, text in enumerate(texts):
            order = ["dsp", "raw"] if (round_ + i) % 2 == 0 else ["raw", "dsp"]
            for name in order:
                call, model = sides[name]
                tokens, wall, cpu = timed(call, model, text, args.max_tokens)
                totals[name][0] += tokens
                totals[name][1] += wall
                totals[name][2] += cpu
    for name, (tokens, wall, cpu) in totals.items():
        print(f"  {name}: {tokens} tokens, {wall:.2f} s wall = {tokens / wall:.0f} tok/s, "
              f"{cpu:.2f} s CPU = {tokens / cpu:.0f} tok/CPU-s")
    (dt, dw, dc), (rt, rw, rc) = totals["dsp"], totals["raw"]
    print(f"throughput ratio dsp.LlamaCpp / raw llama_cpp: {(dt / dw) / (rt / rw):.2f}x wall, "
          f"{(dt / dc) / (rt / rc):.2f}x CPU (goal >= 0.95x)")

    # The two phases through dsp.LlamaCpp alone: prompt evaluation, then token-by-token generation.
    lm._forget_kv()
    _, wall, _ = timed(lm, texts[0], cache=False, max_tokens=1, only_completed=False)
    print(f"  dsp prompt evaluation: {sizes[0]} tokens in {wall:.2f} s = {sizes[0] / wall:.0f} tok/s")
    before = lm.usage.completion_tokens
    _, wall, _ = timed(lm, "Once upon a time", cache=False, max_tokens=96, only_completed=False)
    made = lm.usage.completion_tokens - before
    print(f"  dsp generation: {made} tokens in {wall:.2f} s = {made / wall:.0f} tok/s (5-token prompt)")

    # Self-consistency: n draws of one long prompt.
    long_prompt = f"Document: {passage(99, 75)}\n\nQuestion: When was the castle built?\nAnswer:"
    n_prompt = len(lm.tokenize(long_prompt)) + 1
    params = dict(temperature=0.7, max_tokens=16, stop=["\n"], cache=False, only_completed=False)

    lm._forget_kv()
    start = time.perf_counter()
    reused = lm(long_prompt, n=args.draws, **params)
    t_reuse = time.perf_counter() - start

    # The same seeded draws (n>1 is draws seeded seed, seed+1, ...), each from a cold KV cache.
    start = time.perf_counter()
    fresh = []
    for seed in range(args.draws):
        lm._forget_kv()
        fresh += lm(long_prompt, n=1, seed=seed, **params)
    t_fresh = time.perf_counter() - start
    same = "same" if reused == fresh else "DIFFERENT"
    print(f"self-consistency n={args.draws} on a {n_prompt}-token prompt: {t_reuse:.2f} s with prefix reuse, "
          f"{t_fresh:.2f} s re-evaluating each draw: {t_fresh / t_reuse:.1f}x faster ({same} completions)")

    # For reference: the same n draws through raw llama_cpp (its own prefix reuse re-decodes one token).
    raw.reset()
    raw._ctx.kv_cache_clear()
    start = time.perf_counter()
    for seed in range(args.draws):
        raw.create_completion(long_prompt, temperature=0.7, top_k=0, top_p=1.0, min_p=0.0, max_tokens=16,
                              stop=["\n"], seed=seed)
    print(f"  raw llama_cpp, {args.draws} seeded create_completion calls: {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
