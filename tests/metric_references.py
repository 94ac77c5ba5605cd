"""Reference implementations of the published answer metrics that dsp.metrics follows, for the differential
test in tests/test_metrics_reference.py.

Written for these tests from the published definitions (what each script computes), not from dsp.metrics
and not copied from the scripts; each function names its source. To stay independent of dsp.metrics, the
article rule `\\b(a|an|the)\\b` is restated as "a maximal run of word characters equal to a, an or the",
with the word-character test of the module the source uses spelled out (checked exhaustively against
`re`'s and `regex`'s \\w over every code point when this module was written).

>>> squad_normalize_answer("The  Cafe\\u0301, an old one!")
'cafe\\u0301 old one'
>>> round(squad_f1("Paris, France", ["Paris"]), 3)
0.667
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Callable, Sequence

import regex

__all__ = [
    "DSP_V1_STOPWORDS", "NLTK_EXTRA_STOPWORDS", "HOTPOT_SPECIAL",
    "re_word_char", "regex_word_char", "strip_articles",
    "squad_normalize_answer", "squad_em", "squad_f1",
    "hotpot_f1",
    "dsp_v1_normalize_text", "dsp_v1_em", "dsp_v1_f1", "dsp_v1_hotpot_f1", "dsp_v1_nf1",
    "extended_nf1",
    "litm_normalize_answer", "litm_best_subspan_em",
]

# SQuAD v1.1, HotPotQA, DSP v1 and Lost in the Middle all delete exactly the characters of Python's
# string.punctuation (ASCII only: "’", "“", "—" survive).
_DELETE_PUNCTUATION = str.maketrans("", "", string.punctuation)

# DSP v1 dsp/utils/metrics.py `stopwords` (source given there: https://gist.github.com/sebleier/554280).
DSP_V1_STOPWORDS = frozenset(
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers "
    "herself it its itself they them their theirs themselves what which who whom this that these those am is "
    "are was were be been being have has had having do does did doing a an the and but if or because as "
    "until while of at by for with about against between into through during before after above below to "
    "from up down in out on off over under again further then once here there when where why how all any "
    "both each few more most other some such no nor not only own same so than too very s t can will just "
    "don should now".split()
)
# The 26 words NLTK's current English list adds to the gist's: dsp's variant="dsp-extended" uses them too.
NLTK_EXTRA_STOPWORDS = frozenset(
    "d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn "
    "weren won wouldn".split()
)
# HotPotQA hotpot_evaluate_v1.py f1_score: answers that only score when prediction and gold are equal.
HOTPOT_SPECIAL = ("yes", "no", "noanswer")

# Python's `re` docs: a Unicode word character is str.isalnum() or "_".
def re_word_char(ch: str) -> bool:
    """`re`'s \\w for str patterns.

    >>> re_word_char("\\u0301"), re_word_char("²")
    (False, True)
    """
    return ch.isalnum() or ch == "_"


# `regex` docs (Unicode TR#18 Annex C): \w is Alphabetic, Mark, Decimal_Number, Connector_Punctuation
# or Join_Control.
_REGEX_WORD = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]")


def regex_word_char(ch: str) -> bool:
    """`regex`'s \\w for str patterns.

    >>> regex_word_char("\\u0301"), regex_word_char("²"), regex_word_char("\\u200d")
    (True, False, True)
    """
    return _REGEX_WORD.fullmatch(ch) is not None


def strip_articles(text: str, is_word_char: Callable[[str], bool]) -> str:
    """Replace each maximal run of word characters that is "a", "an" or "the" with a space.

    >>> strip_articles("the\\u0301 an theatre", re_word_char)
    ' \\u0301   theatre'
    """
    pieces: list[str] = []
    run: list[str] = []
    for ch in text + "\0":  # a non-word sentinel closes the last run
        if is_word_char(ch):
            run.append(ch)
            continue
        word = "".join(run)
        pieces.append(" " if word in ("a", "an", "the") else word)
        run = []
        pieces.append(ch)
    return "".join(pieces)[:-1]


def _overlap(pred: Sequence[str], gold: Sequence[str]) -> int:
    # Multiset intersection size: each token counts as often as it occurs on both sides.
    return sum(min(pred.count(t), gold.count(t)) for t in set(pred))


def _harmonic_f1(same: int, n_pred: int, n_gold: int) -> float:
    if same == 0:
        return 0.0
    precision, recall = same / n_pred, same / n_gold
    return 2 * precision * recall / (precision + recall)


# --- SQuAD v1.1 (evaluate-v1.1.py, https://rajpurkar.github.io/SQuAD-explorer/) ---

def squad_normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalize_answer: lower(), drop ASCII punctuation, drop articles (`re` word rule),
    collapse whitespace (str.split).

    >>> squad_normalize_answer("An Apple a day!")
    'apple day'
    """
    lowered = s.lower().translate(_DELETE_PUNCTUATION)
    return " ".join(strip_articles(lowered, re_word_char).split())


