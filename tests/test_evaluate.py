"""dsp.evaluate: serial = parallel, per-example JSONL with a run identity, resume after a kill, a torn
last line repaired, errors kept, no label leak."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial

import pytest

import dsp
from programs import intro


def test_parallel_evaluation_agrees_with_serial_on_the_replayed_intro(data_dir, tmp_path):
    train, dev = intro.load_intro_data()
    d = data_dir / "dsp_v1"
    results = {}
    for threads in (1, 8):
        lm, rm = dsp.ReplayLM(d / "dsp_v1_intro_lm.jsonl"), dsp.ReplayRM(d / "dsp_v1_intro_rm.jsonl")
        with dsp.settings.context(lm=lm, rm=rm, cache_dir=str(tmp_path / f"cache{threads}")):
            results[threads] = [
                dsp.evaluate(partial(intro.PROGRAMS[name], train=train), dev, runner=threads,
                             out=tmp_path / f"{name}-{threads}.jsonl", progress=False)
                for name in ("retrieve_then_read_QA_v2", "multihop_QA_v2")
            ]
    for serial, parallel in zip(results[1], results[8]):
        assert [r["prediction"] for r in serial.rows] == [r["prediction"] for r in parallel.rows]
        assert [r["trace"] for r in serial.rows] == [r["trace"] for r in parallel.rows]
    assert [round(r.score, 1) for r in results[8]] == [53.8, 84.6]
    identity, rows = dsp.evaluation.read_run(tmp_path / "multihop_QA_v2-8.jsonl")
    assert identity["program"]["function"] == "programs.intro.multihop_QA_v2" and identity["seed"] is None
    assert identity["lm"]["lm"]["provider"] == "replay" and identity["rm"]["rm"]["provider"] == "replay"
    assert sorted(r["index"] for r in rows) == list(range(13))
    row = next(r for r in rows if r["index"] == 3)
    assert row["question"] == dev[3].question and row["gold"] == dev[3].answer and row["prediction"] == "1828"
    assert [t["stage"] for t in row["trace"]][-3:] == ["h0", "h1", "qa"]
    # P5 makes 12 LM calls per question; in the serial run, 9 of them (the annotation attempts) are
    # cache hits after the first question, so only 3 reach the LM.
    assert row["usage"]["requests"] + row["usage"]["cached_requests"] == 12
    assert results[1][1].rows[3]["usage"]["requests"] == 3


def test_the_program_sees_only_the_declared_inputs():
    seen = []

    def program(x):
        seen.append(dict(x))
        return x.copy(answer="a")

    # Whatever a dataset calls its labels (here a gold passage and a rewrite), only inputs reach the program.
    dev = [dsp.Example(question="q", answer=["a"], answers=["a"], history=["h"], gold_passage="p", Rewrite="r")]
    fields = dsp.Fields(inputs=("question", "history"))
    result = dsp.evaluate(program, dev, fields=fields, display=False, progress=False)
    assert seen == [{"question": "q", "history": ["h"]}] and result.score == 100.0
    with pytest.raises(ValueError, match="gold field 'answer' cannot also be an input"):
        dsp.Fields(inputs=("question", "answer"))


def test_errors_are_recorded_and_retried_on_rerun(tmp_path):
    out = tmp_path / "run.jsonl"
    fail = {"q1"}

    def program(question):
        if question in fail:
            raise ConnectionError("server down")
        return question.upper()

    dev = [dsp.Example(question=q, answer=q.upper()) for q in ("q0", "q1", "q2")]
    first = dsp.evaluate(program, dev, out=out, progress=False, display=False)
    assert [r["error"] for r in first.rows] == [None, "ConnectionError: server down", None]
    assert first.score == pytest.approx(200 / 3) and "1 example(s) failed" in first.summary()
    fail.clear()
    second = dsp.evaluate(program, dev, out=out, progress=False, display=False)
    assert second.score == 100.0 and not second.errors and second.resumed == 2


def test_metric_may_take_the_example():
    def metric(prediction, gold, example):
        return dsp.nF1(example.history, prediction, gold)

    dev = [dsp.Example(question="q", history="Apple was founded by Steve Jobs", answer=["Steve Wozniak"])]
    result = dsp.evaluate(lambda q: "Steve Jobs", dev, metric=metric, display=False, progress=False)
    assert result.score == 0.0


def test_seeds_drive_sampling_and_summaries(tmp_path):
    train = [dsp.Example(question=f"t{i}", answer="x") for i in range(10)]
    dev = [dsp.Example(question="q", answer="t0")]
    results = [dsp.evaluate(lambda q: dsp.sample(train, 1)[0].question, dev, seed=s, display=False,
                            progress=False) for s in range(5)]
    picks = [r.rows[0]["prediction"] for r in results]
    assert picks == [dsp.sample(train, 1, seed=s)[0].question for s in range(5)] and len(set(picks)) > 1
    table = dsp.summarize_seeds(results)
    assert list(table["seed"]) == [0, 1, 2, 3, 4] and "over 5 seeds" in table.attrs["text"]


def test_bad_dev_sets_are_named():
    with pytest.raises(ValueError, match="dev example 1 has no gold field 'answer'"):
        dsp.evaluate(str, [{"question": "q", "answer": "a"}, {"question": "q"}], display=False)
    with pytest.raises(ValueError, match="no input field 'question'"):
        dsp.evaluate(str, [{"query": "q", "answer": "a"}], display=False)


KILLED_RUN = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import dsp
    from helpers import ScriptedLM
    from templates.intro import qa_template

    calls = open({calls!r}, "a")
    def respond(prompt, request):
        calls.write("x\\n"); calls.flush()
        time.sleep(0.05)
        return [" " + prompt.split("Question: ")[-1].split("\\n")[0][::-1]]

    dev = [dsp.Example(question=f"question {{i}}", answer=f"question {{i}}"[::-1]) for i in range(40)]
    def program(q):
        return dsp.generate(qa_template)(dsp.Example(question=q))[1].answer
    with dsp.settings.context(lm=ScriptedLM(respond), cache=False):
        r = dsp.evaluate(program, dev, runner=4, out={out!r}, progress=False)
    print(r.score)
""")


