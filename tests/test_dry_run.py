"""`dsp.compiling.plan` and `dsp compile --dry-run`: a compile's LM requests and prompt tokens projected
from a few probed examples and the cache, without one LM call."""

from __future__ import annotations

import pytest
from compile_programs import cot_reader, reader
from helpers import ScriptedLM, WordCountingLM

import dsp
from dsp.compiling import DemoSpace, Space, plan
from dsp.compiling.plan import placeholder, race_schedule

RAW = DemoSpace(kinds=("raw",), ks=(2,), selects=("random",), seeds=2)
TRAIN = [dsp.Example(question=f"what is q{i}?", answer=[f"a{i}"]) for i in range(60)]


def _refusing(model: str = "dry", counts_tokens: bool = False) -> ScriptedLM:
    """An LM that fails the test if it is ever asked for a completion."""
    def respond(prompt: str, request: dict) -> list[str]:
        pytest.fail(f"the dry run called the LM with a prompt ending {prompt[-60:]!r}")

    return (WordCountingLM if counts_tokens else ScriptedLM)(respond, model=model)


def three_calls(question: str, train: list, demos: list | None = None, rounds: int = 3) -> dsp.Example:
    """`rounds` LM requests an example, each a prompt of its own (no LM output is used)."""
    for i in range(rounds):
        dsp.settings.lm(f"round {i} of {question}\nAnswer:")
    return dsp.Example(question=question, answer="a")


