"""The five programs of the DSP v1 intro notebook, written as the notebook wrote them.

Each takes a question and the training set and returns an answer string:

With the recorded GPT-3/ColBERTv2 responses of DSP_DATA_DIR/dsp_v1 (so shown, not run as a doctest;
``python -m programs.intro`` replays them all)::

    import dsp, programs.intro as intro
    dsp.settings.configure(lm=dsp.ReplayLM(lm_file), rm=dsp.ReplayRM(rm_file))
    intro.multihop_QA_v2("When was the creator of Hadoop given an award?", train)    # '2015'
"""

from __future__ import annotations

import dsp
from templates.intro import hop_template, qa_template, qa_template_with_CoT, qa_template_with_passages, rewrite_template

__all__ = ["vanilla_LM_QA", "retrieve_then_read_QA", "retrieve_then_read_QA_v2", "multihop_QA_v1", "multihop_QA_v2",
           "PROGRAMS"]


def vanilla_LM_QA(question: str, train: list[dsp.Example]) -> str:
    """Few-shot QA with the LM alone (7 sampled demos)."""
    demos = dsp.sample(train, k=7)
    x = dsp.Example(question=question, demos=demos)
    x, completions = dsp.generate(qa_template)(x, stage="qa")
    return completions[0].answer


def retrieve_then_read_QA(question: str, train: list[dsp.Example]) -> str:
    """Retrieve the top passage, then answer from it."""
    demos = dsp.sample(train, k=7)
    passages = dsp.retrieve(question, k=1)
    x = dsp.Example(question=question, context=passages, demos=demos)
    x, completions = dsp.generate(qa_template_with_passages)(x, stage="qa")
    return completions[0].answer


@dsp.transformation
def QA_predict(example: dsp.Example, sc: bool = True) -> dsp.Example:
    """Answer with chain of thought; with `sc`, 20 samples and a majority vote (self-consistency)."""
    if sc:
        example, completions = dsp.generate(qa_template_with_CoT, n=20, temperature=0.7)(example, stage="qa")
        completions = dsp.majority(completions)
    else:
        example, completions = dsp.generate(qa_template_with_CoT)(example, stage="qa")
    return example.copy(answer=completions.answer)


def retrieve_then_read_QA_v2(question: str, train: list[dsp.Example]) -> str:
    """Retrieve 5 passages, answer with chain of thought and self-consistency."""
    demos = dsp.sample(train, k=7)
    passages = dsp.retrieve(question, k=5)
    x = dsp.Example(question=question, context=passages, demos=demos)
    return QA_predict(x).answer


@dsp.transformation
def multihop_search_v1(example: dsp.Example, max_hops: int = 2, k: int = 2) -> dsp.Example:
    """Two hops: write a query, retrieve k passages, write the next query from what was found."""
    example.context = []
    for hop in range(max_hops):
        template = rewrite_template if hop == 0 else hop_template
        example, completions = dsp.generate(template)(example, stage=f"h{hop}")
        passages = dsp.retrieve(completions.query, k=k)
        example.context = dsp.utils.deduplicate(example.context + passages)
    return example


def multihop_QA_v1(question: str, train: list[dsp.Example]) -> str:
    demos = dsp.sample(train, k=7)
    x = dsp.Example(question=question, demos=demos)
    x = multihop_search_v1(x)
    x = QA_predict(x, sc=False)
    return x.answer


def multihop_attempt(train: list[dsp.Example]):
    """The annotation step: run multihop_search_v1 + QA on a training example; keep it if it succeeds."""

    @dsp.transformation
    def attempt(d: dsp.Example) -> dsp.Example | None:
        x = dsp.Example(question=d.question, demos=dsp.all_but(train, d))
        x = multihop_search_v1(x)
        if not dsp.passage_match(x.context, d.answer):
            return None
        x = QA_predict(x, sc=False)
        if not dsp.answer_match(x.answer, d.answer):
            return None
        return d.copy(**x)

    return attempt


@dsp.transformation
def multihop_demonstrate(x: dsp.Example, train: list[dsp.Example]) -> dsp.Example:
    demos = dsp.sample(train, k=7)
    x.demos = dsp.annotate(multihop_attempt(train))(demos, k=3, return_all=True)
    return x


@dsp.transformation
def multihop_search_v2(example: dsp.Example, max_hops: int = 2, k: int = 5) -> dsp.Example:
    """Each hop samples 10 queries, fuses their results with the question's (CombSUM), keeps k passages."""
    example.context = []
    for hop in range(max_hops):
        template = rewrite_template if hop == 0 else hop_template
        example, completions = dsp.generate(template, n=10, temperature=0.7)(example, stage=f"h{hop}")
        queries = [c.query for c in completions] + [example.question]
        example.context = dsp.retrieveEnsemble(queries, k=k)
        if hop > 0:
            example.context = [completions[0].rationale] + example.context
    return example


def multihop_QA_v2(question: str, train: list[dsp.Example]) -> str:
    x = dsp.Example(question=question)
    x = multihop_demonstrate(x, train)
    x = multihop_search_v2(x)
    x = QA_predict(x)
    return x.answer


PROGRAMS = {
    "vanilla_LM_QA": vanilla_LM_QA,
    "retrieve_then_read_QA": retrieve_then_read_QA,
    "retrieve_then_read_QA_v2": retrieve_then_read_QA_v2,
    "multihop_QA_v1": multihop_QA_v1,
    "multihop_QA_v2": multihop_QA_v2,
}
dsp.register_programs(PROGRAMS)  # compiled files may name them: dsp.load_compiled looks names up, never imports


def load_intro_data() -> tuple[list[dsp.Example], list[dsp.Example]]:
    """The notebook's 6 training and 13 dev examples, from DSP_DATA_DIR/dsp_v1/dsp_v1_intro_data.json."""
    import json

    from dsp.datasets import data_path

    data = json.loads(data_path("dsp_v1/dsp_v1_intro_data.json").read_text(encoding="utf-8"))
    return [dsp.Example(**e) for e in data["train"]], [dsp.Example(**e) for e in data["dev"]]


def replay_intro() -> dict[str, tuple[int, int]]:
    """Replay the five programs on the recorded GPT-3/ColBERTv2 responses; prints and returns the scores."""
    from dsp.datasets import data_path

    train, dev = load_intro_data()
    lm = dsp.ReplayLM(data_path("dsp_v1/dsp_v1_intro_lm.jsonl"))
    rm = dsp.ReplayRM(data_path("dsp_v1/dsp_v1_intro_rm.jsonl"))
    scores = {}
    with dsp.settings.context(lm=lm, rm=rm):
        for name, program in PROGRAMS.items():
            correct = sum(dsp.EM(program(x.question, train), x.answer) for x in dev)
            scores[name] = (correct, len(dev))
            print(f"{name:<26} Answered {correct} / {len(dev)} ({100 * correct / len(dev):.1f}%) correctly.")
    return scores


if __name__ == "__main__":
    replay_intro()
