"""Open-domain QA programs (Open-SQuAD, NQ-open), paper §3.3: three baselines and the DSP program.

Each program is `fn(question, train, **config) -> dsp.Example` with `answer` (and `context` when it
retrieves), over whatever LM and RM `dsp.settings` holds. Each takes `demos=`: demonstrations chosen
for it (by `dsp.compile`: raw training examples, or augmented ones carrying their stage records) in
place of the ones it would draw from `train` itself.

- `vanilla`: the LM alone, 16 sampled demonstrations.
- `retrieve_then_read`: the top-k passages for the question, then a few-shot answer.
- `self_ask` (see programs.self_ask): follow-up questions answered with the same RM.
- `dsp_program`: DEMONSTRATE by annotating 3 training examples with the program's own zero-shot
  retrieve-and-reason pipeline (kept only when the retrieved context holds the answer and the
  predicted answer is right), SEARCH k=7 passages, PREDICT with chain of thought and
  self-consistency over n=20 samples.
"""

from __future__ import annotations

from typing import Literal

import dsp
from programs.family import Family
from programs.self_ask import self_ask_program
from templates.qa import qa, qa_with_context, qa_with_cot

__all__ = ["vanilla", "retrieve_then_read", "self_ask_program", "dsp_program", "PROGRAMS", "PRESETS", "SEARCH", "MOOT",
           "FREE", "BOUNDS", "FAMILY"]

Label = Literal["predicted", "gold"]


def vanilla(question: str, train: list[dsp.Example], n_demos: int = 16,
            demos: list[dsp.Example] | None = None) -> dsp.Example:
    x = dsp.Example(question=question, demos=dsp.sample(train, k=n_demos) if demos is None else demos)
    _, completions = dsp.generate(qa, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer)


def _context(question: str, k: int, order: str) -> list[str]:
    """The top-k passages, arranged for the prompt by `order` (`dsp.order_passages`; "relevance" keeps
    the retriever's order, "lost_in_the_middle" puts the best at both ends)."""
    return dsp.order_passages(dsp.retrieve(question, k=k), strategy=order)


def retrieve_then_read(question: str, train: list[dsp.Example], k: int = 1, n_demos: int = 5,
                       demo_context: bool = True, order: dsp.OrderStrategy = "relevance",
                       demos: list[dsp.Example] | None = None) -> dsp.Example:
    """The top-k passages for the question, then a few-shot answer; with `demo_context`, each raw demo
    shows its own top-k passages too (small models copy answers from a context only after seeing it done;
    an augmented demo shows the context its trace read). `order` arranges every context (see `_context`)."""
    demos = dsp.sample(train, k=n_demos) if demos is None else demos
    if demo_context:
        demos = [d if d.get("augmented") else d.copy(context=_context(d.question, k, order)) for d in demos]
    x = dsp.Example(question=question, demos=demos, context=_context(question, k, order))
    _, completions = dsp.generate(qa_with_context, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer, context=x.context)


def _annotation_attempt(pool: list[dsp.Example], k: int, n_raw: int, template: dsp.Template, label: str,
                        order: str = "relevance"):
    """Run the pipeline on a training example, with the rest of the pool as raw demos (as the DSP v1
    intro's annotate step does); keep its trace only if the context holds the answer and it is right.

    With label="gold", a trace whose search succeeded is kept with the gold answer as its prediction
    (no LM call): for models too weak to answer their own training questions, the demonstration of
    the search stage is what helps."""

    @dsp.transformation
    def attempt(d: dsp.Example) -> dsp.Example | None:
        x = dsp.Example(question=d.question, demos=dsp.all_but(pool, d)[:n_raw], context=_context(d.question, k, order))
        if not dsp.passage_match(x.context, d.answer):
            return None
        if label == "gold":
            gold = dsp.format_answers(d.answer)
            return d.copy(qa=dsp.Example(question=d.question, context=x.context, answer=gold), answer=gold)
        x, completions = dsp.generate(template, stop="auto")(x, stage="qa")
        if not dsp.answer_match(completions.answer, d.answer):
            return None
        return d.copy(qa=x.qa, answer=completions.answer)

    return attempt