def test_a_killed_evaluation_resumes_and_reproduces(tmp_path):
    out, calls = tmp_path / "run.jsonl", tmp_path / "calls.txt"
    script = tmp_path / "run.py"
    script.write_text(KILLED_RUN.format(tests=os.path.dirname(__file__), calls=str(calls), out=str(out)))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, str(script)], env=env)
    while not out.exists() or len(out.read_text().splitlines()) < 11:
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = len([ln for ln in out.read_text().splitlines() if ln.strip()]) - 1  # the header
    assert 10 <= written < 40
    done_before = written
    calls.write_text("")
    finished = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True)
    assert finished.stdout.strip().splitlines()[-1] == "100.0"
    rows = dsp.evaluation.read_run(out)[1]
    assert sorted({r["index"] for r in rows}) == list(range(40))
    # the rerun called the LM only for the examples the killed run had not finished
    assert len(calls.read_text().splitlines()) <= 40 - done_before + 4


def test_intervals_stay_inside_the_scores_range():
    from dsp.evaluation import EvaluationResult

    one_right = EvaluationResult(rows=[{"score": 1.0}] + [{"score": 0.0}] * 99, metric_name="EM")
    low, high = one_right.confidence_interval()  # Wilson: the normal approximation gave -1.0 to 3.0
    assert 0.1 < low < 0.3 and 5.0 < high < 5.6
    assert EvaluationResult(rows=[{"score": 0.0}] * 20, metric_name="EM").confidence_interval()[1] > 10
    graded = EvaluationResult(rows=[{"score": 0.05}] * 9 + [{"score": 0.9}], metric_name="nF1")
    low, high = graded.confidence_interval()  # not a proportion: normal approximation, clipped to [5, 90]
    assert low == 5.0 and 13.5 < high < 40


def _rtr(question, train, k=1):
    return dsp.Example(answer=f"{question}:{k}:{dsp.settings.lm.model}")


