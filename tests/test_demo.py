"""The main job, `dsp demo`, on a couple of questions with the real embedded model."""

from __future__ import annotations

import pytest

import dsp


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
