"""dsp.HybridRM: one query, several RMs, their lists fused (CombSUM over probabilities, or RRF)."""

from __future__ import annotations

import json

import pytest
from helpers import ListRM

import dsp
from dsp.clients.specs import SpecError, check_rm_spec

LEXICAL = [("Hamlet | a tragedy by William Shakespeare", 9.0), ("Macbeth | another tragedy", 5.0),
           ("Othello | a third tragedy", 1.0)]
DENSE = [("Othello | a third tragedy", 0.9), ("King Lear | a fourth", 0.8), ("Hamlet | a tragedy by William Shakespeare", 0.1)]


def test_lists_are_fused_by_passage_probability():
    lexical, dense = ListRM(LEXICAL, name="lexical"), ListRM(DENSE, name="dense")
    rm = dsp.HybridRM([lexical, dense])
    passages = rm("tragedy", k=4, cache=False)
    by_text = {p.long_text: p.score for p in passages}
    # each RM's softmax over its own scores, summed: what fused_retrieval does across queries
    expected = {}
    for source in (lexical("tragedy", k=12, cache=False), dense("tragedy", k=12, cache=False)):
        for p in source:
            expected[p.long_text] = expected.get(p.long_text, 0.0) + p.prob
    assert by_text == pytest.approx(expected)
    assert [p.long_text for p in passages] == sorted(expected, key=lambda t: -expected[t])
    assert [p.rank for p in passages] == [1, 2, 3, 4] and sum(p.prob for p in passages) == pytest.approx(1.0)
    rrf = dsp.HybridRM([lexical, dense], fuse="rrf")("tragedy", k=2, cache=False)
    assert {p.long_text for p in rrf} == {"Hamlet | a tragedy by William Shakespeare", "Othello | a third tragedy"}


def test_a_hybrid_rm_is_one_cached_rm_with_both_identities():
    lexical, dense = ListRM(LEXICAL, name="lexical"), ListRM(DENSE, name="dense")
    rm = dsp.HybridRM([lexical, dense])
    first = rm("tragedy", k=2)
    assert rm("tragedy", k=2) == first and rm.num_requests == 1
    identity = rm.cache_identity()
    assert [i["name"] for i in identity["rms"]] == ["lexical", "dense"] and identity["fuse"] == "combsum"
    with pytest.raises(TypeError, match="two or more RMs"):
        dsp.HybridRM([lexical])
    with pytest.raises(ValueError, match="unknown fusion 'max'"):
        dsp.HybridRM([lexical, dense], fuse="max")


def test_the_hybrid_spec_fuses_bm25_and_a_dense_index_over_one_file(tmp_path, monkeypatch):
    passages = tmp_path / "p.jsonl"
    rows = [{"id": "a", "title": "Hamlet", "text": "a tragedy by William Shakespeare"},
            {"id": "b", "title": "Paris", "text": "the capital of France"},
            {"id": "c", "title": "Rome", "text": "the capital of Italy"}]
    passages.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SpecError, match="fuse must be combsum or rrf"):
        check_rm_spec(f"hybrid:{passages},fuse=max")
    with pytest.raises(SpecError, match="is not a file"):
        check_rm_spec(f"hybrid:{tmp_path / 'none.jsonl'}")
    from dsp.clients import dense

    monkeypatch.setattr(dense, "E5Vectorizer", dsp.HashingVectorizer)  # the offline test vectorizer, fast
    rm = dsp.rm_from_spec(f"hybrid:{passages}")
    assert isinstance(rm, dsp.HybridRM) and [type(r).__name__ for r in rm.rms] == ["BM25", "DenseRM"]
    assert rm("capital of France", k=1)[0].id == "b"


def test_the_hybrid_spec_reads_its_passages_file_once(tmp_path, monkeypatch):
    passages = tmp_path / "p.jsonl"
    rows = [{"id": "a", "title": "Paris", "text": "the capital of France"},
            {"id": "b", "title": "Rome", "text": "the capital of Italy"}]
    passages.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from dsp.clients import dense
    from dsp.datasets import corpus

    monkeypatch.setattr(dense, "E5Vectorizer", dsp.HashingVectorizer)
    opened: list[str] = []
    open_lines = corpus._open_lines

    def counting(path):
        opened.append(str(path))
        return open_lines(path)

    monkeypatch.setattr(corpus, "_open_lines", counting)
    rm = dsp.rm_from_spec(f"hybrid:{passages}")
    assert opened == [str(passages)]  # one read and parse, shared by BM25 and the dense index
    assert [r.source for r in rm.rms] == [str(passages), str(passages)]  # each still names the file
    assert rm.rms[0].fingerprint == rm.rms[1].fingerprint == dsp.BM25(passages).fingerprint
    assert rm("capital of Italy", k=1)[0].id == "b"
