"""The reasoning score: an LM judge compares a model's reasoning with the annotated reasoning and clues.

The judge (any dsp LM, chosen independently of the model under test) reads the question, the options,
the correct answer, the annotators' reasoning steps, the clue paragraphs themselves (each cut to
`CLUE_CHARS` characters) and the model's chosen answer and reasoning (cut to `REASONING_CHARS`), and
gives one integer on this scale (`SCALE`):

    4  reaches the correct answer through the key steps of the reference reasoning, using the decisive
       clues, and says nothing the novel contradicts
    3  correct answer with most key steps and clues; one step missing or vague
    2  partly sound: some of the relevant clues or steps, but important ones missing, or a wrong final
       answer reached by partly sound reasoning
    1  refers to the story but to none of the key clues; does not support the correct answer
    0  no reasoning, irrelevant or contradicting the novel

The reported reasoning score is the mean of score / 4 (0 to 1). An empty reasoning scores 0 without a
call. The prompt ends with "Score:" so base models complete it with the number and chat models read it as
the question; `parse_score` accepts "3", "Score: 3", "3/4" and {"score": 3}. When the reply holds none
(small base models write "100%" or ramble), the judge falls back as answer alignment does: the digit
" 0" .. " 4" the judge LM finds most likely after "Score:" (path "logprob"; needs logprobs, which the
embedded model and most OpenAI-compatible servers give). Failing that the score stays unset and the row
counts as unjudged, not as 0. Judge calls are ordinary LM calls, so they go through dsp's disk cache: a
rerun judges nothing twice.

>>> parse_score(" 3\\n\\nQuestion: ..."), parse_score("Score: 4/4"), parse_score('{"score": 2}'), parse_score("7")
(3, 4, 2, None)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from dsp import LM, settings
from .align import letter_scores
from .data import LETTERS, Novel, Question

__all__ = ["SCALE", "MAX_SCORE", "CLUE_CHARS", "REASONING_CHARS", "JudgeResult", "ReasoningJudge", "judge_prompt",
           "parse_score"]

MAX_SCORE = 4
SCALE: Mapping[int, str] = {
    4: "reaches the correct answer through the key steps of the reference reasoning, using the decisive clues, "
       "and says nothing the novel contradicts",
    3: "correct answer with most key steps and clues; one step missing or vague",
    2: "partly sound: some of the relevant clues or steps, but important ones missing, or a wrong final answer "
       "reached by partly sound reasoning",
    1: "refers to the story but to none of the key clues; does not support the correct answer",
    0: "no reasoning, irrelevant or contradicting the novel",
}
CLUE_CHARS = 400        # a clue paragraph is evidence, not the novel: its opening is enough for the judge
REASONING_CHARS = 1500  # a rambling reply must not crowd the reference out of the judge's context

# In order: a number opening the reply comes first, since a base model completing "Score:" writes its
# score there and may ramble on into another "Score: n" of its own invention.
_SCORE_PATTERNS = [
    re.compile(r'"score"\s*:\s*"?(\d+)', re.IGNORECASE),
    re.compile(r"^\s*\**\s*(\d+)(?![\d.,])"),
    re.compile(r"\bscore\s*(?:is|[:=：])?\s*\**\s*(\d+)", re.IGNORECASE),
    re.compile(r"\b(\d+)\s*/\s*4\b"),
]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def judge_prompt(question: Question, novel: Novel | None, chosen: str | None, reasoning: str) -> str:
    """The judge's prompt for one question and one model reasoning (see the module notes for the scale)."""
    options = "\n".join(f"{letter}: {question.options[letter]}" for letter in LETTERS)
    steps = "\n".join(f"{i}. {step}" for i, step in enumerate(question.reasoning, start=1)) or "(none given)"
    clues = []
    for number in question.clue_position:
        try:
            text = novel.paragraph(number) if novel is not None else ""
        except KeyError:
            text = ""
        clues.append(f"[{number}] {_clip(text, CLUE_CHARS)}" if text else f"[{number}] (not in the novel file)")
    scale = "\n".join(f"{score} = {SCALE[score]}" for score in sorted(SCALE, reverse=True))
    chosen_text = f"{chosen}: {question.options[chosen]}" if chosen in question.options else "no option"
    return (
        "You are grading the reasoning given for an answer to a question about a detective novel.\n\n"
        f"Question: {question.question}\n{options}\n"
        f"Correct answer: {question.answer}: {question.options[question.answer]}\n\n"
        f"Reference reasoning steps:\n{steps}\n\n"
        "Clue paragraphs from the novel:\n" + ("\n".join(clues) or "(none given)") + "\n\n"
        f"Answer chosen by the model: {chosen_text}\n"
        f"Reasoning given by the model:\n{_clip(reasoning, REASONING_CHARS)}\n\n"
        f"Grade the model's reasoning against the reference steps and clues on this scale:\n{scale}\n"
        "Reply with the score only.\n"
        "Score:"
    )


