"""Metrics: DSP's normalisation, EM, F1, HotPotF1, nF1, best_subspan_em, DPR answer match."""

from __future__ import annotations

import gzip
import json

import pytest

import dsp
from dsp import metrics


def test_normalize_text_follows_dsp():
    assert dsp.normalize_text("The  Killing  Season!") == "killing season"
    assert dsp.normalize_text("Café") == "cafe\u0301"  # NFD keeps the accent as a combining mark
    assert dsp.normalize_text("an apple a day") == "apple day"
    assert dsp.normalize_text("theatre") == "theatre"


def test_em_and_f1():
    assert dsp.EM("Boston.", ["Boston, Massachusetts", "Boston"]) is True
    assert dsp.EM("Daytona Beach, Florida.", ["Ormond Beach"]) is False
    assert dsp.EM("x", "x") is True
    assert dsp.F1("Boston Massachusetts", ["Boston"]) == pytest.approx(2 / 3)
    assert dsp.F1("", ["Boston"]) == 0.0
    with pytest.raises(ValueError, match="list of gold answers is empty"):
        dsp.EM("x", [])
    with pytest.raises(TypeError, match="prediction must be text"):
        dsp.F1(3, ["3"])


def test_hotpot_f1_scores_yes_no_only_when_exact():
    assert dsp.HotPotF1("yes", ["no"]) == 0.0
    assert dsp.HotPotF1("yes", ["yes"]) == 1.0
    assert dsp.HotPotF1("no it is not", ["no"]) == 0.0  # a yes/no gold needs the exact answer
    assert dsp.HotPotF1("Paris France", ["Paris"]) == pytest.approx(2 / 3)
    assert dsp.HotPotF1("the answer is no", ["yes"]) == 0.0


def test_novel_f1_ignores_words_from_the_conversation_and_stopwords():
    history = "Who founded Apple? Apple was founded by Steve Jobs."
    assert dsp.nF1(history, "He founded Apple with Steve Wozniak", ["Steve Wozniak"]) == pytest.approx(1.0)
    assert dsp.nF1(history, "Steve Jobs founded Apple", ["Steve Wozniak"]) == 0.0
    assert dsp.F1("Steve Jobs founded Apple", ["Steve Wozniak"]) > 0  # plain F1 rewards the repetition
    assert dsp.nF1([history], "in 1976", ["1976"]) == 1.0
    assert dsp.nF1(history, "Steve Jobs", ["Steve Jobs"]) == 0.0  # no novel gold word: 0, as in DSP v1
    assert dsp.nF1(history, "Steve Jobs", ["Steve Jobs"], variant="dsp-extended") == 1.0  # the old fallback
    assert dsp.nF1(history, "Wozniak and others", ["Wozniak"], return_recall=True) == 1.0


def test_novel_f1_uses_dsp_v1_stopwords_by_default():
    """Issue 15.11: 26 NLTK contraction fragments ("won", "ll", "didn", ...) were stopwords here, not in DSP v1."""
    assert dsp.nF1("", "won", ["won paris"]) == pytest.approx(2 / 3)
    assert dsp.nF1("", "won", ["won paris"], variant="dsp-extended") == 0.0
    assert len(metrics.STOPWORDS) == 127 and "won" not in metrics.STOPWORDS
    assert len(metrics.STOPWORDS_EXTENDED - metrics.STOPWORDS) == 26


def test_novel_f1_gives_nothing_when_no_gold_word_is_novel():
    """Issue 15.11: a gold answer of only stopwords/history words fell back to plain F1; DSP v1 gives 0."""
    assert dsp.nF1("Tell me about Paris, France.", "The no", ["no"]) == 0.0
    assert dsp.nF1("Tell me about Paris, France.", "The no", ["no"], return_recall=True) == 0.0
    assert dsp.nF1("Tell me about Paris, France.", "The no", ["no"], variant="dsp-extended") == 1.0
    assert dsp.nF1("Paris?", "Paris", ["Paris", "Lyon"]) == 0.0


def test_best_subspan_em_matches_lost_in_the_middle():
    assert dsp.best_subspan_em("The answer is Ernest Hemingway, I think", ["ernest hemingway"]) == 1.0
    assert dsp.best_subspan_em("Hemingway", ["Ernest Hemingway"]) == 0.0


@pytest.mark.parametrize("prediction, gold, expected", [
    ("a\u0301 x", "the\u0301 x", 0.0),  # a combining mark is a word character to `regex`, not to `re`
    ("a\u200d x", "the\u200d x", 0.0),  # so is ZWJ
    ("an\U0001e4d0 x", "the\U0001e4d0 x", 0.0),  # and a Unicode 15 letter unknown to Python 3.11's `re`
    ("\u00b2 x", "the\u00b2 x", 1.0),  # "²" is one to `re`, not to `regex`: "the" is an article here
])
def test_best_subspan_em_strips_articles_with_regex_as_lost_in_the_middle_does(prediction, gold, expected):
    """Issue 15.12: articles were found with `re`, whose word characters differ from `regex`'s."""
    assert dsp.best_subspan_em(prediction, [gold]) == expected


def test_has_answer_is_a_token_match_not_a_substring():
    assert dsp.has_answer("He was born in 1925 in Texas.", ["1925"])
    assert not dsp.has_answer("He was born in 19250.", ["1925"])
    assert dsp.passage_match(["x", "Foxcatcher Team | the team"], ["Foxcatcher"])
    assert not dsp.passage_match(["nothing here"], ["Foxcatcher"])
    assert dsp.answer_match("Foxcatcher team", ["Foxcatcher", "Foxcatcher Team"])
    assert dsp.answer_match("Boston Massachusetts", ["Boston"], frac=0.5)


def test_has_answer_agrees_with_the_litm_oracle_annotations(data_dir):
    """Every oracle gold passage is annotated hasanswer=true under DPR matching; check ours agrees."""
    with gzip.open(data_dir / "litm" / "nq-open-oracle.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for _, line in zip(range(400), f)]
    annotated = [r["ctxs"][0]["hasanswer"] for r in rows]
    ours = [dsp.has_answer(r["ctxs"][0]["text"], r["answers"]) for r in rows]
    agreement = sum(a == b for a, b in zip(annotated, ours)) / len(rows)
    assert agreement >= 0.97, agreement
