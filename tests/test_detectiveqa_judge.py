"""programs.detectiveqa.judge: the judge's prompt, its parsing and its cache, with a scripted judge LM."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ScriptedLM

from programs.detectiveqa import ReasoningJudge, judge_prompt, load_detectiveqa, parse_score
from programs.detectiveqa.judge import CLUE_CHARS, REASONING_CHARS

FIXTURE = Path(__file__).parent / "fixtures" / "detectiveqa"


@pytest.fixture(scope="module")
def fixture_set():
    return load_detectiveqa(FIXTURE)


def test_prompt_holds_reference_steps_clues_and_reasoning(fixture_set):
    question, novel = fixture_set.questions[2], fixture_set.novels["901"]  # the causeway; clues 8 and 15
    prompt = judge_prompt(question, novel, "A", "The tide covered the causeway at 8:40.")
    assert "Question: Why was Ashby's story of walking across the causeway at nine o'clock impossible?" in prompt
    assert "Correct answer: A: The causeway had been under water since twenty minutes to nine" in prompt
    assert "1. Ashby said he would walk across the causeway at nine." in prompt
    assert f"[8] {novel.paragraph(8)}" in prompt and "[15] After the pudding" in prompt
    assert "Answer chosen by the model: A: The causeway had been under water" in prompt
    assert "Reasoning given by the model:\nThe tide covered the causeway at 8:40.\n" in prompt
    assert "4 = reaches the correct answer" in prompt and "0 = no reasoning" in prompt
    assert prompt.endswith("Reply with the score only.\nScore:")
    # Long reasoning and long clue paragraphs are clipped, so the reference always fits.
    long = judge_prompt(question, novel, None, "blah " * 2000)
    assert "blah " * (REASONING_CHARS // 5 + 1) not in long and "Answer chosen by the model: no option" in long
    assert all(len(line) <= CLUE_CHARS + 8 for line in long.splitlines() if line.startswith("["))


@pytest.mark.parametrize("reply, score", [
    (" 3", 3), ("Score: 2", 2), ("**4**", 4), ('{"score": 1, "why": "vague"}', 1), ("0\n\nScore: 4", 0),
    ("The reasoning cites the tide. 3/4", 3), ("5", None), ("about 2.5", None), ("good", None), ("", None),
])
def test_parse_score(reply, score):
    assert parse_score(reply) == score


def test_judge_scores_caches_and_skips_empty_reasoning(fixture_set):
    question, novel = fixture_set.questions[0], fixture_set.novels["901"]
    judge_lm = ScriptedLM(lambda prompt, request: [" 3\n\nQuestion: and on it rambles"])
    judge = ReasoningJudge(judge_lm)
    assert judge.get_name() == judge_lm.name == "scripted:scripted"
    first = judge.judge(question, novel, "C", "Ashby's boots had grey clay from the marsh path.")
    assert (first.score, first.normalized, first.path) == (3, 0.75, "judged")
    assert judge_lm.history[-1]["params"]["temperature"] == 0.0
    again = judge.judge(question, novel, "C", "Ashby's boots had grey clay from the marsh path.")
    assert again.score == 3 and len(judge_lm.prompts) == 1  # the second verdict came from dsp's cache
    empty = judge.judge(question, novel, "C", "   ")
    assert (empty.score, empty.path) == (0, "empty") and len(judge_lm.prompts) == 1
    muddled = ReasoningJudge(ScriptedLM(lambda prompt, request: ["It is rather good."]))
    verdict = muddled.judge(question, novel, "C", "clay")
    assert (verdict.score, verdict.normalized, verdict.path) == (None, None, "unparsed")
    assert verdict.as_dict()["judge_raw"] == "It is rather good."


def test_judge_falls_back_to_the_likeliest_digit(fixture_set):
    """A base-model judge that writes no score: the digit with the highest logprob after "Score:" is taken."""
    reply = {"text": " 100%", "finish_reason": "stop",
             "logprobs": {"tokens": [" 1"], "top_logprobs": [{" 1": -0.9, " 2": -0.5, " 4": -1.0, "%": -3.0}]}}
    judge_lm = ScriptedLM(lambda prompt, request: [reply])
    verdict = ReasoningJudge(judge_lm).judge(fixture_set.questions[0], fixture_set.novels["901"], "C", "clay")
    assert (verdict.score, verdict.path, verdict.raw) == (2, "logprob", " 100%")
    assert judge_lm.history[-1]["params"]["max_tokens"] == 1 and judge_lm.prompts[0] == judge_lm.prompts[1]
    strict = ReasoningJudge(ScriptedLM(lambda prompt, request: [reply]), fallback=False)
    assert strict.judge(fixture_set.questions[0], None, "C", "clay").path == "unparsed"


def test_judge_needs_an_lm(fixture_set):
    with pytest.raises(RuntimeError, match="ReasoningJudge has no LM"):
        ReasoningJudge().judge(fixture_set.questions[0], None, "C", "reasons")
