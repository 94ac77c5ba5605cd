"""Example and Completions; the LM base: history, usage, length filter, seeded n>1 draws, errors."""

from __future__ import annotations

import json

import pytest
from helpers import ScriptedLM

import dsp
from dsp.clients import lm as lm_module


def test_example_is_a_dict_with_attribute_access():
    x = dsp.Example({"question": "q"}, answer="a")
    assert x.question == "q" and x["answer"] == "a" and isinstance(x, dict)
    x.context = ["c"]
    assert x == {"question": "q", "answer": "a", "context": ["c"]}
    with pytest.raises(AttributeError, match="no field 'missing'"):
        x.missing
    assert x.copy(answer="b").answer == "b" and x.answer == "a"
    assert x.without("answer", "absent") == {"question": "q", "context": ["c"]}
    assert json.loads(json.dumps(x)) == x
    with pytest.raises(TypeError, match="takes a dict"):
        dsp.Example(["not", "a", "dict"])
    del x.context
    assert "context" not in x


def test_demos_at_overlays_stage_records_without_the_augmented_flag():
    demo = dsp.Example(question="q", augmented=True, qa={"question": "q", "rationale": "r", "augmented": False})
    plain = {"question": "p"}
    x = dsp.Example(demos=[demo, plain]).demos_at(lambda d: d["qa"])
    assert x.demos[0].rationale == "r" and x.demos[0].augmented is True
    assert x.demos[1] == {"question": "p"} and isinstance(x.demos[1], dsp.Example)


def test_completions_read_fields():
    one = dsp.Completions([{"answer": "a"}])
    many = dsp.Completions([{"answer": "a"}, {"answer": "b"}])
    assert one.answer == "a" and many.answer == ["a", "b"] and many[1].answer == "b"
    assert [c.answer for c in many] == ["a", "b"] and len(many) == 2
    with pytest.raises(AttributeError):
        one.rationale


def test_history_is_bounded_and_inspectable(monkeypatch, capsys):
    monkeypatch.setattr(lm_module, "HISTORY_SIZE", 3)
    lm = ScriptedLM(lambda prompt, request: [" out-" + prompt])
    for i in range(5):
        lm(f"p{i}")
    assert [h["prompt"] for h in lm.history] == ["p2", "p3", "p4"]
    assert lm.inspect_history(n=2) is None  # printed, not also returned: a notebook shows it once
    printed = capsys.readouterr().out
    assert "p3" in printed and "out-p4" in printed and "p2" not in printed
    shown = lm.inspect_history(n=2, printed=False)
    assert shown.strip() == printed.strip() and capsys.readouterr().out == ""


def test_inspect_history_colours_only_on_a_terminal(monkeypatch, capsys):
    import io
    import sys

    lm = ScriptedLM(lambda prompt, request: [" out"])
    lm("p")
    lm.inspect_history()  # captured: not a terminal, as a file or a pipe
    assert "\x1b[" not in capsys.readouterr().out
    assert lm.inspect_history(printed=False) == "p out"

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    lm.inspect_history()
    assert "p\x1b[32m out\x1b[0m" in terminal.getvalue()


def test_usage_counts_real_requests_and_cache_hits_separately():
    lm = ScriptedLM(lambda prompt, request: [" x"])
    lm.prices = (1.0, 2.0)
    lm("one two three")
    lm("one two three")
    assert lm.usage.requests == 1 and lm.usage.cached_requests == 1
    assert lm.usage.prompt_tokens == 3 and lm.usage.completion_tokens == 1
    assert lm.usage.cost == pytest.approx((3 * 1.0 + 1 * 2.0) / 1e6)
    assert lm.usage.as_dict()["total_tokens"] == 4


def test_length_truncated_completions_are_dropped_when_one_finished():
    lm = ScriptedLM(lambda prompt, request: [{"text": " cut", "finish_reason": "length"}, " done"])
    assert lm("p") == [" done"]
    assert lm("p", only_completed=False) == [" cut", " done"]
    only_cut = ScriptedLM(lambda prompt, request: [{"text": " cut", "finish_reason": "length"}], model="cut")
    assert only_cut("p") == [" cut"]  # nothing finished: keep what there is


class OneAtATime(ScriptedLM):
    native_n = False


def test_n_draws_on_a_single_sample_backend_are_seeded_and_cached_each():
    lm = OneAtATime(lambda prompt, request: [f" seed={request['seed']}"])
    assert lm("p", n=3, temperature=0.7) == [" seed=0", " seed=1", " seed=2"]
    assert lm.num_requests == 3
    assert lm("p", n=5, temperature=0.7) == [f" seed={i}" for i in range(5)]
    assert lm.num_requests == 5  # the first three draws came from the cache
    assert lm("p", n=2, temperature=0.7, seed=10) == [" seed=10", " seed=11"]


def test_lm_bad_input_is_named():
    lm = ScriptedLM(lambda prompt, request: [])
    with pytest.raises(TypeError, match="prompt must be text"):
        lm(["a"])
    with pytest.raises(ValueError, match="prompt is empty"):
        lm("   ")
    with pytest.raises(ValueError, match="n must be a positive integer"):
        lm("p", n=0)
    with pytest.raises(ValueError, match="returned no completions"):
        lm("p")
    with pytest.raises(ValueError, match="needs a model name"):
        ScriptedLM(lambda p, r: [], model="")
