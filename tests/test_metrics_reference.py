"""Differential test: dsp.metrics against reference implementations of the definitions they claim
(tests/metric_references.py: SQuAD v1.1, HotPotQA, DSP v1, Lost in the Middle), on seeded random pairs.

Which definition each dsp function follows, and the one documented difference:
- normalize_text, EM, F1, HotPotF1, nF1 follow DSP v1 exactly: 0 disagreements allowed.
- Against SQuAD v1.1 (EM, F1) and HotPotQA (HotPotF1) they differ by DSP v1's Unicode NFD step only:
  precomposed and decomposed letters become equal ("café" = "cafe\\u0301"), and NFD exposes an article
  inside an accented word ("thé" -> "the" + U+0301, which `re` splits, so the "the" is dropped). Every such
  disagreement must vanish when the SQuAD/HotPotQA reference is given NFD-normalised text; their counts
  are asserted.
- best_subspan_em follows Lost in the Middle (no NFD, articles found with `regex`): 0 disagreements.
- nF1(variant="dsp-extended") follows this project's earlier definition (extended_nf1): 0 disagreements.
Floats are compared with an absolute tolerance of 1e-12 (the references compute F1 their own way).
"""

from __future__ import annotations

import math
import random
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

import dsp
from dsp import metrics
from metric_references import (
    DSP_V1_STOPWORDS, NLTK_EXTRA_STOPWORDS, dsp_v1_em, dsp_v1_f1, dsp_v1_hotpot_f1, dsp_v1_nf1, dsp_v1_normalize_text,
    extended_nf1, hotpot_f1, litm_best_subspan_em, squad_em, squad_f1, squad_normalize_answer,
)

SEED = 15_11_12
N_CASES = 3000

# Pieces the generator draws from; each list targets a place where the definitions could disagree.
_WORDS = ["paris", "France", "Steve", "jobs", "Apple", "1976", "x", "theatre", "another", "Anne", "thesis",
          "answer", "tower", "Boston"]
_NLTK_ONLY = sorted(NLTK_EXTRA_STOPWORDS)  # stopwords in one nF1 variant only
_STOPS = sorted(DSP_V1_STOPWORDS)
_UNICODE_WORDS = [
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "\u212bngstro\u0308m", "İstanbul", "straße",
    "ΣΟΦΟΣ", "σοφός", "Москва", "東京", "한국", "ที่นี่", "हिन्दी", "ﬁnal", "ǅemal", "Ⓐ", "xⁿ", "Ⅻ", "٣٤",
    "\U0001e4d0\U0001e4d1",  # Nag Mundari (Unicode 15): letters to `regex`, unassigned to Python 3.11's `re`
    "\U00016d40\U00016d41",  # Kirat Rai (Unicode 16)
]
_ARTICLES = ["a", "an", "the", "A", "An", "The", "THE", "á", "à", "thé", "ån", "Thé", "a\u0301", "the\u0301"]
_YES_NO = ["yes", "no", "noanswer", "Yes", "NO", "Noanswer", "no answer", "yes.", "The no", "a yes"]
_MARKS = ["\u0301", "\u0300", "\u0308", "\u030a", "\u20dd", "\u0903"]
_JOINERS = ["\u200d", "\u200c", "\U0001f468\u200d\U0001f469"]
_NUMBERS = ["²", "³", "¹", "₂", "½", "①", "٣", "10"]
_PUNCT = [".", ",", "!", "?", ";", ":", "'", '"', "(", ")", "-", "_", "/", "’", "“", "”", "—", "…", "¿", "«",
          "»", "‿", "·"]
_SPACES = [" ", " ", " ", " ", "  ", "\t", "\n", "\u00a0", "\u2003", "\u3000", "\u200b", "\x1c"]
_GLUE = _MARKS + _JOINERS + _NUMBERS + _PUNCT + ["\U0001e4d0"]


@dataclass(frozen=True)
class Case:
    history: str | tuple[str, ...]
    prediction: str
    golds: tuple[str, ...]


def _token(rng: random.Random) -> str:
    pool = rng.choices([_WORDS, _STOPS, _NLTK_ONLY, _UNICODE_WORDS, _ARTICLES, _YES_NO, _PUNCT, _NUMBERS],
                       weights=[20, 8, 6, 16, 18, 4, 4, 3])[0]
    token = rng.choice(pool)
    roll = rng.random()
    if roll < 0.3:  # glue a mark, joiner, digit or punctuation on: where word-character rules differ
        token += rng.choice(_GLUE)
    elif roll < 0.38:
        token = rng.choice(_GLUE) + token
    return token


def _text(rng: random.Random, n_max: int = 6) -> str:
    if rng.random() < 0.06:
        return rng.choice(["", "", " ", "\u200b", ".", "the", "\u0301"])
    tokens = [_token(rng) for _ in range(rng.randint(1, n_max))]
    text = "".join(tok + rng.choice(_SPACES) for tok in tokens)
    return text if rng.random() < 0.2 else text.strip()