def test_a_changed_run_never_resumes_old_rows(tmp_path):
    """The issue's case: k=3 into a file holding k=1 rows printed the old score with 0 LM calls."""
    from helpers import ScriptedLM

    out = tmp_path / "run.jsonl"
    dev = [dsp.Example(question=f"q{i}", answer=f"q{i}:1:a") for i in range(3)]
    train = [dsp.Example(question="t", answer="t")]
    with dsp.settings.context(lm=ScriptedLM(lambda p, r: ["x"], model="a")):
        first = dsp.evaluate(partial(_rtr, train=train, k=1), dev, out=out, progress=False, display=False)
        assert first.score == 100.0
        with pytest.raises(dsp.RunMismatch, match=r"holds rows of another run \(program.keywords.k: 1 -> 3\)"):
            dsp.evaluate(partial(_rtr, train=train, k=3), dev, out=out, progress=False, display=False)
        with pytest.raises(dsp.RunMismatch, match="seed: null -> 1"):
            dsp.evaluate(partial(_rtr, train=train, k=1), dev, out=out, seed=1, progress=False, display=False)
        # what the caller adds to the identity (the CLI: task, split, preset, shots) counts too
        dsp.evaluate(partial(_rtr, train=train, k=1), dev, out=tmp_path / "t.jsonl", run={"task": "nq"},
                     progress=False, display=False)
        with pytest.raises(dsp.RunMismatch, match='task: "nq" -> "squad"'):
            dsp.evaluate(partial(_rtr, train=train, k=1), dev, out=tmp_path / "t.jsonl", run={"task": "squad"},
                         progress=False, display=False)
        # another training set is another run too
        with pytest.raises(dsp.RunMismatch, match="program.keywords.train"):
            dsp.evaluate(partial(_rtr, train=train * 30, k=1), dev, out=out, progress=False, display=False)
    with dsp.settings.context(lm=ScriptedLM(lambda p, r: ["x"], model="b")):
        with pytest.raises(dsp.RunMismatch, match="lm.lm.model: .a. -> .b."):
            dsp.evaluate(partial(_rtr, train=train, k=1), dev, out=out, progress=False, display=False)
    # the same run resumes every row, and says so
    with dsp.settings.context(lm=ScriptedLM(lambda p, r: ["x"], model="a")):
        again = dsp.evaluate(partial(_rtr, train=train, k=1), dev, out=out, progress=False, display=False)
    assert again.resumed == 3 and again.score == 100.0
    assert len(out.read_text().splitlines()) == 4  # the header and three rows, nothing mixed in


def test_a_file_without_a_run_identity_is_not_resumed(tmp_path):
    out = tmp_path / "old.jsonl"
    out.write_text(json.dumps({"index": 0, "fingerprint": "x", "score": 1.0, "error": None}) + "\n")
    with pytest.raises(dsp.RunMismatch, match="has rows but no run identity"):
        dsp.evaluate(str.upper, [{"question": "q", "answer": "Q"}], out=out, progress=False, display=False)


def test_a_file_made_on_other_examples_at_the_same_positions_is_refused_and_an_edited_one_reruns(tmp_path):
    """The harness's case: `--n 1000` into a file of `--n 500` whose draw put other questions first reran
    every position and left each two questions' rows. Now a row whose id is not its example's is refused
    (nothing written); an example edited in place (its id kept) runs again; a longer prefix resumes."""
    out = tmp_path / "run.jsonl"
    dev = [dsp.Example(id=f"e{i}", question=f"q{i}", answer=f"Q{i}") for i in range(4)]
    dsp.evaluate(str.upper, dev[:2], out=out, progress=False, display=False)
    before = out.read_text()
    with pytest.raises(dsp.RunMismatch, match=r"\(2 of 2; the first, 0: id 'e0' there, 'e2' now\)"):
        dsp.evaluate(str.upper, [dev[2], dev[3], dev[0]], out=out, progress=False, display=False)
    assert out.read_text() == before
    longer = dsp.evaluate(str.upper, dev, out=out, progress=False, display=False)  # the lock was given back
    assert longer.resumed == 2 and longer.score == 100.0
    edited = [dev[0], dsp.Example(id="e1", question="q1 (fixed)", answer="Q1 (FIXED)"), *dev[2:]]
    again = dsp.evaluate(str.upper, edited, out=out, progress=False, display=False)
    assert again.resumed == 3 and again.rows[1]["prediction"] == "Q1 (FIXED)"


