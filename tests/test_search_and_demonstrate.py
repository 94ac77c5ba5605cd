"""retrieve, fused_retrieval, rank; sample, annotate, all_but, knn, crossval; the RM interface."""

from __future__ import annotations

import pytest
from helpers import ListRM, ScriptedLM

import dsp
from templates.intro import qa_template


class DictRM(dsp.RM):
    """An RM answering from a dict query -> [(text, prob)], recording every search."""

    provider = "dict"

    def __init__(self, table):
        super().__init__()
        self.table = table
        self.calls = []

    def _search(self, query, k, **params):
        self.calls.append((query, k))
        return [{"text": t, "score": p * 10, "prob": p} for t, p in self.table.get(query, [])][:k]


def test_retrieve_returns_long_texts_and_the_rm_completes_passages():
    rm = ListRM([{"text": "body", "title": "Title", "score": 3.0, "id": "d1"}, ("plain", 1.0)])
    with dsp.settings.context(rm=rm):
        assert dsp.retrieve("q", k=2) == ["Title | body", "plain"]
    passages = rm("q", k=2)
    assert [p.rank for p in passages] == [1, 2] and passages[0].id == "d1"
    assert abs(sum(p.prob for p in passages) - 1) < 1e-9 and passages[0].prob > passages[1].prob


def test_fused_retrieval_sums_probabilities_skips_empty_queries_and_counts_repeats():
    table = {"a": [("X", 0.5), ("Y", 0.3), ("Z", 0.2)], "b": [("Y", 0.6), ("W", 0.4)]}
    rm = DictRM(table)
    with dsp.settings.context(rm=rm, cache=False):
        assert dsp.fused_retrieval(["a", "", "b"], k=2) == ["Y", "X"]  # Y: 0.9, X: 0.5
        assert rm.calls == [("a", 6), ("b", 6)]  # depth 3k per query, empty skipped
        # a repeated query counts again: X gets 0.5 twice (1.0), Y 0.3 twice (0.6)
        assert dsp.retrieveEnsemble(["a", "a"], k=1) == ["X"]
        fused = dsp.fused_retrieval(["a", "b"], k=3, return_passages=True)
        assert [p.long_text for p in fused] == ["Y", "X", "W"] and fused[0].score == pytest.approx(0.9)
        rrf = dsp.fused_retrieval(["a", "b"], k=2, fuse="rrf")
        assert rrf == ["Y", "X"]  # Y ranks 2 and 1: 1/62 + 1/61 beats X's 1/61
        by_score = dsp.fused_retrieval(["a", "b"], k=1, by_prob=False)
        assert by_score == ["Y"]
    with pytest.raises(ValueError, match="unknown fusion 'max'"):
        dsp.fused_retrieval(["a"], k=1, fuse="max")
    with dsp.settings.context(rm=rm):
        with pytest.raises(ValueError, match="no non-empty query"):
            dsp.fused_retrieval(["", ""], k=1)
        with pytest.raises(TypeError, match="list of queries"):
            dsp.fused_retrieval("a", k=1)


def test_rank_orders_passages_by_vectorizer_similarity_or_reranker():
    passages = ["the cat sat on the mat", "stock markets fell", "a cat and a mat"]
    with dsp.settings.context(vectorizer=dsp.HashingVectorizer()):
        assert dsp.rank("cat on a mat", passages)[-1] == "stock markets fell"
    with dsp.settings.context(reranker=lambda q, ps: [len(p) for p in ps]):
        assert dsp.rank("q", list(reversed(passages))) == passages  # longest first
    with pytest.raises(RuntimeError, match="reranker or settings.vectorizer"):
        dsp.rank("q", passages)


def test_rm_errors_name_the_input():
    rm = ListRM([("a", 1.0)])
    with pytest.raises(ValueError, match="k must be positive, got 0"):
        rm("q", k=0)
    with pytest.raises(TypeError, match="k must be an integer"):
        rm("q", k="3")
    with pytest.raises(ValueError, match="search query is empty"):
        rm("   ", k=1)
    with pytest.raises(TypeError, match="search query must be text"):
        rm(None, k=1)
    with pytest.raises(ValueError, match="returned no passages for the query 'nothing'"):
        DictRM({})("nothing", k=2)
    with dsp.settings.context(rm=None):
        with pytest.raises(RuntimeError, match="no RM is configured"):
            dsp.retrieve("q", k=1)


def test_rm_cache_serves_repeats_without_a_backend_call():
    rm = ListRM([("a", 1.0), ("b", 0.5)])
    first = rm("q", k=2)
    again = ListRM([("a", 1.0), ("b", 0.5)])("q", k=2)
    assert first == again and rm.num_requests == 1
    with dsp.settings.context(cache=False):
        rm("q", k=2)
    assert rm.num_requests == 2


