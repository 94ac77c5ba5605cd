"""The DetectiveQA question prompt, and the novel cut to a token budget with the LM's own tokenizer.

The prompt is the novel content, then the benchmark's instruction, the question, the options as
"A: ..." lines and the reply format:

>>> from programs.detectiveqa.data import Question
>>> q = Question("en/human_anno/1#1", "en", "human_anno", "1", 1, "Who did it?",
...              {"A": "Ann", "B": "Bob", "C": "Cy", "D": "Di"}, "B")
>>> print(render_prompt(question_list("[1] Bob hid the knife.", q)))
[1] Bob hid the knife.
<BLANKLINE>
Please answer the following question based on the provided content:
Who did it?
A: Ann
B: Bob
C: Cy
D: Di
Reply strictly in the following JSON format, where x is the letter of the correct option and xxx is your reasoning: {"answer":"x","reasoning":"xxx"}
<BLANKLINE>

`q_len` is the token budget of the novel content alone (the question, options and instruction come on
top; the caller leaves room for them and for the reply). Cut strategies (`CUTS`):

- ``start``: the beginning of the novel, as many tokens as fit;
- ``answer``: the text up to the answer position, i.e. the paragraphs before `answer_position` (where
  the answer is revealed, so it is left out), keeping the last `q_len` tokens of it, the ones nearest
  the reveal; the benchmark's setting for a reader who has not reached the solution;
- ``both``: the beginning and the end of the novel, half the budget each, joined by `BOTH_SEPARATOR`.

Tokens are counted by `tokenizer_for(lm)`: the LM's own tokenizer when it declares one
(`dsp.CountsTokens`, as the embedded LlamaCpp does), tiktoken for `dsp.OpenAI` clients when tiktoken is
installed and its encoding is available, otherwise `ApproxTokenizer`, an estimate that errs high (ASCII
text at 4 characters a token, every other character a token of its own; real English runs nearer 4.5
characters a token, Chinese about 1-1.5 characters).
"""

from __future__ import annotations

import bisect
import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import dsp
from dsp.utils import check_nonnegative_int, check_positive_int
from .data import LETTERS, DetectiveQAError, Novel, Question

__all__ = [
    "INSTRUCTION", "REPLY_FORMAT", "CUTS", "BOTH_SEPARATOR", "question_block", "question_list", "render_prompt",
    "Tokenizer", "LMTokenizer", "TiktokenTokenizer", "ApproxTokenizer", "tokenizer_for",
    "Context", "truncated_context", "paragraphs_in",
]

log = logging.getLogger("programs.detectiveqa")

INSTRUCTION = "Please answer the following question based on the provided content:"
REPLY_FORMAT = ('Reply strictly in the following JSON format, where x is the letter of the correct option and xxx '
                'is your reasoning: {"answer":"x","reasoning":"xxx"}')
CUTS = ("start", "answer", "both")
BOTH_SEPARATOR = "\n...\n"
_MARKER = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


def question_block(question: Question) -> str:
    """The instruction, question, options ("A: ...") and reply format, one per line."""
    options = "\n".join(f"{letter}: {question.options[letter]}" for letter in LETTERS)
    return f"{INSTRUCTION}\n{question.question}\n{options}\n{REPLY_FORMAT}"


def question_list(content: str, question: Question) -> list[str]:
    """The benchmark model interface's input: [novel content, question block]."""
    return [content, question_block(question)]


def render_prompt(parts: Sequence[str]) -> str:
    """One completion prompt from a question list: parts joined by a blank line, ending with a newline."""
    if isinstance(parts, str) or not parts or not all(isinstance(p, str) for p in parts):
        raise TypeError("a question list is a non-empty list of texts")
    return "\n\n".join(parts) + "\n"


# -- tokenizers ---------------------------------------------------------------------------------------

class Tokenizer(Protocol):
    """What truncation needs: a name, a token count, and a cut keeping the start, the end or both."""

    name: str

    def count(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int, keep: str = "start") -> str: ...


