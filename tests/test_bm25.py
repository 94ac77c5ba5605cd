"""dsp.clients.bm25.BM25: recall on real Wikipedia + NQ data, persistence, caching, input errors."""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import dsp
from dsp.clients.bm25 import BM25, top_k_indices
from dsp.datasets.corpus import CorpusError

DATA_DIR = os.environ.get("DSP_DATA_DIR")
needs_data = pytest.mark.skipif(not DATA_DIR, reason="DSP_DATA_DIR is not set")

SMALL = [
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and most populous city of France."},
    {"id": "rome", "title": "Rome", "text": "Rome is the capital city of Italy."},
    {"id": "lyon", "title": "Lyon", "text": "Lyon is a city in France, known for its cuisine."},
    {"id": "cell", "title": "Mitochondrion", "text": "The mitochondrion is the powerhouse of the cell."},
]


@pytest.fixture(scope="module")
def wiki() -> BM25:
    if not DATA_DIR:
        pytest.skip("DSP_DATA_DIR is not set")
    return BM25(Path(DATA_DIR) / "wiki2018/passages.jsonl.gz")


@pytest.fixture(scope="module")
def nq_questions() -> list[tuple[str, tuple[str, str]]]:
    """The first 300 LitM NQ questions with their gold passage as (title, text)."""
    if not DATA_DIR:
        pytest.skip("DSP_DATA_DIR is not set")
    questions = []
    with gzip.open(Path(DATA_DIR) / "litm/nq-open-oracle.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            gold = [c for c in record["ctxs"] if c.get("isgold")]
            assert len(gold) == 1
            questions.append((record["question"], (gold[0]["title"], gold[0]["text"])))
            if len(questions) == 300:
                break
    return questions


# -- real data ---------------------------------------------------------------------------------------

@needs_data
def test_recall_of_gold_passages_on_nq(wiki, nq_questions):
    hits = wiki.search_batch([q for q, _ in nq_questions], k=20)
    recall = {}
    for k in (1, 5, 20):
        found = [gold in [(p.title, p.text) for p in ranked[:k]] for (_, gold), ranked in zip(nq_questions, hits)]
        recall[k] = sum(found) / len(found)
    print(f"\nBM25 recall on 300 LitM NQ questions over wiki2018 (14,808 passages): "
          f"@1 {recall[1]:.3f}  @5 {recall[5]:.3f}  @20 {recall[20]:.3f}")
    assert recall[5] >= 0.85
    assert recall[1] >= 0.65 and recall[20] >= recall[5] >= recall[1]


@needs_data
def test_single_search_returns_complete_passages(wiki, nq_questions):
    question, gold = nq_questions[0]  # who got the first nobel prize in physics
    passages = wiki(question, k=5, cache=False)
    assert len(passages) == 5
    top = passages[0]
    assert (top.title, top.text) == gold and top.id.startswith("nq-gold-")
    assert top.long_text == f"{top.title} | {top.text}"
    assert [p.rank for p in passages] == [1, 2, 3, 4, 5]
    scores = [p.score for p in passages]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1] > 0
    # prob is the softmax of the returned scores, filled by the RM base.
    expected = np.exp(np.array(scores) - max(scores))
    assert [p.prob for p in passages] == pytest.approx(list(expected / expected.sum()))


@needs_data
def test_batch_matches_single_searches(wiki, nq_questions):
    queries = [q for q, _ in nq_questions[:25]]
    batch = wiki.search_batch(queries, k=7)
    for query, ranked in zip(queries, batch):
        single = wiki(query, k=7, cache=False)
        assert [(p.id, p.score, p.prob) for p in ranked] == [(p.id, p.score, p.prob) for p in single]


