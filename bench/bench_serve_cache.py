"""Benchmark: `python -m dsp.serve_lm` with llama-cpp-python's RAM prompt cache against without it.

    DSP_DATA_DIR=../shared/data .venv/bin/python bench/bench_serve_cache.py [--questions 12] [--grouped]

llama.cpp keeps one prompt's KV cache and reuses the longest prefix the next prompt shares with it. A
client that alternates two prompt families (DSPy, when its ChatAdapter's answer does not parse, asks again
through its JSONAdapter: other instructions before the same demos) loses that prefix on every request
and evaluates the whole prompt each time. The RAM cache (``--cache true``) keeps several prompts'
states and restores the one sharing the longest prefix. It needs ``--logits_all false``: with
llama_cpp.server's default (true) every cached state copies a row of logits per prompt token (Gemma:
1 MB a token) and the server is killed for memory within a few requests (seen with a 150 MB cache: 18
GB). Neither system asks the server for logprobs.

The anchor is the server as bench/peer/run.sh starts it (no cache), measured in the same run on the
same requests: for each of N SQuAD dev questions, the two families' prompts (four solved demos of three
paragraphs each, then the question's; ~3,000 tokens), in that order, greedy, the harness's 150 tokens.
Prints each server's wall time, the ratio, and how many of the 2N completions are identical;
``--grouped`` also sends the plain server the requests one family after the other, to tell how much its
answers depend on the previous prompt. The peer harness does not use the cache: its columns keep the
server their first units ran on (BENCHMARKS.md has the figures and the reason).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "peer"))

from config import MODELS  # noqa: E402  (bench/peer on the path)

# llama-cpp-python's RAM cache of prompt states; logits for the last token only (see the module notes).
PROMPT_CACHE = ("--logits_all", "false", "--cache", "true", "--cache_type", "ram", "--cache_size", str(400 * 2**20))

# Two framings of the same demos, as DSPy's two adapters frame one signature.
FAMILIES = {
    "fields": ("Your input fields are:\n1. `context` (str)\n2. `question` (str)\nYour output fields are:\n"
               "1. `answer` (str)\nRespond with the corresponding output fields, starting with the field "
               "`[[ ## answer ## ]]`, and then ending with the marker for `[[ ## completed ## ]]`.\n\n",
               "[[ ## context ## ]]\n{context}\n\n[[ ## question ## ]]\n{question}\n\n[[ ## answer ## ]]\n{answer}"),
    "json": ("Your input fields are `context` and `question`. Your output is a JSON object with the key "
             "`answer`.\nOutputs will be a JSON object with the following fields.\n{\n  \"answer\": \"{answer}\"\n}"
             "\n\n",
             "context: {context}\nquestion: {question}\n{{\"answer\": \"{answer}\"}}"),
}


def squad_items(n: int) -> list[dict[str, str]]:
    """The first `n` SQuAD dev questions with one question per paragraph: context, question, answer."""
    data_dir = os.environ.get("DSP_DATA_DIR")
    if not data_dir:
        sys.exit("set DSP_DATA_DIR to the data folder (../shared/data)")
    path = Path(data_dir) / "squad" / "squad_v1.1_dev_rebuilt.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        articles = json.load(f)["data"]
    items = []
    for article in articles:
        # The harness retrieves 3 passages a question: the question's paragraph and the next two.
        paragraphs = [p["context"] for p in article["paragraphs"][:3]]
        qa = article["paragraphs"][0]["qas"][0]
        items.append({"context": "\n".join(f"[{i + 1}] {text}" for i, text in enumerate(paragraphs)),
                      "question": qa["question"], "answer": qa["answers"][0]["text"]})
        if len(items) == n:
            break
    return items


def prompts(items: list[dict[str, str]], demos: int = 4) -> list[str]:
    """Per question, one prompt of each family: its instructions, the same `demos` solved demos, the question."""
    shots, questions = items[:demos], items[demos:]
    out = []
    for item in questions:
        for head, shape in FAMILIES.values():
            solved = "\n\n".join(shape.format(**demo) for demo in shots)
            out.append(head + solved + "\n\n" + shape.format(**{**item, "answer": ""}).rstrip())
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(model: str, extra: tuple[str, ...], threads: int, texts: list[str]) -> tuple[float, list[str]]:
    """Start dsp.serve_lm with `extra`, send `texts` one by one (chat, greedy, 150 tokens), stop it;
    the wall seconds of the requests and the completions."""
    port = _free_port()
    spec = MODELS[model]
    args = [sys.executable, "-m", "dsp.serve_lm", "--host", "127.0.0.1", "--port", str(port), *spec.serve_args,
            "--model_alias", spec.alias, "--n_threads", str(threads), *extra]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                if server.poll() is not None:
                    sys.exit(f"the server exited ({server.returncode}): {' '.join(args)}")
                time.sleep(0.5)
        answers, started = [], time.perf_counter()
        for text in texts:
            body = {"model": spec.alias, "messages": [{"role": "user", "content": text}],
                    "temperature": 0.0, "max_tokens": 150}
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                             json.dumps(body).encode(), {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=900) as reply:
                answers.append(json.load(reply)["choices"][0]["message"]["content"])
        return time.perf_counter() - started, answers
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--model", default="gemma", choices=sorted(MODELS))
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--cache-args", help="the cached server's extra arguments instead of PROMPT_CACHE")
    parser.add_argument("--grouped", action="store_true",
                        help="also send the plain server the requests grouped by family (order dependence)")
    args = parser.parse_args()
    texts = prompts(squad_items(args.questions + 4))
    base = MODELS[args.model].server
    cached = base + (tuple(args.cache_args.split()) if args.cache_args else PROMPT_CACHE)
    print(f"{len(texts)} requests ({args.questions} questions x {len(FAMILIES)} families, alternating), "
          f"{args.model}, {args.threads} threads")
    plain_s, plain = serve(args.model, base, args.threads, texts)
    print(f"without the cache {' '.join(base)}: {plain_s:.1f} s ({plain_s / len(texts):.1f} s a request)")
    cache_s, with_cache = serve(args.model, cached, args.threads, texts)
    print(f"with the cache {' '.join(cached)}: {cache_s:.1f} s ({cache_s / len(texts):.1f} s a request)")
    if args.grouped:
        # The same requests to the plain server, one family after the other: how much its greedy answers
        # already depend on which prompt came before (its one-prompt prefix reuse).
        order = [i for i in range(len(texts)) if i % 2 == 0] + [i for i in range(len(texts)) if i % 2]
        grouped_s, grouped = serve(args.model, base, args.threads, [texts[i] for i in order])
        again = dict(zip(order, grouped))
        print(f"without the cache, grouped by family: {grouped_s:.1f} s; identical to its alternating "
              f"answers: {sum(again[i] == plain[i] for i in range(len(texts)))} of {len(texts)}, to the "
              f"cache's: {sum(again[i] == with_cache[i] for i in range(len(texts)))}")
    same = sum(a == b for a, b in zip(plain, with_cache))
    print(f"speed-up (without / with): {plain_s / cache_s:.2f}x; identical completions: {same} of {len(texts)}")
    for i, (a, b) in enumerate(zip(plain, with_cache)):
        if a != b:
            print(f"  request {i}: without {a[:60]!r}\n  {' ' * len(str(i))}           with {b[:60]!r}")


if __name__ == "__main__":
    main()