def parse_score(text: str, max_score: int = MAX_SCORE) -> int | None:
    """The judge's integer score in 0..max_score, or None if the reply holds none."""
    if not isinstance(text, str):
        return None
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped).get("score")
            if isinstance(value, (int, str)) and str(value).strip().isdigit():
                score = int(str(value).strip())
                return score if 0 <= score <= max_score else None
        except (ValueError, AttributeError):
            pass  # not a JSON object after all: the patterns below still apply
    for pattern in _SCORE_PATTERNS:
        found = pattern.search(stripped)
        if found:
            score = int(found.group(1))
            return score if 0 <= score <= max_score else None
    return None


@dataclass
class JudgeResult:
    """score: 0..MAX_SCORE or None; normalized = score / MAX_SCORE; path: judged (parsed from the reply),
    logprob (the likeliest digit), empty (no reasoning: 0) or unparsed (no score)."""

    score: int | None
    raw: str
    path: str

    @property
    def normalized(self) -> float | None:
        return None if self.score is None else self.score / MAX_SCORE

    def as_dict(self) -> dict[str, Any]:
        return {"judge_score": self.score, "judge_normalized": self.normalized, "judge_raw": self.raw,
                "judge_path": self.path}


class ReasoningJudge:
    """Scores reasoning with `lm` (default `dsp.settings.lm` at call time), greedily, through the cache.

    >>> from dsp import LM
    >>> class Three(LM):
    ...     def _request(self, request):
    ...         return {"choices": [{"text": " 3", "finish_reason": "stop"}]}
    >>> from programs.detectiveqa.data import Question
    >>> q = Question("x#1", "en", "human_anno", "1", 1, "Who?", {"A": "a", "B": "b", "C": "c", "D": "d"}, "A",
    ...              reasoning=("a had the key",), clue_position=())
    >>> ReasoningJudge(Three("three")).judge(q, None, "A", "a had the key", cache=False).normalized
    0.75
    """

    def __init__(self, lm: Any = None, max_tokens: int = 16, fallback: bool = True) -> None:
        self._lm = lm
        self.max_tokens = max_tokens
        self.fallback = fallback  # score by the digits' logprobs when the reply holds no score

    @property
    def lm(self) -> LM:
        lm = self._lm if self._lm is not None else settings.lm
        if lm is None:
            raise RuntimeError("ReasoningJudge has no LM: pass one, or dsp.settings.configure(lm=...)")
        return lm

    def get_name(self) -> str:
        return self.lm.name

    def judge(self, question: Question, novel: Novel | None, chosen: str | None, reasoning: str,
              cache: bool | None = None) -> JudgeResult:
        """Score one model reasoning for `question` (see the module notes)."""
        if not isinstance(reasoning, str) or not reasoning.strip():
            return JudgeResult(0, "", "empty")
        prompt = judge_prompt(question, novel, chosen, reasoning)
        lm = self.lm
        raw = lm(prompt, max_tokens=self.max_tokens, temperature=0.0, cache=cache)[0]
        score = parse_score(raw)
        if score is not None:
            return JudgeResult(score, raw, "judged")
        if self.fallback:
            digits = [str(d) for d in range(MAX_SCORE + 1)]
            scores = letter_scores(lm, prompt, digits)
            if scores:
                return JudgeResult(int(max(scores, key=lambda d: scores[d])), raw, "logprob")
        return JudgeResult(None, raw, "unparsed")
