"""programs.litm data generation on the real oracle questions and a BM25 over a small Wikipedia-2018 subset."""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path

import pytest

import dsp
from dsp.datasets import DataFileError, iter_passages
from programs.litm import (
    Document, evenly_spaced_positions, gold_chunk, kv_records_with_gold_at, make_kv_records, make_qa_data,
    make_qa_example, randomize_distractors, read_kv_records, read_qa_records, relevance_ranked, retrieve_candidates,
    write_records,
)

N_QUESTIONS = 12
PAPER_DISTRACTOR_KEYS = ["id", "title", "text", "score", "hasanswer", "original_retrieval_index", "isgold"]


@pytest.fixture(scope="module")
def oracle_file(data_dir: Path) -> Path:
    return data_dir / "litm/nq-open-oracle.jsonl.gz"


@pytest.fixture(scope="module")
def data_dir() -> Path:  # module-scoped twin of conftest's fixture (skips only when DSP_DATA_DIR is unset)
    import os

    if not os.environ.get("DSP_DATA_DIR"):
        pytest.skip("DSP_DATA_DIR is not set")
    return Path(os.environ["DSP_DATA_DIR"])


@pytest.fixture(scope="module")
def questions(oracle_file: Path) -> list[dict]:
    """The first oracle questions, plus the first one whose gold passage lacks its answer under DPR's
    matching (that passage must still never become a distractor)."""
    records = read_qa_records(oracle_file)
    chosen = records[:N_QUESTIONS]
    odd = next(r for r in records if not dsp.has_answer(r["ctxs"][0]["text"], r["answers"]))
    return chosen + [odd]


@pytest.fixture(scope="module")
def rm(data_dir: Path, questions: list[dict]) -> dsp.BM25:
    """BM25 over the first 2,500 Wikipedia-2018 passages plus the chosen questions' gold passages."""
    passages = []
    for passage in iter_passages(data_dir / "wiki2018/passages.jsonl.gz"):
        passages.append(passage)
        if len(passages) == 2500:
            break
    seen = {(p["title"], p["text"]) for p in passages}
    for i, record in enumerate(questions):
        gold = record["ctxs"][0]
        if (gold["title"], gold["text"]) not in seen:
            passages.append({"id": f"gold-{i}", "title": gold["title"], "text": gold["text"]})
    return dsp.BM25(passages)


@pytest.fixture(scope="module")
def data(questions, rm) -> dict[int, list[dict]]:
    return make_qa_data(questions, rm, total_docs=10, gold_indices=[0, 4, 9], depth=100)


def test_gold_at_the_requested_index_among_n_documents(data, questions):
    for gold_index, examples in data.items():
        assert len(examples) == len(questions)
        for example, record in zip(examples, questions):
            assert example["question"] == record["question"] and example["answers"] == record["answers"]
            assert len(example["ctxs"]) == 10
            golds = [i for i, c in enumerate(example["ctxs"]) if c["isgold"]]
            assert golds == [gold_index]
            gold = example["ctxs"][gold_index]
            # the paper's gold chunk: the NQ-annotated title and chunked long answer
            assert gold == {"title": record["nq_annotated_gold"]["title"],
                            "text": record["nq_annotated_gold"]["chunked_long_answer"],
                            "hasanswer": True, "isgold": True}


def test_distractors_have_no_answer_and_keep_retrieval_order(data, questions, rm):
    hits = rm.search_batch([q["question"] for q in questions], k=100)
    for example, record, passages in zip(data[4], questions, hits):
        distractors = [c for c in example["ctxs"] if not c["isgold"]]
        assert len(distractors) == 9
        for ctx in distractors:
            assert list(ctx) == PAPER_DISTRACTOR_KEYS
            assert ctx["hasanswer"] is False and not dsp.has_answer(ctx["text"], record["answers"])
            assert (ctx["title"], ctx["text"]) != (record["ctxs"][0]["title"], record["ctxs"][0]["text"])
            assert isinstance(ctx["score"], str) and float(ctx["score"]) >= 0
        indices = [c["original_retrieval_index"] for c in distractors]
        assert indices == sorted(indices) and len(set(indices)) == 9
        # exactly the first nine answer-free, non-gold passages of the ranking, each where BM25 put it
        gold = record["ctxs"][0]
        expected = [i for i, p in enumerate(passages)
                    if not dsp.has_answer(p.text, record["answers"]) and (p.title, p.text) != (gold["title"], gold["text"])][:9]
        assert indices == expected
        assert [c["id"] for c in distractors] == [str(passages[i].id) for i in expected]


