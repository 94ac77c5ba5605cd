"""programs.litm scoring, runs, per-position tables, the plot, and dsp.order_passages."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from helpers import ScriptedLM

from dsp import ContextLengthExceeded, CountsTokens, RunMismatch
from dsp.clients.rm import Passage
from dsp.evaluation import read_run
from dsp.stats import wilson_interval
from programs.litm import (
    check_prompts_fit, closedbook_run, first_error, first_line, kv_run, kv_score, load_summaries, make_kv_records,
    order_passages, plot_positions, qa_run, qa_score, reorder_run, results_markdown, run_setting, summarize,
)

# -- scoring ----------------------------------------------------------------------------------------------

def test_qa_score_uses_only_the_first_line():
    assert qa_score(" Wilhelm Conrad Röntgen\nmore text", ["Wilhelm Conrad Röntgen"]) == 1.0
    # the context contains the answer: copying it after a newline earns nothing
    assert qa_score(" I am not sure.\nWilhelm Conrad Röntgen", ["Wilhelm Conrad Röntgen"]) == 0.0
    assert qa_score("\nParis", ["Paris"]) == 0.0
    assert first_line("  Paris  \nRome") == "Paris"


def test_qa_score_is_squad_normalised_subspan_match():
    assert qa_score("It was THE Beatles!", ["beatles"]) == 1.0          # case, punctuation, articles
    assert qa_score("May 18, 2018 in the US", ["May 18, 2018", "2019"]) == 1.0   # any gold, as a substring
    assert qa_score("2018", ["May 18, 2018"]) == 0.0                     # the gold must be inside the prediction
    # no Unicode normalisation (the paper's SQuAD normaliser): a decomposed ö is another string
    assert qa_score("Ro\u0308ntgen", ["R\u00f6ntgen"]) == 0.0


def test_kv_score_is_case_insensitive_containment_of_the_whole_answer():
    value = "bb3ba2a5-7de8-434b-a86e-a88bb9fa7289"
    assert kv_score(f'"{value.upper()}"', value) == 1.0
    assert kv_score(f"The value is:\n{value}", value) == 1.0  # the paper does not cut KV answers
    assert kv_score(value[:-1], value) == 0.0


def test_cells_carry_dsp_stats_wilson_intervals():
    run = closedbook_run([{"question": f"q{i}?", "answers": ["a"]} for i in range(20)])
    cell = summarize(run, [{"score": 0.0, "usage": {}}] * 20)["curves"]["closed-book"]
    low, high = wilson_interval(0, 20)
    assert cell["ci95"] == [round(low, 4), round(high, 4)] and cell["ci95"][0] == 0.0 and 0.16 < high < 0.17
    # untimed (no LM requests) and uncounted (no token counts): no timing or token keys
    assert cell == {"positions": {}, "n": 20, "correct": 0.0, "accuracy": 0.0, "ci95": cell["ci95"]}


# -- order_passages ---------------------------------------------------------------------------------------

def test_order_passages_strategies():
    ranked = [f"r{i}" for i in range(1, 8)]
    assert order_passages(ranked, "relevance") == ranked
    assert order_passages(ranked, "reverse") == ranked[::-1]
    litm = order_passages(ranked)  # the default strategy
    assert litm == ["r1", "r3", "r5", "r7", "r6", "r4", "r2"]
    assert (litm[0], litm[-1], litm[1], litm[-2]) == ("r1", "r2", "r3", "r4")  # best at both ends
    assert sorted(litm) == sorted(ranked)
    shuffled = order_passages(ranked, "random", seed=3)
    assert shuffled == order_passages(ranked, "random", seed=3) and sorted(shuffled) == sorted(ranked)
    assert ranked == [f"r{i}" for i in range(1, 8)]  # the input is untouched
    assert order_passages([], "lost_in_the_middle") == []


def test_order_passages_with_scores_and_passage_objects():
    passages = [Passage(text=t, score=s) for t, s in (("a", 0.1), ("b", 0.9), ("c", 0.5), ("d", 0.7))]
    ordered = order_passages(passages, scores=[p.score for p in passages])
    assert [p.text for p in ordered] == ["b", "c", "a", "d"]
    assert ordered[0] is passages[1]
    with pytest.raises(ValueError, match="4 passages but 3 scores"):
        order_passages(passages, scores=[1, 2, 3])
    with pytest.raises(ValueError, match="unknown passage order 'middle'"):
        order_passages(passages, "middle")
    with pytest.raises(TypeError, match="list of passages"):
        order_passages("abc")


# -- runs -------------------------------------------------------------------------------------------------

def _example(q: int, total: int, gold: int) -> dict:
    ctxs = [{"id": str(i), "title": f"Doc {q}-{i}", "text": f"filler text {i}.", "score": "1.0", "hasanswer": False,
             "original_retrieval_index": i, "isgold": False} for i in range(total - 1)]
    ctxs.insert(gold, {"title": f"Gold {q}", "text": f"The answer is answer{q}.", "hasanswer": True, "isgold": True})
    return {"question": f"question {q}?", "answers": [f"answer{q}"], "ctxs": ctxs,
            "nq_annotated_gold": {"title": f"Gold {q}", "chunked_long_answer": f"The answer is answer{q}."},
            "gold_original_retrieval_index": 2}


def _primacy_lm() -> ScriptedLM:
    """Answers correctly only when the gold document is among the first three: a caricature of primacy."""
    def respond(prompt: str, request: dict) -> list[str]:
        docs = re.findall(r"Document \[(\d+)\]\(Title: ([^)]*)\)", prompt)
        for number, title in docs:
            if title.startswith("Gold") and int(number) <= 3:
                q = title.split()[1]
                return [f" answer{q}\nDocument [1] copied context answer{q}"]
        return [" I do not know\nanswer is maybe in the text"]
    return ScriptedLM(respond)


def test_qa_run_orders_items_question_by_question_with_positions_descending():
    data = {g: [_example(q, 5, g) for q in range(3)] for g in (0, 2, 4)}
    run = qa_run(data, total_docs=5)
    assert [item.id for item in run.items[:4]] == ["q0@4", "q0@2", "q0@0", "q1@4"]
    assert run.setting == "qa-5docs"
    assert "answers" in run.items[0] and run.items[0]["position"] == 4
    with pytest.raises(ValueError, match="not at index 2"):
        qa_run({2: [_example(0, 5, 1)]}, total_docs=5)
    with pytest.raises(ValueError, match="has 5 documents, expected 6"):
        qa_run(data, total_docs=6)


def test_run_setting_scores_by_position_writes_predictions_and_resumes(tmp_path):
    data = {g: [_example(q, 5, g) for q in range(4)] for g in (0, 2, 4)}
    lm = _primacy_lm()
    summary = run_setting(lm, qa_run(data, total_docs=5), tmp_path, max_tokens=16, progress=False)
    curve = summary["curves"]["5 docs"]
    assert {p: c["accuracy"] for p, c in curve["positions"].items()} == {"0": 1.0, "2": 1.0, "4": 0.0}
    assert curve["n"] == 12 and curve["positions"]["4"]["n"] == 4 and curve["accuracy"] == pytest.approx(2 / 3)
    assert summary["questions"] == 4 and summary["errors"] == 0
    # the same 4 questions at each position: compared pair by pair (gold last is right nowhere)
    pairs = {(p["a"], p["b"]): p for p in summary["paired"]["5 docs"]}
    assert pairs["0", "4"] == {"a": "0", "b": "4", "n": 4, "a_only": 4, "b_only": 0, "p": 0.125}
    assert pairs["0", "2"]["a_only"] == pairs["0", "2"]["b_only"] == 0 and pairs["0", "2"]["p"] == 1.0
    assert len(pairs) == 3
    assert len(lm.prompts) == 12
    # the program never sees the gold answers: only the prompt reaches the LM
    assert all("answer0" not in p or "The answer is answer0." in p for p in lm.prompts)

    identity, rows = read_run(tmp_path / "qa-5docs.jsonl")
    header = json.loads((tmp_path / "qa-5docs.jsonl").read_text().splitlines()[0])
    assert list(header) == ["dsp_run"] and header["dsp_run"]["identity"] == identity  # the first line
    # The LM is a closure, not dsp.settings.lm: the header names it and its parameters.
    assert identity["setting"] == "qa-5docs" and identity["lm"]["lm"] == {"provider": "scripted", "model": "scripted"}
    assert identity["params"] == {"temperature": 0.0, "max_tokens": 16}
    assert identity["fields"] == {"inputs": "prompt", "gold": "answers", "prediction": "answer"}
    assert len(rows) == 12 and [r["id"] for r in rows[:3]] == ["q0@4", "q0@2", "q0@0"]
    assert rows[2]["prediction"].startswith(" answer0\nDocument [1]") and rows[2]["score"] == 1.0  # raw answer kept
    assert rows[0]["prediction"].startswith(" I do not know\nanswer") and rows[0]["score"] == 0.0  # first line scored
    with gzip.open(tmp_path / "qa-5docs.predictions.jsonl.gz", "rt") as f:
        predictions = [json.loads(line) for line in f]
    first = predictions[0]
    assert first["model_answer"] == rows[0]["prediction"] and first["metric_best_subspan_em"] == 0.0
    assert predictions[2]["metric_best_subspan_em"] == 1.0
    assert first["litm_position"] == 4 and first["model_documents"][4]["isgold"] is True
    assert first["model_prompt"].startswith("Write a high-quality answer")
    assert set(first) >= {"question", "answers", "ctxs", "nq_annotated_gold", "model", "model_temperature",
                          "model_use_random_ordering", "model_prompt_mention_random_ordering"}
    # no spec (not built from one): the model is named by lm.name
    assert first["model"] == summary["model"] == summary["model_name"] == "scripted:scripted"
    assert summary["model_identity"] == {"provider": "scripted", "model": "scripted"} and summary["n_ctx"] is None

    again = run_setting(lm, qa_run(data, total_docs=5), tmp_path, max_tokens=16, progress=False)
    assert len(lm.prompts) == 12  # resumed: nothing asked again
    assert again["curves"]["5 docs"]["accuracy"] == curve["accuracy"]
    assert len((tmp_path / "qa-5docs.jsonl").read_text().splitlines()) == 1 + 12  # the header and the rows
    assert first_error(tmp_path, qa_run(data, total_docs=5)) is None


def test_order_strategy_turns_the_gold_position_into_a_rank(tmp_path):
    data = {g: [_example(q, 7, g) for q in range(2)] for g in (0, 1, 6)}
    run = qa_run(data, total_docs=7, order="lost_in_the_middle")
    assert run.setting == "qa-7docs-order_lost_in_the_middle"
    gold_at = {(item["position"]): item["gold_at"] for item in run.items}
    assert gold_at == {0: 0, 1: 6, 6: 3}  # rank 2 goes last, rank 7 to the middle
    summary = run_setting(_primacy_lm(), run, tmp_path, progress=False)
    positions = summary["curves"]["7 docs, lost_in_the_middle order (x = rank)"]["positions"]
    assert {p: c["accuracy"] for p, c in positions.items()} == {"0": 1.0, "1": 0.0, "6": 0.0}


def test_reorder_run_uses_the_retrievers_rank_of_the_gold(tmp_path):
    examples = [_example(q, 6, 5) for q in range(3)]  # retrieved at rank 2 (index 2): relevance puts it third
    run = reorder_run(examples, ["relevance", "lost_in_the_middle", "reverse"])
    by_curve = {item["curve"]: item["gold_at"] for item in run.items[:3]}
    assert by_curve == {"relevance": 2, "lost_in_the_middle": 1, "reverse": 3}
    summary = run_setting(_primacy_lm(), run, tmp_path, progress=False)
    assert summary["curves"]["relevance"]["accuracy"] == 1.0
    assert summary["curves"]["reverse"]["accuracy"] == 0.0
    assert summary["gold_at"]["relevance"]["rank2+"]["n"] == 3
    relevance_vs_reverse = [p for p in summary["paired"]["orders"] if (p["a"], p["b"]) == ("relevance", "reverse")]
    assert relevance_vs_reverse == [{"a": "relevance", "b": "reverse", "n": 3, "a_only": 3, "b_only": 0, "p": 0.25}]
    markdown = results_markdown(load_summaries(tmp_path.parent))
    assert "Passage order on retrieval-ranked contexts" in markdown
    assert "| relevance | reverse | 3 | 3 | 0 | 0.250 |" in markdown


def test_kv_run_and_closedbook_run_with_report_and_plot(tmp_path):
    records = make_kv_records(num_keys=4, num_examples=3, seed=0)

    def respond(prompt: str, request: dict) -> list[str]:
        key = re.findall(r'Key: "([^"]+)"', prompt)[-1]
        first = re.search(r'\{"([^"]+)": "([^"]+)"', prompt)
        return [f' "{first.group(2)}"\n'] if first.group(1) == key else [' "no idea"']

    kv = run_setting(ScriptedLM(respond), kv_run(records, [0, 3]), tmp_path / "m", progress=False)
    assert {p: c["accuracy"] for p, c in kv["curves"]["4 key-value pairs"]["positions"].items()} == {"0": 1.0, "3": 0.0}
    qa_records = [_example(q, 3, 0) for q in range(2)]
    closed = run_setting(ScriptedLM(lambda p, r: [" answer1"]), closedbook_run(qa_records), tmp_path / "m",
                         progress=False)
    assert closed["curves"]["closed-book"]["accuracy"] == 0.5 and closed["curves"]["closed-book"]["positions"] == {}
    run_setting(_primacy_lm(), qa_run({g: [_example(q, 5, g) for q in range(2)] for g in (0, 4)}, 5), tmp_path / "m",
                progress=False)

    summaries = load_summaries(tmp_path)
    assert {s["setting"] for s in summaries} == {"kv-4keys", "closedbook", "qa-5docs"}
    markdown = results_markdown(summaries)
    assert "| gold at 1 | gold at 4 | mean |" in markdown and "| closed-book | 2 | 50.0 |" in markdown
    assert "| gold at 1 | gold at 4 | 3 | 3 | 0 | 0.250 |" in markdown  # KV: the first key is found, the last never
    assert "paired" not in closed  # one condition: nothing to pair
    png = plot_positions(summaries, tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_positions([s for s in summaries if s["kind"] == "closedbook"], tmp_path / "none.png")


class CountingLM(ScriptedLM, CountsTokens):
    """A scripted LM that declares it counts tokens (one per word) in a window of `n_ctx`."""

    n_ctx = 64

    def tokenize(self, text: str, add_bos: bool = False) -> list[int]:
        return [0] * (len(text.split()) + int(add_bos))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def truncate(self, text: str, max_tokens: int, keep: str = "start", separator: str = "\n...\n") -> str:
        raise AssertionError("a Lost in the Middle prompt is never truncated")


def test_prompts_that_do_not_fit_stop_the_run_before_any_request(tmp_path):
    lm = CountingLM(lambda p, r: [" x"])
    run = qa_run({0: [_example(0, 5, 0)]}, total_docs=5)
    expected = r"q0@0 .* needs n_ctx >= \d+, but the model has n_ctx=64\. Rerun with --n-ctx 1024"
    with pytest.raises(ContextLengthExceeded, match=expected) as caught:
        run_setting(lm, run, tmp_path, max_tokens=20, progress=False)
    # the library's one "prompt too long" error, with its figures
    assert caught.value.limit == 64 and caught.value.requested == 20
    assert caught.value.prompt_tokens == check_prompts_fit(CountingLM(lambda p, r: [""]), run, 0)[0]
    assert lm.prompts == [] and not (tmp_path / "qa-5docs.jsonl").exists()
    # A server LM does not declare CountsTokens: nothing to check here (the server refuses, per prompt).
    assert check_prompts_fit(ScriptedLM(lambda p, r: [""]), run, 20) is None
    fits = CountingLM(lambda p, r: [" answer0"])
    fits.n_ctx = 4096
    summary = run_setting(fits, run, tmp_path, max_tokens=20, progress=False)
    assert summary["n_ctx"] == 4096 and summary["curves"]["5 docs"]["prompt_tokens_max"] == caught.value.prompt_tokens


def test_another_lm_max_tokens_or_stop_on_the_same_out_is_refused_not_resumed(tmp_path):
    data = {g: [_example(q, 5, g) for q in range(2)] for g in (0, 4)}
    out = tmp_path / "m"
    first = run_setting(_primacy_lm(), qa_run(data, total_docs=5), out, max_tokens=16, stop=["\n"], progress=False)
    assert first["curves"]["5 docs"]["accuracy"] == 0.5
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    for changed, kwargs, what in [
        (ScriptedLM(lambda p, r: [" answer0"], model="other"), {"max_tokens": 16, "stop": ["\n"]}, "lm.lm.model"),
        (_primacy_lm(), {"max_tokens": 32, "stop": ["\n"]}, "params.max_tokens: 16 -> 32"),
        (_primacy_lm(), {"max_tokens": 16}, "params.stop"),
    ]:
        with pytest.raises(RunMismatch, match=re.escape(what)):
            run_setting(changed, qa_run(data, total_docs=5), out, progress=False, **kwargs)
        assert changed.prompts == []  # refused before anything is asked
    # Nothing was rewritten: no old rows were reported as the new model's.
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_failed_prompts_are_counted_named_and_retried(tmp_path):
    data = {g: [_example(q, 5, g) for q in range(2)] for g in (0, 4)}
    broken = {"on": True}

    def respond(prompt: str, request: dict) -> list[str]:
        if broken["on"] and "question 1?" in prompt:
            raise ContextLengthExceeded("the server says the prompt is too long", prompt_tokens=9000, limit=8192)
        return [" answer0"]

    lm = ScriptedLM(respond)
    run = qa_run(data, total_docs=5)
    summary = run_setting(lm, run, tmp_path, progress=False)
    assert summary["errors"] == 2 and summary["curves"]["5 docs"]["n"] == 4
    assert first_error(tmp_path, run) == "q1@4: ContextLengthExceeded: the server says the prompt is too long"
    with gzip.open(tmp_path / "qa-5docs.predictions.jsonl.gz", "rt") as f:
        assert [json.loads(line).get("model_error") is not None for line in f] == [False, False, True, True]
    broken["on"] = False
    again = run_setting(lm, run, tmp_path, progress=False)  # the same run: finished rows kept, failed ones retried
    assert again["errors"] == 0 and first_error(tmp_path, run) is None
    assert len(lm.prompts) == 2 + 2 + 2  # q0 twice, q1 failed twice (one per position), then q1 retried twice
