"""The bundled open-QA, multi-hop and conversational programs, driven by a scripted LM: each runs end to
end, sends the requests its design says, and the conversational runner feeds back its own answers."""

from __future__ import annotations

import re

import pytest
from helpers import ListRM, ScriptedLM

import dsp
from programs import conversational, multihop, open_qa
from templates.qa import qa_with_cot

TRAIN = [dsp.Example(question=f"train question {i}?", answer=[f"answer {i}"]) for i in range(20)]
RM = [("Paris | Paris is the capital of France.", 3.0), ("Lyon | Lyon is a city.", 2.0),
      ("Nice | Nice is on the coast.", 1.0), ("Rome | Rome is in Italy.", 0.5)]


class KeywordRM(dsp.RM):
    """Scores passages by the words they share with the query (ties keep list order)."""

    provider = "keyword-test"

    def __init__(self, texts):
        super().__init__()
        self.texts = texts

    def _search(self, query, k, **params):
        words = set(re.findall(r"\w+", query.lower()))
        scored = [(len(words & set(re.findall(r"\w+", t.lower()))), -i, t) for i, t in enumerate(self.texts)]
        return [{"text": t, "score": float(s)} for s, _, t in sorted(scored, reverse=True)[:k]]


def respond(prompt, request):
    tail = prompt[-80:]
    if tail.endswith(("find out", "learned the following.", "Search Query:")):
        return [f" facts\nSearch Query: query {i} {request.get('seed', 0)}" for i in range(request.get("n", 1))]
    if tail.endswith("step by step."):
        return [" The context says so.\n\nAnswer: Paris"] * request.get("n", 1)
    return [" Paris"] * request.get("n", 1)


def test_stop_auto_is_resolved_from_the_templates_inputs():
    lm = ScriptedLM(respond)
    with dsp.settings.context(lm=lm, cache=False):
        dsp.generate(qa_with_cot, stop="auto")(dsp.Example(question="q", context=["c"]))
    assert lm.history[0]["params"]["stop"] == ["\n\n---", "\nContext:", "\nQuestion:"]


@pytest.mark.parametrize("module", [open_qa, multihop])
def test_every_qa_program_answers(module):
    lm = ScriptedLM(lambda p, r: [" Yes.\nFollow up: what?"] if p.endswith("needed here:") else
                    ([" So the final answer is: Paris"] if "Intermediate answer" in p[-200:] else respond(p, r)))
    with dsp.settings.context(lm=lm, rm=ListRM(RM), cache=False):
        for name, program in module.PROGRAMS.items():
            assert program("What is the capital of France?", TRAIN).answer == "Paris", name


def test_the_dsp_open_qa_program_annotates_demos_and_votes_over_twenty_samples():
    def answer_train(prompt, request):
        question = re.findall(r"Question: (.*)", prompt)[-1]
        n = request.get("n", 1)
        if question.startswith("train question"):
            i = question.split()[2].rstrip("?")
            return [f" reasoning\n\nAnswer: answer {i}"] * n
        return [" r\n\nAnswer: Paris"] * (n - 5) + [" r\n\nAnswer: Lyon"] * 5

    rm = KeywordRM([f"Doc {i} | train question {i} has answer {i}" for i in range(20)] + [t for t, _ in RM])
    lm = ScriptedLM(answer_train)
    with dsp.settings.context(lm=lm, rm=rm, cache=False):
        out = open_qa.dsp_program("What is the capital of France?", TRAIN)
    assert out.answer == "Paris" and out.n_augmented == 3 and len(out.context) == 7
    final = lm.history[-1]
    assert final["params"]["n"] == 20 and final["params"]["temperature"] == 0.7
    assert final["prompt"].count("Rationale: Let's think step by step. reasoning") == 3  # the annotated demos


