"""Acceptance: the five programs of the DSP v1 intro notebook, replayed from the recorded GPT-3 and
ColBERTv2 responses, send every recorded request in order and reproduce every prediction."""

from __future__ import annotations

import json
import sqlite3

import pytest

import dsp
from programs import intro

NOTEBOOK_ORDER = [  # (program, which dev question(s)) in the notebook's cell order
    ("vanilla_LM_QA", 0), ("vanilla_LM_QA", "eval"),
    ("retrieve_then_read_QA", 0), ("retrieve_then_read_QA", "eval"),
    ("retrieve_then_read_QA_v2", 2), ("retrieve_then_read_QA_v2", "eval"),
    ("multihop_QA_v1", 2), ("multihop_QA_v1", "eval"),
    ("multihop_QA_v2", 3), ("multihop_QA_v2", "eval"),
    ("multihop_QA_v2", "When was the creator of Hadoop given an award?"),
]


@pytest.fixture
def recording(data_dir):
    d = data_dir / "dsp_v1"
    data = json.loads((d / "dsp_v1_intro_data.json").read_text())
    expected = json.loads((d / "dsp_v1_intro_expected.json").read_text())
    train = [dsp.Example(**e) for e in data["train"]]
    dev = [dsp.Example(**e) for e in data["dev"]]
    return d, train, dev, expected


def clients(d):
    return dsp.ReplayLM(d / "dsp_v1_intro_lm.jsonl"), dsp.ReplayRM(d / "dsp_v1_intro_rm.jsonl")


def run_notebook(train, dev):
    """Run the notebook's cells in order; returns the single-call results and each eval's predictions."""
    singles, evals = [], {}
    for name, which in NOTEBOOK_ORDER:
        program = intro.PROGRAMS[name]
        if which == "eval":
            evals[name] = [program(x.question, train) for x in dev]
        else:
            question = dev[which].question if isinstance(which, int) else which
            singles.append(program(question, train))
    return singles, evals


def test_every_prediction_and_accuracy_matches_the_recording(recording):
    d, train, dev, expected = recording
    lm, rm = clients(d)
    with dsp.settings.context(lm=lm, rm=rm, cache=False):
        singles, evals = run_notebook(train, dev)
    assert singles == [call["returned"] for call in expected["single_calls"]]
    accuracies = []
    for program in expected["programs"]:
        predictions = evals[program["name"]]
        assert predictions == [q["prediction"] for q in program["per_question"]], program["name"]
        correct = [dsp.EM(p, x.answer) for p, x in zip(predictions, dev)]
        assert correct == [q["correct"] for q in program["per_question"]]
        assert sum(correct) == program["correct"]
        assert round(100 * sum(correct) / len(dev), 1) == program["accuracy"]
        accuracies.append(sum(correct))
    assert accuracies == [3, 5, 7, 7, 11]


def test_requests_match_the_recording_byte_for_byte_in_order(recording):
    d, train, dev, _ = recording
    lm, rm = clients(d)
    with dsp.settings.context(lm=lm, rm=rm, cache=False):
        run_notebook(train, dev)
    recorded_lm = [json.loads(line) for line in (d / "dsp_v1_intro_lm.jsonl").open()]
    recorded_rm = [json.loads(line) for line in (d / "dsp_v1_intro_rm.jsonl").open()]
    sent_lm = [{"prompt": h["prompt"], **h["params"]} for h in lm.history]
    assert len(sent_lm) == len(recorded_lm) == 265
    for i, (sent, rec) in enumerate(zip(sent_lm, recorded_lm)):
        rec = {k: v for k, v in rec.items() if k != "choices"}
        # json.dumps tells 0 from 0.0, as the recorded request types demand
        assert json.dumps(sent, sort_keys=True) == json.dumps(rec, sort_keys=True), f"LM request {i} differs"
    sent_rm = [(h["query"], h["k"]) for h in rm.history]
    assert sent_rm == [(r["query"], r["k"]) for r in recorded_rm]
    assert len(sent_rm) == 463


def test_a_rerun_is_served_entirely_from_the_cache_and_holds_no_pickle(recording, tmp_path):
    d, train, dev, expected = recording
    cache_dir = tmp_path / "cache"
    lm, rm = clients(d)
    with dsp.settings.context(lm=lm, rm=rm, cache_dir=str(cache_dir)):
        first = run_notebook(train, dev)
    assert lm.num_requests > 0 and rm.num_requests > 0
    lm2, rm2 = clients(d)  # fresh clients: nothing in memory, only the disk cache
    with dsp.settings.context(lm=lm2, rm=rm2, cache_dir=str(cache_dir)):
        second = run_notebook(train, dev)
    assert second == first
    assert lm2.num_requests == 0 and rm2.num_requests == 0
    assert lm2.usage.cached_requests == 265 and len(rm2.history) == 463
    # diskcache mode 4 is MODE_PICKLE: no entry may use it, and no file may hold a pickle stream.
    with sqlite3.connect(cache_dir / "cache.db") as db:
        modes = {row[0] for row in db.execute("SELECT DISTINCT mode FROM Cache")}
        assert 4 not in modes and modes
    for path in cache_dir.rglob("*"):
        if path.is_file() and path.suffix != ".db" and not path.name.startswith("cache.db"):
            assert not path.read_bytes().startswith(b"\x80"), f"{path} looks like a pickle"


def test_an_unrecorded_request_fails_and_names_the_difference(recording):
    d, train, dev, _ = recording
    lm, rm = clients(d)
    with dsp.settings.context(lm=lm, rm=rm, cache=False):
        with pytest.raises(dsp.UnrecordedRequest, match="first differs at character"):
            intro.vanilla_LM_QA("A question nobody recorded?", train)
        with pytest.raises(dsp.UnrecordedRequest, match="other parameters"):
            lm(lm.recording.requests[0][1]["prompt"], temperature=0.3)
        with pytest.raises(dsp.UnrecordedRequest):
            dsp.retrieve("an unrecorded query", k=3)


def test_replay_rejects_a_missing_or_broken_recording(tmp_path):
    with pytest.raises(FileNotFoundError, match="recording not found"):
        dsp.ReplayLM(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "choices": []}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2"):
        dsp.ReplayLM(bad)
