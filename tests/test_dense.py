"""dsp.clients.dense.DenseRM: flat vs IVF, persistence, caching, and E5 retrieval on real passages."""

from __future__ import annotations

import gzip
import json
import os
import random

import numpy as np
import pytest

import dsp
from dsp.clients import dense
from dsp.clients.dense import DenseRM, default_nlist, default_nprobe
from dsp.clients.vectorizers import E5Vectorizer, HashingVectorizer
from dsp.datasets.corpus import read_passages

DATA_DIR = os.environ.get("DSP_DATA_DIR")


def topic_corpus(n: int, seed: int = 0) -> tuple[list[dict], list[str]]:
    """Synthetic passages with topical structure (as real text has), and one query per passage drawn
    from its own words, so the passage is the right answer to its query."""
    rng = random.Random(seed)
    topics = [[f"t{t}w{i}" for i in range(30)] for t in range(80)]
    common = [f"c{i}" for i in range(2000)]
    passages, queries = [], []
    for i in range(n):
        words = rng.sample(topics[rng.randrange(len(topics))], 10) + rng.sample(common, 10)
        passages.append({"id": f"s{i}", "title": "", "text": " ".join(words)})
        queries.append(" ".join(rng.sample(words, 12)))
    return passages, queries


@pytest.fixture(scope="module")
def synthetic():
    passages, queries = topic_corpus(6000)
    vectorizer = HashingVectorizer(dim=128)
    return passages, queries[:200], DenseRM(passages, vectorizer, index="flat"), DenseRM(passages, vectorizer, index="ivf")


def test_flat_and_ivf_agree_on_top1(synthetic):
    passages, queries, flat, ivf = synthetic
    assert flat.index_kind == "flat" and ivf.index_kind == "ivf"
    assert ivf.nlist == default_nlist(6000) == 310 and ivf.nprobe == default_nprobe(310)
    exact = flat.search_batch(queries, k=3)
    approx = ivf.search_batch(queries, k=3)
    hit_exact = np.mean([r[0].id == f"s{i}" for i, r in enumerate(exact)])
    agree = np.mean([a[0].id == b[0].id for a, b in zip(exact, approx)])
    print(f"\nflat top-1 hit {hit_exact:.3f}; IVF (nlist={ivf.nlist}, nprobe={ivf.nprobe}) agrees with flat on top-1 for {agree:.3f}")
    assert hit_exact >= 0.95
    assert agree >= 0.85
    # Scores are cosines, best first; the same passage has the same score in both indexes.
    for a, b in zip(exact, approx):
        assert [p.score for p in a] == sorted((p.score for p in a), reverse=True)
        if a[0].id == b[0].id:
            assert a[0].score == pytest.approx(b[0].score, abs=1e-5)
    # Searching every list makes IVF exact.
    ivf.nprobe = ivf.nlist
    try:
        full = ivf.search_batch(queries[:50], k=1)
        assert [r[0].id for r in full] == [r[0].id for r in exact[:50]]
    finally:
        ivf.nprobe = default_nprobe(ivf.nlist)


def test_auto_switches_to_ivf_at_the_limit(monkeypatch):
    passages, _ = topic_corpus(400, seed=1)
    vectorizer = HashingVectorizer(dim=32)
    assert dense.FLAT_LIMIT == 50_000
    assert DenseRM(passages, vectorizer).index_kind == "flat"
    monkeypatch.setattr(dense, "FLAT_LIMIT", 400)
    rm = DenseRM(passages, vectorizer)
    assert rm.index_kind == "ivf" and rm.nlist == 80
    assert len(rm("t0w1 t0w2", k=5, cache=False)) == 5


def test_single_search_result_shape(synthetic):
    passages, queries, flat, _ = synthetic
    hits = flat(queries[7], k=4, cache=False)
    assert hits[0].id == "s7" and hits[0].text == passages[7]["text"]
    assert set(hits[0]) >= {"id", "title", "text", "score", "prob", "rank", "long_text"}
    assert sum(p.prob for p in hits) == pytest.approx(1.0)
    assert -1.0 <= hits[-1].score <= hits[0].score <= 1.0 + 1e-6


