"""Multi-hop QA programs (HotPotQA), paper §3.4: baselines and the DSP program.

- `vanilla`: the LM alone with sampled demonstrations.
- `retrieve_then_read`: the top 2 passages for the question, then a few-shot answer.
- `self_ask` (programs.self_ask): follow-up questions answered with the same RM.
- `dsp_program`: DEMONSTRATE with demos annotated by a simpler greedy two-hop pipeline; SEARCH over
  two hops, each sampling n=10 queries (plus the question) whose results are fused with CombSUM,
  the hop's summary of what it learned carried to the next hop and to the answer; PREDICT with chain
  of thought and self-consistency, over the summaries and the last hop's k=5 passages.
"""

from __future__ import annotations

import dsp
from programs.family import Family
from programs.self_ask import self_ask_program
from templates.qa import hop, qa, qa_with_context, qa_with_cot, rewrite

__all__ = ["vanilla", "retrieve_then_read", "self_ask_program", "dsp_program", "greedy_search", "PROGRAMS", "PRESETS",
           "SEARCH", "MOOT", "FREE", "BOUNDS", "FAMILY"]


def vanilla(question: str, train: list[dsp.Example], n_demos: int = 16,
            demos: list[dsp.Example] | None = None) -> dsp.Example:
    x = dsp.Example(question=question, demos=dsp.sample(train, k=n_demos) if demos is None else demos)
    _, completions = dsp.generate(qa, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer)


def retrieve_then_read(question: str, train: list[dsp.Example], k: int = 2, n_demos: int = 16,
                       order: dsp.OrderStrategy = "relevance", demos: list[dsp.Example] | None = None) -> dsp.Example:
    """The top-k passages, arranged by `order` (`dsp.order_passages`), then a few-shot answer."""
    context = dsp.order_passages(dsp.retrieve(question, k=k), strategy=order)
    x = dsp.Example(question=question, demos=dsp.sample(train, k=n_demos) if demos is None else demos,
                    context=context)
    _, completions = dsp.generate(qa_with_context, stop="auto")(x, stage="qa")
    return dsp.Example(question=question, answer=completions.answer, context=x.context)


@dsp.transformation
def greedy_search(x: dsp.Example, hops: int = 2, k: int = 2) -> dsp.Example:
    """One greedy query per hop, k passages each, deduplicated (the intro's multihop_search_v1)."""
    x.context = []
    for h in range(hops):
        x, completions = dsp.generate(rewrite if h == 0 else hop, stop="auto")(x, stage=f"h{h}")
        # A hop that wrote no query (a small model may only restate the format) searches the question.
        query = completions.query.strip() or x.question
        x.context = dsp.utils.deduplicate(x.context + dsp.retrieve(query, k=k))
    return x


def _annotation_attempt(train: list[dsp.Example]):
    @dsp.transformation
    def attempt(d: dsp.Example) -> dsp.Example | None:
        x = greedy_search(dsp.Example(question=d.question, demos=dsp.all_but(train, d)))
        if not dsp.passage_match(x.context, d.answer):
            return None
        x, completions = dsp.generate(qa_with_cot, stop="auto")(x, stage="qa")
        if not dsp.answer_match(completions.answer, d.answer):
            return None
        return d.copy(**{stage: x[stage] for stage in ("h0", "h1", "qa")}, answer=completions.answer)

    return attempt


def dsp_program(question: str, train: list[dsp.Example], hops: int = 2, n_queries: int = 10, k: int = 5,
                n: int = 20, temperature: float = 0.7, n_demos: int = 3, pool: int = 16,
                order: dsp.OrderStrategy = "relevance", cot: bool = True, extractive: bool = False,
                demos: list[dsp.Example] | None = None) -> dsp.Example:
    """The DSP multi-hop program; `order` arranges each hop's fused passages (`dsp.order_passages`).
    `cot=False` answers without a rationale (for models too small to write one). `extractive=True` lets
    only sampled answers found in the context vote (`dsp.majority(context=...)`). `demos` (from
    `dsp.compile`) replace the annotated ones."""
    if demos is None:
        demos = dsp.annotate(_annotation_attempt(train))(dsp.sample(train, k=pool), k=n_demos, return_all=True)
    x = dsp.Example(question=question, demos=demos)
    summaries: list[str] = []
    x.context = []
    for h in range(hops):
        x, completions = dsp.generate(rewrite if h == 0 else hop, n=n_queries, temperature=temperature,
                                      stop="auto")(x, stage=f"h{h}")
        if h > 0 and completions[0].get("rationale"):
            summaries.append(completions[0].rationale)  # what this hop learned from the last passages
        passages = dsp.order_passages(dsp.fused_retrieval([c.get("query") for c in completions] + [question], k=k),
                                      strategy=order)
        x.context = summaries + passages
    reader = qa_with_cot if cot else qa_with_context
    _, completions = dsp.generate(reader, n=n, temperature=temperature, stop="auto")(x, stage="qa")
    best = dsp.majority(completions, context=x.context if extractive else None)
    return dsp.Example(question=question, answer=best.answer, context=x.context, summaries=summaries)


PROGRAMS = {
    "vanilla": vanilla,
    "retrieve_then_read": retrieve_then_read,
    "self_ask": self_ask_program,
    "dsp": dsp_program,
}
dsp.register_programs(PROGRAMS)  # compiled files may name them: dsp.load_compiled looks names up, never imports

# Settings of the DSP program: the paper's (GPT-3 scale: 10 queries per hop, 20 chains of thought),
# and one for the embedded 270M model: 3 queries per hop, 5 near-greedy answers without a rationale
# (it cannot write one: with chain of thought it copied the format's placeholders for every
# question) over the 2 best fused passages (on NQ it lost accuracy with more: see RESULTS.md).
PRESETS = {
    "paper": {},
    "small": {"n_queries": 3, "n": 5, "temperature": 0.3, "k": 2, "cot": False},
}

# What `dsp compile` may tune besides the demonstrations: option -> values to try (plain data).
SEARCH = {
    "vanilla": {},
    "retrieve_then_read": {"k": [2, 3, 5], "order": ["relevance", "lost_in_the_middle"]},
    "self_ask": {"k": [1, 2]},
    "dsp": {"k": [2, 3, 5], "n_queries": [1, 3], "n": [1, 5], "temperature": [0.3, 0.7], "cot": [False, True],
            "extractive": [False, True]},
}
# Options that have no effect under another's value (one passage has one order; one sample, no vote):
# never searched there.
MOOT = {"order": {"k": [1]}, "extractive": {"n": [1]}}
# Options that change no LM or RM call, only which sampled answers vote: a compile reads every candidate
# both ways from the same cached calls and decides on the evidence of all of them (dsp.Space.free).
FREE = ("extractive",)

# The valid range of every numeric option of these programs: option -> (least, greatest), inclusive, None
# for no bound. The `dsp` command checks --set, --preset and --search values against it before any model
# loads (no hop or no query would search nothing: the program is a multi-hop search).
BOUNDS = {
    "k": (1, None),              # passages per question (per hop)
    "n": (1, None),              # sampled answers voting
    "temperature": (0.0, None),  # 0: greedy
    "n_demos": (0, None),        # 0: zero-shot
    "pool": (0, None),           # training examples tried for annotation
    "hops": (1, None),
    "n_queries": (1, None),      # sampled queries per hop
}

# The family as the `dsp` command reads it (a compile tries 2 or 4 demonstrations).
FAMILY = Family("multihop", PROGRAMS, PRESETS, SEARCH, MOOT, BOUNDS, demo_ks=(2, 4), main_program="dsp",
                small_preset="small", free=FREE)
