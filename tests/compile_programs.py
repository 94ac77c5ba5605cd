"""Importable programs and a scripted LM for the dsp.compile tests (a compiled program is saved by name)."""

from __future__ import annotations

import re

import dsp
from templates.qa import qa, qa_with_cot

__all__ = ["reader", "cot_reader", "evidence", "magic_respond", "wrong_respond", "lucky", "as_written", "MAGIC"]

MAGIC = "which demo unlocks the answers?"


def reader(question: str, train: list, demos: list | None = None, n_demos: int = 2, shout: bool = False) -> dsp.Example:
    """A one-stage program: demos (given, or drawn from train), then the answer."""
    x = dsp.Example(question=question, demos=dsp.sample(train, k=n_demos) if demos is None else demos)
    _, completions = dsp.generate(qa, stop="auto")(x, stage="qa")
    answer = completions.answer.upper() if shout else completions.answer
    return dsp.Example(question=question, answer=answer)


def magic_respond(prompt: str, request: dict) -> list[str]:
    """Right ("a<N>" for "q<N>?") only when the MAGIC training example is among the prompt's demos."""
    asked = re.findall(r"Question: (.*)\n", prompt)[-1]
    number = re.findall(r"\d+", asked)
    if f"Question: {MAGIC}" in prompt and number:
        return [f" a{number[0]}"]
    return [" no idea"]


def evidence(question: str) -> list[str]:
    """A stand-in search: questions with an even number find a passage holding their answer."""
    number = int(re.findall(r"\d+", question)[0]) if re.findall(r"\d+", question) else 1
    return [f"Q{number} | the answer to q{number} is a{number}"] if number % 2 == 0 else ["Nothing | no answer here"]


def cot_reader(question: str, train: list, demos: list | None = None) -> dsp.Example:
    """Search (`evidence`), then a rationale and an answer."""
    x = dsp.Example(question=question, context=evidence(question), demos=dsp.sample(train, k=2) if demos is None else demos)
    _, completions = dsp.generate(qa_with_cot, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer, context=x.context)


def wrong_respond(prompt: str, request: dict) -> list[str]:
    """A model that reasons and always answers wrong."""
    return [" guess wildly.\n\nAnswer: wrong"]


def lucky(question: str, train: list, demos: list | None = None, luck: int = 0, first: tuple = ()) -> dsp.Example:
    """No LM: right ("a<N>" for "what is q<N>?") on the questions in `first` when `luck`, on the others when not."""
    right = (question in first) == bool(luck)
    return dsp.Example(question=question, answer=f"a{question[9:-1]}" if right else "no")


def as_written(question: str, train: list, demos: list | None = None, luck: int = 0, first: tuple = ()) -> dsp.Example:
    """`lucky` with every option ignored: every candidate answers as the program as written."""
    return lucky(question, train, first=first)