@needs_data
def test_save_load_round_trip_is_identical_and_moves(wiki, nq_questions, tmp_path):
    saved = wiki.save(tmp_path / "index")
    names = {p.relative_to(saved).as_posix() for p in saved.rglob("*") if p.is_file()}
    # JSON, JSONL and .npy only: nothing that needs pickle to read.
    assert names and all(n.endswith((".json", ".jsonl", ".npy")) for n in names), names
    for npy in saved.rglob("*.npy"):
        np.load(npy, allow_pickle=False)
    moved = tmp_path / "moved"
    shutil.move(str(saved), str(moved))
    for mmap in (True, False):
        loaded = BM25.load(moved, mmap=mmap)
        assert len(loaded) == len(wiki) == 14808
        assert loaded.cache_identity() == wiki.cache_identity()  # content, not path
        queries = [q for q, _ in nq_questions[:40]] + ["zzzz unknownword", "the of and"]
        before = wiki.search_batch(queries, k=10)
        after = loaded.search_batch(queries, k=10)
        assert [[(p.id, p.score) for p in r] for r in before] == [[(p.id, p.score) for p in r] for r in after]
    if_mapped = BM25.load(moved, mmap=True)
    assert isinstance(if_mapped._retriever.scores["data"], np.memmap)


@needs_data
def test_second_identical_search_is_served_by_the_cache(wiki, nq_questions, tmp_path):
    question = nq_questions[3][0]
    with dsp.settings.context(cache_dir=str(tmp_path / "cache"), cache=True):
        before = wiki.num_requests
        first = wiki(question, k=4)
        assert wiki.num_requests == before + 1
        second = wiki(question, k=4)
        assert wiki.num_requests == before + 1  # zero backend calls
        assert second == first and wiki.history[-1]["cached"] is True
        wiki(question, k=5)  # another k is another request
        assert wiki.num_requests == before + 2


# -- behaviour on a small corpus -----------------------------------------------------------------------

def test_small_corpus_ranking_and_k_beyond_corpus():
    rm = BM25(SMALL)
    ranked = rm("capital of France", k=10, cache=False)
    # Paris matches both words; Rome and Lyon one each; the cell passage none.
    assert ranked[0].id == "paris" and {p.id for p in ranked[1:3]} == {"rome", "lyon"} and ranked[3].id == "cell"
    assert len(ranked) == len(SMALL)  # k beyond the corpus: the whole corpus, ranked
    assert {p.id for p in ranked} == {p["id"] for p in SMALL}
    assert ranked[-1].score == 0.0 and sum(p.prob for p in ranked) == pytest.approx(1.0)
    # Stemming: "cities" matches "city"; stopwords alone match nothing (every score 0, corpus order).
    assert rm("cities", k=1, cache=False)[0].score > 0
    assert [p.id for p in rm("the of is", k=4, cache=False)] == ["paris", "rome", "lyon", "cell"]


def test_strings_jsonl_and_gz_sources_agree(tmp_path):
    texts = [f"{p['title']} {p['text']}" for p in SMALL]
    from_strings = BM25(texts)
    path = tmp_path / "small.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({"text": text}) + "\n")
    from_file = BM25(path)
    assert from_file.cache_identity() == from_strings.cache_identity()
    a, b = from_strings("powerhouse", k=2, cache=False), from_file("powerhouse", k=2, cache=False)
    assert [(p.id, p.score) for p in a] == [(p.id, p.score) for p in b] and a[0].id == 3


def test_identity_changes_with_parameters_and_content():
    base = BM25(SMALL).cache_identity()
    assert BM25(SMALL, k1=1.2).cache_identity() != base
    assert BM25(SMALL, stemmer=None).cache_identity() != base
    changed = [dict(p) for p in SMALL]
    changed[0]["text"] += " Extra."
    assert BM25(changed).cache_identity()["corpus"] != base["corpus"]
    assert "passages" not in json.dumps(base)  # no path or source name in the identity


