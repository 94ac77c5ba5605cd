"""dsp.MilvusRM on Milvus Lite: the Wikipedia sample's gold passages found as dsp.BM25 finds them, a program
run end to end on it, calls cached like every RM's, an ingest that resumes without duplicates and refuses
another corpus, one-line errors for bad specs and a missing server, and the server path (a Milvus Lite gRPC
server on loopback) with its token from the environment.

One Milvus Lite database serves the module (each test its own collection): Lite starts once per process.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from slow_lm_server import SlowLMServer

import dsp
from dsp.clients import milvus
from dsp.clients.specs import SpecError, check_rm_spec, rm_from_spec
from dsp.clients.vectorizers import HashingVectorizer
from programs.cli import main
from programs.recall import gold_ids, recall_at
from programs.tasks import TASKS

PASSAGES = [{"id": "hamlet", "title": "Hamlet", "text": "A tragedy written by William Shakespeare around 1600."},
            {"id": 7, "title": "Paris", "text": "Paris is the capital and largest city of France.", "lang": "en"},
            {"id": "nile", "title": "Nile", "text": "The Nile is a major river of north-eastern Africa."},
            {"id": "lima", "title": "", "text": "Lima is the capital of Peru, on the Pacific coast."}]
# Measured on the first 300 NQ dev questions (RESULTS.md): Milvus BM25 and dsp.BM25 give the same recall.
RECALL_MARGIN = 0.02


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from milvus_lite.server_manager import server_manager_instance

    path = tmp_path_factory.mktemp("milvus") / "lite.db"
    yield str(path)
    server_manager_instance.release_server(str(path.resolve()))  # the suite goes on without its threads


@pytest.fixture(scope="module")
def wiki(db):
    """The Wikipedia-2018 sample in the collection "wiki" (BM25), and the NQ questions of the recall test."""
    from conftest import DATA_DIR

    if not DATA_DIR:
        pytest.skip("DSP_DATA_DIR is not set")
    corpus = Path(DATA_DIR) / "wiki2018/passages.jsonl.gz"
    return milvus.MilvusRM.build(corpus, db, "wiki", batch_size=2000), corpus


def _write(path: Path, passages: list[dict]) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in passages))
    return path


def test_the_gold_passages_of_nq_are_found_as_dsp_bm25_finds_them(wiki):
    rm, corpus = wiki
    _, dev = TASKS["nq"].load(n=100)
    questions = [q.question for q in dev]
    gold = gold_ids(dev, dsp.datasets.read_passages(corpus))
    ours = [[p.id for p in hits] for hits in rm.search_batch(questions, k=20)]
    anchor = [[p.id for p in hits] for hits in dsp.BM25(corpus).search_batch(questions, k=20)]
    ours_recall, anchor_recall = recall_at(ours, gold), recall_at(anchor, gold)
    assert ours_recall["R@20"] > 0.85, ours_recall  # the gold passages are found, not merely as often
    for at, value in anchor_recall.items():
        assert abs(ours_recall[at] - value) <= RECALL_MARGIN, (ours_recall, anchor_recall)
    assert sum(a[0] == b[0] for a, b in zip(ours, anchor)) >= 95  # the same passage first, nearly always
    one = rm(questions[0], k=20, cache=False)  # one at a time: what a batch gives
    assert [p.id for p in one] == ours[0] and one[0].score > one[-1].score > 0
    assert set(one[0]) >= {"id", "title", "text", "score", "prob", "rank", "long_text"}
    assert rm.describe() == {"provider": "milvus", "index": "wiki", "passages": 14_808}


def test_retrieve_then_read_runs_on_milvus_from_the_command_line(wiki, db, tmp_path, capsys):
    spec = f"milvus:{db},collection=wiki"
    with SlowLMServer(delay=0.0) as server:
        argv = ["run", "retrieve_then_read", "--dataset", "nq", "--n", "3", "--shots", "4", "--lm", server.spec,
                "--rm", spec, "--out", str(tmp_path)]
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "'requests': 3" in out
    header, rows = dsp.evaluation.read_run(tmp_path / "nq-retrieve_then_read-shots4-seed0.jsonl")
    rm = wiki[0]
    assert f'"rm": {{"rm": {json.dumps(rm.cache_identity())}' in json.dumps(header)  # the run names its RM
    _, dev = TASKS["nq"].load(n=3)
    for row in rows:  # each question read the passage Milvus ranks first for it
        assert row["context"] == [rm(dev[row["index"]].question, k=1)[0].long_text]


def test_searches_are_cached_by_corpus_and_mode_not_by_path(db, tmp_path):
    rm = milvus.MilvusRM.build(PASSAGES, db, "cached", mode="hybrid", vectorizer=HashingVectorizer(dim=64))
    first = rm("capital of France", k=2)
    assert rm("capital of France", k=2) == first and rm.num_requests == 1 and rm.history[-1]["cached"]
    again = milvus.MilvusRM(db, "cached", vectorizer=HashingVectorizer(dim=64))  # another client, the same corpus
    assert again("capital of France", k=2) == first and again.num_requests == 0
    lexical = milvus.MilvusRM(db, "cached", mode="bm25")  # another mode is another answer
    assert lexical("capital of France", k=2)[0].id == 7 and lexical.num_requests == 1
    assert db not in json.dumps(rm.cache_identity())
    dense = milvus.MilvusRM(db, "cached", mode="dense", vectorizer=HashingVectorizer(dim=64))("Nile Africa", k=4)
    assert dense[0].id == "nile" and 1.0 >= dense[0].score > dense[-1].score
    weighted = milvus.MilvusRM(db, "cached", fuse="weighted", weight=0.9)
    assert weighted("river Nile", k=2)[0].id == "nile" and weighted.cache_identity()["weight"] == 0.9
    passage = lexical("capital of France", k=1)[0]  # the corpus's fields come back as they went in
    assert (passage.id, passage.title, passage.text, passage.lang) == (7, "Paris", PASSAGES[1]["text"], "en")
    assert [p.id for p in lexical("the of", k=3, cache=False)] == ["hamlet", 7, "nile"]  # no term: corpus order
    assert [p.score for p in lexical("Lima", k=4, cache=False)][1:] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="was built with .*HashingVectorizer.*would not be comparable"):
        milvus.MilvusRM(db, "cached", vectorizer=HashingVectorizer(dim=32))


def test_an_interrupted_ingest_resumes_without_duplicates(db, tmp_path, monkeypatch):
    corpus = _write(tmp_path / "p.jsonl", [{"id": f"p{i}", "title": f"T{i % 7}", "text": f"passage number {i} of "
                                            f"word{i % 13} and word{i % 5}"} for i in range(230)])
    insert = milvus._insert
    calls = []

    def interrupted(client, collection, rows, bm25, vectorizer):
        calls.append(len(rows))
        if len(calls) == 3:  # the third batch goes in half, then the process dies
            insert(client, collection, rows[:25], bm25, vectorizer)
            raise KeyboardInterrupt
        insert(client, collection, rows, bm25, vectorizer)

    monkeypatch.setattr(milvus, "_insert", interrupted)
    with pytest.raises(KeyboardInterrupt):
        milvus.MilvusRM.build(corpus, db, "resumed", batch_size=50)
    with pytest.raises(SpecError, match=r"unfinished \(125 of 230 passages\): run its dsp index command again"):
        rm_from_spec(f"milvus:{db},collection=resumed")
    monkeypatch.setattr(milvus, "_insert", insert)
    assert main(["index", "--backend", "milvus", "--passages", str(corpus), "--out", f"{db},collection=resumed"]) == 0
    rm = milvus.MilvusRM(db, "resumed")
    rows = rm._client.query("resumed", filter="pos >= 0", output_fields=["pos", "meta"], limit=1000)
    assert sorted(r["pos"] for r in rows) == list(range(230))  # every passage once
    assert sorted(r["meta"]["id"] for r in rows) == sorted(f"p{i}" for i in range(230))
    assert rm("passage number 117", k=1)[0].id == "p117"


def test_a_collection_of_another_corpus_is_refused(db, tmp_path, capsys):
    first = _write(tmp_path / "a.jsonl", PASSAGES)
    assert main(["index", "--backend", "milvus", "--passages", str(first), "--out", f"{db},collection=corpus"]) == 0
    assert main(["index", "--backend", "milvus", "--passages", str(first), "--out", f"{db},collection=corpus"]) == 0
    capsys.readouterr()
    other = _write(tmp_path / "b.jsonl", PASSAGES[:3])
    assert main(["index", "--backend", "milvus", "--passages", str(other), "--out", f"{db},collection=corpus"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds another corpus (4 passages, fingerprint" in err and "this one: 3" in err and "\n" not in err
    with pytest.raises(ValueError, match=r"other settings \(dense_index=None, dim=None, mode='bm25', vectorizer=None\)"):
        milvus.MilvusRM.build(first, db, "corpus", mode="hybrid", vectorizer=HashingVectorizer(dim=8))
    assert main(["index", "--backend", "milvus", "--passages", str(first), "--out", f"{db},shards=0"]) == 2
    assert "--out " + f"{db},shards=0: shards: must be a positive integer" in capsys.readouterr().err
    with pytest.raises(SpecError, match="built for bm25 search; mode dense needs"):
        rm_from_spec(f"milvus:{db},collection=corpus,mode=dense")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("spec, message", [
    ("milvus:", "'milvus:' needs database path or server url"),
    ("milvus:passages.jsonl", "neither a Milvus Lite database"),
    ("milvus:/nowhere/wiki.db", "no Milvus Lite database there"),
    ("milvus:http://root:Milvus@127.0.0.1:19530", r"carries no credentials \(http://\*\*\*@127.0.0.1:19530\)"),
    ("milvus:http://127.0.0.1:19530,mode=sparse", "mode must be bm25 or dense or hybrid"),
    ("milvus:http://127.0.0.1:19530,collection=my-wiki", "collection must be a Milvus collection name"),
    ("milvus:http://127.0.0.1:19530,fuse=rrf,weight=1.5", "weight must be a number from 0 to 1"),
    ("milvus:http://127.0.0.1:19530,shards=2", r"unknown option\(s\) shards"),
])
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(SpecError, match=message) as error:
        check_rm_spec(spec)
    assert "\n" not in str(error.value) and "Milvus@" not in str(error.value)


def test_a_missing_server_or_collection_is_a_one_line_error(db, tmp_path, capsys):
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(SpecError, match=f"cannot reach Milvus at {url}") as error:
        rm_from_spec(f"milvus:{url}")
    assert "\n" not in str(error.value)
    with pytest.raises(SpecError, match=r"has no collection 'absent'; build it: dsp index --backend milvus"):
        rm_from_spec(f"milvus:{db},collection=absent")
    passages = _write(tmp_path / "p.jsonl", PASSAGES)
    assert main(["index", "--backend", "milvus", "--passages", str(passages), "--out", url]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dsp index: error: --out {url}: cannot reach Milvus") and "\n" not in err


def test_a_server_uri_takes_its_token_from_the_environment(tmp_path, monkeypatch):
    from milvus_lite.adapter.grpc.server import start_server_in_thread

    server, database, port = start_server_in_thread(str(tmp_path / "served.db"), host="127.0.0.1", port=0)
    try:
        monkeypatch.setenv("MILVUS_TOKEN", "root:s3cret-token")
        rm = dsp.MilvusRM.build(PASSAGES, f"http://127.0.0.1:{port}", "served")
        assert rm("who wrote hamlet", k=1)[0].id == "hamlet"
        shown = repr(rm) + json.dumps(rm.describe()) + json.dumps(rm.cache_identity())
        assert "s3cret" not in shown and rm.cache_identity()["engine"] == "server"
        rm.close()
    finally:
        server.stop(grace=0)
        database.close()
