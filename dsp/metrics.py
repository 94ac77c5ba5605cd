"""Answer metrics: DSP's normalisation, EM, F1, HotPotQA F1, novel F1, Lost in the Middle's subspan EM,
and the DPR-style answer match that annotate uses to accept a retrieved context.

>>> EM("The Eiffel Tower.", ["eiffel tower"])
True
>>> round(F1("Paris, France", ["Paris"]), 3)
0.667
>>> passage_match(["Tower | The Eiffel Tower is in Paris."], ["paris"])
True
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from typing import Sequence

import regex

__all__ = [
    "normalize_text", "EM", "F1", "HotPotF1", "nF1", "best_subspan_em",
    "has_answer", "passage_match", "answer_match", "wilson_interval", "STOPWORDS",
]

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# DPR's SimpleTokenizer: runs of letters/digits/marks, or any single non-space, non-control character.
_DPR_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)

# A standard English stopword list (the one NLTK ships), for novel F1.
STOPWORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves what which who whom this that these those am is
are was were be been being have has had having do does did doing a an the and but if or because as until
while of at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very s t can will just don should now
d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
weren won wouldn
""".split())


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
    """DSP's answer normalisation: NFD, lower-case, drop ASCII punctuation and a/an/the, squeeze spaces.

    >>> normalize_text("The  Beatles!")
    'beatles'
    """
    s = unicodedata.normalize("NFD", _text(s, "text")).lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


def EM(prediction: str, answers_list: str | Sequence[str]) -> bool:
    """Exact match after normalisation against any gold answer."""
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
    """SQuAD token F1 after normalisation, max over the gold answers."""
    pred = normalize_text(_text(prediction, "prediction")).split()
    return max(_f1(pred, normalize_text(a).split()) for a in _answers(answers_list))


def HotPotF1(prediction: str, answers_list: str | Sequence[str]) -> float:
    """HotPotQA's F1: like F1, but yes/no/noanswer score only when they match exactly."""
    pred = normalize_text(_text(prediction, "prediction"))
    best = 0.0
    for answer in _answers(answers_list):
        gold = normalize_text(answer)
        if (pred in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer")) and pred != gold:
            continue
        best = max(best, _f1(pred.split(), gold.split()))
    return best


def nF1(history: str | Sequence[str], prediction: str, answers_list: str | Sequence[str], return_recall: bool = False) -> float:
    """Novel F1 for conversational QA: token F1 ignoring stopwords and any word of the question/history.

    An answer that only repeats the conversation earns nothing. When the gold answer has no novel word
    at all, its plain F1 is used (novelty cannot be measured).

    >>> nF1("Who founded Apple?", "Apple was founded by Steve Jobs", ["Steve Jobs"])
    1.0
    """
    if not isinstance(history, str):
        history = " ".join(_text(h, "history") for h in history)
    seen = set(normalize_text(history).split()) | STOPWORDS
    pred_all = normalize_text(_text(prediction, "prediction")).split()
    pred = [t for t in pred_all if t not in seen]
    best = 0.0
    for answer in _answers(answers_list):
        gold_all = normalize_text(answer).split()
        gold = [t for t in gold_all if t not in seen]
        p, g = (pred, gold) if gold else (pred_all, gold_all)
        common = sum((Counter(p) & Counter(g)).values())
        if return_recall:
            best = max(best, common / len(g) if g else 0.0)
        else:
            best = max(best, _f1(p, g) if p and g else 0.0)
    return best


def _squad_normalize(s: str) -> str:
    # Lost in the Middle's normalize_answer (SQuAD's): no Unicode normalisation, unlike DSP's.
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


def best_subspan_em(prediction: str, ground_truths: str | Sequence[str]) -> float:
    """1.0 if some normalised gold answer occurs inside the normalised prediction (Lost in the Middle)."""
    pred = _squad_normalize(_text(prediction, "prediction"))
    return float(any(_squad_normalize(g) in pred for g in _answers(ground_truths, "ground_truths")))


def _dpr_tokens(text: str) -> list[str]:
    return [m.group().lower() for m in _DPR_TOKEN.finditer(unicodedata.normalize("NFD", text))]


def has_answer(passage: str, answers: str | Sequence[str]) -> bool:
    """DPR's has_answer: some normalised gold answer's tokens occur contiguously in the passage."""
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
    """True if any passage contains any gold answer (DPR-style token match)."""
    if isinstance(passages, str):
        passages = [passages]
    texts = [p if isinstance(p, str) else (p.get("long_text") or p.get("text", "")) for p in passages]
    return any(has_answer(t, answers) for t in texts)


def answer_match(prediction: str, answers: str | Sequence[str], frac: float = 1.0) -> bool:
    """EM when `frac` is 1, else F1 of at least `frac`."""
    if frac >= 1.0:
        return EM(prediction, answers)
    return F1(prediction, answers) >= frac


def wilson_interval(correct: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default), as fractions; unlike the normal
    approximation it stays inside [0, 1] and is not empty at 0 or n correct.

    >>> [round(x, 3) for x in wilson_interval(50, 100)]
    [0.404, 0.596]
    """
    if n <= 0:
        return (0.0, 0.0)
    p = correct / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))
