"""The main job, `dsp demo`: on a couple of questions with the real embedded model, and its choice of
settings by the LM's declared size with a scripted one."""

from __future__ import annotations

import pytest
from helpers import ListRM, ScriptedLM

import dsp
from programs import open_qa


def test_the_demo_prints_a_results_table_and_writes_per_example_rows(data_dir, tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    from programs.demo import run_demo

    rows = run_demo(n=2, out=str(tmp_path))
    out = capsys.readouterr().out
    assert [r[0] for r in rows] == ["vanilla", "retrieve_then_read", "dsp"]
    assert "program" in out and "EM %" in out and str(tmp_path) in out
    for name in ("vanilla", "retrieve_then_read", "dsp"):
        identity, rows = dsp.evaluation.read_run(tmp_path / f"nq-{name}.jsonl")
        assert len(rows) == 2 and all(row["error"] is None for row in rows)
        assert identity["program_name"] == name and identity["lm"]["lm"]["provider"] == "llamacpp"


class _SmallLM(ScriptedLM):
    small = True  # declared as the embedded llama.cpp client declares it


@pytest.mark.parametrize("lm_class, options", [(_SmallLM, dict(open_qa.PRESETS["small"])), (ScriptedLM, {})])
def test_the_demo_picks_the_dsp_programs_preset_from_the_lms_declared_size(lm_class, options, tmp_path, monkeypatch,
                                                                           capsys):
    """A small LM (`dsp.LM.small`, as the embedded one declares) runs the small-model preset, any other the
    paper's settings; the provider's name plays no part (this scripted LM is no llamacpp)."""
    from programs import demo

    questions = [dsp.Example(question=f"question {i}?", answer=["Paris"]) for i in range(2020)]
    lm = lm_class(lambda prompt, request: [" Paris"] * request.get("n", 1))
    monkeypatch.setattr(demo, "load_litm_oracle", lambda: questions)
    monkeypatch.setattr(demo, "demo_corpus", lambda: ("two passages", []))
    monkeypatch.setattr(dsp, "lm_from_spec", lambda spec: lm)
    monkeypatch.setattr(dsp, "BM25", lambda passages: ListRM([("Paris | Paris is the capital of France.", 1.0)]))
    demo.run_demo(n=2, programs=["dsp"], out=str(tmp_path))
    identity, rows = dsp.evaluation.read_run(tmp_path / "nq-dsp.jsonl")
    assert identity["options"] == options and len(rows) == 2
    assert max(entry["params"].get("n", 1) for entry in lm.history) == (5 if options else 20)  # the voting samples


def test_each_progress_bar_of_the_demo_names_its_program(tmp_path, monkeypatch, capsys):
    from programs import demo

    questions = [dsp.Example(question=f"question {i}?", answer=["Paris"]) for i in range(2020)]
    monkeypatch.setattr(demo, "load_litm_oracle", lambda: questions)
    monkeypatch.setattr(demo, "demo_corpus", lambda: ("one passage", []))
    monkeypatch.setattr(dsp, "lm_from_spec", lambda spec: ScriptedLM(lambda prompt, request: [" Paris"] *
                                                                     request.get("n", 1)))
    monkeypatch.setattr(dsp, "BM25", lambda passages: ListRM([("Paris | Paris is the capital of France.", 1.0)]))
    demo.run_demo(n=2, programs=["vanilla", "dsp"], out=str(tmp_path))
    bars = capsys.readouterr().err  # tqdm draws on stderr
    assert "vanilla (EM)" in bars and "dsp (EM)" in bars and "evaluate (EM)" not in bars
