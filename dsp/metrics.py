"""Answer metrics: DSP's normalisation, EM, F1, HotPotQA F1, novel F1, Lost in the Middle's subspan EM,
and the DPR-style answer match that annotate uses to accept a retrieved context.

`normalize_text`, `EM`, `F1`, `HotPotF1` and `nF1` follow DSP v1's `dsp/utils/metrics.py`, which is the
SQuAD v1.1 / HotPotQA definition with one addition: the text is first put in Unicode NFD. So a precomposed
"é" equals "e" + U+0301 here (not in SQuAD's or HotPotQA's scripts), and "á"/"thé" lose their "a"/"the"
(NFD leaves a bare combining mark, which `re` does not count as a word character).
`best_subspan_em` follows Lost in the Middle, which has no NFD and strips articles with the `regex` module.
tests/test_metrics_reference.py checks all of them against reference implementations of those definitions.

>>> EM("The Eiffel Tower.", ["eiffel tower"])
True
>>> round(F1("Paris, France", ["Paris"]), 3)
0.667
>>> passage_match(["Tower | The Eiffel Tower is in Paris."], ["paris"])
True
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from typing import Sequence

import regex

__all__ = [
    "normalize_text", "EM", "F1", "HotPotF1", "nF1", "best_subspan_em",
    "has_answer", "passage_match", "answer_match", "STOPWORDS", "STOPWORDS_EXTENDED", "NF1_VARIANTS",
]

_PUNCTUATION = frozenset(string.punctuation)
# DSP v1 (like SQuAD and HotPotQA) strips articles with `re`, whose \w is str.isalnum() plus "_".
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# Lost in the Middle strips them with `regex`, whose \w also takes marks, ZWJ, all connector punctuation and
# letters newer than Python's Unicode tables, but not "²"-like digits; so "the\u0301" is a word there.
_LITM_ARTICLES = regex.compile(r"\b(a|an|the)\b")
# DPR's SimpleTokenizer: runs of letters/digits/marks, or any single non-space, non-control character.
_DPR_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)

# DSP v1's nF1 stopwords, exactly: the 127-word list of https://gist.github.com/sebleier/554280
# (NLTK's English list as it was before the contraction fragments were added).
STOPWORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves what which who whom this that these those am is
are was were be been being have has had having do does did doing a an the and but if or because as until
while of at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very s t can will just don should now
""".split())

# This project's earlier nF1 list (NLTK's current 153 words): DSP v1's plus 26 contraction fragments.
STOPWORDS_EXTENDED = STOPWORDS | frozenset("""
d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
weren won wouldn
""".split())

# "dsp-v1": DSP v1's novel F1. "dsp-extended": this project's earlier variant (see nF1's docstring).
NF1_VARIANTS = ("dsp-v1", "dsp-extended")


def _answers(answers: str | Sequence[str], what: str = "answers") -> list[str]:
    if isinstance(answers, str):
        return [answers]
    if isinstance(answers, (list, tuple)) and all(isinstance(a, str) for a in answers):
        if not answers:
            raise ValueError(f"{what}: the list of gold answers is empty")
        return list(answers)
    raise TypeError(f"{what} must be a string or a list of strings, got {answers!r:.80}")