def test_query_and_k_errors_come_from_the_base():
    rm = BM25(SMALL)
    with pytest.raises(ValueError, match="k must be positive"):
        rm("paris", k=0)
    with pytest.raises(ValueError, match="k must be positive"):
        rm("paris", k=-3)
    with pytest.raises(ValueError, match="empty"):
        rm("   ", k=2)
    with pytest.raises(TypeError, match="must be text"):
        rm(None, k=2)
    with pytest.raises(ValueError, match="query 1: the search query is empty"):
        rm.search_batch(["paris", ""], k=2)
    with pytest.raises(TypeError, match="list of queries"):
        rm.search_batch("paris", k=2)


def test_construction_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown stemmer language 'klingon'"):
        BM25(SMALL, stemmer="klingon")
    with pytest.raises(ValueError, match="unknown BM25 method"):
        BM25(SMALL, method="okapi")
    with pytest.raises(ValueError, match="unusable stopwords"):
        BM25(SMALL, stopwords="xx")
    with pytest.raises(ValueError, match="b must be between 0 and 1"):
        BM25(SMALL, b=1.5)
    with pytest.raises(CorpusError, match="no passages"):
        BM25([])
    with pytest.raises(CorpusError, match="no passage has an indexable word"):
        BM25(["the", "of a"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": 3}\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"bad.jsonl, line 2"):
        BM25(bad)
    with pytest.raises(FileNotFoundError, match="not a saved dsp BM25 index"):
        BM25.load(tmp_path)


def test_load_detects_an_incomplete_index(tmp_path):
    BM25(SMALL).save(tmp_path / "idx")
    meta = json.loads((tmp_path / "idx/meta.json").read_text())
    meta["count"] = 99
    (tmp_path / "idx/meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="incomplete"):
        BM25.load(tmp_path / "idx")


def test_custom_stopword_list_and_methods():
    rm = BM25(SMALL, stopwords=["capital", "city"], method="bm25+")
    # "capital" is now a stopword: the query keeps only "france".
    assert [p.id for p in rm("capital france", k=2, cache=False)] == ["paris", "lyon"]
    assert BM25(SMALL, stopwords=["city", "capital"]).cache_identity() == BM25(SMALL, stopwords=["capital", "city"]).cache_identity()


def test_top_k_indices_is_deterministic_on_ties():
    scores = np.array([1.0, 3.0, 1.0, 1.0, 2.0, 1.0], dtype=np.float32)
    assert top_k_indices(scores, 4).tolist() == [1, 4, 0, 2]
    assert top_k_indices(scores, 100).tolist() == [1, 4, 0, 2, 3, 5]
    assert top_k_indices(scores, 0).tolist() == []
    rng = np.random.default_rng(0)
    random_scores = rng.random(1000).astype(np.float32)
    assert top_k_indices(random_scores, 10).tolist() == np.argsort(-random_scores, kind="stable")[:10].tolist()
    assert math.isclose(float(random_scores[top_k_indices(random_scores, 1)[0]]), float(random_scores.max()))


def test_meta_json_problems_are_named_and_an_overwrite_is_all_or_nothing(tmp_path, monkeypatch):
    index = tmp_path / "idx"
    BM25(SMALL).save(index)
    meta_path = index / "meta.json"
    meta_text = meta_path.read_text()
    meta_path.write_text("{truncated")
    with pytest.raises(ValueError, match=r"idx/meta.json: unreadable index metadata"):
        BM25.load(index)
    meta_path.write_text(meta_text.replace("dsp.bm25/1", "dsp.dense/1"))
    with pytest.raises(ValueError, match=r"idx/meta.json: not a dsp.bm25/1 index \(format 'dsp.dense/1'\)"):
        BM25.load(index)
    meta_path.write_text(meta_text)
    assert BM25.load(index)("capital of France", k=1)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # an overwrite interrupted after meta.json went and before the new one

    monkeypatch.setattr("dsp.clients.bm25.write_passages", killed)
    with pytest.raises(KeyboardInterrupt):
        BM25(SMALL[:2]).save(index)
    with pytest.raises(FileNotFoundError, match="not a saved dsp BM25 index"):
        BM25.load(index)  # half-written: never taken for a finished index
