"""Benchmark: retrieval at scale. Build time, peak memory and query latency of bm25s (dsp.BM25), faiss flat and
IVF (dsp.DenseRM's two index kinds) and Milvus Lite (dsp.MilvusRM, BM25) at 15k, 100k and 1M passages,
with ratios against bm25s measured in the same run.

The corpus of each size is the Wikipedia-2018 sample (14,808 passages) plus synthetic passages made by
recombining the sample's words (seeded): each takes the title and the length of a random sample passage and
draws its words from the sample's word frequencies. The sample stays in every corpus, so the first NQ
questions keep their gold passages: recall@1/20 is measured at every size, among more distractors.

faiss needs vectors, and embedding 1M passages with E5 takes days on 2 cores: faiss is measured on
synthetic 384-d unit vectors (E5-small's size) around 1,024 seeded centroids, queries being noisy copies
of corpus vectors (top-1 = finding the source). That measures the engine, not retrieval quality.

Each system runs in a fresh child process; peak memory is the growth of its peak RSS over the child's
baseline after imports (reading or generating the data included: what using it costs). Times are given
as wall and as CPU seconds of the whole process (all threads): on a machine shared with other jobs, CPU
time is the steadier figure, and the ratios against bm25s are taken on it. Milvus Lite runs
in-process (threads), so its memory is the child's too. A system that does not finish within its time
budget is killed and reported as not measured; for Milvus, the rows its ingest got in are counted (a rerun
would resume).

    DSP_DATA_DIR=../shared/data .venv/bin/python bench/bench_scale.py                    # 15k and 100k
    DSP_DATA_DIR=../shared/data .venv/bin/python bench/bench_scale.py --sizes 1000000 --budget 600
    DSP_DATA_DIR=../shared/data .venv/bin/python bench/bench_scale.py --sizes 1000000 --systems milvus-lite \
        --resume --queries 50        # the 1M Milvus database of the run before: resume (finish) it and query

Needs the [milvus] extra. Figures are wall-clock on this machine; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_bm25 import _nq_questions as nq_questions  # noqa: E402  (bench/ is this script's sys.path[0])

SYSTEMS = ("bm25s", "milvus-lite", "faiss-flat", "faiss-ivf")
DIM = 384


def _peak_mb() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, it starts afresh at exec, not at the parent's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def make_corpus(data: Path, size: int, work: Path, seed: int = 0) -> Path:
    """The sample plus synthetic passages up to `size`, as JSONL (written once per size and seed)."""
    path = work / f"wiki2018+synthetic-{size}-seed{seed}.jsonl"
    if path.exists():
        return path
    import numpy as np

    from dsp.datasets.corpus import read_passages

    sample = read_passages(data / "wiki2018/passages.jsonl.gz")
    counts: dict[str, int] = {}
    for p in sample:
        for word in p["text"].split():
            counts[word] = counts.get(word, 0) + 1
    vocab = np.array(list(counts))
    probs = np.array(list(counts.values()), dtype=np.float64)
    probs /= probs.sum()
    lengths = [len(p["text"].split()) for p in sample]
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        for p in sample:
            out.write(json.dumps(p, ensure_ascii=False) + "\n")
        made = 0
        while made < size - len(sample):
            chunk = min(10_000, size - len(sample) - made)
            templates = rng.integers(0, len(sample), chunk)
            words = vocab[rng.choice(len(vocab), size=sum(lengths[t] for t in templates), p=probs)]
            at = 0
            for i, t in enumerate(templates):
                text = " ".join(words[at:at + lengths[t]])
                at += lengths[t]
                out.write(json.dumps({"id": f"synthetic-{made + i}", "title": sample[t]["title"], "text": text},
                                     ensure_ascii=False) + "\n")
            made += chunk
    tmp.replace(path)
    return path


def _latency(search, queries: list) -> tuple[list, dict]:
    """Each query searched one at a time: (results, {median_ms, p95_ms, cpu_ms}); cpu_ms is the process's CPU
    time per query (every thread's: Milvus Lite's server threads included), which a busy machine inflates
    far less than wall time."""
    results, times = [], []
    cpu = time.process_time()
    for query in queries:
        start = time.perf_counter()
        results.append(search(query))
        times.append((time.perf_counter() - start) * 1000)
    cpu_ms = (time.process_time() - cpu) * 1000 / len(queries)
    times.sort()
    return results, {"median_ms": statistics.median(times), "p95_ms": times[int(0.95 * (len(times) - 1))],
                     "cpu_ms": cpu_ms}


class _Clock:
    """Wall and CPU seconds (all threads) of a block: `with _Clock() as clock: ...; clock.wall, clock.cpu`."""

    def __enter__(self) -> "_Clock":
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self._wall, time.process_time() - self._cpu


def _recall(ranked: list[list[tuple[str, str]]], golds: list[tuple[str, str]]) -> dict:
    return {f"R@{k}": sum(g in r[:k] for r, g in zip(ranked, golds)) / len(golds) for k in (1, 20)}


# -- workers (each in a child process) -------------------------------------------------------------------

def worker_bm25s(corpus: Path, questions: list, work: Path) -> dict:
    from dsp.clients.bm25 import BM25

    base = _peak_mb()
    with _Clock() as build:
        rm = BM25(corpus)  # reads the file into memory, then indexes it: both are what dsp.BM25 costs
    hits, latency = _latency(lambda q: rm(q, k=20, cache=False), [q for q, _ in questions])
    return {"build_s": build.wall, "build_cpu_s": build.cpu, "peak_mb": _peak_mb() - base, **latency,
            **_recall([[(p.title, p.text) for p in h] for h in hits], [g for _, g in questions])}


def worker_milvus(corpus: Path, questions: list, work: Path, resume: bool = False) -> dict:
    from dsp.clients.milvus import MilvusRM

    db = work / f"{corpus.stem}.db"
    if not resume:
        shutil.rmtree(db, ignore_errors=True)
    base = _peak_mb()
    with _Clock() as build:
        rm = MilvusRM.build(corpus, str(db), batch_size=2000)  # streams the file: never all in memory
    with _Clock() as first:
        rm("warm up", k=1, cache=False)  # the first search loads the BM25 index from disk
    hits, latency = _latency(lambda q: rm(q, k=20, cache=False), [q for q, _ in questions])
    disk = sum(f.stat().st_size for f in db.rglob("*") if f.is_file())
    return {"build_s": build.wall, "build_cpu_s": build.cpu, "first_query_s": first.wall,
            "peak_mb": _peak_mb() - base, "disk_mb": disk / 2**20,
            **latency, **_recall([[(p.title, p.text) for p in h] for h in hits], [g for _, g in questions])}


def milvus_rows(corpus: Path, work: Path) -> dict:
    """How many passages an interrupted Milvus ingest got in (the collection is there, unfinished)."""
    from pymilvus import MilvusClient

    client = MilvusClient(str((work / f"{corpus.stem}.db").resolve()))
    client.load_collection("passages")
    return {"rows": client.query("passages", filter="", output_fields=["count(*)"])[0]["count(*)"]}


def _vectors(n: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    centroids = rng.standard_normal((1024, DIM)).astype(np.float32)
    vectors = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):
        stop = min(n, start + 100_000)
        vectors[start:stop] = centroids[rng.integers(0, 1024, stop - start)]
        vectors[start:stop] += rng.standard_normal((stop - start, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    sources = rng.choice(n, 200, replace=False)
    queries = vectors[sources] + 0.05 * rng.standard_normal((200, DIM)).astype(np.float32)
    return vectors, queries / np.linalg.norm(queries, axis=1, keepdims=True), sources


def worker_faiss(kind: str, n: int) -> dict:
    import faiss
    import numpy as np

    from dsp.clients.dense import default_nlist, default_nprobe

    # One thread: on a busy machine OpenMP threads spin waiting for each other, billing a one-vector search many
    # times its work (flat at 15k: 13 ms CPU with two threads).
    faiss.omp_set_num_threads(1)
    base = _peak_mb()
    vectors, queries, sources = _vectors(n)
    clock = _Clock().__enter__()
    if kind == "flat":
        index = faiss.IndexFlatIP(DIM)
    else:  # as DenseRM builds it: nlist ~ 4 sqrt(N), trained on a seeded sample of 40 per list
        nlist = default_nlist(n)
        quantizer = faiss.IndexFlatIP(DIM)
        index = faiss.IndexIVFFlat(quantizer, DIM, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = 0
        sample = vectors[np.sort(np.random.default_rng(0).choice(n, min(n, max(40 * nlist, 10_000)), replace=False))]
        index.train(sample)
        index.nprobe = default_nprobe(nlist)
    index.add(vectors)
    clock.__exit__()
    found, latency = _latency(lambda q: index.search(q[None, :], 20)[1][0], list(queries))
    top1 = sum(int(f[0]) == int(s) for f, s in zip(found, sources)) / len(sources)
    return {"build_s": clock.wall, "build_cpu_s": clock.cpu, "peak_mb": _peak_mb() - base, **latency, "top1": top1}


def _worker(args: argparse.Namespace) -> None:
    data, work = Path(os.environ["DSP_DATA_DIR"]), Path(args.work)
    questions = nq_questions(data, args.queries)
    if args.worker == "bm25s":
        result = worker_bm25s(Path(args.corpus), questions, work)
    elif args.worker == "milvus-lite":
        result = worker_milvus(Path(args.corpus), questions, work, args.resume)
    elif args.worker == "milvus-rows":
        result = milvus_rows(Path(args.corpus), work)
    else:
        result = worker_faiss(args.worker.split("-")[1], args.size)
    print("RESULT " + json.dumps(result), flush=True)


# -- the driver ----------------------------------------------------------------------------------------

def _run(system: str, size: int, corpus: Path, args: argparse.Namespace, budget: float) -> dict:
    argv = [sys.executable, __file__, "--worker", system, "--corpus", str(corpus), "--size", str(size),
            "--queries", str(args.queries), "--work", args.work, *(["--resume"] if args.resume else [])]
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=budget)
    except subprocess.TimeoutExpired:
        result = {"not_measured": f"killed after {budget:.0f} s"}
        if system == "milvus-lite":
            rows = subprocess.run([*argv[:3], "milvus-rows", *argv[4:]], capture_output=True, text=True, timeout=600)
            got = [json.loads(line[7:]) for line in rows.stdout.splitlines() if line.startswith("RESULT ")]
            if got:  # every row in: the ingest finished within the budget, the queries did not
                result["rows_in"] = got[0]["rows"]
                result["ingest_per_s"] = None if got[0]["rows"] == size else got[0]["rows"] / budget
        return result
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{system} at {size}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return {**json.loads(lines[-1][7:]), "wall_s": time.perf_counter() - start}


def _print(size: int, results: dict) -> None:
    anchor = results.get("bm25s", {})
    print(f"\n{size:,} passages  (load average {os.getloadavg()[0]:.1f})")
    print("| system | build s (CPU s) | peak MB | query ms: median / p95 (CPU) | quality | "
          "vs bm25s: build CPU / memory / query CPU |")
    print("|---|---|---|---|---|---|")
    for system, r in results.items():
        if "not_measured" in r:
            rate = "all: the ingest finished" if r.get("ingest_per_s") is None else f"{r['ingest_per_s']:.0f}/s"
            extra = f"; {r['rows_in']:,} passages in ({rate})" if "rows_in" in r else ""
            print(f"| {system} | not measured: {r['not_measured']}{extra} | | | | |")
            continue
        quality = (f"R@1 {r['R@1']:.3f}, R@20 {r['R@20']:.3f}" if "R@1" in r else f"top-1 {r['top1']:.3f}")
        ratio = ""
        if "build_s" in anchor and system != "bm25s":
            ratio = (f"{r['build_cpu_s'] / anchor['build_cpu_s']:.2f}x / "
                     f"{r['peak_mb'] / max(anchor['peak_mb'], 1):.2f}x / {r['cpu_ms'] / anchor['cpu_ms']:.2f}x")
        extra = f"; first query {r['first_query_s']:.1f} s, disk {r['disk_mb']:.0f} MB" if "disk_mb" in r else ""
        print(f"| {system} | {r['build_s']:.1f} ({r['build_cpu_s']:.1f}{extra}) | {r['peak_mb']:,.0f} | "
              f"{r['median_ms']:.2f} / {r['p95_ms']:.2f} ({r['cpu_ms']:.2f}) | {quality} | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="14808,100000", help="corpus sizes (14808: the sample alone)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--queries", type=int, default=200, help="NQ questions (and vector queries) per system")
    parser.add_argument("--budget", type=float, default=1800, help="seconds a system may take at one size")
    parser.add_argument("--work", default=str(ROOT / "runs" / "bench-scale"), help="corpora and databases")
    parser.add_argument("--resume", action="store_true",
                        help="milvus-lite: keep the database of an earlier run, whose ingest then resumes (or "
                             "finds it complete) instead of starting afresh")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args)
    data = Path(os.environ.get("DSP_DATA_DIR") or sys.exit("set DSP_DATA_DIR (the shared data)"))
    Path(args.work).mkdir(parents=True, exist_ok=True)
    everything = {}
    for size in (int(s) for s in args.sizes.split(",")):
        start = time.perf_counter()
        corpus = make_corpus(data, size, Path(args.work))
        print(f"corpus of {size:,}: {corpus} ({time.perf_counter() - start:.0f} s)", flush=True)
        results = {}
        for system in args.systems.split(","):
            results[system] = _run(system, size, corpus, args, args.budget)
            print(f"  {system}: {results[system]}", flush=True)
        everything[size] = results
        _print(size, results)
    out = Path(args.work) / f"results-{int(time.time())}.json"
    out.write_text(json.dumps(everything, indent=1))
    print(f"\nraw figures: {out}")


if __name__ == "__main__":
    main()
