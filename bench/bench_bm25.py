"""Benchmark: dsp.BM25 (bm25s) vs rank_bm25 on the Wikipedia-2018 sample and on a 1M-passage synthetic
corpus, and DenseRM flat vs IVF.

Each measurement runs in a fresh child process, so peak memory (ru_maxrss) is its own: it is reported
as the growth of the peak over the child's baseline after the passages were read.

    DSP_DATA_DIR=../shared/data .venv/bin/python bench/bench_bm25.py                 # all (~15 min)
    DSP_DATA_DIR=../shared/data .venv/bin/python bench/bench_bm25.py --dense-n 100000
    .venv/bin/python bench/bench_bm25.py --skip-bm25 --skip-synthetic --dense-n 1000000
    .venv/bin/python bench/bench_bm25.py --skip-bm25 --skip-dense --synthetic-n 1000000

The synthetic corpus (--synthetic-n passages, default 1,000,000) has 40-word passages drawn from a
Zipfian vocabulary of 50,000 made-up words plus a topic of 10 rarer words each; a query is 6 words of one
passage (its "gold"). rank_bm25 scores every passage in Python per query term, so on 1M passages it
is measured on a subsample of the queries (--synthetic-rank-bm25-queries) and said so.

Needs `pip install rank_bm25` for the comparison (skipped with a note when it is missing).
Figures are wall-clock on this machine; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _nq_questions(data: Path, n: int) -> list[tuple[str, tuple[str, str]]]:
    out = []
    with gzip.open(data / "litm/nq-open-oracle.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            gold = next(c for c in record["ctxs"] if c.get("isgold"))
            out.append((record["question"], (gold["title"], gold["text"])))
            if len(out) == n:
                break
    return out


def _recall(ranked: list[list[tuple[str, str]]], golds: list[tuple[str, str]], k: int) -> float:
    return sum(g in r[:k] for r, g in zip(ranked, golds)) / len(golds)


# -- workers (run in child processes) ----------------------------------------------------------------

def worker_dsp(data: Path, n_queries: int) -> dict:
    from dsp.clients.bm25 import BM25
    from dsp.datasets.corpus import read_passages

    passages = read_passages(data / "wiki2018/passages.jsonl.gz")
    questions = _nq_questions(data, n_queries)
    base = _peak_mb()
    start = time.perf_counter()
    rm = BM25(passages)
    index_s = time.perf_counter() - start
    peak = _peak_mb() - base
    queries = [q for q, _ in questions]
    start = time.perf_counter()
    single = [rm(q, k=20, cache=False) for q in queries]
    single_qps = len(queries) / (time.perf_counter() - start)
    start = time.perf_counter()
    batch = rm.search_batch(queries, k=20)
    batch_qps = len(queries) / (time.perf_counter() - start)
    ranked = [[(p.title, p.text) for p in r] for r in batch]
    golds = [g for _, g in questions]
    if [[p.id for p in r] for r in single] != [[p.id for p in r] for r in batch]:
        raise RuntimeError("single and batch results differ")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        rm.save(tmp)
        start = time.perf_counter()
        loaded = BM25.load(tmp, mmap=True)
        load_s = time.perf_counter() - start
        loaded.search_batch(queries[:10], k=5)
    return {"system": "dsp.BM25 (bm25s)", "index_s": index_s, "peak_mb": peak, "qps_single": single_qps,
            "qps_batch": batch_qps, "mmap_load_s": load_s,
            **{f"recall@{k}": _recall(ranked, golds, k) for k in (1, 5, 20)}}


def worker_rank_bm25(data: Path, n_queries: int) -> dict:
    import bm25s
    import numpy as np
    import Stemmer
    from rank_bm25 import BM25Okapi

    from dsp.datasets.corpus import read_passages

    passages = read_passages(data / "wiki2018/passages.jsonl.gz")
    questions = _nq_questions(data, n_queries)
    stemmer = Stemmer.Stemmer("english")

    def tokenize(texts: list[str]) -> list[list[str]]:
        # The same tokens as dsp.BM25 (bm25s split, English stopwords, Snowball stems): a fair comparison.
        return bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)

    base = _peak_mb()
    start = time.perf_counter()
    model = BM25Okapi(tokenize([f"{p['title']} {p['text']}" for p in passages]))
    index_s = time.perf_counter() - start
    peak = _peak_mb() - base
    ranked = []
    start = time.perf_counter()
    for question, _ in questions:
        scores = model.get_scores(tokenize([question])[0])
        top = np.argsort(-scores, kind="stable")[:20]
        ranked.append([(passages[i]["title"], passages[i]["text"]) for i in top])
    qps = len(questions) / (time.perf_counter() - start)
    golds = [g for _, g in questions]
    return {"system": "rank_bm25.BM25Okapi", "index_s": index_s, "peak_mb": peak, "qps_single": qps,
            **{f"recall@{k}": _recall(ranked, golds, k) for k in (1, 5, 20)}}


def synthetic_corpus(path: Path, n: int) -> None:
    """Write the synthetic corpus (JSONL) and its queries (path + ".queries.json")."""
    rng = random.Random(0)
    vocab = [f"w{i}x{(i * 7919) % 997}" for i in range(50_000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]  # Zipf: a few very common words
    cumulative, total = [], 0.0
    for weight in weights:
        total += weight
        cumulative.append(total)
    queries = []
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            words = rng.choices(vocab, cum_weights=cumulative, k=30)
            topic = rng.randrange(n // 20 + 1)
            words += [f"t{topic}r{j}" for j in rng.sample(range(40), 10)]
            rng.shuffle(words)
            out.write(json.dumps({"id": str(i), "title": "", "text": " ".join(words)}) + "\n")
            if i % max(1, n // 2000) == 0:
                queries.append((" ".join(rng.sample(words, 6)), str(i)))
    Path(str(path) + ".queries.json").write_text(json.dumps(queries), encoding="utf-8")


def worker_synthetic_dsp(path: Path, n_queries: int) -> dict:
    from dsp.clients.bm25 import BM25
    from dsp.datasets.corpus import read_passages

    passages = read_passages(path)
    queries = json.loads(Path(str(path) + ".queries.json").read_text())[:n_queries]
    base = _peak_mb()
    start = time.perf_counter()
    rm = BM25(passages)
    index_s = time.perf_counter() - start
    peak = _peak_mb() - base
    texts = [q for q, _ in queries]
    start = time.perf_counter()
    single = [rm(q, k=10, cache=False) for q in texts]
    single_qps = len(texts) / (time.perf_counter() - start)
    start = time.perf_counter()
    rm.search_batch(texts, k=10)
    batch_qps = len(texts) / (time.perf_counter() - start)
    hit1 = sum(r[0].id == gold for r, (_, gold) in zip(single, queries)) / len(queries)
    return {"system": "dsp.BM25 (bm25s)", "n": len(passages), "queries": len(texts), "index_s": index_s,
            "peak_mb": peak, "qps_single": single_qps, "qps_batch": batch_qps, "gold@1": hit1}


def worker_synthetic_rank_bm25(path: Path, n_queries: int) -> dict:
    import bm25s
    import numpy as np
    import Stemmer
    from rank_bm25 import BM25Okapi

    from dsp.datasets.corpus import read_passages

    passages = read_passages(path)
    queries = json.loads(Path(str(path) + ".queries.json").read_text())[:n_queries]
    stemmer = Stemmer.Stemmer("english")
    base = _peak_mb()
    start = time.perf_counter()
    # The same tokens as dsp.BM25; ids mapped back to one shared string per word (kinder to rank_bm25's memory).
    tokenized = bm25s.tokenize([p["text"] for p in passages], stopwords="en", stemmer=stemmer, return_ids=True,
                               show_progress=False)
    words = {i: w for w, i in tokenized.vocab.items()}
    model = BM25Okapi([[words[i] for i in doc] for doc in tokenized.ids])
    index_s = time.perf_counter() - start
    peak = _peak_mb() - base
    hits = 0
    start = time.perf_counter()
    for text, gold in queries:
        query = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)[0]
        scores = model.get_scores(query)
        hits += passages[int(np.argmax(scores))]["id"] == gold
    qps = len(queries) / (time.perf_counter() - start)
    return {"system": "rank_bm25.BM25Okapi", "n": len(passages), "queries": len(queries), "index_s": index_s,
            "peak_mb": peak, "qps_single": qps, "gold@1": hits / len(queries)}


def worker_dense(n: int, n_queries: int, dim: int) -> dict:
    import numpy as np

    from dsp.clients.dense import DenseRM
    from dsp.clients.vectorizers import HashingVectorizer

    rng = random.Random(0)
    n_topics = max(50, int(math.sqrt(n)))
    topics = [[f"t{t}w{i}" for i in range(30)] for t in range(n_topics)]
    common = [f"c{i}" for i in range(5000)]
    passages, queries = [], []
    for i in range(n):
        words = rng.sample(topics[rng.randrange(n_topics)], 10) + rng.sample(common, 10)
        passages.append(" ".join(words))
        if i < n_queries:
            queries.append(" ".join(rng.sample(words, 12)))
    vectorizer = HashingVectorizer(dim=dim)
    start = time.perf_counter()
    vectorizer.embed_passages(passages)
    embed_s = time.perf_counter() - start
    out = {"system": f"DenseRM synthetic N={n:,} dim={dim}", "embed_s": embed_s}
    results = {}
    for kind in ("flat", "ivf"):
        base = _peak_mb()
        start = time.perf_counter()
        rm = DenseRM(passages, vectorizer, index=kind)
        build = time.perf_counter() - start - embed_s  # DenseRM embeds again (hashing is not cached)
        peak = _peak_mb() - base
        start = time.perf_counter()
        hits = rm.search_batch(queries, k=10)
        qps = len(queries) / (time.perf_counter() - start)
        results[kind] = hits
        out[kind] = {"build_s": max(build, 0.0), "peak_mb": peak, "qps_batch": qps,
                     "top1_hit": float(np.mean([h[0].id == i for i, h in enumerate(hits)]))}
        if kind == "ivf":
            out[kind].update(nlist=rm.nlist, nprobe=rm.nprobe)
        del rm
    agree = [a[0].id == b[0].id for a, b in zip(results["flat"], results["ivf"])]
    overlap = [len({p.id for p in a} & {p.id for p in b}) / 10 for a, b in zip(results["flat"], results["ivf"])]
    out["ivf_vs_flat"] = {"top1_agreement": float(np.mean(agree)), "recall@10_of_flat": float(np.mean(overlap))}
    return out


# -- driver ------------------------------------------------------------------------------------------

def _child(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=1000, help="NQ questions for dsp.BM25 (default 1000)")
    parser.add_argument("--rank-bm25-queries", type=int, default=300, help="questions for rank_bm25 (slow)")
    parser.add_argument("--dense-n", type=int, default=100_000, help="synthetic passages for flat vs IVF")
    parser.add_argument("--dense-dim", type=int, default=256)
    parser.add_argument("--synthetic-n", type=int, default=1_000_000, help="passages of the synthetic corpus")
    parser.add_argument("--synthetic-queries", type=int, default=1000, help="queries for dsp.BM25 on it")
    parser.add_argument("--synthetic-rank-bm25-queries", type=int, default=20,
                        help="queries for rank_bm25 on it (seconds each at 1M passages)")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--skip-bm25", action="store_true")
    parser.add_argument("--skip-dense", action="store_true")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        kind, *rest = args.worker
        if kind == "synthetic_dsp":
            result = worker_synthetic_dsp(Path(rest[0]), int(rest[1]))
        elif kind == "synthetic_rank_bm25":
            result = worker_synthetic_rank_bm25(Path(rest[0]), int(rest[1]))
        elif kind == "dsp":
            result = worker_dsp(Path(rest[0]), int(rest[1]))
        elif kind == "rank_bm25":
            result = worker_rank_bm25(Path(rest[0]), int(rest[1]))
        else:
            result = worker_dense(int(rest[0]), int(rest[1]), int(rest[2]))
        print(json.dumps(result))
        return

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    if not args.skip_bm25:
        data = os.environ.get("DSP_DATA_DIR")
        if not data:
            sys.exit("set DSP_DATA_DIR to the shared data directory (wiki2018/, litm/)")
        ours = _child(["dsp", data, str(args.queries)])
        print(f"\n== BM25 on wiki2018 (14,808 passages), {args.queries} NQ queries for dsp, "
              f"{args.rank_bm25_queries} for rank_bm25, k=20")
        rows = [ours]
        try:
            import rank_bm25  # noqa: F401
        except ImportError:
            print("rank_bm25 is not installed (pip install rank_bm25): comparison skipped")
        else:
            rows.append(_child(["rank_bm25", data, str(args.rank_bm25_queries)]))
        print(f"{'system':24} {'index s':>8} {'peak MB':>8} {'q/s one':>9} {'q/s batch':>10} "
              f"{'R@1':>6} {'R@5':>6} {'R@20':>6}")
        for r in rows:
            batch = f"{r['qps_batch']:10.0f}" if "qps_batch" in r else f"{'-':>10}"
            print(f"{r['system']:24} {r['index_s']:8.2f} {r['peak_mb']:8.0f} {r['qps_single']:9.0f} {batch} "
                  f"{r['recall@1']:6.3f} {r['recall@5']:6.3f} {r['recall@20']:6.3f}")
        print(f"dsp.BM25 mmap load of the saved index: {ours['mmap_load_s'] * 1000:.0f} ms")
        if len(rows) == 2:
            other = rows[1]
            print(f"ratio dsp/rank_bm25: index {other['index_s'] / ours['index_s']:.1f}x faster, "
                  f"queries {ours['qps_single'] / other['qps_single']:.0f}x (one at a time), "
                  f"{ours['qps_batch'] / other['qps_single']:.0f}x (batch), "
                  f"peak memory {ours['peak_mb'] / max(other['peak_mb'], 1):.2f}x")
    if not args.skip_synthetic:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="dsp-bench-bm25-") as tmp:
            path = Path(tmp) / "synthetic.jsonl"
            start = time.perf_counter()
            synthetic_corpus(path, args.synthetic_n)
            print(f"\n== BM25 on a synthetic corpus of {args.synthetic_n:,} passages (written in "
                  f"{time.perf_counter() - start:.0f} s, {path.stat().st_size / 1e6:.0f} MB), k=10; "
                  f"load average {os.getloadavg()[0]:.2f}", flush=True)
            rows = [_child(["synthetic_dsp", str(path), str(args.synthetic_queries)])]
            try:
                import rank_bm25  # noqa: F401
            except ImportError:
                print("rank_bm25 is not installed (pip install rank_bm25): comparison skipped")
            else:
                rows.append(_child(["synthetic_rank_bm25", str(path), str(args.synthetic_rank_bm25_queries)]))
        print(f"{'system':24} {'queries':>8} {'index s':>8} {'peak MB':>8} {'q/s one':>9} {'q/s batch':>10} {'gold@1':>7}")
        for r in rows:
            batch = f"{r['qps_batch']:10.1f}" if "qps_batch" in r else f"{'-':>10}"
            print(f"{r['system']:24} {r['queries']:8} {r['index_s']:8.1f} {r['peak_mb']:8.0f} {r['qps_single']:9.2f} "
                  f"{batch} {r['gold@1']:7.3f}")
        if len(rows) == 2:
            ours, other = rows
            print(f"ratio dsp/rank_bm25 on {ours['n']:,} passages: queries {ours['qps_single'] / other['qps_single']:.0f}x "
                  f"(one at a time), {ours['qps_batch'] / other['qps_single']:.0f}x (batch) (goal >= 30x; rank_bm25 "
                  f"measured on {other['queries']} queries), index {other['index_s'] / ours['index_s']:.1f}x faster, "
                  f"peak memory {ours['peak_mb'] / max(other['peak_mb'], 1):.2f}x; load average {os.getloadavg()[0]:.2f}")
    if not args.skip_dense:
        n_queries = 1000
        dense = _child(["dense", str(args.dense_n), str(n_queries), str(args.dense_dim)])
        print(f"\n== {dense['system']} (HashingVectorizer; embedding took {dense['embed_s']:.1f} s), "
              f"{n_queries} queries, k=10")
        for kind in ("flat", "ivf"):
            r = dense[kind]
            extra = f"  nlist={r['nlist']} nprobe={r['nprobe']}" if kind == "ivf" else ""
            print(f"{kind:5} build {r['build_s']:6.2f} s  peak +{r['peak_mb']:5.0f} MB  {r['qps_batch']:8.0f} q/s  "
                  f"top-1 hit {r['top1_hit']:.3f}{extra}")
        agreement = dense["ivf_vs_flat"]
        print(f"IVF vs flat: top-1 agreement {agreement['top1_agreement']:.3f}, "
              f"recall@10 of flat's top 10 {agreement['recall@10_of_flat']:.3f}, "
              f"speed-up {dense['ivf']['qps_batch'] / dense['flat']['qps_batch']:.1f}x")


if __name__ == "__main__":
    main()