def test_the_gold_passage_lacking_its_answer_string_is_still_no_distractor(data, questions, rm):
    odd = questions[-1]
    assert not dsp.has_answer(odd["ctxs"][0]["text"], odd["answers"])
    retrieved = retrieve_candidates([odd], rm, depth=100)[0]
    assert retrieved["gold_original_retrieval_index"] is not None  # BM25 finds it...
    assert retrieved["ctxs"][retrieved["gold_original_retrieval_index"]]["isgold"] is True
    texts = [c["text"] for c in data[0][-1]["ctxs"][1:]]
    assert odd["ctxs"][0]["text"] not in texts  # ...and it is not used as a distractor


def test_every_position_uses_the_same_distractors(data):
    for i in range(len(data[0])):
        sets = [[c for c in data[g][i]["ctxs"] if not c["isgold"]] for g in (0, 4, 9)]
        assert sets[0] == sets[1] == sets[2]


def test_records_are_the_papers_format_and_round_trip(data, tmp_path):
    path = write_records(tmp_path / "nq-open-10_total_documents_gold_at_4.jsonl.gz", data[4])
    again = write_records(tmp_path / "copy.jsonl.gz", data[4])
    assert path.read_bytes() == again.read_bytes()  # deterministic gzip
    loaded = read_qa_records(path)
    assert loaded == data[4]
    assert list(loaded[0])[:4] == ["question", "answers", "ctxs", "nq_annotated_gold"]
    documents = [Document.from_dict(c) for c in loaded[0]["ctxs"]]
    assert all(isinstance(d.score, float) for d in documents if not d.isgold)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        assert f.readline().isascii()  # json.dumps defaults, as the paper wrote its files


def test_the_papers_oracle_file_loads_as_qa_records(oracle_file):
    records = read_qa_records(oracle_file)
    assert len(records) == 2655
    assert all(len(r["ctxs"]) == 1 and Document.from_dict(r["ctxs"][0]).isgold for r in records)
    assert gold_chunk(records[0])["text"] == records[0]["ctxs"][0]["text"]


def test_not_enough_distractors_is_a_clear_error(questions, rm):
    retrieved = retrieve_candidates(questions[:1], rm, depth=3)[0]
    with pytest.raises(ValueError, match="distractors are needed; retrieve deeper"):
        make_qa_example(retrieved, total_docs=10, gold_index=0)
    with pytest.raises(ValueError, match="gold_index must be an integer in 0..9"):
        make_qa_example(retrieved, total_docs=10, gold_index=10)
    with pytest.raises(ValueError, match="total_docs must be an integer >= 2"):
        make_qa_example(retrieved, total_docs=1, gold_index=0)


def test_bad_qa_file_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"question": "q", "answers": ["a"], "ctxs": [{"title": "t", "text": "x"}]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "answers": []}) + "\n")
    with pytest.raises(DataFileError, match="bad.jsonl, line 2: 'answers'"):
        read_qa_records(path)
    path.write_text(json.dumps({**good, "ctxs": [{"title": "t", "text": "x", "rank": 3}]}) + "\n")
    with pytest.raises(DataFileError, match="line 1: ctxs\\[0\\] is not a document"):
        read_qa_records(path)


