"""Benchmark: serving two alternating prompt families -- one `python -m dsp.serve_lm` (the anchor), two
behind the peer harness's gate routing by shared prefix, one with llama-cpp-python's RAM prompt cache.

    DSP_DATA_DIR=../shared/data .venv/bin/python bench/bench_serve_cache.py [--questions 12] \
        [--variants routed,cache,grouped]

llama.cpp keeps one prompt's KV cache and reuses the longest prefix the next prompt shares with it. A
client that alternates two prompt families (DSPy, when its ChatAdapter's answer does not parse, asks again
through its JSONAdapter: other instructions before the same demos) loses that prefix on every request
and evaluates the whole prompt each time. Two ways back:

- ``routed``: two plain servers behind bench/peer/gate.py, whose router sends each prompt to the server
  whose last prompt shares the longest prefix with it, one generation at a time: each family settles
  on a server of its own.
- ``cache``: one server with the RAM cache (``--cache true``), which keeps several prompts' states and
  restores the one sharing the longest prefix. It needs ``--logits_all false``: with llama_cpp.server's
  default (true) every cached state copies a row of logits per prompt token (Gemma: 1 MB a token) and the
  server is killed for memory within a few requests (seen with a 150 MB cache: 18 GB).
- ``grouped``: the plain server, the requests one family after the other: how much its answers depend
  on the previous prompt.

The anchor is one server as bench/peer/run.sh starts it (no cache), measured in the same run on the same
requests, all through the gate (its generation policy): for each of N SQuAD dev questions, the two
families' prompts (four solved demos of three paragraphs each, then the question's; ~3,000 tokens), in
that order, greedy, the harness's 150 tokens. Prints each variant's wall time, the ratio, and how many of
the 2N completions are identical to the anchor's. BENCHMARKS.md has the figures, and why the harness
routes over two servers and leaves the cache off.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "peer"))

from config import MODELS  # noqa: E402  (bench/peer on the path)
from gate import POLICY, Gate  # noqa: E402

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


def _start(model: str, extra: tuple[str, ...], threads: int) -> tuple[subprocess.Popen, str]:
    """dsp.serve_lm with the column's arguments and `extra`, answering; (process, URL)."""
    port = _free_port()
    spec = MODELS[model]
    args = [sys.executable, "-m", "dsp.serve_lm", "--host", "127.0.0.1", "--port", str(port), *spec.serve_args,
            "--model_alias", spec.alias, "--n_threads", str(threads), *extra]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if server.poll() is not None:
                sys.exit(f"the server exited ({server.returncode}): {' '.join(args)}")
            time.sleep(0.5)
    server.terminate()
    sys.exit(f"the server did not answer within 120 s: {' '.join(args)}")


def serve(model: str, extra: tuple[str, ...], threads: int, texts: list[str],
          servers: int = 1) -> tuple[float, list[str], list[int]]:
    """Start `servers` dsp.serve_lm with `extra` behind the harness's gate (its generation policy, its
    router), send `texts` one by one (chat, greedy, 150 tokens), stop them; the wall seconds of the
    requests, the completions, and how many requests each server answered."""
    processes, urls = [], []
    try:
        for _ in range(servers):
            process, url = _start(model, extra, threads)
            processes.append(process)
            urls.append(url)
        front = Gate(0, urls, "http://127.0.0.1:9")  # no RM behind it: the bench asks none
        threading.Thread(target=front.serve_forever, daemon=True).start()
        endpoint = f"http://127.0.0.1:{front.server_address[1]}/lm/v1/chat/completions"
        answers, started = [], time.perf_counter()
        for text in texts:
            body = {"model": MODELS[model].alias, "messages": [{"role": "user", "content": text}],
                    "temperature": 0.0, "max_tokens": 150}
            request = urllib.request.Request(endpoint, json.dumps(body).encode(), {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=900) as reply:
                answers.append(json.load(reply)["choices"][0]["message"]["content"])
        seconds = time.perf_counter() - started
        front.shutdown()
        front.server_close()
        return seconds, answers, list(front.stats["lm_servers"])
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


def _differences(anchor: list[str], other: list[str]) -> None:
    for i, (a, b) in enumerate(zip(anchor, other)):
        if a != b:
            print(f"  request {i}: plain {a[:60]!r}\n  {' ' * len(str(i))}        other {b[:60]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--model", default="gemma", choices=sorted(MODELS))
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--cache-args", help="the cached server's extra arguments instead of PROMPT_CACHE")
    parser.add_argument("--variants", default="routed,cache",
                        help="comma list, measured against the plain server: routed (two plain servers behind the "
                             "gate's router), cache (the RAM prompt cache), grouped (the plain server, the requests "
                             "one family after the other)")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - {"routed", "cache", "grouped"})
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (routed, cache, grouped)")
    texts = prompts(squad_items(args.questions + 4))
    base = MODELS[args.model].server
    print(f"{len(texts)} requests ({args.questions} questions x {len(FAMILIES)} families, alternating), "
          f"{args.model}, {args.threads} threads, through the gate (policy {POLICY})")
    plain_s, plain, _ = serve(args.model, base, args.threads, texts)
    print(f"plain, one server {' '.join(base)}: {plain_s:.1f} s ({plain_s / len(texts):.1f} s a request)")
    for variant in variants:
        if variant == "grouped":
            # The plain server, one family after the other: how much its greedy answers already depend
            # on which prompt came before (its one-prompt prefix reuse).
            order = [i for i in range(len(texts)) if i % 2 == 0] + [i for i in range(len(texts)) if i % 2]
            seconds, grouped, _ = serve(args.model, base, args.threads, [texts[i] for i in order])
            again = dict(zip(order, grouped))
            answers = [again[i] for i in range(len(texts))]
            label = "plain, one server, grouped by family"
        elif variant == "routed":
            seconds, answers, counts = serve(args.model, base, args.threads, texts, servers=2)
            label = f"two plain servers, routed by shared prefix (requests per server {counts})"
        else:
            cached = base + (tuple(args.cache_args.split()) if args.cache_args else PROMPT_CACHE)
            seconds, answers, _ = serve(args.model, cached, args.threads, texts)
            label = f"one server with the RAM cache {' '.join(cached)}"
        same = sum(a == b for a, b in zip(plain, answers))
        print(f"{label}: {seconds:.1f} s ({seconds / len(texts):.1f} s a request); plain / this "
              f"{plain_s / seconds:.2f}x; completions identical to plain's: {same} of {len(texts)}")
        _differences(plain, answers)


if __name__ == "__main__":
    main()