TRAIN = [dsp.Example(question=f"question {i}", answer=[f"a{i}"]) for i in range(6)]


def test_sample_is_the_v1_seeded_shuffle():
    assert [x.question[-1] for x in dsp.sample(TRAIN, k=7)] == list("421053")
    assert dsp.sample(TRAIN, k=3) == dsp.sample(TRAIN, k=3)
    with dsp.settings.context(branch_idx=1):
        assert dsp.sample(TRAIN, k=6) != dsp.sample(TRAIN, k=6, seed=0)
    assert dsp.sample(TRAIN, k=2)[0] is not TRAIN[4]  # copies, never the caller's examples
    with pytest.raises(ValueError, match="k must be a non-negative integer"):
        dsp.sample(TRAIN, k=-1)
    with pytest.raises(TypeError, match="list of Examples"):
        dsp.sample("abc", k=1)


def test_annotate_keeps_successes_as_augmented_demos_and_stops_at_k():
    attempted = []

    def succeed_on_even(x):
        attempted.append(x.question)
        return x.copy(context=["c"]) if int(x.question[-1]) % 2 == 0 else None

    demos = dsp.annotate(succeed_on_even)(TRAIN, k=2, return_all=True)
    assert [d.question for d in demos] == ["question 0", "question 2", "question 1", "question 3",
                                          "question 4", "question 5"]
    assert [d.augmented for d in demos] == [True, True, False, False, False, False]
    assert attempted == ["question 0", "question 1", "question 2"]  # none once k succeeded
    assert dsp.annotate(succeed_on_even)(TRAIN) == [d for d in dsp.annotate(succeed_on_even)(TRAIN, return_all=True)
                                                    if d.augmented]
    assert "augmented" not in TRAIN[0]
    with pytest.raises(TypeError, match="returned str"):
        dsp.annotate(lambda x: "oops")(TRAIN[:1])


def test_annotate_demos_carry_their_stage_records_into_prompts():
    lm = ScriptedLM(lambda prompt, request: [" pred"])

    def attempt(x):
        x, _ = dsp.generate(qa_template)(x.copy(demos=[]), stage="qa")
        return x

    with dsp.settings.context(lm=lm, cache=False):
        demos = dsp.annotate(attempt)(TRAIN[:1])
        dsp.generate(qa_template)(dsp.Example(question="new", demos=demos), stage="qa")
    assert "Question: question 0\nAnswer: pred" in lm.history[-1]["prompt"]


def test_all_but_drops_the_example_and_shared_history():
    conv = [dsp.Example(question="q1", history=["h"]), dsp.Example(question="q2", history=["h"]),
            dsp.Example(question="q3")]
    assert dsp.all_but(conv, dsp.Example(question="q1", history=["h"])) == [conv[2]]
    assert [x.question for x in dsp.all_but(TRAIN, TRAIN[2])] == [f"question {i}" for i in (0, 1, 3, 4, 5)]


def test_knn_finds_the_nearest_training_examples():
    train = [dsp.Example(question=q) for q in ["capital of France", "who painted the Mona Lisa",
                                              "capital city of Germany", "how tall is Everest"]]
    with dsp.settings.context(vectorizer=dsp.HashingVectorizer()):
        nearest = dsp.knn(train)
        assert [x.question for x in nearest(dsp.Example(question="the capital of Italy"), 2)] == \
            ["capital of France", "capital city of Germany"]
        assert nearest(dsp.Example(question="Mona Lisa painter"), 1)[0].question == "who painted the Mona Lisa"
    with dsp.settings.context(vectorizer=None):
        with pytest.raises(RuntimeError, match="needs a vectorizer"):
            dsp.knn(train)


def test_crossval_picks_the_best_demo_set_on_held_out_examples():
    seen = []

    def evaluate(demos, heldout):
        seen.append((len(demos), len(heldout)))
        assert not {d.question for d in demos} & {h.question for h in heldout}
        return sum(int(d.question[-1]) for d in demos)

    best = dsp.crossval(TRAIN, n=4, k=2, evaluate=evaluate)
    assert seen == [(2, 4)] * 4
    assert sum(int(d.question[-1]) for d in best) == max(
        sum(int(d.question[-1]) for d in dsp.sample(TRAIN, 2, seed=s)) for s in range(4))
    with pytest.raises(ValueError, match="k < len"):
        dsp.crossval(TRAIN, n=1, k=6, evaluate=evaluate)


def test_transformation_turns_dicts_into_examples():
    @dsp.transformation
    def f(x):
        return x.copy(seen=type(x).__name__)

    assert f({"question": "q"}).seen == "Example" and f.__name__ == "f"