def test_random_ordering_is_seeded_and_keeps_the_gold_in_place(data):
    examples = data[4]
    first = [randomize_distractors(e, seed=0) for e in examples]
    assert first == [randomize_distractors(e, seed=0) for e in examples]  # reproducible
    assert first[3] == randomize_distractors(examples[3], seed=0)          # independent of the other examples
    other = [randomize_distractors(e, seed=1) for e in examples]
    assert first != other
    changed = 0
    for original, shuffled in zip(examples, first):
        assert shuffled["ctxs"][4] == original["ctxs"][4] and shuffled["ctxs"][4]["isgold"]
        key = lambda c: c["original_retrieval_index"]  # noqa: E731
        assert sorted(shuffled["ctxs"][:4] + shuffled["ctxs"][5:], key=key) == original["ctxs"][:4] + original["ctxs"][5:]
        changed += shuffled["ctxs"] != original["ctxs"]
    assert changed == len(examples)


def test_relevance_ranking_puts_the_gold_at_its_retrieval_rank(data):
    for example in data[9]:
        ranked = relevance_ranked(example)
        rank = next(i for i, c in enumerate(ranked) if c["isgold"])
        gold_index = example["gold_original_retrieval_index"]
        assert all(c["original_retrieval_index"] < (gold_index if gold_index is not None else 10**9)
                   for c in ranked[:rank])
        assert all(c["original_retrieval_index"] > gold_index for c in ranked[rank + 1:]) if gold_index is not None \
            else rank == 9


# -- key-value retrieval ----------------------------------------------------------------------------------

def test_kv_generation():
    records = make_kv_records(num_keys=75, num_examples=3, seed=7, gold_index=36)
    assert records == make_kv_records(num_keys=75, num_examples=3, seed=7, gold_index=36)
    assert records != make_kv_records(num_keys=75, num_examples=3, seed=8, gold_index=36)
    for record in records:
        assert list(record) == ["ordered_kv_records", "key", "value"]
        pairs = record["ordered_kv_records"]
        assert len(pairs) == 75 and len({k for k, _ in pairs}) == 75
        assert pairs[36] == [record["key"], record["value"]]
        for key, value in pairs:
            assert uuid.UUID(key).version == 4 and uuid.UUID(value).version == 4 and str(uuid.UUID(key)) == key
    placed = {tuple(r["ordered_kv_records"][36]) for r in records}
    assert len(placed) == 3
    with pytest.raises(ValueError, match="num_keys must be an integer >= 2"):
        make_kv_records(num_keys=1, num_examples=1)


def test_the_shared_kv_file_loads_and_the_gold_moves(data_dir, tmp_path):
    records = read_kv_records(data_dir / "litm/kv-retrieval-75_keys.jsonl.gz")
    assert len(records) == 500 and all(len(r["ordered_kv_records"]) == 75 for r in records)
    record = records[0]
    original = record["ordered_kv_records"]
    for gold_index in (0, 17, 74):
        moved = kv_records_with_gold_at(record, gold_index)
        assert moved[gold_index] == [record["key"], record["value"]]
        assert [p for p in moved if p[0] != record["key"]] == [p for p in original if p[0] != record["key"]]
    assert record["ordered_kv_records"] == original  # the input is untouched
    with pytest.raises(ValueError, match="gold_index must be an integer in 0..74"):
        kv_records_with_gold_at(record, 75)
    bad = tmp_path / "kv.jsonl"
    bad.write_text(json.dumps({"ordered_kv_records": [["a", "1"], ["b", "2"]], "key": "a", "value": "2"}) + "\n")
    with pytest.raises(DataFileError, match="kv.jsonl, line 1: the pair \\[key, value\\]"):
        read_kv_records(bad)


def test_evenly_spaced_positions_match_the_papers_choices():
    assert evenly_spaced_positions(20) == [0, 4, 9, 14, 19]
    assert evenly_spaced_positions(140) == [0, 34, 69, 104, 139]
    assert evenly_spaced_positions(10, 3) == [0, 4, 9]
    assert evenly_spaced_positions(75) == [0, 17, 36, 55, 74]
    assert evenly_spaced_positions(3, 5) == [0, 1, 2]
