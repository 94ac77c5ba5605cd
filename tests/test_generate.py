"""generate, majority, branch: DSP v1 semantics with a scripted LM."""

from __future__ import annotations

import pytest
from helpers import ScriptedLM

import dsp
from templates.intro import qa_template, qa_template_with_CoT, rewrite_template

X = dsp.Example(question="Who?", context=["T | text"])


def lm_of(*texts, **params):
    """An LM that returns the given texts (a list per call, cycling through the arguments)."""
    calls = iter(texts)
    return ScriptedLM(lambda prompt, request: next(calls), **params)


def test_generate_parses_one_completion_and_records_the_stage():
    lm = lm_of([" because\nAnswer: Paris"], max_tokens=150)
    with dsp.settings.context(lm=lm, cache=False):
        x, completions = dsp.generate(qa_template_with_CoT)(X, stage="qa")
    assert completions.answer == "Paris" and completions[0].rationale == "because"
    assert len(completions) == 1 and [c.answer for c in completions] == ["Paris"]
    assert x.qa.answer == "Paris" and x.qa.question == "Who?" and "demos" not in x.qa
    assert x.completions is not None and "answer" not in X  # the input is not modified


def test_generate_keeps_the_most_complete_completions():
    lm = lm_of([" no answer here", " r1\nAnswer: A", {"text": " r2\nAnswer: B", "finish_reason": "length"},
                " r3\nAnswer: C"])
    with dsp.settings.context(lm=lm, cache=False):
        _, completions = dsp.generate(qa_template_with_CoT, n=4, temperature=0.7)(X)
    # the length-cut one is dropped (others finished), the one without an answer is dropped
    assert [c.answer for c in completions] == ["A", "C"]
    assert completions.answer == ["A", "C"]


def test_a_completion_without_the_last_field_is_continued_greedily():
    lm = lm_of([" partial\n\nthoughts"], [" Rome"], max_tokens=150)
    with dsp.settings.context(lm=lm, cache=False):
        x, completions = dsp.generate(qa_template_with_CoT, n=1)(X, stage="qa")
    assert completions.answer == "Rome" and completions[0].rationale == "partial\n\nthoughts"
    first, second = lm.history[0], lm.history[1]
    assert second["prompt"] == first["prompt"] + " partial thoughts\n\nAnswer:"
    assert second["params"]["max_tokens"] == 75 and second["params"]["n"] == 1
    assert second["params"]["temperature"] == 0.0


def test_the_short_template_continuation_uses_a_single_newline():
    lm = lm_of([" the singer"], [" who sings"])
    with dsp.settings.context(lm=lm, cache=False):
        _, completions = dsp.generate(rewrite_template)(dsp.Example(question="Q"))
    assert completions.query == "who sings"
    assert lm.history[1]["prompt"] == lm.history[0]["prompt"] + " the singer\nSearch Query:"


def test_stop_sequences_reach_the_lm_and_a_stopped_completion_is_continued():
    def respond(prompt, request):
        full = " step one\n\nstep two\nAnswer: 7"
        stop = request.get("stop")
        cut = min((full.find(s) for s in stop if s in full), default=len(full)) if stop else len(full)
        return [full[:cut]] if "Answer:" not in prompt[-8:] else [" 7"]

    lm = ScriptedLM(respond)
    with dsp.settings.context(lm=lm, cache=False):
        _, completions = dsp.generate(qa_template_with_CoT, stop=["\n\n"])(X)
    assert lm.history[0]["params"]["stop"] == ["\n\n"]
    assert completions[0].rationale == "step one" and completions.answer == "7"


def test_empty_completions_end_as_empty_fields_after_two_continuations():
    lm = lm_of([""], [""], [""])
    with dsp.settings.context(lm=lm, cache=False):
        _, completions = dsp.generate(qa_template_with_CoT)(X)
    assert len(lm.history) == 3  # the call and at most two continuations
    assert completions.answer == "" and completions[0].rationale == ""