def test_a_torn_last_line_is_set_aside_once_and_the_next_row_survives(tmp_path, caplog):
    """A kill mid-write leaves half a row; before the fix the next row was appended onto it and lost."""
    out = tmp_path / "run.jsonl"
    dev = [dsp.Example(question=f"q{i}", answer=f"Q{i}") for i in range(3)]
    dsp.evaluate(str.upper, dev[:2], out=out, progress=False, display=False)
    text = out.read_text()
    out.write_text(text[: len(text) - 25])  # the second row cut mid-line, no newline
    with caplog.at_level("WARNING", logger="dsp.evaluate"):
        result = dsp.evaluate(str.upper, dev, out=out, progress=False, display=False)
    assert result.score == 100.0 and result.resumed == 1
    identity, rows = dsp.evaluation.read_run(out)
    assert sorted(r["index"] for r in rows) == [0, 1, 2] and identity is not None
    assert (tmp_path / "run.jsonl.torn").read_text().strip() == text[text.index('{"index": 1'): len(text) - 25]
    assert sum("cut mid-write" in r.getMessage() for r in caplog.records) == 1
    caplog.clear()
    with caplog.at_level("WARNING", logger="dsp.evaluate"):
        again = dsp.evaluate(str.upper, dev, out=out, progress=False, display=False)
    assert again.resumed == 3 and not caplog.records  # repaired once: no warning on later resumes


def test_a_run_resumed_on_another_machine_says_where_its_rows_were_made(tmp_path, caplog, monkeypatch):
    """A local model's answers can round differently on another processor: the file records each machine."""
    from dsp.evaluation import log as run_log

    here = run_log.machine()
    assert here["cpu"] and here["system"] and "llama-cpp-python" in here["runtimes"]
    out = tmp_path / "run.jsonl"
    dev = [dsp.Example(question=f"q{i}", answer=f"Q{i}") for i in range(3)]
    dsp.evaluate(str.upper, dev[:2], out=out, progress=False, display=False)
    other = {**here, "cpu": "another processor", "cpu_flags": ["avx2"]}
    monkeypatch.setattr(run_log, "machine", lambda: other)
    with caplog.at_level("WARNING", logger="dsp.evaluate"):
        result = dsp.evaluate(str.upper, dev, out=out, progress=False, display=False)
    assert result.resumed == 2 and result.score == 100.0
    assert sum("made on another machine" in r.getMessage() and "another processor" in r.getMessage()
               for r in caplog.records) == 1
    headers = [json.loads(line)["dsp_run"] for line in out.read_text().splitlines() if '"dsp_run"' in line]
    assert [h["machine"]["cpu"] for h in headers] == [here["cpu"], "another processor"]
    assert headers[0]["identity"] == headers[1]["identity"]
    identity, rows = dsp.evaluation.read_run(out)
    assert identity == headers[0]["identity"] and sorted(r["index"] for r in rows) == [0, 1, 2]
    caplog.clear()
    with caplog.at_level("WARNING", logger="dsp.evaluate"):  # the same machine again: nothing to add
        again = dsp.evaluate(str.upper, dev, out=out, progress=False, display=False)
    assert again.resumed == 3 and not caplog.records
    assert out.read_text().count('"dsp_run"') == 2


def test_odd_keys_do_not_break_a_row():
    """A non-text key once raised "'<' not supported between 'int' and 'str'" and aborted the run."""
    result = dsp.evaluate(str.upper, [{"question": "q", "answer": "Q", 1: "x"}], progress=False, display=False)
    assert result.score == 100.0 and not result.errors


def test_runners_are_checked():
    with pytest.raises(ValueError, match="threads must be a positive integer, got 0"):
        dsp.evaluate(str, [{"question": "q", "answer": "a"}], runner=0, display=False)
    with pytest.raises(TypeError, match="runner must be"):
        dsp.evaluate(str, [{"question": "q", "answer": "a"}], runner="fast", display=False)
