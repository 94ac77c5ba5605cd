"""Answer alignment: turn a model's reply into one option letter, and say how.

Paths, tried in order (`PATHS`):

1. ``json``: the reply holds a JSON object whose "answer" is an option letter (the format the prompt
   asks for; surrounding text and code fences are ignored);
2. ``lenient``: an option letter found by patterns such as ``"answer": "B`` (JSON cut short),
   ``the answer is C``, ``option D``, ``B: ...`` / ``(B)`` at the start, or the text of exactly one option;
3. ``logprob``: the prompt, the reply and ``\\nSo the correct option is`` go back to the LM, and the option
   letter with the highest log-probability as the next token wins (dsp.LlamaCpp scores " A" .. " D"
   exactly with `option_logprobs`; other LMs, e.g. OpenAI-compatible servers, are asked for one token
   with top logprobs and the letters found among them are compared);
4. ``none``: nothing worked (no LM given, or no letter among its logprobs); the question counts as wrong.

>>> align_reply('{"answer": "B", "reasoning": "the boots"}').path
'json'
>>> a = align_reply('I think the answer is C because of the tide.')
>>> a.answer, a.path
('C', 'lenient')
>>> align_reply("No idea.").path
'none'
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from dsp import LM, RequestRejected, ScoresOptions
from .data import LETTERS
from .prompt import INSTRUCTION, REPLY_FORMAT

__all__ = [
    "PATHS", "FALLBACK_SUFFIX", "Alignment", "parse_json_reply", "lenient_letter", "letter_scores",
    "scores_from_logprobs", "align_reply", "strip_echo",
]

log = logging.getLogger("programs.detectiveqa")

PATHS = ("json", "lenient", "logprob", "none")
_ECHOES = (INSTRUCTION, REPLY_FORMAT.split(",")[0])
FALLBACK_SUFFIX = "\nSo the correct option is"
_LETTER_VALUE = re.compile(r"^\s*[\[(（]?\s*([A-Da-d])\s*(?:$|[\])）.:：、,\s])")
_LENIENT = [
    # Key words match in any case, letters only in capitals (so "the answer is a ..." is not "A"), except
    # a quoted letter after "answer": as a cut-short JSON reply writes it ("answer": "b ...).
    re.compile(r"""(?i:["']?answer["']?)\s*[:：]\s*(?:["']([A-Da-d])(?=["'\s.,)]|$)|["'\[(]?([A-D])\b)"""),
    # Prose: "the answer is C", "correct option: (D)", "I choose B", "答案是C", "选B".
    re.compile(r"\b(?i:answer|option|choice)\s*(?:(?i:is|would be))?\s*[:：=]?\s*(?:(?i:option)\s*)?[\[(]?([A-D])\b"),
    re.compile(r"(?:答案|选项|选择|应选|选)\s*(?:是|为|[:：])?\s*[\[(（]?([A-Da-d])(?![A-Za-z])"),
    re.compile(r"\b(?i:choose|pick|select)\s+(?:(?i:option)\s*)?[\[(]?([A-D])\b"),
    # A letter opening the reply: "B", "B:", "(B)", "B. Dr. Marsh".
    re.compile(r"^\s*[\[(（]?([A-D])(?:\s*$|\s*[\])）.:：]|\s+[-–])"),
]


@dataclass
class Alignment:
    """The aligned answer (a letter or None), the reasoning text, which path produced it, and the option
    log-probabilities when the logprob path ran."""

    answer: str | None
    reasoning: str
    path: str
    scores: dict[str, float] | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"answer": self.answer, "reasoning": self.reasoning, "path": self.path, "scores": self.scores}


def _letter(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    found = _LETTER_VALUE.match(value)
    return found.group(1).upper() if found else None


def parse_json_reply(text: str) -> tuple[str, str] | None:
    """(letter, reasoning) from the first JSON object in `text` whose "answer" is an option letter.

    >>> parse_json_reply('```json\\n{"answer":"d","reasoning":"x"}\\n```')
    ('D', 'x')
    >>> parse_json_reply('{"answer": "E"}') is None
    True
    """
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if not isinstance(value, Mapping):
            continue
        keys = {str(k).strip().lower(): v for k, v in value.items()}
        letter = _letter(keys.get("answer"))
        if letter is not None:
            reasoning = keys.get("reasoning", "")
            if isinstance(reasoning, list):
                reasoning = " ".join(str(r) for r in reasoning)
            return letter, str(reasoning) if reasoning is not None else ""
    return None


def lenient_letter(text: str, options: Mapping[str, str] | None = None) -> str | None:
    """An option letter read leniently from free text (see the module notes), or None.

    >>> lenient_letter('{"answer": "B", "reasoning": "cut sho')
    'B'
    >>> lenient_letter("A man walked in.") is None
    True
    >>> lenient_letter("It was the boathouse.", {"A": "glasshouse", "B": "attic", "C": "ferry", "D": "boathouse"})
    'D'
    """
    for pattern in _LENIENT:
        found = pattern.search(text)
        if found:
            return next(g for g in found.groups() if g).upper()
    if options:
        # Exactly one option's text in the reply (options that contain another are not told apart).
        lowered = " ".join(text.lower().split())
        hits = [letter for letter, option in options.items()
                if len(option.strip()) >= 3 and " ".join(option.lower().split()).rstrip(".") in lowered]
        if len(hits) == 1:
            return hits[0]
    return None


def scores_from_logprobs(logprobs: Any, letters: Sequence[str] = LETTERS) -> dict[str, float]:
    """Log-probabilities of the option letters at the first generated token, from an LM response's
    logprobs in any of the shapes servers return: completions ({"top_logprobs": [{token: lp}]}), chat
    ({"content": [{"top_logprobs": [{"token", "logprob"}]}]}), or dsp.LlamaCpp's (as completions).
    A letter token may carry spaces (" B"); the best-scoring spelling of each letter is kept.

    >>> scores_from_logprobs({"tokens": [" B"], "top_logprobs": [{" B": -0.2, " A": -1.9, "The": -3.0}]})
    {'A': -1.9, 'B': -0.2}
    >>> scores_from_logprobs({"content": [{"token": "C", "logprob": -0.1,
    ...     "top_logprobs": [{"token": "C", "logprob": -0.1}, {"token": "D", "logprob": -2.5}]}]})
    {'C': -0.1, 'D': -2.5}
    """
    candidates: list[tuple[str, float]] = []
    if isinstance(logprobs, Mapping):
        content = logprobs.get("content")
        if isinstance(content, list) and content and isinstance(content[0], Mapping):
            first = content[0]
            candidates.append((str(first.get("token", "")), first.get("logprob")))
            for entry in first.get("top_logprobs") or []:
                if isinstance(entry, Mapping):
                    candidates.append((str(entry.get("token", "")), entry.get("logprob")))
        top = logprobs.get("top_logprobs")
        if isinstance(top, list) and top and isinstance(top[0], Mapping):
            candidates.extend(top[0].items())
        tokens, token_lps = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if isinstance(tokens, list) and tokens and isinstance(token_lps, list) and token_lps:
            candidates.append((str(tokens[0]), token_lps[0]))
    scores: dict[str, float] = {}
    for token, value in candidates:
        letter = token.strip().strip("(").upper() if isinstance(token, str) else ""
        if letter in letters and isinstance(value, (int, float)) and math.isfinite(value):
            scores[letter] = max(float(value), scores.get(letter, -math.inf))
    return {letter: scores[letter] for letter in letters if letter in scores}


def letter_scores(lm: LM, prompt: str, letters: Sequence[str] = LETTERS, top: int = 20) -> dict[str, float] | None:
    """log P(label | prompt) of each label (the option letters; the judge's digits) as the next token, or
    None if the LM gives no logprobs.

    An LM that scores given continuations (`dsp.ScoresOptions`, as dsp.LlamaCpp) scores " A" .. " D"
    exactly; other LMs are asked for one token with `logprobs=top` and only the labels among those top
    tokens are scored (read from the call's response in `lm.history`).

    For example (a model load, so not run as a doctest),
    ``letter_scores(dsp.LlamaCpp(), "Q: 2+2?\\nA: 4\\nB: 5\\nThe correct option is")`` is
    ``{'A': -0.4, 'B': -2.1, 'C': -3.5, 'D': -3.9}`` (rounded).
    """
    if isinstance(lm, ScoresOptions):
        scored = lm.option_logprobs(prompt, [f" {letter}" for letter in letters])
        return {letter: float(scored[f" {letter}"]) for letter in letters}
    lm(prompt, max_tokens=1, temperature=0.0, logprobs=top, only_completed=False)
    # Threads may share the LM: the newest entry for this prompt is this call's, the newest entry may not be.
    entry = next((e for e in reversed(list(lm.history)) if e.get("prompt") == prompt), None)
    if entry is None:
        return None
    choices = (entry.get("response") or {}).get("choices") or []
    if not choices or choices[0].get("logprobs") is None:
        return None
    scores = scores_from_logprobs(choices[0]["logprobs"], letters)
    return scores or None


def strip_echo(text: str) -> str:
    """The reply up to where it starts repeating the prompt's instructions (small base models often do:
    the options they echo would otherwise read as an answer).

    >>> strip_echo("The answer is B.\\nPlease answer the following question based on the provided content:\\nA: x")
    'The answer is B.\\n'
    """
    cut = len(text)
    for marker in _ECHOES:
        found = text.find(marker)
        if found >= 0:
            cut = min(cut, found)
    return text[:cut]


def align_reply(text: str, prompt: str | None = None, lm: LM | None = None,
                options: Mapping[str, str] | None = None) -> Alignment:
    """Align a reply to an option letter: JSON, else a lenient read, else (with `prompt` and `lm`) the
    LM's logprobs after ``prompt + reply + FALLBACK_SUFFIX``; `path` records which one answered. An echo
    of the prompt's instructions and everything after it is not part of the reply (`strip_echo`)."""
    text = strip_echo(text if isinstance(text, str) else "")
    parsed = parse_json_reply(text)
    if parsed is not None:
        return Alignment(parsed[0], parsed[1], "json")
    letter = lenient_letter(text, options)
    if letter is not None:
        return Alignment(letter, text.strip(), "lenient")
    if lm is not None and prompt is not None:
        try:
            scores = letter_scores(lm, prompt + text + FALLBACK_SUFFIX)
        except (RequestRejected, ValueError) as error:
            # Permanent refusals (a server without logprobs, a prompt over the context window) cost this
            # answer its fallback, not the question; transient failures still raise, so a rerun retries.
            return Alignment(None, text.strip(), "none", detail={"why": f"{type(error).__name__}: {error}"})
        if scores:
            best = max(scores, key=lambda k: scores[k])
            return Alignment(best, text.strip(), "logprob", scores)
        return Alignment(None, text.strip(), "none", detail={"why": f"{lm!r} returned no logprobs for the letters"})
    return Alignment(None, text.strip(), "none")