def _variant_of(rng: random.Random, gold: str) -> str:
    # A prediction near a gold answer, so that matches (and near misses) are common.
    how = rng.randrange(9)
    if how == 0:
        return gold
    if how == 1:
        return rng.choice([gold.upper(), gold.title(), gold.lower()])
    if how == 2:
        return unicodedata.normalize(rng.choice(["NFC", "NFD", "NFKC"]), gold)
    if how == 3:
        return rng.choice(_ARTICLES) + rng.choice(_SPACES) + gold
    if how == 4:
        return gold + rng.choice(_PUNCT)
    if how == 5:
        return _text(rng, 3) + " " + gold + " " + _text(rng, 3)
    if how == 6:
        words = gold.split()
        return " ".join(words[1:] if len(words) > 1 else words + [_token(rng)])
    if how == 7:
        return gold + " " + _token(rng)
    return gold.replace("the", rng.choice(["thé", "the\u0301", "the\u200d", "the²", "the\U0001e4d0"]), 1)


def _glued_pair(rng: random.Random) -> tuple[str, str]:
    # An article glued to a character the word-character rules disagree on, in gold and prediction alike:
    # the shape of `best_subspan_em("a\u0301 x", ["the\u0301 x"])`.
    glue = rng.choice(_MARKS + _JOINERS[:2] + ["²", "³", "\U0001e4d0", "‿", "_"])
    word = rng.choice(_WORDS + _UNICODE_WORDS)
    gold = f"{rng.choice(['a', 'an', 'the', 'The'])}{glue} {word}"
    prediction = f"{rng.choice(['a', 'an', 'the', 'x', ''])}{glue} {word}"
    return gold, (prediction if rng.random() < 0.5 else f"{_text(rng, 2)} {prediction}.")


def _gold(rng: random.Random) -> str:
    return rng.choice(_YES_NO) if rng.random() < 0.15 else _text(rng, 4)


def generate_cases(seed: int = SEED, n: int = N_CASES) -> list[Case]:
    """Seeded (history, prediction, golds) cases; the golds list has 1 to 4 answers."""
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        golds = tuple(_gold(rng) for _ in range(rng.choices([1, 2, 3, 4], weights=[45, 25, 15, 15])[0]))
        if rng.random() < 0.08:
            glued_gold, prediction = _glued_pair(rng)
            golds = (glued_gold,) + golds[1:]
        elif rng.random() < 0.12:
            prediction = rng.choice(_YES_NO)
        elif rng.random() < 0.5:
            prediction = _variant_of(rng, rng.choice(golds))
        else:
            prediction = _text(rng)
        # A history that shares words with the answers, so novelty decides the score.
        shared = [w for w in " ".join((prediction,) + golds).split() if rng.random() < 0.4]
        history_text = " ".join(shared + [rng.choice(_STOPS + _NLTK_ONLY) for _ in range(rng.randint(0, 3))])
        roll = rng.random()
        if roll < 0.15:
            history: str | tuple[str, ...] = ""
        elif roll < 0.35:
            history = (history_text, _text(rng, 3))
        else:
            history = history_text
        cases.append(Case(history, prediction, golds))
    return cases


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return generate_cases()


def _same(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=1e-12)


def _nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


def _disagreements(cases: Sequence[Case], ours: Callable[[Case], float], ref: Callable[[Case], float]) -> list[Case]:
    return [c for c in cases if not _same(ours(c), ref(c))]


def _history_text(case: Case) -> str:
    # dsp.nF1 joins a list of turns with spaces; DSP v1 takes one string.
    return case.history if isinstance(case.history, str) else " ".join(case.history)


def test_the_generated_cases_cover_the_hard_inputs(cases):
    texts = [t for c in cases for t in (c.prediction, *c.golds)]
    has = lambda pred: sum(1 for t in texts if pred(t))  # noqa: E731
    assert len(cases) >= 2000
    assert has(lambda t: any(unicodedata.category(ch).startswith("M") for ch in t)) >= 500
    assert has(lambda t: "\u200d" in t) >= 100
    assert has(lambda t: any(ch in "²³¹₂½①" for ch in t)) >= 200
    assert has(lambda t: any(ch in '.,!?;:\'"()-_/' for ch in t)) >= 500
    assert has(lambda t: t.strip() == "") >= 50
    assert has(lambda t: any(ch in t for ch in "\t\n\u00a0\u2003\u3000\x1c")) >= 500
    assert has(lambda t: any(w in t.lower().split() for w in ("a", "an", "the"))) >= 500
    assert has(lambda t: any(ord(ch) >= 0x1E4D0 for ch in t)) >= 50
    assert has(lambda t: dsp_v1_normalize_text(t) in ("yes", "no", "noanswer")) >= 300
    assert has(lambda t: unicodedata.normalize("NFC", t) != t) >= 200  # decomposed forms
    assert sum(len(c.golds) > 1 for c in cases) >= 1000
    assert sum(dsp_v1_em(c.prediction, c.golds) for c in cases) >= 300  # matches, not only misses