def test_the_dsp_open_qa_program_with_extractive_votes_only_over_answers_in_its_context():
    # 3 of 5 samples say "Rome", which is in no retrieved passage; 2 say "Paris", which the top one holds
    lm = ScriptedLM(lambda prompt, request: [" Rome"] * 3 + [" Paris"] * 2)
    with dsp.settings.context(lm=lm, rm=ListRM(RM), cache=False):
        small = open_qa.PRESETS["small"]
        assert open_qa.dsp_program("What is the capital of France?", TRAIN, **small).answer == "Rome"
        out = open_qa.dsp_program("What is the capital of France?", TRAIN, **small, extractive=True)
    assert out.answer == "Paris" and out.context == ["Paris | Paris is the capital of France."]


def test_multihop_dsp_fuses_ten_queries_per_hop_and_carries_the_summary():
    rm = ListRM(RM)
    lm = ScriptedLM(respond)
    with dsp.settings.context(lm=lm, rm=rm, cache=False):
        out = multihop.dsp_program("Where is the capital?", TRAIN, n_demos=0)
    hop_calls = [h for h in lm.history if h["params"].get("n") == 10]
    assert len(hop_calls) == 2
    assert out.summaries == ["facts"] and out.context[0] == "facts" and len(out.context) == 1 + 4
    # each hop: 10 sampled queries and the question, 15 passages each (3k)
    assert sum(1 for q, k in rm.queries if k == 15) == 2 * 11


def test_multihop_small_preset_answers_without_a_rationale():
    lm = ScriptedLM(respond)
    with dsp.settings.context(lm=lm, rm=ListRM(RM), cache=False):
        out = multihop.dsp_program("Where is the capital?", TRAIN, n_demos=0, **multihop.PRESETS["small"])
    final = lm.history[-1]
    assert out.answer == "Paris" and final["params"]["n"] == 5 and final["params"]["temperature"] == 0.3
    assert final["prompt"].endswith("Answer:") and "Rationale:" not in final["prompt"]
    assert [h["params"].get("n") for h in list(lm.history)[:2]] == [3, 3]  # 3 queries per hop


def test_a_hop_that_writes_no_query_searches_the_question():
    # Gemma 3 270M's reply to the rewrite prompt with no demos (the first annotation attempt on
    # HotPotQA): it restates the format's placeholders, which fill no field.
    def restate(prompt, request):
        if prompt.rstrip().endswith(("find out", "learned the following.", "Search Query:")):
            return [" ${the missing information}\nSearch Query: ${a simple question for seeking the missing "
                    "information}"] * request.get("n", 1)
        return respond(prompt, request)

    rm = ListRM(RM)
    with dsp.settings.context(lm=ScriptedLM(restate), rm=rm, cache=False):
        x = multihop.greedy_search(dsp.Example(question="Where is the capital?", demos=[]))
    assert [q for q, _ in rm.queries] == ["Where is the capital?", "Where is the capital?"]
    assert x.h0.query == "" and len(x.context) == 2


def test_conversations_feed_the_programs_own_answers_not_the_gold():
    seen = []

    def program(question, history):
        seen.append((question, list(history)))
        return dsp.Example(answer=f"my answer to {question}")

    turns = [dsp.Example(Conversation_no=7, Turn_no=t, question=f"q{t}", answer=[f"gold {t}"],
                         Answer=f"gold {t}", Context=[f"gold rewrite {t}"]) for t in (1, 2, 3)]
    runner = conversational.Conversations(turns, program)
    out = runner(dsp.Example(Conversation_no=7, Turn_no=3, question="q3"))
    assert out.answer == "my answer to q3"
    assert seen[-1] == ("q3", [("q1", "my answer to q1"), ("q2", "my answer to q2")])
    assert not any("gold" in str(s) for s in seen)
    fields = dsp.Fields(inputs=("Conversation_no", "Turn_no", "question"))
    result = dsp.evaluate(runner, turns, fields=fields, metric=lambda p, g: float(p == "my answer to q1"),
                          display=False, progress=False)
    assert [r["prediction"] for r in result.rows] == ["my answer to q1", "my answer to q2", "my answer to q3"]
    with pytest.raises(ValueError, match="turn 3 needs turns 1..2"):
        conversational.Conversations(turns[2:], program)(turns[2])


