"""Dataset loaders on the real files, clear errors for bad lines, and the verified resumable downloader
against a loopback HTTP server that serves DSP_DATA_DIR (honestly, or with corrupted bytes)."""

from __future__ import annotations

import gzip
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import dsp
from dsp import datasets


def test_loaders_read_the_real_files(data_dir):
    nq = datasets.load_nq_open()
    assert len(nq) == 3610 and nq[0].question and isinstance(nq[0].answer, list)
    squad = datasets.load_squad()
    corpus = datasets.squad_corpus()
    assert len(squad) == 10570 and len(corpus) == 2067
    ids = {p["id"] for p in corpus}
    assert all(q.gold_passage_id in ids for q in squad)
    by_id = {p["id"]: p["text"] for p in corpus}
    assert sum(dsp.has_answer(by_id[q.gold_passage_id], q.answer) for q in squad[:500]) >= 495
    hotpot = datasets.load_hotpotqa()
    assert len(hotpot) == 100 and Counter(h.type for h in hotpot) == {"bridge": 85, "comparison": 15}
    assert all(len(h.paragraphs) == 10 and h.gold_titles for h in hotpot)
    assert all(any(p.startswith(t + " | ") for p in h.paragraphs) for h in hotpot for t in h.gold_titles)
    pool = datasets.hotpotqa_corpus()  # the pooled distractor contexts, then the abstracts sample
    titles = {p["title"] for p in pool}
    assert len(titles) == len(pool) == len({p["id"] for p in pool})
    assert all(set(h.gold_titles) <= titles for h in hotpot)
    assert sum(p["id"].startswith("wiki17-") for p in pool) == len(pool) - len({p.split(" | ")[0] for h in hotpot for p in h.paragraphs})
    assert len(datasets.load_hotpotqa_simplified()) == 7405
    assert [len(datasets.load_hotpotqa_csv(s)) for s in ("train", "dev", "test")] == [500, 200, 200]
    assert "answer_category" in datasets.load_hotpotqa_csv("dev")[0]
    qrecc = datasets.load_qrecc()
    pieces = datasets.qrecc_corpus(words=200)  # whole pages overflow a 4k context: cut, nothing lost
    assert max(len(p["text"].split()) for p in pieces) == 200 and len({p["id"] for p in pieces}) == len(pieces)
    pages = datasets.read_jsonl(data_dir / "qrecc" / "passages.jsonl.gz")
    assert " ".join(p["text"] for p in pieces).split() == " ".join(r["text"] for _, r in pages).split()
    with pytest.raises(ValueError, match="words must be a positive integer, got 0"):
        datasets.qrecc_corpus(words=0)
    assert len(qrecc) == 36 and len({q.Conversation_no for q in qrecc}) == 19
    first = [q for q in qrecc if q.Conversation_no == 1]
    assert [q.Turn_no for q in first] == list(range(1, 11))
    # the original convention: Context alternates the earlier turns' Rewrite and Answer
    assert first[2].Context == [first[0].Rewrite, first[0].Answer, first[1].Rewrite, first[1].Answer]
    oracle = datasets.load_litm_oracle()
    assert len(oracle) == 2655 and oracle[0].gold_passage["text"]


def test_a_bad_line_names_the_file_and_line(tmp_path):
    f = tmp_path / "nq.jsonl"
    f.write_text('{"question": "q", "answer": ["a"]}\n{"question": "q2", "answer": \n')
    with pytest.raises(datasets.DataFileError, match=r"nq.jsonl, line 2: not valid JSON"):
        datasets.load_nq_open(f)
    f.write_text('{"question": "q", "answer": ["a"]}\n\n{"question": 5, "answer": ["a"]}\n')
    with pytest.raises(datasets.DataFileError, match=r"nq.jsonl, line 3: field 'question'"):
        datasets.load_nq_open(f)
    f.write_text('{"question": "q", "answer": []}\n')
    with pytest.raises(datasets.DataFileError, match=r"line 1: 'answer' must be a non-empty list"):
        datasets.load_nq_open(f)
    gz = tmp_path / "broken.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"question": "q", "answer": ["a"]}\n' * 100)[:60])
    with pytest.raises(datasets.DataFileError, match="broken.jsonl.gz: unreadable"):
        datasets.load_nq_open(gz)


