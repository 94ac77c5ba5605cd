"""README.md's program runs as written on the shared data (with a scripted LM in place of the embedded one)."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import ScriptedLM

import dsp

README = Path(__file__).resolve().parents[1] / "README.md"


def _program_snippet() -> str:
    section = README.read_text(encoding="utf-8").split("\n## A program\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_program_runs_as_written(data_dir, monkeypatch, capsys):
    lm = ScriptedLM(lambda prompt, request: [" Wilhelm Conrad Röntgen"] * request.get("n", 1))
    monkeypatch.setattr(dsp, "LlamaCpp", lambda: lm)  # the one change: no model load in a unit test
    namespace: dict = {"__name__": "readme"}
    exec(compile(_program_snippet(), str(README), "exec"), namespace)
    assert capsys.readouterr().out.strip() == "Wilhelm Conrad Röntgen"
    train = namespace["train"]
    assert len(train) == 16 and all(x.question and x.answer for x in train)  # real NQ examples
    [prompt] = lm.prompts
    assert prompt.rstrip().endswith("Question: who got the first nobel prize in physics\n\nAnswer:")
    assert sum(x.question in prompt for x in train) == 5  # the five demonstrations, from the training set
    assert "Context:\n«List of Nobel laureates in Physics | The first Nobel Prize" in prompt  # BM25's top passage