def test_the_dry_run_projects_the_requests_of_a_program_whose_calls_it_knows_without_calling_the_lm():
    lm = _refusing()
    config = dsp.CompileConfig(space=Space(options={"rounds": [1]}, demos=RAW), candidates=4, val=40, progress=False)
    with dsp.settings.context(lm=lm):
        projected = plan(three_calls, TRAIN, dsp.EM, config, probe=2)
    assert lm.prompts == []
    rungs, each, most = race_schedule(config, 4, 40)
    assert (projected.rungs, projected.each, rungs, each) == ([20, 40], 40, [20, 40], 40)
    rows = {row.key: row for row in projected.rows}
    assert list(rows) == ["baseline", "baseline-rounds1", "raw2-random0-rounds1", "raw2-random1-rounds1"]
    assert rows["baseline"].per_example() == 3.0 and rows["baseline-rounds1"].per_example() == 1.0
    assert all(row.probed == 2 and row.examples == 40 and row.cached == 0 and row.errors == 0 for row in rows.values())
    assert projected.new_requests() == 40 * (3 + 1 + 1 + 1)
    # Tokens of a client that cannot count its own: about four characters a token, per request.
    _, heldout = dsp.compiling.split_train(TRAIN, 40, 0)
    assert rows["baseline-rounds1"].prompt_tokens == sum(-(-len(f"round 0 of {e.question}\nAnswer:") // 4)
                                                         for e in heldout[:2])
    text = str(projected)
    assert text.startswith("A projection, not a count: nothing was sent to the LM. 4 candidates")
    assert "estimated at 4 characters a token" in text and "stand-in LM" in text
    assert text.splitlines()[-1].split()[:2] == ["total", str(40 * 6)]


def test_the_bootstrap_is_projected_and_a_model_that_counts_tokens_counts_them():
    lm = _refusing(counts_tokens=True)
    space = Space(demos=DemoSpace(kinds=("raw", "augmented"), ks=(2,), selects=("random",), seeds=1))
    config = dsp.CompileConfig(space=space, candidates=3, val=20, bootstrap_limit=12, progress=False)
    with dsp.settings.context(lm=lm):
        projected = plan(reader, TRAIN, dsp.EM, config, probe=3)
    assert lm.prompts == []
    rows = {row.key: row for row in projected.rows}
    assert list(rows) == ["bootstrap", "baseline", "raw2-random0", "augmented2-random0"]
    assert rows["bootstrap"].examples == 12 and rows["bootstrap"].probed == 3
    assert all(row.per_example() == 1.0 for row in rows.values())  # reader makes one request an example
    assert projected.new_requests() == 12 + 3 * 20
    assert rows["baseline"].prompt_tokens > 0 and "counted by the LM's tokenizer" in str(projected)
    assert "probed with raw demos" in str(projected)


def test_a_two_field_completion_is_one_request_and_cached_requests_cost_nothing(tmp_path):
    """cot_reader asks for a rationale and an answer in one completion: the stand-in's placeholder fills both,
    so `generate` continues nothing (one request an example, as with a real completion). Requests the
    cache holds are counted as cached; the stand-in writes nothing to the cache."""
    def right(prompt: str, request: dict) -> list[str]:
        number = prompt.rsplit("Question: what is q", 1)[1].split("?")[0]
        return [f" it says so.\n\nAnswer: a{number}"]

    config = dsp.CompileConfig(space=Space(demos=RAW), candidates=2, val=20, progress=False)
    real = ScriptedLM(right, model="cot")
    with dsp.settings.context(lm=real):  # the real compile's first two examples of each candidate, cached
        search = dsp.compiling.search.prepare(cot_reader, TRAIN, dsp.EM, config)
        for candidate in search.chosen:
            dsp.compiling.search.evaluate_candidate(search, candidate, 2, {"augmented": [], "gold": []})
    asked = len(real.prompts)  # fewer than 4: the program as written drew the same demos as a candidate
    with dsp.settings.context(lm=_refusing("cot")):
        warm = plan(cot_reader, TRAIN, dsp.EM, config, probe=3)
    assert [(row.requests, row.cached) for row in warm.rows] == [(3, 2), (3, 2)]
    assert warm.new_requests() == 2 * -(-20 // 3)  # a third of the examples new: 7 of 20, rounded up
    # The placeholder the stand-in answered the third example with was not cached: the real LM is asked.
    with dsp.settings.context(lm=real):
        dsp.compiling.search.evaluate_candidate(search, search.chosen[0], 3, {"augmented": [], "gold": []})
    assert len(real.prompts) == asked + 1


def test_the_placeholder_fills_the_fields_the_prompt_still_asks_for():
    from templates.qa import qa_with_cot

    x = dsp.Example(question="who?", context=["A | b"], demos=[])
    prompt = qa_with_cot(x)
    filled = qa_with_cot.extract(x, placeholder(prompt))
    assert filled.rationale == "dry run" and filled.answer == "dry run"
    assert placeholder("no format guide here") == " dry run"


def test_plan_checks_its_arguments():
    with pytest.raises(ValueError, match="probe must be a positive number of examples, got 0"):
        plan(reader, TRAIN, dsp.EM, probe=0)
    with pytest.raises(TypeError, match="config must be a dsp.CompileConfig, got dict"):
        plan(reader, TRAIN, dsp.EM, {"candidates": 2})


def test_compile_config_refuses_a_bad_field_in_one_line_naming_it():
    for field, value in [("candidates", 0), ("val", -1), ("bootstrap_limit", 0), ("passing", 0), ("alpha", 1),
                         ("budget", True), ("seed", -1), ("vectorizer", "tfidf"), ("space", {}), ("racing", 1),
                         ("bootstrap_demos", -1), ("require_context", "yes"), ("progress", None)]:
        with pytest.raises(ValueError, match=rf"^CompileConfig\.{field}: .*, got ") as refused:
            dsp.CompileConfig(**{field: value})
        assert "\n" not in str(refused.value)
    with pytest.raises(TypeError, match="unexpected keyword argument 'candidates'"):
        dsp.compile(reader, TRAIN, dsp.EM, candidates=3)  # the old keywords are gone: one config


def test_dsp_compile_dry_run_prints_the_projection_and_calls_no_lm(data_dir, tmp_path, monkeypatch, capsys):
    from programs.cli import main

    monkeypatch.setattr(dsp, "lm_from_spec", lambda spec=None: _refusing("cli-dry"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["compile", "retrieve_then_read", "--dataset", "nq", "--candidates", "3", "--val", "12",
                 "--bootstrap", "4", "--dry-run", "--seeds", "0,1"]) == 0
    out = capsys.readouterr().out
    assert out.count("A projection, not a count: nothing was sent to the LM. 3 candidates") == 2
    assert "== seed 0" in out and "== seed 1" in out and "bootstrap" in out and "total" in out
    assert list(work.iterdir()) == []  # nothing written: no compiled file, no rows


def costly_without_demos(question: str, train: list, demos: list | None = None) -> dsp.Example:
    """Four LM requests an example without demonstrations, one with them."""
    for i in range(1 if demos else 4):
        dsp.settings.lm(f"{i} {question}\nAnswer:")
    return dsp.Example(answer="a")


def test_the_bootstrap_probe_runs_the_program_as_the_compile_does():
    """The bootstrap row comes from `bootstrap_runs` itself (raw demos from the rest of the pool): a program
    whose bootstrap costs other than its candidates shows it."""
    space = Space(demos=DemoSpace(kinds=("gold",), ks=(1,), selects=("random",), seeds=1))
    with dsp.settings.context(lm=_refusing()):
        projected = plan(costly_without_demos, TRAIN, dsp.EM,
                         dsp.CompileConfig(space=space, candidates=2, val=20, bootstrap_limit=5, progress=False))
    rows = {row.key: row.per_example() for row in projected.rows}
    assert rows == {"bootstrap": 1.0, "baseline": 4.0, "gold1-random0": 1.0}