def squad_em(prediction: str, golds: Sequence[str]) -> bool:
    """SQuAD v1.1 exact match, max over the gold answers.

    >>> squad_em("The Tower.", ["tower"])
    True
    """
    pred = squad_normalize_answer(prediction)
    return any(pred == squad_normalize_answer(g) for g in golds)


def squad_f1(prediction: str, golds: Sequence[str]) -> float:
    """SQuAD v1.1 token F1 (0 without a shared token), max over the gold answers.

    >>> squad_f1("", [""])
    0.0
    """
    pred = squad_normalize_answer(prediction).split()
    scores = []
    for gold in golds:
        tokens = squad_normalize_answer(gold).split()
        scores.append(_harmonic_f1(_overlap(pred, tokens), len(pred), len(tokens)))
    return max(scores)


# --- HotPotQA (hotpot_evaluate_v1.py, https://github.com/hotpotqa/hotpot) ---

def _hotpot_f1_on_normalized(pred: str, gold: str) -> float:
    # f1_score's first element: yes/no/noanswer on either side score 0 unless both sides are equal.
    if (pred in HOTPOT_SPECIAL or gold in HOTPOT_SPECIAL) and pred != gold:
        return 0.0
    p, g = pred.split(), gold.split()
    return _harmonic_f1(_overlap(p, g), len(p), len(g))


def hotpot_f1(prediction: str, golds: Sequence[str]) -> float:
    """HotPotQA's answer F1 with its normalize_answer (SQuAD's); max over several golds as DSP v1 allows.

    >>> hotpot_f1("yes", ["yes it is"]), hotpot_f1("No", ["no"])
    (0.0, 1.0)
    """
    pred = squad_normalize_answer(prediction)
    return max(_hotpot_f1_on_normalized(pred, squad_normalize_answer(g)) for g in golds)


# --- DSP v1 (dsp/utils/metrics.py, https://github.com/stanfordnlp/dsp) ---

def dsp_v1_normalize_text(s: str) -> str:
    """DSP v1 normalize_text: Unicode NFD first, then SQuAD's steps (lower, punctuation, articles, spaces).

    >>> dsp_v1_normalize_text("Café") == dsp_v1_normalize_text("Cafe\\u0301")
    True
    """
    return squad_normalize_answer(unicodedata.normalize("NFD", s))


def dsp_v1_em(prediction: str, golds: Sequence[str]) -> bool:
    """DSP v1 EM: em_score (equal normalize_text) max over the gold list.

    >>> dsp_v1_em("á", ["thé"])  # NFD leaves a bare U+0301 on both sides
    True
    """
    pred = dsp_v1_normalize_text(prediction)
    return any(pred == dsp_v1_normalize_text(g) for g in golds)


def dsp_v1_f1(prediction: str, golds: Sequence[str]) -> float:
    """DSP v1 F1: f1_score on normalize_text tokens (two empty answers score 0), max over the gold list.

    >>> dsp_v1_f1("", [""])
    0.0
    """
    pred = dsp_v1_normalize_text(prediction).split()
    scores = []
    for gold in golds:
        tokens = dsp_v1_normalize_text(gold).split()
        scores.append(_harmonic_f1(_overlap(pred, tokens), len(pred), len(tokens)))
    return max(scores)


