"""Open-domain QA programs (Open-SQuAD, NQ-open), paper §3.3: three baselines and the DSP program.

Each program is `fn(question, train, **config) -> dsp.Example` with `answer` (and `context` when it
retrieves), over whatever LM and RM `dsp.settings` holds.

- `vanilla`: the LM alone, 16 sampled demonstrations.
- `retrieve_then_read`: the top-k passages for the question, then a few-shot answer.
- `self_ask` (see programs.self_ask): follow-up questions answered with the same RM.
- `dsp_program`: DEMONSTRATE by annotating 3 training examples with the program's own zero-shot
  retrieve-and-reason pipeline (kept only when the retrieved context holds the answer and the
  predicted answer is right), SEARCH k=7 passages, PREDICT with chain of thought and
  self-consistency over n=20 samples.
"""

from __future__ import annotations

import dsp
from programs.self_ask import self_ask
from templates.qa import qa, qa_with_context, qa_with_cot

__all__ = ["vanilla", "retrieve_then_read", "self_ask_program", "dsp_program", "PROGRAMS"]


def vanilla(question: str, train: list[dsp.Example], n_demos: int = 16) -> dsp.Example:
    x = dsp.Example(question=question, demos=dsp.sample(train, k=n_demos))
    _, completions = dsp.generate(qa, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer)


def retrieve_then_read(question: str, train: list[dsp.Example], k: int = 7, n_demos: int = 16) -> dsp.Example:
    x = dsp.Example(question=question, demos=dsp.sample(train, k=n_demos), context=dsp.retrieve(question, k=k))
    _, completions = dsp.generate(qa_with_context, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer, context=x.context)


def self_ask_program(question: str, train: list[dsp.Example], k: int = 1) -> dsp.Example:
    return self_ask(question, k=k)


def _annotation_attempt(k: int):
    """Run the pipeline zero-shot on a training example; keep the trace only if it succeeds."""

    @dsp.transformation
    def attempt(d: dsp.Example) -> dsp.Example | None:
        x = dsp.Example(question=d.question, demos=[], context=dsp.retrieve(d.question, k=k))
        if not dsp.passage_match(x.context, d.answer):
            return None
        x, completions = dsp.generate(qa_with_cot, stop="auto")(x, stage="qa")
        if not dsp.answer_match(completions.answer, d.answer):
            return None
        return d.copy(qa=x.qa, answer=completions.answer)

    return attempt


def dsp_program(question: str, train: list[dsp.Example], k: int = 7, n: int = 20, temperature: float = 0.7,
                n_demos: int = 3, demo_k: int = 3, pool: int = 16) -> dsp.Example:
    """The DSP open-QA program. `demo_k` passages per annotated demo keep the prompt short."""
    demos = dsp.annotate(_annotation_attempt(demo_k))(dsp.sample(train, k=pool), k=n_demos, return_all=True)
    # Raw demos show question/answer only; keep just enough of them to fill the 16-shot budget.
    x = dsp.Example(question=question, demos=demos[:pool], context=dsp.retrieve(question, k=k))
    _, completions = dsp.generate(qa_with_cot, n=n, temperature=temperature, stop="auto")(x, stage="qa")
    best = dsp.majority(completions)
    return dsp.Example(question=question, answer=best.answer, context=x.context, rationale=best[0].rationale,
                       n_augmented=sum(bool(d.get("augmented")) for d in demos))


PROGRAMS = {
    "vanilla": vanilla,
    "retrieve_then_read": retrieve_then_read,
    "self_ask": self_ask_program,
    "dsp": dsp_program,
}