def test_k_beyond_corpus_and_errors():
    rm = DenseRM(["alpha beta", "gamma delta", "alpha gamma"], HashingVectorizer(dim=64), index="ivf", nlist=2)
    everything = rm("alpha", k=50, cache=False)
    assert sorted(p.id for p in everything) == [0, 1, 2]  # nprobe = nlist here: every list is searched
    with pytest.raises(ValueError, match="k must be positive"):
        rm("alpha", k=0)
    with pytest.raises(ValueError, match="empty"):
        rm("", k=1)
    with pytest.raises(ValueError, match="index must be"):
        DenseRM(["x"], HashingVectorizer(), index="hnsw")
    with pytest.raises(TypeError, match="dsp Vectorizer"):
        DenseRM(["x"], lambda texts: np.ones((len(texts), 2)))
    with pytest.raises(ValueError, match="nprobe must be"):
        rm.nprobe = 5
    with pytest.raises(ValueError, match="IVF index only"):
        DenseRM(["x"], HashingVectorizer(), index="flat").nprobe = 1


def test_default_vectorizer_is_settings_then_e5(tmp_path):
    with dsp.settings.context(vectorizer=HashingVectorizer(dim=16)):
        assert DenseRM(["one two", "three"]).vectorizer.dim == 16
    with dsp.settings.context(cache_dir=str(tmp_path / "cache")):
        rm = DenseRM(["The Eiffel Tower is in Paris.", "Bananas are rich in potassium."])
        assert isinstance(rm.vectorizer, E5Vectorizer) and rm.dim == 384
        assert rm("which fruit contains potassium", k=1, cache=False)[0].id == 1


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_save_load_round_trip(synthetic, tmp_path, kind):
    _, queries, flat, ivf = synthetic
    rm = flat if kind == "flat" else ivf
    rm.save(tmp_path / "idx")
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == [
        "index.faiss", "meta.json", "passages.jsonl", "passages.jsonl.offsets.npy"]
    for mmap in (True, False):
        loaded = DenseRM.load(tmp_path / "idx", mmap=mmap)  # vectorizer rebuilt from meta.json
        assert loaded.cache_identity() == rm.cache_identity()
        before, after = rm.search_batch(queries[:60], k=5), loaded.search_batch(queries[:60], k=5)
        assert [[(p.id, p.score) for p in r] for r in before] == [[(p.id, p.score) for p in r] for r in after]
    with pytest.raises(ValueError, match="not be comparable"):
        DenseRM.load(tmp_path / "idx", HashingVectorizer(dim=64))
    with pytest.raises(FileNotFoundError, match="not a saved dsp DenseRM index"):
        DenseRM.load(tmp_path)


def test_second_identical_search_is_cached(synthetic, tmp_path):
    _, queries, flat, _ = synthetic
    with dsp.settings.context(cache_dir=str(tmp_path / "cache"), cache=True):
        before = flat.num_requests
        first = flat(queries[0], k=3)
        second = flat(queries[0], k=3)
        assert flat.num_requests == before + 1 and first == second


def test_e5_dense_retrieval_on_real_passages(data_dir, tmp_path):
    """Gold passages of the first 8 LitM NQ questions among 16 other wiki2018 passages (small: E5 on 2 cores)."""
    corpus = read_passages(data_dir / "wiki2018/passages.jsonl.gz")
    by_content = {(p["title"], p["text"]): p for p in corpus}
    questions, gold_ids = [], []
    with gzip.open(data_dir / "litm/nq-open-oracle.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            gold = next(c for c in record["ctxs"] if c.get("isgold"))
            questions.append(record["question"])
            gold_ids.append(by_content[(gold["title"], gold["text"])]["id"])
            if len(questions) == 8:
                break
    others = [p for p in corpus[::900] if p["id"] not in gold_ids][:16]
    passages = [p for p in corpus if p["id"] in set(gold_ids)] + others
    with dsp.settings.context(cache_dir=str(tmp_path / "cache"), cache=True):
        vectorizer = E5Vectorizer(batch_size=8)
        rm = DenseRM(passages, vectorizer)
        hits = rm.search_batch(questions, k=3)
        top1 = np.mean([h[0].id == g for h, g in zip(hits, gold_ids)])
        print(f"\nE5 dense top-1 on 8 NQ questions over {len(passages)} passages: {top1:.2f}")
        assert top1 >= 0.75
        # Rebuilding over the same passages embeds nothing: every vector comes from the disk cache.
        calls = vectorizer.num_requests
        again = DenseRM(passages, E5Vectorizer())
        assert again.vectorizer.num_requests == 0 and again.vectorizer._model is None
        assert again.cache_identity() == rm.cache_identity()
        assert vectorizer.num_requests == calls