def dsp_v1_hotpot_f1(prediction: str, golds: Sequence[str]) -> float:
    """DSP v1 HotPotF1: HotPotQA's f1_score on normalize_text, max over the gold list.

    >>> dsp_v1_hotpot_f1("noanswer", ["no answer"])
    0.0
    """
    pred = dsp_v1_normalize_text(prediction)
    return max(_hotpot_f1_on_normalized(pred, dsp_v1_normalize_text(g)) for g in golds)


def dsp_v1_nf1(history: str, prediction: str, golds: Sequence[str], return_recall: bool = False) -> float:
    """DSP v1 nF1 (novel_f1_score max over the gold list): drop tokens of the history and the stopwords from
    both sides; 0 when no kept token is shared, else the F1 (or, with return_recall, the recall).

    >>> dsp_v1_nf1("", "won", ["won paris"]) == 2 / 3
    True
    """
    excluded = set(dsp_v1_normalize_text(history).split()) | DSP_V1_STOPWORDS
    pred = [t for t in dsp_v1_normalize_text(prediction).split() if t not in excluded]
    scores = []
    for gold in golds:
        tokens = [t for t in dsp_v1_normalize_text(gold).split() if t not in excluded]
        same = _overlap(pred, tokens)
        if same == 0:
            scores.append(0.0)
        elif return_recall:
            scores.append(same / len(tokens))
        else:
            scores.append(_harmonic_f1(same, len(pred), len(tokens)))
    return max(scores)


# --- dsp's own variant="dsp-extended" (this project's pre-fix nF1, as its docstring defines it) ---

def extended_nf1(history: str, prediction: str, golds: Sequence[str], return_recall: bool = False) -> float:
    """nF1 with NLTK's 153 stopwords; a gold answer with no novel token is scored on all tokens instead.

    >>> extended_nf1("", "won", ["won paris"]), extended_nf1("Paris?", "no", ["no"])
    (0.0, 1.0)
    """
    excluded = set(dsp_v1_normalize_text(history).split()) | DSP_V1_STOPWORDS | NLTK_EXTRA_STOPWORDS
    pred_all = dsp_v1_normalize_text(prediction).split()
    scores = []
    for gold in golds:
        gold_all = dsp_v1_normalize_text(gold).split()
        novel = [t for t in gold_all if t not in excluded]
        if novel:
            pred, tokens = [t for t in pred_all if t not in excluded], novel
        else:
            pred, tokens = pred_all, gold_all
        same = _overlap(pred, tokens)
        if return_recall:
            scores.append(same / len(tokens) if tokens else 0.0)
        else:
            scores.append(_harmonic_f1(same, len(pred), len(tokens)))
    return max(scores)


# --- Lost in the Middle (src/lost_in_the_middle/metrics.py, https://github.com/nelson-liu/lost-in-the-middle) ---

def litm_normalize_answer(s: str) -> str:
    """Lost in the Middle normalize_answer: SQuAD's steps, but articles found with the `regex` module.

    >>> litm_normalize_answer("The\\u0301 x"), squad_normalize_answer("The\\u0301 x")
    ('the\\u0301 x', '\\u0301 x')
    """
    lowered = s.lower().translate(_DELETE_PUNCTUATION)
    return " ".join(strip_articles(lowered, regex_word_char).split())


def litm_best_subspan_em(prediction: str, golds: Sequence[str]) -> float:
    """Lost in the Middle best_subspan_em: 1.0 if some normalised gold (lower-cased again) is a substring of
    the normalised prediction (lower-cased again), else 0.0.

    >>> litm_best_subspan_em("It was Ernest Hemingway.", ["ernest hemingway"]), litm_best_subspan_em("x", [""])
    (1.0, 1.0)
    """
    pred = litm_normalize_answer(prediction).lower()
    return 1.0 if any(litm_normalize_answer(g).lower() in pred for g in golds) else 0.0
