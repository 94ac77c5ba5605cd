"""The self-ask baseline (Press et al., 2022), with our RM answering the follow-up questions.

The LM writes "Follow up: ..." questions; each is searched with the configured RM and answered from
the top passage by a short QA prompt ("Intermediate answer: ..."); the LM then continues until it
writes "So the final answer is: ...". The same RM serves every program, so the comparison with DSP
is about the program, not the retriever.

For example (a model load, so shown, not run as a doctest)::

    dsp.settings.configure(lm=dsp.LlamaCpp(), rm=dsp.BM25(passages))
    self_ask("Who was president when the Eiffel Tower opened?").answer
"""

from __future__ import annotations

import dsp
from templates.qa import SELF_ASK_DEMOS, SELF_ASK_INSTRUCTIONS, qa_with_context

__all__ = ["self_ask", "self_ask_program"]

FOLLOW_UP = "Follow up:"
INTERMEDIATE = "Intermediate answer:"
FINAL = "So the final answer is:"


def _intermediate_answer(follow_up: str, k: int, demos: list[dsp.Example]) -> tuple[str, list[str]]:
    passages = dsp.retrieve(follow_up, k=k)
    x = dsp.Example(question=follow_up, context=passages, demos=demos)
    _, completions = dsp.generate(qa_with_context, max_tokens=40, stop="auto")(x, stage="self_ask_ia")
    return completions.answer.strip() or "unknown", passages


def self_ask(question: str, k: int = 1, max_follow_ups: int = 3, max_tokens: int = 64,
             demos: list[dsp.Example] | None = None) -> dsp.Example:
    """Answer `question` by self-ask; returns an Example with `answer`, `follow_ups` and `context`.

    `demos` are the question/context/answer demonstrations of the step that answers each follow-up
    from the retrieved passages (the reader of retrieve-then-read; a small model answers nothing
    zero-shot: with no demos and a stop at the first newline it wrote nothing)."""
    lm = dsp.settings.lm
    if lm is None:
        raise RuntimeError("self_ask needs an LM: dsp.settings.configure(lm=...)")
    prompt = f"{SELF_ASK_INSTRUCTIONS}\n\n{SELF_ASK_DEMOS}\n\nQuestion: {' '.join(question.split())}\n" \
             f"Are follow up questions needed here:"
    follow_ups, context = [], []
    for _ in range(max_follow_ups + 1):
        text = lm(prompt, max_tokens=max_tokens, temperature=0.0, stop=[INTERMEDIATE, "\nQuestion:"])[0]
        prompt += text
        if FINAL in text:
            answer = text.split(FINAL, 1)[1].strip().split("\n")[0].strip()
            return dsp.Example(question=question, answer=answer, follow_ups=follow_ups, context=context)
        follow_up = text.rsplit(FOLLOW_UP, 1)[1].strip().split("\n")[0] if FOLLOW_UP in text else ""
        if not follow_up or len(follow_ups) == max_follow_ups:
            break
        answer, passages = _intermediate_answer(follow_up, k, demos or [])
        follow_ups.append({"question": follow_up, "answer": answer})
        context.extend(p for p in passages if p not in context)
        prompt = prompt.rstrip() + f"\n{INTERMEDIATE} {answer}\n"
    # No final answer written: ask for it explicitly, greedily.
    tail = lm(prompt.rstrip() + f"\n{FINAL}", max_tokens=max_tokens, temperature=0.0, stop=["\n"])[0]
    return dsp.Example(question=question, answer=tail.strip(), follow_ups=follow_ups, context=context)


def self_ask_program(question: str, train: list[dsp.Example], k: int = 1, n_demos: int = 5,
                     demos: list[dsp.Example] | None = None) -> dsp.Example:
    """Self-ask as a bundled program: its follow-ups are answered by the retrieve-then-read reader
    (demos sampled from `train`, or given, each raw one shown with its own top-k passages, as in
    retrieve-then-read)."""
    chosen = dsp.sample(train, k=n_demos) if demos is None else demos
    reader = [d if d.get("augmented") else d.copy(context=dsp.retrieve(d.question, k=k)) for d in chosen]
    return self_ask(question, k=k, demos=reader)