def test_conversational_programs_run_on_a_conversation():
    lm = ScriptedLM(respond)
    turns = [dsp.Example(Conversation_no=1, Turn_no=t, question=f"q{t}?", answer=["Paris"], history=[]) for t in (1, 2)]
    with dsp.settings.context(lm=lm, rm=ListRM(RM), cache=False):
        for name, program in conversational.PROGRAMS.items():
            runner = conversational.Conversations(turns, lambda q, h, p=program: p(q, h, turns))
            result = dsp.evaluate(runner, turns, fields=dsp.Fields(inputs=("Conversation_no", "Turn_no", "question")),
                                  display=False, progress=False)
            assert result.score == 100.0, name
    assert "User: q1?\nAssistant: Paris" in lm.history[-1]["prompt"]


def test_recall_rewrites_show_gold_titles_of_training_questions_only():
    from programs import recall

    train = [dsp.Example(question=f"train question {i}?", answer=["a"],
                         gold_passage={"title": f"Article {i}", "text": "t"}) for i in range(8)]
    lm = ScriptedLM(lambda prompt, request: [" the article\nSearch Query: Paris capital"] * request.get("n", 1))
    with dsp.settings.context(lm=lm):
        queries = recall.rewrites_for("what is the capital of france?", train, n=3)
    assert queries[-1] == "what is the capital of france?" and len(queries) == 4
    assert all(q == "Paris capital" for q in queries[:3])
    prompt = lm.prompts[-1]
    shown = re.findall(r"Search Query: (Article \d) (train question \d\?)", prompt)
    assert len(shown) == 4 and all(title[-1] == q[-2] for title, q in shown)  # each demo names its own article
    assert "we first need to find out the Wikipedia article on Article" in prompt


def test_recall_at_counts_the_gold_within_k_and_gold_ids_needs_every_gold_in_the_corpus():
    from programs import recall

    ranked = [["a", "b", "c"], ["x", "y", "g"], ["q"] * 20]
    assert recall.recall_at(ranked, ["a", "g", "z"]) == {"R@1": 1 / 3, "R@5": 2 / 3, "R@20": 2 / 3}
    corpus = [{"id": "p1", "title": "T", "text": "x"}]
    questions = [dsp.Example(question="q", gold_passage={"title": "T", "text": "x"})]
    assert recall.gold_ids(questions, corpus) == ["p1"]
    with pytest.raises(ValueError, match="1 gold passages are not in the corpus"):
        recall.gold_ids(questions + [dsp.Example(question="r", gold_passage={"title": "U", "text": "y"})], corpus)


def test_self_ask_answers_each_follow_up_with_the_retrieve_then_read_reader_and_its_demos():
    def respond_self_ask(prompt, request):
        if prompt.endswith("needed here:"):
            return [" Yes.\nFollow up: Which city is the capital of France?"]
        if prompt.endswith("Answer:"):  # the reader answering a follow-up from its passage
            return [" Paris"]
        return [" So the final answer is: Paris"]

    lm = ScriptedLM(respond_self_ask)
    with dsp.settings.context(lm=lm, rm=ListRM(RM), cache=False):
        out = open_qa.self_ask_program("What is the capital of France?", TRAIN, n_demos=3)
    assert out.answer == "Paris" and out.follow_ups == [{"question": "Which city is the capital of France?",
                                                         "answer": "Paris"}]
    reader = [p for p in lm.prompts if p.endswith("Answer:")]
    assert len(reader) == 1 and reader[0].count("Question: train question") == 3  # the demos are shown
    assert reader[0].rstrip().endswith("Question: Which city is the capital of France?\n\nAnswer:")


@pytest.mark.parametrize("module, program", [(open_qa, "retrieve_then_read"), (open_qa, "dsp"),
                                             (multihop, "retrieve_then_read"), (multihop, "dsp")])
