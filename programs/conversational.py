"""Conversational QA programs (QReCC), paper §3.4, and the autoregressive runner that evaluates them.

Every program answers one turn from its question and the conversation so far, given as
`history` = [(question, answer), ...] of the earlier turns. `Conversations` runs a program turn by
turn and feeds it *its own* earlier answers (never the gold ones), as the paper evaluates.

- `vanilla`: the LM alone, answering from the history.
- `retrieve_then_read`: search with the first turn's question plus the last question, then answer.
- `dsp_program`: n=10 sampled stand-alone rewrites of the question, fused (CombSUM) into 5 passages,
  then a greedy answer conditioned on the passages and the history.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Callable, Sequence

import dsp
from programs.family import Family
from templates.qa import conv_qa, conv_qa_with_context, conv_rewrite

__all__ = ["format_history", "vanilla", "retrieve_then_read", "dsp_program", "Conversations", "by_turns", "PROGRAMS",
           "PRESETS", "SEARCH", "MOOT", "BOUNDS", "FAMILY"]

Turns = Sequence[tuple[str, str]]


def format_history(history: Turns) -> str:
    """The earlier turns as lines "User: ..." / "Assistant: ..." (the empty string for a first turn)."""
    lines = []
    for question, answer in history:
        lines += [f"User: {' '.join(question.split())}", f"Assistant: {' '.join(str(answer).split())}"]
    return "\n".join(lines) or "(none)"


def _demos(train: list[dsp.Example], n_demos: int, chosen: list[dsp.Example] | None = None) -> list[dsp.Example]:
    """Training turns as demos: their gold history and answer, in the program's own field names (`chosen`
    ones, e.g. by dsp.compile, instead of a sample; an augmented one keeps its stage records)."""
    out = []
    for d in dsp.sample(train, k=n_demos) if chosen is None else chosen:
        if d.get("augmented"):
            out.append(d)
            continue
        context = d.get("history") or []
        if context and not isinstance(context, str):
            context = format_history(list(zip(context[0::2], context[1::2])))
        out.append(dsp.Example(question=d.question, history=context or format_history([]), answer=d.answer))
    return out


def vanilla(question: str, history: Turns, train: list[dsp.Example], n_demos: int = 4,
            demos: list[dsp.Example] | None = None) -> dsp.Example:
    x = dsp.Example(question=question, history=format_history(history), demos=_demos(train, n_demos, demos))
    _, completions = dsp.generate(conv_qa, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer)


def retrieve_then_read(question: str, history: Turns, train: list[dsp.Example], k: int = 5,
                       n_demos: int = 4, demos: list[dsp.Example] | None = None) -> dsp.Example:
    query = " ".join([history[0][0], question]) if history else question
    x = dsp.Example(question=question, history=format_history(history), demos=_demos(train, n_demos, demos),
                    context=dsp.retrieve(query, k=k))
    _, completions = dsp.generate(conv_qa_with_context, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer, context=x.context)


def dsp_program(question: str, history: Turns, train: list[dsp.Example], n_queries: int = 10, k: int = 5,
                temperature: float = 0.7, n_demos: int = 4, demos: list[dsp.Example] | None = None) -> dsp.Example:
    x = dsp.Example(question=question, history=format_history(history), demos=_demos(train, n_demos, demos))
    if history:
        _, rewrites = dsp.generate(conv_rewrite, n=n_queries, temperature=temperature, stop="auto")(x, stage="rewrite")
        queries = [c.get("query") for c in rewrites] + [question]
    else:
        queries = [question]  # a first turn already stands alone
    x.context = dsp.fused_retrieval(queries, k=k)
    _, completions = dsp.generate(conv_qa_with_context, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer, context=x.context, queries=queries)


class Conversations:
    """Answer turns autoregressively: turn t sees the program's own answers to turns 1..t-1.

    Built from the turns to answer (only their conversation, turn number and question are kept, so no
    gold answer or rewrite can reach a prompt); call it on a turn to get the program's answer. Turns
    of one conversation run in order under a lock; conversations run in parallel.

    >>> turns = [dsp.Example(Conversation_no=1, Turn_no=n, question=q) for n, q in
    ...          ((1, "Who wrote Hamlet?"), (2, "When was he born?"))]
    >>> def program(question, history):  # a stand-in for dsp_program: says how many turns it was shown
    ...     return dsp.Example(answer=f"after {len(history)} turns")
    >>> out = Conversations(turns, program)(turns[1])   # turn 1 is answered first, for turn 2's history
    >>> out.answer, out.history
    ('after 1 turns', [('Who wrote Hamlet?', 'after 0 turns')])

    In an evaluation (with an LM and RM configured, so shown, not run)::

        runner = Conversations(turns, lambda q, h: dsp_program(q, h, train))
        dsp.evaluate(runner, turns, fields=dsp.Fields(inputs=("Conversation_no", "Turn_no", "question")),
                     metric=...)
    """

    def __init__(self, turns: Sequence[dsp.Example], program: Callable[[str, Turns], dsp.Example]) -> None:
        self.program = program
        self.questions: dict[tuple, str] = {}
        for t in turns:
            self.questions[(t["Conversation_no"], t["Turn_no"])] = t["question"]
        self.answers: dict[tuple, str] = {}
        self._locks: defaultdict[object, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def _lock(self, conversation: object) -> threading.Lock:
        with self._guard:
            return self._locks[conversation]

    def __call__(self, turn: dsp.Example) -> dsp.Example:
        conversation, number = turn["Conversation_no"], turn["Turn_no"]
        earlier = sorted(n for c, n in self.questions if c == conversation and n < number)
        if earlier != list(range(1, number)):
            raise ValueError(f"conversation {conversation}: turn {number} needs turns 1..{number - 1}, "
                             f"but only {earlier} are present")
        with self._lock(conversation):
            history = []
            for n in earlier:
                key = (conversation, n)
                if key not in self.answers:
                    self.answers[key] = self.program(self.questions[key], list(history)).answer
                history.append((self.questions[key], self.answers[key]))
            out = self.program(turn["question"], history)
            self.answers[(conversation, number)] = out.answer
            return out.copy(history=history)


PROGRAMS = {
    "vanilla": vanilla,
    "retrieve_then_read": retrieve_then_read,
    "dsp": dsp_program,
}
dsp.register_programs(PROGRAMS)  # compiled files may name them: dsp.load_compiled looks names up, never imports

# Named option sets of the DSP program (the paper's are its defaults).
PRESETS: dict[str, dict] = {"paper": {}}

# What `dsp compile` may tune besides the demonstrations: option -> values to try (plain data).
SEARCH: dict[str, dict] = {
    "vanilla": {},
    "retrieve_then_read": {"k": [3, 5]},
    "dsp": {"k": [3, 5], "n_queries": [3, 10], "temperature": [0.3, 0.7]},
}
# Options that have no effect under another's value (one passage has one order): never searched there.
MOOT: dict[str, dict] = {}

# The valid range of every numeric option of these programs: option -> (least, greatest), inclusive, None
# for no bound. The `dsp` command checks --set, --preset and --search values against it before any model
# loads.
BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "k": (1, None),              # passages per turn
    "n_queries": (1, None),      # sampled rewrites of the question
    "temperature": (0.0, None),  # 0: greedy
    "n_demos": (0, None),        # 0: zero-shot
}


def by_turns(program: Callable[[str, Turns], dsp.Example], turns: Sequence[dsp.Example]) -> Conversations:
    """`program` evaluated autoregressively over `turns` (the `wrap(program, examples)` that `dsp.compile`
    and the `dsp` command take): `Conversations(turns, program)`.

    >>> runner = by_turns(lambda q, h: dsp.Example(answer=f"{len(h)} earlier"), [])
    >>> isinstance(runner, Conversations)
    True
    """
    return Conversations(turns, program)


# The family as the `dsp` command reads it: turns are evaluated together, each after its conversation's
# earlier ones (so a compile holds whole conversations out); no small-model preset is measured for it (the
# paper's settings are the DSP program's defaults).
FAMILY = Family("conversational", PROGRAMS, PRESETS, SEARCH, MOOT, BOUNDS, demo_ks=(2, 4), main_program="dsp",
                wrap=by_turns, group="Conversation_no")