def test_demos_are_overlaid_with_their_stage_records():
    demo = dsp.Example(question="Dq", answer="gold", augmented=True,
                       qa=dsp.Example(question="Dq", context=["ctx"], rationale="R", answer="pred"))
    lm = lm_of([" r\nAnswer: a"])
    with dsp.settings.context(lm=lm, cache=False):
        dsp.generate(qa_template_with_CoT)(X.copy(demos=[demo]), stage="qa")
    prompt = lm.history[0]["prompt"]
    assert "Context:\n«ctx»\n\nQuestion: Dq\n\nRationale: Let's think step by step. R\n\nAnswer: pred" in prompt


def test_generate_records_a_trace_when_asked():
    trace = []
    lm = lm_of([" r\nAnswer: a"])
    with dsp.settings.context(lm=lm, cache=False, trace=trace):
        dsp.generate(qa_template_with_CoT)(X, stage="qa")
    assert trace[0]["stage"] == "qa" and trace[0]["completions"][0]["answer"] == "a"


def test_generate_errors():
    with pytest.raises(TypeError, match="needs a dsp.Template"):
        dsp.generate("Question: {q}")
    with dsp.settings.context(lm=None):
        with pytest.raises(RuntimeError, match="no LM is configured"):
            dsp.generate(qa_template)(dsp.Example(question="q"))
    with dsp.settings.context(lm=lm_of([]), cache=False):
        with pytest.raises(ValueError, match="returned no completions"):
            dsp.generate(qa_template)(dsp.Example(question="q"))
    with dsp.settings.context(lm=lm_of([" a"]), cache=False):
        with pytest.raises(TypeError, match="takes an Example"):
            dsp.generate(qa_template)("q")


def test_majority_normalises_ignores_empties_and_breaks_ties_by_first_seen():
    c = dsp.Completions([dsp.Example(answer=a) for a in ["", "1828", "1925", "the 1828", "1970", "1970", None]],
                        template=qa_template)
    assert dsp.majority(c).answer == "1828"  # 1828 and 1970 tie at 2; 1828 came first
    merged = dsp.Completions([dsp.Example(answer=a) for a in ["Aerospace engineering", "x", "Aerospace Engineering"]],
                             template=qa_template)
    assert dsp.majority(merged).answer == "Aerospace engineering"  # surface form of the first winner
    empties = dsp.Completions([dsp.Example(answer=""), dsp.Example(answer="")], template=qa_template)
    assert dsp.majority(empties).answer == ""
    assert dsp.majority(c, normalize=None).answer == "1970"  # raw values: "the 1828" no longer counts as 1828
    with pytest.raises(ValueError, match="pass field"):
        dsp.majority([dsp.Example(answer="a")])
    assert dsp.majority([dsp.Example(answer="a")], field="answer").answer == "a"


def test_an_extractive_majority_counts_only_answers_found_in_the_context():
    c = dsp.Completions([dsp.Example(answer=a) for a in ["Lyon", "Lyon", "Paris", "", "the capital"]],
                        template=qa_template)
    context = ["Paris | Paris is the capital of France.", "Nice | a city."]
    assert dsp.majority(c).answer == "Lyon"
    assert dsp.majority(c, context=context).answer == "Paris"  # "the capital" is found too, but later, 1 vote each
    assert dsp.majority(c, context="Lyon, Lyon.").answer == "Lyon"  # one passage as a string
    nowhere = dsp.Completions([dsp.Example(answer=a) for a in ["Rome", "Oslo", "Oslo"]], template=qa_template)
    assert dsp.majority(nowhere, context=context).answer == "Oslo"  # nothing found: everyone votes
    assert dsp.majority(c, context=[]).answer == "Lyon"


def test_branch_samples_distinct_reproducible_paths():
    def respond(prompt, request):
        return [f" answer-{request.get('seed')}-{request['temperature']}"]

    lm = ScriptedLM(respond)

    def program(x):
        return dsp.generate(qa_template)(x)[1].answer

    with dsp.settings.context(lm=lm):
        first = dsp.branch(program, n=3, temperature=0.9)(dsp.Example(question="q"))
        again = dsp.branch(program, n=3, temperature=0.9)(dsp.Example(question="q"))
    assert len(set(first)) == 3 and all(a.endswith("-0.9") for a in first)
    assert again == first and lm.num_requests == 3  # the rerun came from the cache
    assert dsp.settings.lm_overrides is None  # nothing leaks out of the branches
