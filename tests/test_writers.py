"""Results files under concurrent writers and hostile rows (hardening, second pass, items 1-4):
one writer per results file or compile folder, one rule for duplicate rows, atomic compiled saves with
their own temporary names, and `dsp compare` refusing impossible scores and rows of other questions."""

import json
import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import dsp
from dsp.evaluation import RunLog, WriterLock, finished_by_index, read_run
from dsp.evaluation.compare import compare_runs
from programs.cli import main as cli_main
from helpers import ScriptedLM

CHILD = Path(__file__).with_name("writer_child.py")
EXAMPLES = [dsp.Example(question=f"q{i}", answer=f"a{i}") for i in range(6)]


def _child(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(process: subprocess.Popen) -> tuple[int, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out + err


def _hold(path: Path) -> subprocess.Popen:
    """A process that takes the writer lock of `path` and keeps it until killed; returns once it holds it."""
    code = ("import sys, time; from dsp.evaluation import WriterLock; WriterLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_two_identical_runs_at_once_make_one_set_of_rows(tmp_path):
    out = tmp_path / "rtr.jsonl"
    first, second = _child("evaluate", str(out), "1", "0.3"), _child("evaluate", str(out), "1", "0.3")
    results = sorted([_finish(first), _finish(second)])
    assert [code for code, _ in results] == [0, 3], results
    refused = results[1][1]
    assert f"{out} is being written by another process (pid " in refused and refused.count("\n") == 1
    identity, rows = read_run(out)
    # 6 rows for 6 examples, each example run once (before the lock: 12 rows, every call made twice)
    assert sorted(r["index"] for r in rows) == list(range(6))
    assert identity["options"] == {"k": 1}


def test_two_runs_of_different_settings_never_mix_rows_in_one_new_file(tmp_path):
    out = tmp_path / "new.jsonl"
    a, b = _child("evaluate", str(out), "1", "0.2"), _child("evaluate", str(out), "3", "0.2")
    results = [_finish(a), _finish(b)]
    # The loser is refused by the lock while the winner writes (3), or, on a loaded machine where it
    # started only after the winner had finished, by the winner's header (1: RunMismatch): never mixed.
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 3], [0, 1]), results
    if codes == [0, 1]:
        assert "holds rows of another run (options.k:" in results[[c for c, _ in results].index(1)][1], results
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    headers = [line for line in lines if "dsp_run" in line]
    assert len(headers) == 1 and len(lines) == 7  # one header, the winner's 6 rows
    # the loser's settings meet the file afterwards as another run's rows, not as its own
    k_winner = headers[0]["dsp_run"]["identity"]["options"]["k"]
    loser = [code for code, _ in results].index(codes[1])
    k_loser = (1, 3)[loser]
    assert k_winner != k_loser
    with pytest.raises(dsp.RunMismatch, match=rf"options.k: {k_winner} -> {k_loser}"):
        dsp.evaluate(lambda q: q, EXAMPLES, dsp.EM, out=out, run={"task": "toy", "options": {"k": k_loser}}, seed=0,
                     progress=False, display=False)


def test_a_held_results_file_is_refused_before_its_header_is_read_or_written(tmp_path):
    out = tmp_path / "held.jsonl"
    holder = _hold(out)
    try:
        with pytest.raises(dsp.FileInUse, match=rf"held.jsonl is being written by another process \(pid {holder.pid}"):
            dsp.evaluate(lambda q: q, EXAMPLES, dsp.EM, out=out, progress=False, display=False)
        assert not out.exists()  # nothing written: the header comes only under the lock
    finally:
        holder.kill()
        holder.wait()
    # the lock dies with its process (even killed): the file is free again
    result = dsp.evaluate(lambda q: f"a{q[1:]}", EXAMPLES, dsp.EM, out=out, progress=False, display=False)
    assert result.score == 100.0


def test_the_lock_is_released_when_the_run_ends_or_fails(tmp_path):
    out = tmp_path / "rtr.jsonl"
    dsp.evaluate(lambda q: q, EXAMPLES, dsp.EM, out=out, progress=False, display=False)
    with WriterLock(out):  # free after a finished run
        pass
    with pytest.raises(dsp.RunMismatch):  # refused on open: the lock must not stay behind
        dsp.evaluate(lambda q: q, EXAMPLES, dsp.F1, out=out, progress=False, display=False)
    with WriterLock(out):
        pass


def test_a_second_compile_into_one_folder_is_refused(tmp_path):
    folder = tmp_path / "nq.runs"
    holder = _hold(folder)
    try:
        code, text = _finish(_child("compile", str(folder), "0"))
    finally:
        holder.kill()
        holder.wait()
    assert code == 3 and f"{folder} is being written by another process (pid {holder.pid}" in text
    assert not (folder / "candidates").exists()  # refused before any candidate ran
    # two at once: one compiles, the other is refused, and no candidate file holds a row twice
    a, b = _child("compile", str(folder), "0.05"), _child("compile", str(folder), "0.05")
    assert sorted(_finish(p)[0] for p in (a, b)) == [0, 3]
    for path in folder.rglob("*.jsonl"):
        indexes = [row["index"] for row in read_run(path)[1]]
        assert len(indexes) == len(set(indexes)), path


def test_the_cli_says_a_busy_results_file_in_one_line(data_dir, tmp_path, monkeypatch, capsys):
    def scripted(spec=None):
        lm = ScriptedLM(lambda prompt, request: [" Paris"] * int(request.get("n") or 1), model="scripted-busy")
        lm.spec = "scripted"
        return lm

    monkeypatch.setattr(dsp, "lm_from_spec", scripted)
    argv = ["run", "vanilla", "--dataset", "nq", "--n", "2", "--out", str(tmp_path)]
    assert cli_main(argv) == 0
    (made,) = tmp_path.glob("*.jsonl")
    capsys.readouterr()
    holder = _hold(made)
    try:
        assert cli_main(argv) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err.strip()
    # one line: the file, the process holding it (pid, its command cut to 80 characters, since when)
    assert err.startswith(f"dsp run: error: {made} is being written by another process (pid {holder.pid}, `-c ")
    assert err.endswith("): wait for it to finish, or write to another file") and "\n" not in err


# -- one rule for duplicate rows -------------------------------------------------------------------


def _write(path: Path, rows: list[dict], identity: dict | None = None) -> Path:
    header = {"dsp_run": {"format": 1, "identity": identity or {"task": "toy", "metric": "dsp.metrics.EM"}}}
    path.write_text("\n".join(json.dumps(r) for r in [header, *rows]) + "\n")
    return path


def _row(index: int, score, error=None, question=None, fingerprint=None) -> dict:
    row = {"index": index, "id": f"id{index}", "question": question or f"q{index}", "score": score, "error": error,
           "prediction": "p"}
    if fingerprint is not None:
        row["fingerprint"] = fingerprint
    return row


def test_resume_and_compare_read_duplicate_rows_alike_and_name_them(tmp_path, caplog):
    rows = [_row(0, 1.0), _row(1, 0.0), _row(2, 0.0, error="E: boom"), _row(1, 1.0), _row(2, 1.0)]
    path = _write(tmp_path / "dup.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="dsp.evaluate"):
        with RunLog(path, {"task": "toy", "metric": "dsp.metrics.EM"}) as log:
            done = log.open()
    assert {i: r["score"] for i, r in done.items()} == {0: 1.0, 1: 1.0, 2: 1.0}  # the last finished row of each
    assert "examples 1 have more than one finished row" in caplog.text  # 2's first row failed: no duplicate
    table = compare_runs([path])
    assert table.runs[0].score == 100.0  # compare reads the same rows: before, it took index 1's first (0.0)
    assert any("dup.jsonl: examples 1 have more than one finished row; the last of each is used" in n for n in table.notes)
    by_index, duplicated = finished_by_index(rows)
    assert duplicated == [1] and by_index[2]["error"] is None


# -- Compiled.save -----------------------------------------------------------------------------------


def test_concurrent_saves_each_leave_a_whole_file(tmp_path):
    target = tmp_path / "compiled" / "rtr.json"
    failures: list[BaseException] = []

    def save(k: int) -> None:
        for _ in range(15):
            try:
                dsp.Compiled(json.dumps, {"k": k}, [dsp.Example(question="q", answer="a")] * 50).save(target)
            except BaseException as error:  # noqa: BLE001 - the test reports whatever a save raised
                failures.append(error)

    threads = [threading.Thread(target=save, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]  # a fixed ".partial" name: FileNotFoundError when another renamed it first
    assert dsp.load_compiled(target).options["k"] in range(6)
    assert sorted(p.name for p in target.parent.iterdir()) == ["rtr.json"]  # no temporary left behind


# -- dsp compare refuses impossible scores and rows of other questions ----------------------------------


@pytest.mark.parametrize("score, shown", [(float("nan"), "NaN"), (float("inf"), "Infinity"), (5, "5"), (-0.5, "-0.5"),
                                          ("abc", '"abc"'), ({"em": 1}, '{"em": 1}'), (None, "null"), (True, "true")])
def test_compare_refuses_a_score_no_metric_gives(tmp_path, score, shown, capsys):
    good = _write(tmp_path / "good.jsonl", [_row(i, 1.0) for i in range(3)])
    bad = tmp_path / "bad.jsonl"
    rows = [_row(0, 1.0), _row(1, score), _row(2, 0.0)]
    header = {"dsp_run": {"format": 1, "identity": {"task": "toy", "metric": "dsp.metrics.EM"}}}
    bad.write_text("\n".join(json.dumps(r) for r in [header, *rows]) + "\n")  # json writes NaN and Infinity
    with pytest.raises(dsp.BadRow, match=r"bad.jsonl: the row of example 1 \(id 'id1'\) has score "):
        compare_runs([good, bad])
    assert cli_main(["compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.jsonl: the row of example 1" in err and shown in err


def test_compare_refuses_to_pair_rows_of_different_questions(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [_row(i, 1.0, fingerprint=f"f{i}") for i in range(3)])
    b = _write(tmp_path / "b.jsonl", [_row(0, 1.0, fingerprint="f0"), _row(1, 0.0, fingerprint="other"),
                                      _row(2, 1.0, fingerprint="f2")])
    with pytest.raises(dsp.RunMismatch, match=r"b.jsonl: the row of example 1 \(id 'id1'\) is not the question"):
        compare_runs([a, b])
    # without fingerprints (older files), the question text decides
    c = _write(tmp_path / "c.jsonl", [_row(i, 1.0) for i in range(3)])
    d = _write(tmp_path / "d.jsonl", [_row(0, 1.0), _row(1, 1.0, question="another"), _row(2, 1.0)])
    assert cli_main(["compare", str(c), str(d)]) == 2
    assert "d.jsonl: the row of example 1" in capsys.readouterr().err
    assert compare_runs([a, _write(tmp_path / "e.jsonl", [_row(i, 0.0, fingerprint=f"f{i}") for i in range(3)])]).n == 3


@pytest.mark.parametrize("header", ['{"dsp_run": 7}', '{"dsp_run": {"format": 1, "identity": [1, 2]}}'])
def test_compare_refuses_a_header_that_is_not_an_object(tmp_path, header, capsys):
    path = tmp_path / "h.jsonl"
    path.write_text(header + "\n" + json.dumps(_row(0, 1.0)) + "\n")
    assert cli_main(["compare", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "h.jsonl: line 1: the 'dsp_run' header (or its identity) is not a JSON object" in err


def test_published_results_still_pair(tmp_path):
    """Every published file pair of one task still compares (fingerprints agree, scores are in range)."""
    root = Path(__file__).resolve().parent.parent / "results"
    files = sorted(root.glob("squad-*-seed0.jsonl"))
    assert len(files) >= 3
    table = compare_runs(files, n=1000)
    assert table.n == 1000 and all(0 <= run.score <= 100 for run in table.runs)