def dsp_program(question: str, train: list[dsp.Example], k: int = 7, n: int = 20, temperature: float = 0.7,
                n_demos: int = 3, demo_k: int = 3, pool: int = 16, n_raw: int = 8, cot: bool = True,
                label: Label = "predicted", order: dsp.OrderStrategy = "relevance", extractive: bool = False,
                demos: list[dsp.Example] | None = None) -> dsp.Example:
    """The DSP open-QA program. `demo_k` passages per annotated demo keep the prompt short; `n_raw`
    raw (question/answer) demos accompany the augmented ones. `cot=False` predicts the answer
    directly (for models too small to write a rationale: the demos then show context and answer).
    `order` arranges the passages in every context, e.g. "lost_in_the_middle" (`dsp.order_passages`).
    `extractive=True` lets only sampled answers found in the context vote (`dsp.majority(context=...)`).
    With `demos` (from `dsp.compile`), its augmented ones and up to `n_raw` raw ones are used as they are:
    no annotation runs."""
    template = qa_with_cot if cot else qa_with_context
    if label not in ("predicted", "gold") or (label == "gold" and cot):
        raise ValueError(f"label must be 'predicted', or 'gold' with cot=False (a gold answer has no rationale); got {label!r}")
    given = demos is not None
    if demos is None:
        sampled = dsp.sample(train, k=pool)
        attempt = _annotation_attempt(sampled, demo_k, n_raw, template, label, order)
        demos = dsp.annotate(attempt)(sampled, k=n_demos, return_all=True)
    augmented = [d for d in demos if d.get("augmented")]
    raw = [d for d in demos if not d.get("augmented")]
    raw = raw if given else raw[:n_raw]  # chosen demos (dsp.compile) are used as they are
    x = dsp.Example(question=question, demos=augmented + raw, context=_context(question, k, order))
    _, completions = dsp.generate(template, n=n, temperature=temperature, stop="auto")(x, stage="qa")
    best = dsp.majority(completions, context=x.context if extractive else None)
    return dsp.Example(question=question, answer=best.answer, context=x.context, rationale=best[0].get("rationale"),
                       n_augmented=len(augmented))


# Settings of the DSP program: the paper's (GPT-3 scale), and one for the embedded 270M model, which
# cannot write rationales, loses accuracy past one passage, and answers best near-greedily (measured
# on NQ with Gemma 3 270M: see RESULTS.md).
PRESETS = {
    "paper": {},
    "small": {"k": 1, "cot": False, "demo_k": 1, "label": "gold", "n_demos": 5, "n_raw": 0, "n": 5,
              "temperature": 0.3},
}

PROGRAMS = {
    "vanilla": vanilla,
    "retrieve_then_read": retrieve_then_read,
    "self_ask": self_ask_program,
    "dsp": dsp_program,
}
dsp.register_programs(PROGRAMS)  # compiled files may name them: dsp.load_compiled looks names up, never imports

# What `dsp compile` may tune besides the demonstrations: option -> values to try (plain data).
SEARCH = {
    "vanilla": {},
    "retrieve_then_read": {"k": [1, 2, 3], "demo_context": [True, False], "order": ["relevance", "lost_in_the_middle"]},
    "self_ask": {"k": [1, 2]},
    "dsp": {"k": [1, 2, 3], "n": [1, 5], "temperature": [0.3, 0.7], "cot": [False, True],
            "order": ["relevance", "lost_in_the_middle"], "extractive": [False, True]},
}
# Options that have no effect under another's value (one passage has one order; one sample, no vote):
# never searched there.
MOOT = {"order": {"k": [1]}, "extractive": {"n": [1]}}
# Options that change no LM or RM call, only which sampled answers vote: a compile reads every candidate
# both ways from the same cached calls and decides on the evidence of all of them (dsp.Space.free).
FREE = ("extractive",)

# The valid range of every numeric option of these programs: option -> (least, greatest), inclusive, None
# for no bound. The `dsp` command checks --set, --preset and --search values against it before any model
# loads (a k of 0 retrieves nothing to read; n=0 samples nothing to vote on).
BOUNDS = {
    "k": (1, None),              # passages per question
    "n": (1, None),              # sampled answers voting
    "temperature": (0.0, None),  # 0: greedy
    "n_demos": (0, None),        # 0: zero-shot
    "demo_k": (1, None),         # passages per annotated demo
    "pool": (0, None),           # training examples tried for annotation
    "n_raw": (0, None),          # raw demos beside the augmented ones
}

# The family as the `dsp` command reads it (a compile tries 3, 5 or 8 demonstrations).
FAMILY = Family("open_qa", PROGRAMS, PRESETS, SEARCH, MOOT, BOUNDS, demo_ks=(3, 5, 8), main_program="dsp",
                small_preset="small", free=FREE)