def test_the_retrieval_programs_arrange_their_context_by_order(module, program):
    ranked = [(f"Title {i} | passage number {i}", 10.0 - i) for i in range(5)]
    contexts = {}
    for order in ("relevance", "lost_in_the_middle"):
        with dsp.settings.context(lm=ScriptedLM(respond), rm=ListRM(ranked), cache=False):
            out = module.PROGRAMS[program]("What is the capital of France?", TRAIN, k=5, order=order)
        contexts[order] = [p for p in out.context if "passage number" in p]
    assert contexts["relevance"] == [text for text, _ in ranked]  # the retriever's order, unchanged
    assert contexts["lost_in_the_middle"] == dsp.order_passages(contexts["relevance"], strategy="lost_in_the_middle")
    assert contexts["lost_in_the_middle"][-1] == ranked[1][0]  # the second best goes last
    with dsp.settings.context(lm=ScriptedLM(respond), rm=ListRM(ranked), cache=False), \
            pytest.raises(ValueError, match="unknown passage order 'middle'"):
        module.PROGRAMS[program]("What is the capital of France?", TRAIN, k=5, order="middle")


# -- a family is declared data ---------------------------------------------------------------------------

def test_each_task_refers_to_its_family_object_which_declares_what_the_command_reads():
    from programs.family import Family
    from programs.tasks import FAMILIES, TASKS

    assert FAMILIES == {"open_qa": open_qa.FAMILY, "multihop": multihop.FAMILY, "conversational": conversational.FAMILY}
    for name in ("nq", "nq-open", "squad"):
        assert TASKS[name].family is open_qa.FAMILY  # the object, never a name loaded later
    assert TASKS["hotpotqa"].family is multihop.FAMILY and TASKS["qrecc"].family is conversational.FAMILY
    for module in (open_qa, multihop, conversational):
        family = module.FAMILY
        assert isinstance(family, Family) and dict(family.programs) == module.PROGRAMS
        assert dict(family.presets) == module.PRESETS and dict(family.search) == module.SEARCH
        assert dict(family.bounds) == module.BOUNDS and dict(family.moot) == module.MOOT
        assert family.main_program in family.programs and family.min_pool == 20
        with pytest.raises(TypeError):
            family.programs["new"] = family.programs[family.main_program]  # declared once, read-only
    assert open_qa.FAMILY.demo_ks == (3, 5, 8) and multihop.FAMILY.demo_ks == conversational.FAMILY.demo_ks == (2, 4)
    assert [f.small_preset for f in FAMILIES.values()] == ["small", "small", None]
    assert [f.standalone for f in FAMILIES.values()] == [True, True, False]


def test_the_conversational_familys_wrap_evaluates_turns_with_the_programs_own_answers():
    turns = [dsp.Example(Conversation_no=1, Turn_no=t, question=f"q{t}") for t in (1, 2)]
    runner = conversational.FAMILY.wrap(lambda q, h: dsp.Example(answer=f"{q} after {len(h)}"), turns)
    assert runner(turns[1]).answer == "q2 after 1" and runner.answers[(1, 1)] == "q1 after 0"


@pytest.mark.parametrize("changes, message", [
    ({"main_program": "nosuch"}, "family f: main_program 'nosuch' is not one of its programs"),
    ({"small_preset": "tiny"}, "family f: small_preset 'tiny' is not one of its presets"),
    ({"search": {"nosuch": {"k": [1]}}}, "family f: search names programs it does not have: nosuch"),
    ({"demo_ks": ()}, "family f: demo_ks must be positive integers, got ()"),
    ({"min_pool": 0}, "family f: min_pool must be a positive integer, got 0"),
])
def test_a_family_that_contradicts_itself_is_refused_in_one_line(changes, message):
    from programs.family import Family

    declared = {"programs": {"dsp": open_qa.dsp_program}, "presets": {"paper": {}}, "main_program": "dsp", **changes}
    with pytest.raises(ValueError) as error:
        Family("f", **declared)
    assert str(error.value) == message