class LMTokenizer:
    """The tokenizer of an LM that declares one (`dsp.CountsTokens`, as dsp.LlamaCpp), named after the LM.

    For example (a model load, so not run as a doctest)::

        lm = dsp.LlamaCpp()
        LMTokenizer(lm).name == lm.name, LMTokenizer(lm).count("Hello world")    # (True, 2)
    """

    def __init__(self, lm: dsp.CountsTokens) -> None:
        if not isinstance(lm, dsp.CountsTokens):
            raise TypeError(f"LMTokenizer needs an LM that counts its tokens (dsp.CountsTokens), got {lm!r}")
        self.lm = lm
        # A CountsTokens that is not a dsp LM has no "provider:model" name: its class names it.
        self.name = lm.name if isinstance(lm, dsp.LM) else type(lm).__name__

    def count(self, text: str) -> int:
        return int(self.lm.count_tokens(text))

    def truncate(self, text: str, max_tokens: int, keep: str = "start") -> str:
        return self.lm.truncate(text, max_tokens, keep=keep, separator=BOTH_SEPARATOR)


def _cut_ids(text: str, max_tokens: int, keep: str, encode: Any, decode: Any) -> str:
    """Cut by token ids, shrinking until the re-encoded result fits (decoding can merge differently)."""
    ids = encode(text)
    if len(ids) <= max_tokens:
        return text
    budget = max_tokens - (len(encode(BOTH_SEPARATOR)) if keep == "both" else 0)
    if keep == "both" and budget < 2:
        keep, budget = "start", max_tokens
    while budget > 0:
        if keep == "start":
            result = decode(ids[:budget])
        elif keep == "end":
            result = decode(ids[len(ids) - budget:])
        else:
            head, tail = (budget + 1) // 2, budget // 2
            result = decode(ids[:head]) + BOTH_SEPARATOR + decode(ids[len(ids) - tail:])
        if len(encode(result)) <= max_tokens:
            return result
        budget -= 1
    return ""


class TiktokenTokenizer:
    """tiktoken's encoding for an OpenAI model (o200k_base when tiktoken does not know the model)."""

    def __init__(self, model: str) -> None:
        import tiktoken

        try:
            self.encoding = tiktoken.encoding_for_model(model)
        except KeyError:
            self.encoding = tiktoken.get_encoding("o200k_base")
        self.name = f"tiktoken:{self.encoding.name}"

    def _encode(self, text: str) -> list[int]:
        return self.encoding.encode(text, disallowed_special=())

    def count(self, text: str) -> int:
        return len(self._encode(text))

    def truncate(self, text: str, max_tokens: int, keep: str = "start") -> str:
        _check_keep(keep, max_tokens)
        return _cut_ids(text, max_tokens, keep, self._encode, self.encoding.decode)


