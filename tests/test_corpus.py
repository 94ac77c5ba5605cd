"""dsp.datasets.corpus: reading, validating and storing passage corpora."""

from __future__ import annotations

import gzip
import json
import logging

import pytest

from dsp.datasets.corpus import (
    CorpusError, MappedPassages, corpus_fingerprint, iter_passages, normalize_passages, read_passages,
    write_passages,
)


def _write(path, lines, compress=False):
    data = "\n".join(lines).encode("utf-8") + b"\n"
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


# -- real data ---------------------------------------------------------------------------------------

def test_wiki2018_sample_reads_whole_and_valid(data_dir):
    passages = read_passages(data_dir / "wiki2018/passages.jsonl.gz")
    assert len(passages) == 14808  # the README's count
    assert passages[0]["id"] == "colbert-3479" and passages[0]["title"] == "Ankara"
    assert len({p["id"] for p in passages}) == len(passages)
    assert all(isinstance(p["text"], str) and p["text"] and p["title"] for p in passages)
    assert sum(p["id"].startswith("nq-gold-") for p in passages) == 2600


def test_untitled_corpus_gets_empty_titles_and_keeps_ids(data_dir):
    passages = read_passages(data_dir / "qrecc/passages.jsonl.gz")
    assert len(passages) == 326
    assert all(p["title"] == "" for p in passages)
    assert all("_p" in p["id"] for p in passages)  # QReCC ids: page URL + _p<n>


def test_streaming_yields_before_reading_everything(data_dir):
    first = next(iter_passages(data_dir / "wiki2018/passages.jsonl.gz"))
    assert first["id"] == "colbert-3479"


# -- format rules ------------------------------------------------------------------------------------

def test_defaults_blank_lines_and_extra_fields(tmp_path):
    path = _write(tmp_path / "c.jsonl", [
        '{"text": "first"}',
        "",
        '{"title": "T", "text": "third", "url": "http://x"}',
        '{"id": 7, "title": null, "text": "fourth"}',
    ])
    passages = read_passages(path)
    # ids default to the 0-based line index (blank lines count as lines), like ColBERT pids.
    assert passages == [
        {"id": 0, "title": "", "text": "first"},
        {"id": 2, "title": "T", "text": "third", "url": "http://x"},
        {"id": 7, "title": "", "text": "fourth"},
    ]


def test_gzip_detected_by_content_not_suffix(tmp_path):
    path = _write(tmp_path / "corpus.data", ['{"id": "a", "text": "zipped"}'], compress=True)
    assert read_passages(path) == [{"id": "a", "title": "", "text": "zipped"}]


@pytest.mark.parametrize("bad_line, why", [
    ('{"id": "x", "text": "unterminated', "invalid JSON"),
    ('["a", "list"]', "JSON object"),
    ('"just a string"', "JSON object"),
    ('{"id": "x", "title": "no text"}', "no 'text'"),
    ('{"id": "x", "text": 42}', "non-text 'text'"),
    ('{"id": "x", "text": "t", "title": 5}', "'title' must be text"),
    ('{"id": [1], "text": "t"}', "'id' must be"),
    ('{"id": true, "text": "t"}', "'id' must be"),
])
@pytest.mark.parametrize("compress", [False, True])
def test_corrupt_line_names_file_and_line(tmp_path, bad_line, why, compress):
    name = "corpus.jsonl.gz" if compress else "corpus.jsonl"
    path = _write(tmp_path / name, ['{"id": "a", "text": "ok"}', '{"id": "b", "text": "ok"}', bad_line], compress)
    with pytest.raises(CorpusError) as info:
        read_passages(path)
    message = str(info.value)
    assert str(path) in message and "line 3" in message and why in message


def test_not_utf8_is_reported_with_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(CorpusError, match=r"latin1.jsonl, line 2: not UTF-8"):
        read_passages(path)


def test_truncated_gzip_is_reported(tmp_path):
    data = gzip.compress(b"".join(json.dumps({"text": f"passage {i} " * 20}).encode() + b"\n" for i in range(2000)))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusError, match=r"cut.jsonl.gz: unreadable after line \d+"):
        read_passages(path)