def _text(value: object, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be text, got {type(value).__name__}: {value!r:.80}")
    return value


def normalize_text(s: str) -> str:
    """DSP v1's answer normalisation: NFD, lower-case, drop ASCII punctuation and a/an/the, squeeze spaces.

    SQuAD's normalize_answer without the NFD step; NFD makes "é" and "e\\u0301" equal and turns "á" into a
    bare U+0301 (its "a" is then an article to `re`).

    >>> normalize_text("The  Beatles!")
    'beatles'
    >>> normalize_text("Café") == normalize_text("Cafe\\u0301") == "cafe\\u0301"
    True
    """
    s = unicodedata.normalize("NFD", _text(s, "text")).lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


def EM(prediction: str, answers_list: str | Sequence[str]) -> bool:
    """DSP v1's exact match: normalised prediction equals some normalised gold answer.

    SQuAD v1.1's exact match plus NFD (see normalize_text): "Café" matches "Cafe\\u0301" here, not in SQuAD.

    >>> EM("Café", ["cafe\\u0301"]), EM("Boston", "Boston, MA")
    (True, False)
    """
    pred = normalize_text(_text(prediction, "prediction"))
    return any(pred == normalize_text(a) for a in _answers(answers_list))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def F1(prediction: str, answers_list: str | Sequence[str]) -> float:
    """DSP v1's token F1 after normalisation, max over the gold answers (two empty answers score 0).

    SQuAD v1.1's F1 plus NFD (see normalize_text).

    >>> round(F1("Boston Massachusetts", ["Boston"]), 3)
    0.667
    """
    pred = normalize_text(_text(prediction, "prediction")).split()
    return max(_f1(pred, normalize_text(a).split()) for a in _answers(answers_list))


def HotPotF1(prediction: str, answers_list: str | Sequence[str]) -> float:
    """DSP v1's HotPotF1: HotPotQA's answer F1, where a normalised "yes", "no" or "noanswer" on either side
    scores only when both sides are equal; max over the gold answers.

    HotPotQA's script plus NFD (see normalize_text), and several gold answers as DSP v1 allows.

    >>> HotPotF1("no it is not", ["no"]), HotPotF1("No.", ["no"])
    (0.0, 1.0)
    """
    pred = normalize_text(_text(prediction, "prediction"))
    best = 0.0
    for answer in _answers(answers_list):
        gold = normalize_text(answer)
        if (pred in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer")) and pred != gold:
            continue
        best = max(best, _f1(pred.split(), gold.split()))
    return best


def nF1(history: str | Sequence[str], prediction: str, answers_list: str | Sequence[str],
        return_recall: bool = False, *, variant: str = "dsp-v1") -> float:
    """Novel F1 for conversational QA: token F1 over the words of prediction and gold that are neither
    stopwords nor words of the history (question and earlier turns); max over the gold answers.

    variant="dsp-v1" (default) is DSP v1's nF1 exactly: stopwords are STOPWORDS (127 words), and a gold
    answer with no novel word, or with no novel word in common with the prediction, scores 0.
    `return_recall=True` gives the novel recall instead (also 0 when nothing novel is shared).
    variant="dsp-extended" is this project's earlier variant, kept for comparing old runs: stopwords are
    STOPWORDS_EXTENDED (153 words: adds "won", "ll", "re", "ma", "didn", "isn", ...), and a gold answer
    with no novel word falls back to plain F1 (or recall) over all the words.
    Beyond DSP v1, `history` may be a list of turns (joined with spaces) and `answers_list` one string.

    >>> nF1("Who founded Apple?", "Apple was founded by Steve Jobs", ["Steve Jobs"])
    1.0
    >>> nF1("Tell me about Paris.", "The no", ["no"])  # "no" is a stopword: nothing novel to score
    0.0
    >>> nF1("Tell me about Paris.", "The no", ["no"], variant="dsp-extended")
    1.0
    """
    if variant not in NF1_VARIANTS:
        raise ValueError(f"nF1 variant must be one of {NF1_VARIANTS}, got {variant!r}")
    if not isinstance(history, str):
        history = " ".join(_text(h, "history") for h in history)
    extended = variant == "dsp-extended"
    seen = set(normalize_text(history).split()) | (STOPWORDS_EXTENDED if extended else STOPWORDS)
    pred_all = normalize_text(_text(prediction, "prediction")).split()
    pred = [t for t in pred_all if t not in seen]
    best = 0.0
    for answer in _answers(answers_list):
        gold_all = normalize_text(answer).split()
        gold = [t for t in gold_all if t not in seen]
        # DSP v1 scores a gold answer with nothing novel as 0; the extended variant falls back to plain F1.
        p, g = (pred_all, gold_all) if extended and not gold else (pred, gold)
        common = sum((Counter(p) & Counter(g)).values())
        if return_recall:
            best = max(best, common / len(g) if g else 0.0)
        else:
            best = max(best, _f1(p, g) if p and g else 0.0)
    return best


def _litm_normalize(s: str) -> str:
    # Lost in the Middle's normalize_answer (SQuAD's, with `regex` for the articles): no NFD, unlike DSP's.
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    return " ".join(_LITM_ARTICLES.sub(" ", s).split())


def best_subspan_em(prediction: str, ground_truths: str | Sequence[str]) -> float:
    """Lost in the Middle's best_subspan_em: 1.0 if some normalised gold answer occurs inside the normalised
    prediction. Normalisation is SQuAD's normalize_answer with articles stripped by the `regex` module, as the
    paper's code does: no NFD, and "a\\u0301", "the\\u200d" are words, not articles.

    (Lost in the Middle lower-cases both sides once more before the test; lower() is idempotent on every
    code point, so that step changes nothing and is left out.)

    >>> best_subspan_em("The answer is Ernest Hemingway.", ["ernest hemingway"])
    1.0
    >>> best_subspan_em("a\\u0301 x", ["the\\u0301 x"])
    0.0
    """
    pred = _litm_normalize(_text(prediction, "prediction"))
    return float(any(_litm_normalize(g) in pred for g in _answers(ground_truths, "ground_truths")))


def _dpr_tokens(text: str) -> list[str]:
    return [m.group().lower() for m in _DPR_TOKEN.finditer(unicodedata.normalize("NFD", text))]


def has_answer(passage: str, answers: str | Sequence[str]) -> bool:
    """DPR's has_answer: some normalised gold answer's tokens occur contiguously in the passage.

    >>> has_answer("He was born in 1925 in Texas.", ["1925"]), has_answer("Born in 19250.", ["1925"])
    (True, False)
    """
    tokens = _dpr_tokens(normalize_text(_text(passage, "passage")))
    for answer in _answers(answers):
        needle = _dpr_tokens(normalize_text(answer))
        if not needle:
            continue
        n = len(needle)
        if any(tokens[i:i + n] == needle for i in range(len(tokens) - n + 1)):
            return True
    return False


def passage_match(passages: str | Sequence[str], answers: str | Sequence[str]) -> bool:
    """True if any passage contains any gold answer (DPR-style token match).

    >>> passage_match(["nothing here", "Foxcatcher Team | the team"], ["Foxcatcher"])
    True
    """
    if isinstance(passages, str):
        passages = [passages]
    texts = [p if isinstance(p, str) else (p.get("long_text") or p.get("text", "")) for p in passages]
    return any(has_answer(t, answers) for t in texts)


def answer_match(prediction: str, answers: str | Sequence[str], frac: float = 1.0) -> bool:
    """EM when `frac` is 1, else F1 of at least `frac`.

    >>> answer_match("Boston MA", ["Boston"]), answer_match("Boston MA", ["Boston"], frac=0.5)
    (False, True)
    """
    if frac >= 1.0:
        return EM(prediction, answers)
    return F1(prediction, answers) >= frac