class ApproxTokenizer:
    """An estimate for LMs whose tokenizer is not at hand: ceil(ASCII characters / 4) + other characters.

    It errs high for English and about right for Chinese, so a budget it honours rarely overflows the
    real one; cuts fall on character boundaries.

    >>> ApproxTokenizer().count("abcdefgh"), ApproxTokenizer().count("侦探小说")
    (2, 4)
    >>> ApproxTokenizer().truncate("one two three four", 2)
    'one two '
    """

    name = "approx:ascii/4+other"

    def count(self, text: str) -> int:
        ascii_chars = sum(1 for ch in text if ord(ch) < 128)
        return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)

    def truncate(self, text: str, max_tokens: int, keep: str = "start") -> str:
        _check_keep(keep, max_tokens)
        if self.count(text) <= max_tokens:
            return text
        if keep == "both":
            budget = max_tokens - self.count(BOTH_SEPARATOR)
            if budget >= 2:
                head = self.truncate(text, (budget + 1) // 2, "start")
                return head + BOTH_SEPARATOR + self.truncate(text, budget // 2, "end")
            keep = "start"
        # The estimate of a prefix (or suffix) never shrinks as it grows: take the longest that fits.
        pieces = text if keep == "start" else text[::-1]
        counts, ascii_chars = [0], 0
        for i, ch in enumerate(pieces, start=1):
            ascii_chars += ord(ch) < 128
            counts.append(math.ceil(ascii_chars / 4) + (i - ascii_chars))
        length = bisect.bisect_right(counts, max_tokens) - 1
        return text[:length] if keep == "start" else text[len(text) - length:] if length else ""


def _check_keep(keep: str, max_tokens: int) -> None:
    if keep not in ("start", "end", "both"):
        raise ValueError(f"keep must be 'start', 'end' or 'both', got {keep!r}")
    check_nonnegative_int(max_tokens, "max_tokens")


def tokenizer_for(lm: Any) -> Tokenizer:
    """The tokenizer to count `lm`'s tokens with: its own (`dsp.CountsTokens`), else tiktoken (`dsp.OpenAI`),
    else an estimate.

    >>> tokenizer_for(object()).name
    'approx:ascii/4+other'
    """
    if isinstance(lm, dsp.CountsTokens):
        return LMTokenizer(lm)
    if isinstance(lm, dsp.OpenAI):
        try:
            return TiktokenTokenizer(str(lm.model))
        except ImportError:
            log.warning("tiktoken is not installed: token budgets for %r are estimated (pip install tiktoken)", lm)
        except (OSError, ValueError) as error:  # tiktoken downloads its encodings once; offline that fails
            log.warning("tiktoken has no encoding for %r here (%s): token budgets are estimated", lm, error)
    return ApproxTokenizer()


# -- the novel cut to q_len ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Context:
    """The novel content given to the model: its text, the strategy, its token count, the paragraphs whose
    "[N]" marker it holds, and whether anything was cut."""

    text: str
    strategy: str
    tokens: int
    paragraphs: tuple[int, ...]
    truncated: bool


def paragraphs_in(text: str) -> tuple[int, ...]:
    """Paragraph numbers whose "[N] " marker starts a line of `text` (a paragraph cut mid-way whose marker
    survives counts; one whose marker was cut off does not).

    >>> paragraphs_in("[3] a\\nb\\n[4] c")
    (3, 4)
    """
    return tuple(int(m.group(1)) for m in _MARKER.finditer(text))


def truncated_context(novel: Novel, question: Question, q_len: int, tokenizer: Tokenizer,
                      cut: str = "answer") -> Context:
    """The novel content for `question` in at most `q_len` tokens, cut by strategy `cut` (see `CUTS`).

    >>> from pathlib import Path
    >>> from programs.detectiveqa.data import load_detectiveqa
    >>> ds = load_detectiveqa(Path(__file__).parents[2] / "tests/fixtures/detectiveqa")
    >>> context = truncated_context(ds.novels["901"], ds.questions[0], 300, ApproxTokenizer(), "answer")
    >>> context.tokens <= 300, context.paragraphs[-1], context.truncated      # revealed at [60]
    (True, 59, True)
    """
    if cut not in CUTS:
        raise ValueError(f"unknown cut strategy {cut!r}; choose one of {', '.join(CUTS)}")
    check_positive_int(q_len, "q_len")
    if cut == "answer":
        if question.answer_position is None:
            raise DetectiveQAError(question.source or question.qid, "has no answer_position, which the 'answer' cut "
                                   "needs; use --cut start or both", question=question.index, qid=question.qid)
        full = novel.render(novel.numbers_before(question.answer_position))
        if not full:
            raise DetectiveQAError(question.source or question.qid, f"answer_position {question.answer_position} "
                                   "leaves no paragraph before it", question=question.index, qid=question.qid)
        text = tokenizer.truncate(full, q_len, keep="end")
    else:
        full = novel.render()
        text = tokenizer.truncate(full, q_len, keep=cut)
    return Context(text, cut, tokenizer.count(text), paragraphs_in(text), text != full)