def test_duplicate_ids_error_names_both_lines(tmp_path):
    path = _write(tmp_path / "dup.jsonl", ['{"id": "a", "text": "x"}', '{"id": "b", "text": "y"}',
                                           '{"id": "a", "text": "z"}'])
    with pytest.raises(CorpusError, match=r"dup.jsonl, line 3: duplicate passage id 'a' \(first seen at line 1\)"):
        read_passages(path)


def test_duplicate_ids_can_be_allowed_with_a_warning(tmp_path, caplog):
    path = _write(tmp_path / "dup.jsonl", ['{"id": "a", "text": "x"}', '{"id": "a", "text": "z"}'])
    with caplog.at_level(logging.WARNING, logger="dsp.corpus"):
        passages = read_passages(path, duplicates="warn")
    assert [p["text"] for p in passages] == ["x", "z"]
    assert "duplicate passage id 'a'" in caplog.text
    # An integer id and its string form are different ids.
    path2 = _write(tmp_path / "mixed.jsonl", ['{"id": 1, "text": "x"}', '{"id": "1", "text": "z"}'])
    assert len(read_passages(path2)) == 2


def test_missing_file_and_bad_policy(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_passages(tmp_path / "nope.jsonl")
    path = _write(tmp_path / "c.jsonl", ['{"text": "x"}'])
    with pytest.raises(ValueError, match="duplicates must be"):
        read_passages(path, duplicates="sometimes")


def test_normalize_in_memory_passages():
    assert normalize_passages(["plain", {"id": "k", "title": "T", "text": "body"}]) == [
        {"id": 0, "title": "", "text": "plain"}, {"id": "k", "title": "T", "text": "body"}]
    with pytest.raises(CorpusError, match=r"passages\[1\]: the passage has no 'text'"):
        normalize_passages(["ok", {"title": "no text"}])
    with pytest.raises(CorpusError, match=r"item 1: duplicate passage id 'k'"):
        normalize_passages([{"id": "k", "text": "a"}, {"id": "k", "text": "b"}])
    with pytest.raises(TypeError, match="list of passage"):
        normalize_passages("not a list")


# -- stored passages ---------------------------------------------------------------------------------

def test_write_and_map_round_trip(tmp_path):
    passages = normalize_passages([{"id": "a", "title": "Ünïcode", "text": "line one"},
                                   {"id": 2, "title": "", "text": "with \"quotes\"\nand a newline", "extra": [1]}])
    fingerprint = write_passages(tmp_path / "p.jsonl", passages)
    assert fingerprint == corpus_fingerprint(passages)
    for mmap_file in (True, False):
        store = MappedPassages(tmp_path / "p.jsonl", mmap_file=mmap_file)
        assert len(store) == 2 and list(store) == passages and store[-1] == passages[1]
        assert store.fingerprint() == fingerprint
        with pytest.raises(IndexError, match="out of range"):
            store[2]
    # The fingerprint follows content only: another order is another corpus.
    assert corpus_fingerprint(passages[::-1]) != fingerprint


def test_truncated_store_is_detected(tmp_path):
    write_passages(tmp_path / "p.jsonl", normalize_passages(["one", "two"]))
    data = (tmp_path / "p.jsonl").read_bytes()
    (tmp_path / "p.jsonl").write_bytes(data[:-5])
    with pytest.raises(CorpusError, match="truncated"):
        MappedPassages(tmp_path / "p.jsonl")
    (tmp_path / "p.jsonl.offsets.npy").unlink()
    with pytest.raises(FileNotFoundError, match="offsets.npy is missing"):
        MappedPassages(tmp_path / "p.jsonl")


def test_passages_that_cannot_be_json_are_named():
    with pytest.raises(CorpusError, match="passage 1 cannot be stored as JSON"):
        corpus_fingerprint(normalize_passages(["fine", {"text": "x", "score": float("nan")}]))
    with pytest.raises(CorpusError, match="passage 0 cannot be stored as JSON"):
        corpus_fingerprint(normalize_passages([{"text": "x", "vector": object()}]))