def test_splits_follow_the_protocol():
    pool = [dsp.Example(question=str(i), answer=[str(i)]) for i in range(50)]
    shots = datasets.few_shot_train(pool, k=16, seeds=range(5))
    assert all(len(v) == 16 and len({x.question for x in v}) == 16 for v in shots.values())
    assert shots[0] != shots[1] and datasets.few_shot_train(pool, 16, [0])[0] == shots[0]
    train_pool, rest = datasets.split_pool(pool, 20)
    assert len(train_pool) == 20 and not {x.question for x in train_pool} & {x.question for x in rest}
    with pytest.raises(ValueError, match="cannot draw 60"):
        datasets.few_shot_train(pool, k=60)


class _Files(BaseHTTPRequestHandler):
    """Serves files under `root` with Range support; `corrupt` flips one byte of every response."""

    root: Path
    corrupt = False
    requests: list

    def do_GET(self):
        path = self.root / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        if self.corrupt:
            data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        start = 0
        header = self.headers.get("Range")
        self.requests.append(header)
        if header:
            start = int(header.split("=")[1].split("-")[0])
        body = data[start:]
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(len(body)))
        if header:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def file_server(data_dir):
    handler = type("Handler", (_Files,), {"root": data_dir, "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


NAME = "nq_open/NQ-open.dev.jsonl"


def test_download_is_verified_and_atomic(file_server, tmp_path, data_dir):
    url, handler = file_server
    entry = datasets.REGISTRY[NAME]
    dest = datasets.download(f"{url}/{NAME}", tmp_path / NAME, entry.checksum)
    assert dest.read_bytes() == (data_dir / NAME).read_bytes()
    assert not (tmp_path / (NAME + ".part")).exists()


def test_a_corrupted_download_is_rejected_and_removed(file_server, tmp_path):
    url, handler = file_server
    handler.corrupt = True
    with pytest.raises(datasets.ChecksumError, match="sha256 is .* expected f15567f3"):
        datasets.download(f"{url}/{NAME}", tmp_path / "x.jsonl", datasets.REGISTRY[NAME].checksum)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_download_resumes_with_a_range_request(file_server, tmp_path, data_dir):
    url, handler = file_server
    full = (data_dir / NAME).read_bytes()
    (tmp_path / "x.jsonl.part").write_bytes(full[:150_000])
    dest = datasets.download(f"{url}/{NAME}", tmp_path / "x.jsonl", datasets.REGISTRY[NAME].checksum)
    assert handler.requests == ["bytes=150000-"] and dest.read_bytes() == full


def test_fetch_prefers_the_mirror_then_downloads_registered_files(file_server, tmp_path, monkeypatch, data_dir):
    url, handler = file_server
    assert datasets.fetch(NAME) == data_dir / NAME and handler.requests == []
    monkeypatch.delenv("DSP_DATA_DIR")
    monkeypatch.setenv("DSP_DOWNLOAD_DIR", str(tmp_path / "dl"))
    monkeypatch.setitem(datasets.REGISTRY, NAME, datasets.DataFile(NAME, f"{url}/{NAME}", datasets.REGISTRY[NAME].checksum))
    assert len(datasets.load_nq_open()) == 3610  # the loader downloaded it
    assert (tmp_path / "dl" / NAME).is_file() and len(handler.requests) == 1
    datasets.load_nq_open()
    assert len(handler.requests) == 1  # a finished download is reused
    with pytest.raises(FileNotFoundError, match="derived file with no public download"):
        datasets.fetch("wiki2018/passages.jsonl.gz")
    with pytest.raises(KeyError, match="neither in DSP_DATA_DIR nor registered"):
        datasets.fetch("nope/nothing.json")


# The registered originals a mirror replaces with a derived file (see DSP_DATA_DIR's README): the only
# registered names a mirror may lack. Every other one, a derived file above all, must be there.
REPLACED_BY_DERIVED = {"hotpotqa/hotpot_dev_distractor_v1.json", "squad/dev-v1.1.json", "qrecc/qrecc_data.zip"}


def test_the_mirror_holds_the_registered_files_with_their_checksums(data_dir):
    expected = [name for name in datasets.REGISTRY if name not in REPLACED_BY_DERIVED]
    assert [name for name in expected if not (data_dir / name).is_file()] == []
    assert all(datasets.REGISTRY[name].url is not None for name in REPLACED_BY_DERIVED)
    for name, entry in datasets.REGISTRY.items():
        if (data_dir / name).is_file():
            datasets.verify(data_dir / name, entry.checksum)
