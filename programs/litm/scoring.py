"""The paper's metrics: best subspan EM on the first line of a QA answer, containment for KV retrieval.

>>> qa_score("Wilhelm Röntgen won it.\\nQuestion: ...", ["Wilhelm Röntgen"])
1.0
>>> qa_score("I think\\nWilhelm Röntgen", ["Wilhelm Röntgen"])   # only the first line counts
0.0
>>> kv_score('"9f0e1f1a-3c2b-4d5e-8f9a-0b1c2d3e4f5a"', "9F0E1F1A-3C2B-4D5E-8F9A-0B1C2D3E4F5A")
1.0
"""

from __future__ import annotations

from typing import Sequence

from dsp import best_subspan_em

__all__ = ["first_line", "qa_score", "kv_score"]


def first_line(model_answer: str) -> str:
    """The answer up to its first newline, stripped (the paper scores only this, so that copying the
    context, which contains the gold answer, earns nothing).

    >>> first_line(" Paris\\nQuestion: who")
    'Paris'
    """
    if not isinstance(model_answer, str):
        raise TypeError(f"a model answer must be text, got {type(model_answer).__name__}: {model_answer!r:.80}")
    return model_answer.split("\n")[0].strip()


def qa_score(model_answer: str, answers: Sequence[str]) -> float:
    """The paper's QA metric: best_subspan_em of the answer's first line against the gold answers.

    >>> qa_score(" The Beatles, in 1962.", ["beatles"])
    1.0
    """
    return best_subspan_em(first_line(model_answer), answers)


def kv_score(model_answer: str, value: str) -> float:
    """The paper's KV accuracy: 1.0 when the gold value occurs in the whole answer (case-insensitive).

    >>> kv_score('The value is "abc-1"', "ABC-1")
    1.0
    """
    if not isinstance(model_answer, str) or not isinstance(value, str):
        raise TypeError("kv_score needs the model answer and the gold value as text")
    return 1.0 if value.lower() in model_answer.lower() else 0.0


# The names dsp.evaluate shows and records for these metrics: the paper's.
qa_score.__name__ = "best_subspan_em"
kv_score.__name__ = "kv_accuracy"
