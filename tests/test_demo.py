"""The main job, `dsp demo`, on a couple of questions with the real embedded model."""

from __future__ import annotations

import json

import pytest


def test_the_demo_prints_a_results_table_and_writes_per_example_rows(data_dir, tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    from dsp.demo import run_demo

    rows = run_demo(n=2, out=str(tmp_path))
    out = capsys.readouterr().out
    assert [r[0] for r in rows] == ["vanilla", "retrieve_then_read", "dsp"]
    assert "program" in out and "EM %" in out and str(tmp_path) in out
    for name in ("vanilla", "retrieve_then_read", "dsp"):
        lines = (tmp_path / f"nq-{name}.jsonl").read_text().splitlines()
        assert len(lines) == 2 and all(json.loads(line)["error"] is None for line in lines)