def test_normalize_text_equals_dsp_v1_and_squad_after_nfd(cases):
    texts = [t for c in cases for t in (c.prediction, *c.golds)]
    assert len(texts) >= 2000
    assert [t for t in texts if dsp.normalize_text(t) != dsp_v1_normalize_text(t)] == []
    squad = [t for t in texts if dsp.normalize_text(t) != squad_normalize_answer(t)]
    # The documented difference: NFD. Each disagreement with SQuAD is SQuAD applied to NFD text.
    assert [t for t in squad if dsp.normalize_text(t) != squad_normalize_answer(_nfd(t))] == []
    assert len(squad) == 2317


def test_em_equals_dsp_v1_and_squad_up_to_nfd(cases):
    ours = lambda c: dsp.EM(c.prediction, list(c.golds))  # noqa: E731
    assert _disagreements(cases, ours, lambda c: dsp_v1_em(c.prediction, c.golds)) == []
    squad = _disagreements(cases, ours, lambda c: squad_em(c.prediction, c.golds))
    after_nfd = lambda c: squad_em(_nfd(c.prediction), [_nfd(g) for g in c.golds])  # noqa: E731
    assert _disagreements(squad, ours, after_nfd) == []
    assert len(squad) == 27


def test_f1_equals_dsp_v1_and_squad_up_to_nfd(cases):
    ours = lambda c: dsp.F1(c.prediction, list(c.golds))  # noqa: E731
    assert _disagreements(cases, ours, lambda c: dsp_v1_f1(c.prediction, c.golds)) == []
    squad = _disagreements(cases, ours, lambda c: squad_f1(c.prediction, c.golds))
    after_nfd = lambda c: squad_f1(_nfd(c.prediction), [_nfd(g) for g in c.golds])  # noqa: E731
    assert _disagreements(squad, ours, after_nfd) == []
    assert len(squad) == 76


def test_hotpot_f1_equals_dsp_v1_and_hotpotqa_up_to_nfd(cases):
    ours = lambda c: dsp.HotPotF1(c.prediction, list(c.golds))  # noqa: E731
    assert _disagreements(cases, ours, lambda c: dsp_v1_hotpot_f1(c.prediction, c.golds)) == []
    hotpot = _disagreements(cases, ours, lambda c: hotpot_f1(c.prediction, c.golds))
    after_nfd = lambda c: hotpot_f1(_nfd(c.prediction), [_nfd(g) for g in c.golds])  # noqa: E731
    assert _disagreements(hotpot, ours, after_nfd) == []
    assert len(hotpot) == 78
    # The yes/no/noanswer rule is exercised: plain F1 and HotPotQA's F1 differ on these cases.
    assert sum(not _same(dsp.F1(c.prediction, list(c.golds)), ours(c)) for c in cases) >= 50


@pytest.mark.parametrize("return_recall", [False, True])
def test_nf1_equals_dsp_v1(cases, return_recall):
    ours = lambda c: dsp.nF1(c.history, c.prediction, list(c.golds), return_recall=return_recall)  # noqa: E731
    ref = lambda c: dsp_v1_nf1(_history_text(c), c.prediction, c.golds, return_recall)  # noqa: E731
    assert _disagreements(cases, ours, ref) == []
    assert sum(ours(c) > 0 for c in cases) >= 300  # novel overlaps occur, not only zeros


@pytest.mark.parametrize("return_recall", [False, True])
def test_nf1_dsp_extended_equals_its_definition_and_differs_from_dsp_v1(cases, return_recall):
    ours = lambda c: dsp.nF1(c.history, c.prediction, list(c.golds), return_recall=return_recall,  # noqa: E731
                             variant="dsp-extended")
    ref = lambda c: extended_nf1(_history_text(c), c.prediction, c.golds, return_recall)  # noqa: E731
    assert _disagreements(cases, ours, ref) == []
    v1 = lambda c: dsp_v1_nf1(_history_text(c), c.prediction, c.golds, return_recall)  # noqa: E731
    assert len(_disagreements(cases, ours, v1)) == (629 if return_recall else 652)


def test_best_subspan_em_equals_lost_in_the_middle(cases):
    ours = lambda c: dsp.best_subspan_em(c.prediction, list(c.golds))  # noqa: E731
    assert _disagreements(cases, ours, lambda c: litm_best_subspan_em(c.prediction, c.golds)) == []
    # The pairs on which stripping articles with `re` (the old code) would have scored differently.
    with_re = lambda c: float(any(squad_normalize_answer(g) in squad_normalize_answer(c.prediction)  # noqa: E731
                                  for g in c.golds))
    assert len(_disagreements(cases, ours, with_re)) == 165


def test_nf1_rejects_an_unknown_variant():
    with pytest.raises(ValueError, match="variant must be one of"):
        dsp.nF1("", "x", ["x"], variant="nltk")
    assert metrics.NF1_VARIANTS == ("dsp-v1", "dsp-extended")
