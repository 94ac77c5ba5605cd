"""dsp.compile: finds the demonstration that matters, never shows the dev set to the LM, round-trips as
JSON, resumes a killed search without repeating finished candidates, and works from the command line."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from compile_programs import MAGIC, as_written, cot_reader, evidence, lucky, magic_respond, reader, wrong_respond
from helpers import ScriptedLM

import dsp
from dsp.compiling import DemoSpace, Space, split_train

TESTS = Path(__file__).resolve().parent


def _trainset(n: int = 40) -> list[dsp.Example]:
    examples = [dsp.Example(question=f"what is q{i}?", answer=[f"a{i}"]) for i in range(n)]
    examples[5] = dsp.Example(question=MAGIC, answer=["a5"])
    return examples


def _patch_cli_lm(monkeypatch, model: str, respond=None) -> None:
    """`dsp` CLI commands get a scripted LM (answering " Paris" to every draw unless `respond` is given)."""
    def scripted(spec=None):
        lm = ScriptedLM(respond or (lambda prompt, request: [" Paris"] * int(request.get("n") or 1)), model=model)
        lm.spec = "scripted"
        return lm

    monkeypatch.setattr(dsp, "lm_from_spec", scripted)


def test_compile_finds_the_demonstration_that_makes_the_answers_right(tmp_path):
    train = _trainset()
    pool, val = split_train(train, val=10, seed=0)
    assert any(d.question == MAGIC for d in pool)  # the demonstration that matters can be found
    lm = ScriptedLM(magic_respond)
    space = Space(demos=DemoSpace(kinds=("raw",), ks=(1,), selects=("random",), seeds=30))
    with dsp.settings.context(lm=lm):
        compiled = dsp.compile(reader, train, dsp.EM, dsp.CompileConfig(space=space, candidates=31, val=10, progress=False),
                               out=tmp_path / "c")
    assert [d.question for d in compiled.demos] == [MAGIC]
    best = compiled.table[0]
    assert best["score"] == 100.0 and best["key"] == compiled.candidate["key"]
    assert min(row["score"] for row in compiled.table) == 0.0  # the others never unlock it
    # Paired with the program as written on the validation examples both ran: right on all 10, alone.
    baseline = next(row for row in compiled.table if row["key"] == "baseline")
    assert "vs_baseline" not in baseline and baseline["score"] == 0.0
    assert best["vs_baseline"] == {"n": 10, "a_only": 10, "b_only": 0, "p": dsp.stats.mcnemar_exact(10, 0)}
    assert "+10 -0 p=0.002" in dsp.compiling.report(compiled.table)
    with dsp.settings.context(lm=lm):
        assert compiled("what is q77?").answer == "a77"  # a question it never saw
    # Compiled again into the same folder: every row is reused, no LM call, and the cost the rows took
    # when they ran is still reported (this call's own is nothing).
    with dsp.settings.context(lm=lm):
        again = dsp.compile(reader, train, dsp.EM, dsp.CompileConfig(space=space, candidates=31, val=10, progress=False),
                            out=tmp_path / "c")
    rows = compiled.meta["rows_usage"]
    assert rows["requests"] + rows["cached_requests"] >= 31 * 10 and again.meta["rows_usage"] == rows
    assert again.meta["lm_usage"]["requests"] == again.meta["lm_usage"]["cached_requests"] == 0
    scored = lambda table: [{k: v for k, v in row.items() if k != "seconds"} for row in table]  # noqa: E731
    assert scored(again.table) == scored(compiled.table) and again.digest() == compiled.digest()


def test_augmented_demonstrations_carry_the_trace_that_passed(tmp_path):
    from functools import partial

    from dsp.compiling import bootstrap

    train = _trainset()
    lm = ScriptedLM(magic_respond)
    with dsp.settings.context(lm=lm):
        config = dsp.CompileConfig(bootstrap_limit=None, bootstrap_demos=5, progress=False)
        demos = bootstrap(partial(reader, train=train), train, dsp.EM, config, out=tmp_path / "b.jsonl")["predicted"]
    rows = dsp.evaluation.read_run(tmp_path / "b.jsonl")[1]
    passed = {r["question"] for r in rows if r["score"] == 1.0}
    # Only traces that passed become demonstrations (those whose raw demos held MAGIC), in pool order.
    assert [d.question for d in demos] == [e.question for e in train if e.question in passed] and demos
    assert 0 < len(demos) < len(train)
    assert all(d.augmented and d.qa.answer == d.answer[0] and d.qa.question == d.question for d in demos)
    # The example being answered is never among its own demonstrations.
    assert all(f"Question: {r['question']}\nAnswer:" not in r["trace"][0]["prompt"].rsplit("---", 1)[0] for r in rows)


def test_gold_labelled_demonstrations_show_the_search_that_found_the_answer(tmp_path):
    """A model that never answers right bootstraps no passing trace, but every trace whose context held
    the answer becomes a demonstration labelled with the gold answer, without the rationale it wrote
    for its own wrong answer; one bootstrap run gives both labellings."""
    from functools import partial

    from dsp.compiling import bootstrap_runs, demos_of_rows

    train = [dsp.Example(question=f"what is q{i}?", answer=[f"a{i}"]) for i in range(12)]
    with dsp.settings.context(lm=ScriptedLM(wrong_respond)):
        attempted, rows = bootstrap_runs(partial(cot_reader, train=train), train, dsp.EM, dsp.CompileConfig(progress=False),
                                         out=tmp_path / "b.jsonl")
    assert [r["prediction"] for r in rows] == ["wrong"] * 12
    assert demos_of_rows(attempted, rows) == []
    gold = demos_of_rows(attempted, rows, label="gold")
    assert [d.question for d in gold] == [f"what is q{i}?" for i in range(0, 12, 2)]  # the ones whose search found it
    for d in gold:
        assert d.augmented and d.qa.answer == d.answer[0] and d.qa.context == evidence(d.question)
        assert "rationale" not in d.qa  # it argued for "wrong"
    assert all(r["trace"][0]["written"] == ["rationale", "answer"] for r in rows)
    with pytest.raises(ValueError, match="label must be one of predicted, gold"):
        demos_of_rows(attempted, rows, label="silver")


def test_compile_tries_gold_labelled_demonstrations(tmp_path):
    """The gold kind reaches the search: a gold-labelled candidate carries traces whose context held the answer."""
    train = [dsp.Example(question=f"what is q{i}?", answer=[f"a{i}"]) for i in range(30)]
    space = Space(demos=DemoSpace(kinds=("gold",), ks=(2,), selects=("random",), seeds=1))
    with dsp.settings.context(lm=ScriptedLM(wrong_respond)):
        compiled = dsp.compile(cot_reader, train, dsp.EM, dsp.CompileConfig(space=space, candidates=2, val=10, progress=False),
                               out=tmp_path / "c")
    assert [row["key"] for row in compiled.table] == ["baseline", "gold2-random0"]
    assert compiled.meta["augmented"] == 0 and compiled.meta["gold"] > 0
    gold_candidate = next(r for r in compiled.table if r["key"] == "gold2-random0")
    assert gold_candidate["n"] == 10


def test_a_kind_the_bootstrap_found_nothing_of_is_not_searched(tmp_path):
    """A model that answers every pool question wrong, with no context: no augmented or gold trace exists, so
    the candidates are raw ones (not raw demos under another kind's name, taking their slots)."""
    train = [dsp.Example(question=f"what is q{i}?", answer=[f"a{i}"]) for i in range(30)]
    space = Space(demos=DemoSpace(kinds=("raw", "augmented", "gold"), ks=(1, 2), selects=("random",), seeds=2))
    with dsp.settings.context(lm=ScriptedLM(wrong_respond)):
        compiled = dsp.compile(reader, train, dsp.EM, dsp.CompileConfig(space=space, candidates=5, val=10, progress=False),
                               out=tmp_path / "c")
    assert compiled.meta["augmented"] == compiled.meta["gold"] == 0 and compiled.meta["demo_kinds"] == ["raw"]
    keys = [row["key"] for row in compiled.table]
    assert len(keys) == 5 and all(k == "baseline" or k.startswith("raw") for k in keys), keys
    assert compiled.meta["rows_usage"]["requests"] > 0  # the bootstrap ran, and found nothing


def test_graded_metrics_pass_traces_at_the_given_score(tmp_path):
    """With F1, an answer with extra words scores 0.5: no trace passes at 1.0; at passing=0.5 they become demos."""
    train = [dsp.Example(question=f"what is q{i}?", answer=[f"a{i}"]) for i in range(30)]

    def wordy(prompt: str, request: dict) -> list[str]:
        import re

        number = re.findall(r"what is q(\d+)", prompt)[-1]
        return [f" a{number} and more"]

    space = Space(demos=DemoSpace(kinds=("raw", "augmented"), ks=(2,), selects=("random",), seeds=1))
    found = {}
    for passing in (1.0, 0.5):
        with dsp.settings.context(lm=ScriptedLM(wordy)):
            config = dsp.CompileConfig(space=space, candidates=3, val=10, passing=passing, progress=False)
            compiled = dsp.compile(reader, train, dsp.F1, config, out=tmp_path / "c")
        found[passing] = compiled.meta["augmented"]
    assert found[1.0] == 0 and found[0.5] == 20  # every bootstrapped trace scored 0.5


def test_a_bigger_bootstrap_reruns_only_the_candidates_that_draw_on_it(tmp_path):
    """Raw candidates and the baseline do not depend on the bootstrapped demos: a compile resumed with
    more of the pool bootstrapped keeps their rows; augmented candidates (new demos) are scored again."""
    train = _trainset()
    space = Space(demos=DemoSpace(kinds=("raw", "augmented"), ks=(3,), selects=("random",), seeds=1))
    runs = {}
    for limit in (8, 25):
        lm = ScriptedLM(magic_respond)
        with dsp.settings.context(lm=lm, cache=False):
            config = dsp.CompileConfig(space=space, candidates=3, val=10, bootstrap_limit=limit, racing=False,
                                       progress=False)
            compiled = dsp.compile(reader, train, dsp.EM, config, out=tmp_path / "c")
        runs[limit] = (compiled.meta["augmented"], len(lm.prompts))
    assert runs[8][0] < runs[25][0]  # the bigger bootstrap found more passing traces
    # The second compile: 17 new bootstrap runs + the augmented candidate's 10 questions, nothing else.
    assert runs[25][1] == (25 - 8) + 10


def test_halving_keeps_the_program_as_written_to_the_last_rung_and_gives_it_ties(tmp_path):
    """A candidate that is right only on the first quarter of the validation part tops the first rung; the
    program as written, wrong there and right on the rest, still runs on all of it and is chosen."""
    train = _trainset(80)
    _, heldout = split_train(train, 24, 0)
    first = sorted(e.question for e in heldout[:6])  # rungs: 6, 12, 24 questions

    space = Space(options={"luck": [1, 2]}, demos=DemoSpace(kinds=("raw",), ks=(1,), selects=("random",), seeds=1))
    config = dsp.CompileConfig(space=space, candidates=3, val=24, progress=False)
    compiled = dsp.compile(lucky, train, dsp.EM, config, options={"first": first}, out=tmp_path / "c")
    rows = {row["key"]: row for row in compiled.table}
    assert compiled.candidate["key"] == "baseline" and rows["baseline"]["n"] == 24 and rows["baseline"]["score"] == 75.0
    assert {row["n"] for key, row in rows.items() if key != "baseline"} <= {12, 24}
    # Every candidate answering as the program as written: the tie goes to the program as written.
    same = dsp.compile(as_written, train, dsp.EM, config, options={"first": first}, out=tmp_path / "d")
    assert same.candidate["key"] == "baseline"


def test_seeds_that_choose_the_program_as_written_choose_the_same_program(tmp_path):
    """The program as written draws its own demonstrations from `train`: during the race from the pool less
    the seed's validation part (never a validation question), once chosen from the whole training set, so
    two seeds that end in a tie return one program, not two draws of it."""
    train = _trainset()
    space = Space(demos=DemoSpace(kinds=("raw",), ks=(1,), selects=("random",), seeds=2))
    chosen = []
    with dsp.settings.context(lm=ScriptedLM(wrong_respond)):  # every candidate wrong everywhere: a tie
        for seed in (0, 1):
            config = dsp.CompileConfig(space=space, candidates=3, val=10, seed=seed, progress=False)
            chosen.append(dsp.compile(reader, train, dsp.EM, config, out=tmp_path / f"seed{seed}"))
    first, second = chosen
    assert first.candidate["key"] == second.candidate["key"] == "baseline"
    assert first.meta["pool"] == second.meta["pool"] == 30 and first.meta["train"] == len(first.train) == 40
    assert [e.question for e in first.train] == [e.question for e in train] and first.digest() == second.digest()
    assert first.meta["seed"] != second.meta["seed"]


def test_the_program_as_written_is_searched_with_other_option_values(tmp_path):
    """Its own demonstrations are a demo choice like any other: the program as written with another option
    value is a candidate (and can win), and with the value it already has (its default, or one fixed by
    `options`) it is the baseline, not a second candidate."""
    train = _trainset(80)
    _, heldout = split_train(train, 24, 0)
    first = tuple(e.question for e in heldout)  # lucky(luck=1) is right on every validation question
    space = Space(options={"luck": [0, 1]}, demos=DemoSpace(kinds=("raw",), ks=(1,), selects=("random",), seeds=1))
    config = dsp.CompileConfig(space=space, candidates=10, val=24, progress=False)
    compiled = dsp.compile(lucky, train, dsp.EM, config, options={"first": first}, out=tmp_path / "c")
    assert sorted(row["key"] for row in compiled.table) == ["baseline", "baseline-luck1", "raw1-random0-luck0",
                                                             "raw1-random0-luck1"]  # no baseline-luck0: luck=0 is its default
    assert compiled.candidate["key"] == "baseline-luck1"  # tied with raw1-random0-luck1: the cheaper (no demos)
    assert compiled.demos is None and compiled.options == {"first": first, "luck": 1}
    # the program as written, wrong on every validation question, is dropped on the first rung's evidence
    baseline = next(row for row in compiled.table if row["key"] == "baseline")
    assert baseline["dropped"]["n"] == 20 and baseline["dropped"]["this_only"] == 0
    assert compiled.table[0]["score"] == 100.0 and compiled.table[0]["vs_baseline"]["a_only"] == 20
    fixed = dsp.compile(lucky, train, dsp.EM, config, options={"first": first, "luck": 1}, out=tmp_path / "d")
    assert sorted(row["key"] for row in fixed.table) == ["baseline", "baseline-luck0", "raw1-random0-luck0",
                                                          "raw1-random0-luck1"]
    assert fixed.candidate["key"] == "baseline"


def test_the_compiled_program_round_trips_as_json(tmp_path):
    train = _trainset()
    lm = ScriptedLM(magic_respond)
    space = Space(options={"shout": [False, True]},
                  demos=DemoSpace(kinds=("raw",), ks=(3,), selects=("random", "knn"), seeds=2))
    with dsp.settings.context(lm=lm):
        compiled = dsp.compile(reader, train, dsp.EM, dsp.CompileConfig(space=space, candidates=7, val=10, progress=False))
        path = compiled.save(tmp_path / "compiled.json")
        loaded = dsp.load_compiled(path)
        questions = [f"what is q{i}?" for i in (50, 51, 52)]
        assert [loaded(q).answer for q in questions] == [compiled(q).answer for q in questions]
    assert loaded.options == compiled.options and loaded.candidate == compiled.candidate
    assert loaded.table == compiled.table and "pickle" not in path.read_text()
    # a knn candidate keeps its pool, not a fixed list, and picks demos per question
    from dsp.compiling import Compiled

    knn = Compiled(reader, {}, train, None, train[:10], 2, "hashing")
    again = Compiled.from_dict(knn.to_dict())
    assert [d.question for d in again.demos_for("what is q3?")] == [d.question for d in knn.demos_for("what is q3?")]
    with pytest.raises(FileNotFoundError, match="no compiled program there"):
        dsp.load_compiled(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"format": 99}')
    with pytest.raises(ValueError, match="not a compiled program of format 1"):
        dsp.load_compiled(tmp_path / "bad.json")


KILLED_COMPILE = textwrap.dedent("""
    import sys, time
    sys.path[:0] = [{tests!r}, {root!r}]
    import dsp
    from compile_programs import reader, magic_respond
    from helpers import ScriptedLM
    from dsp.compiling import DemoSpace, Space

    calls = open({calls!r}, "a")
    def respond(prompt, request):
        calls.write("x\\n"); calls.flush()
        time.sleep(0.01)
        return magic_respond(prompt, request)

    train = [dsp.Example(question=f"what is q{{i}}?", answer=[f"a{{i}}"]) for i in range(40)]
    space = Space(demos=DemoSpace(kinds=("raw",), ks=(1,), selects=("random",), seeds=12))
    with dsp.settings.context(lm=ScriptedLM(respond), cache=False):
        config = dsp.CompileConfig(space=space, candidates=13, val=10, racing=False, progress=False)
        compiled = dsp.compile(reader, train, dsp.EM, config, out={out!r})
    print("done", compiled.candidate["key"])
""")


def test_a_killed_compile_resumes_without_repeating_finished_candidates(tmp_path):
    out, calls = tmp_path / "compile", tmp_path / "calls.txt"
    script = tmp_path / "compile.py"
    script.write_text(KILLED_COMPILE.format(tests=str(TESTS), root=str(TESTS.parent), calls=str(calls), out=str(out)))
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)

    def finished() -> int:
        files = list((out / "candidates").glob("*.jsonl")) if (out / "candidates").exists() else []
        return sum(len(dsp.evaluation.read_run(f)[1]) == 10 for f in files)

    deadline = time.monotonic() + 120
    while finished() < 4:
        assert process.poll() is None and time.monotonic() < deadline, "the compile ended before it was killed"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = finished()
    assert 4 <= done_before < 13
    calls.write_text("")
    rerun = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert rerun.stdout.startswith("done")
    # With the cache off, every call the rerun made was for a candidate the killed run had not finished.
    assert len(calls.read_text().splitlines()) <= 10 * (13 - done_before)


def test_dsp_compile_and_run_compiled_never_show_the_dev_set_to_the_lm(data_dir, tmp_path, monkeypatch, capsys):
    from programs.cli import main
    from programs.tasks import TASKS

    prompts: list[str] = []

    def respond(prompt, request):
        prompts.append(prompt)
        return [" Paris"]

    _patch_cli_lm(monkeypatch, "scripted-compile", respond)
    out = tmp_path / "nq-rtr.json"
    code = main(["compile", "retrieve_then_read", "--dataset", "nq", "--candidates", "4", "--val", "12",
                 "--bootstrap", "4", "--out", str(out)])
    assert code == 0
    shown = capsys.readouterr()
    assert "chose " in shown.out and "candidate" in shown.out and "the search's rows, when they ran" in shown.out
    assert "bootstrap (EM)" in shown.err and "compile" in shown.err  # both stages show their progress
    compile_prompts = list(prompts)
    assert compile_prompts
    _, dev = TASKS["nq"].load()
    asked = {p.rsplit("Question: ", 1)[-1].split("\n")[0] for p in compile_prompts}
    assert not asked & {d.question for d in dev}  # no dev question was ever asked...
    joined = "\n".join(compile_prompts)
    assert not any(f"Question: {d.question}\n" in joined for d in dev[:300])  # ...or shown as a demo
    compiled = dsp.load_compiled(out)
    assert compiled.meta["task"] == "nq" and compiled.meta["val"] == 12 and len(compiled.table) == 4
    # dsp run --compiled: the compiled program on the dev set
    assert main(["run", "retrieve_then_read", "--dataset", "nq", "--n", "3", "--compiled", str(out),
                 "--out", str(tmp_path / "runs")]) == 0
    identity, rows = dsp.evaluation.read_run(tmp_path / "runs" / "nq-retrieve_then_read-compiled_nq-rtr-seed0.jsonl")
    assert len(rows) == 3 and identity["compiled"] == compiled.digest() and identity["options"] == compiled.options
    # The same compile rerun (cached: only its timing differs) and saved again: the run still resumes...
    again = dsp.load_compiled(out)
    again.meta["seconds"] = 123.4
    again.save(out)
    before = len(prompts)
    assert main(["run", "retrieve_then_read", "--dataset", "nq", "--n", "4", "--compiled", str(out),
                 "--out", str(tmp_path / "runs")]) == 0
    assert len(prompts) == before + 1 and "resumed 3 rows" in capsys.readouterr().out
    # --set changes an option of the compiled program (an ablation): a file of its own, the same demos.
    assert main(["run", "retrieve_then_read", "--dataset", "nq", "--n", "2", "--compiled", str(out),
                 "--set", "k=2", "--out", str(tmp_path / "runs")]) == 0
    identity, rows = dsp.evaluation.read_run(tmp_path / "runs" / "nq-retrieve_then_read-compiled_nq-rtr-k2-seed0.jsonl")
    assert identity["options"]["k"] == 2 and identity["compiled"] != compiled.digest() and len(rows) == 2
    assert all(len(row["context"]) == 2 for row in rows)
    # a --set that changes nothing is the compiled program itself (its own file, resumed)
    assert main(["run", "retrieve_then_read", "--dataset", "nq", "--n", "4", "--compiled", str(out),
                 "--set", f"k={compiled.options.get('k', 1)}", "--out", str(tmp_path / "runs")]) == 0
    assert "resumed 4 rows" in capsys.readouterr().out
    # ...but other demonstrations are another program, refused in one line.
    changed = dsp.load_compiled(out)
    changed.options = {**changed.options, "k": 3}
    changed.save(out)
    assert main(["run", "retrieve_then_read", "--dataset", "nq", "--n", "4", "--compiled", str(out),
                 "--out", str(tmp_path / "runs")]) == 2
    assert "compiled:" in capsys.readouterr().err
    assert main(["run", "dsp", "--dataset", "nq", "--n", "3", "--compiled", str(out)]) == 2
    assert "holds programs.open_qa.retrieve_then_read, not programs.open_qa.dsp_program" in capsys.readouterr().err


def test_compile_arguments_are_checked_before_any_model_loads(data_dir, tmp_path, monkeypatch, capsys):
    from programs.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(dsp, "lm_from_spec", refuse)
    for argv, message in [
        (["compile", "dsp"], "--out FILE.json is required"),
        (["compile", "dsp", "--out", "x.txt"], "give a .json file"),
        (["compile", "dsp", "--out", "x.json", "--candidates", "0"], "--candidates: must be a positive integer"),
        (["compile", "dsp", "--out", "x.json", "--passing", "1.5"], "--passing: takes a number in (0, 1], got '1.5'"),
        (["compile", "nosuch", "--out", "x.json"], "has no program 'nosuch'"),
        (["run", "dsp", "--compiled", str(tmp_path / "none.json")], "none.json: no such file"),
    ]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


def test_a_small_sample_of_a_big_space_covers_every_value():
    from programs.open_qa import SEARCH
    space = Space(options=SEARCH["retrieve_then_read"], demos=DemoSpace(ks=(1, 3, 5)))
    assert len(space.grid()) == 1 + (27 + 1) * 12  # the program's own demos are a demo choice too
    for seed in range(20):
        picked = space.candidates(6, seed=seed)[1:]
        assert len({c.key for c in picked}) == 5
        for name, values in SEARCH["retrieve_then_read"].items():
            assert {c.options[name] for c in picked} == set(values), (seed, name)
        assert {c.demos["kind"] for c in picked} == {"none", "raw", "augmented", "gold"}
        assert {c.demos.get("k") for c in picked} == {None, 1, 3, 5}


def test_a_moot_option_is_never_searched_where_it_has_no_effect():
    """Passage order with one passage: those candidates ran the same prompts as others and took a slot."""
    from programs.open_qa import MOOT, SEARCH
    space = Space(options=SEARCH["retrieve_then_read"], demos=DemoSpace(ks=(1, 3, 5)), moot=MOOT)
    grid = space.grid()
    assert len(grid) == 1 + 28 * (2 + 2 * 2 * 2)  # k=1 keeps only demo_context's two values
    assert all(("order" in c.options) == (c.options.get("k") != 1) for c in grid[1:])
    assert len({c.key for c in grid}) == len(grid)
    for seed in range(10):
        picked = space.candidates(8, seed=seed)[1:]
        assert {c.options["k"] for c in picked} == {1, 2, 3}
        assert {c.options.get("order") for c in picked} == {None, "relevance", "lost_in_the_middle"}
    # k fixed to 1 for every candidate (a preset): order is searched nowhere.
    fixed = Space(options={"n": [1, 5], "order": SEARCH["dsp"]["order"]}, demos=DemoSpace(kinds=("raw",)), moot=MOOT)
    assert all("order" not in c.options for c in fixed.grid(fixed={"k": 1}))
    assert len(fixed.grid(fixed={"k": 1})) == 1 + 10 * 2 and len(fixed.grid(fixed={"k": 2})) == 1 + 10 * 4
    assert any("order" in c.options for c in fixed.candidates(6, fixed={"k": 3}))
    with pytest.raises(ValueError, match="moot"):
        Space(moot={"order": ["k"]})


def test_fixed_options_stay_in_the_compiled_program(tmp_path):
    """Options every candidate starts from (a preset) are part of what was scored, so they are saved."""
    train = _trainset()
    space = Space(options={"shout": [False, True]}, demos=DemoSpace(kinds=("raw",), ks=(3,), selects=("random",),
                                                                     seeds=1))
    with dsp.settings.context(lm=ScriptedLM(magic_respond)):
        compiled = dsp.compile(reader, train, dsp.EM, dsp.CompileConfig(space=space, candidates=3, val=10, progress=False),
                               options={"n_demos": 1})
    assert compiled.options["n_demos"] == 1
    assert dsp.load_compiled(compiled.save(tmp_path / "c.json")).options == compiled.options


@pytest.mark.parametrize("dataset,program", [("hotpotqa", "dsp"), ("hotpotqa", "self_ask"), ("qrecc", "dsp"),
                                             ("qrecc", "retrieve_then_read"), ("squad", "dsp"), ("nq", "vanilla")])
def test_every_family_compiles_and_runs_compiled(data_dir, tmp_path, monkeypatch, capsys, dataset, program):
    """Multi-hop, conversational and open-QA programs all take chosen demonstrations: compile, save,
    load and run on the dev set, end to end through the CLI (a scripted LM; the real RM and data)."""
    from programs.cli import main

    _patch_cli_lm(monkeypatch, "scripted-families")
    out = tmp_path / f"{dataset}-{program}.json"
    assert main(["compile", program, "--dataset", dataset, "--candidates", "3", "--val", "10", "--bootstrap", "4",
                 "--out", str(out), "--no-racing"]) == 0
    compiled = dsp.load_compiled(out)
    # one row per candidate, or (a family with a free option: the extractive vote) per candidate and reading
    readings = len(compiled.meta["readings"]) or 1
    assert compiled.meta["task"] == dataset and compiled.meta["candidates"] == 3
    assert 3 <= len(compiled.table) <= 3 * readings and (readings == 1) == (dataset == "qrecc" or program != "dsp")
    # QReCC holds whole conversations out, so its validation part is the first conversations reaching 10 turns.
    sizes = {row["n"] for row in compiled.table}
    assert len(sizes) == 1 and (sizes == {10} or dataset == "qrecc" and min(sizes) > 10), compiled.table
    assert all(row["errors"] == 0 for row in compiled.table), compiled.table
    capsys.readouterr()
    assert main(["run", program, "--dataset", dataset, "--n", "2", "--compiled", str(out),
                 "--out", str(tmp_path / "runs")]) == 0
    assert "2 examples" in capsys.readouterr().out


def _passages(path: Path, answers: bool) -> Path:
    """A passages file: each q{i} has a passage, holding its answer only in the "good" corpus."""
    import json

    with path.open("w") as handle:
        for i in range(100):
            text = f"the answer to q{i} is a{i}" if answers else f"nobody knows what q{i} is"
            handle.write(json.dumps({"id": str(i), "title": f"Q{i}", "text": text}) + "\n")
    return path


def read_respond(prompt: str, request: dict) -> list[str]:
    """A reader that answers only from a context holding the asked question's answer."""
    import re

    number = re.findall(r"what is q(\d+)\?", prompt)[-1]
    return [f" a{number}" if f"the answer to q{number} is a{number}" in prompt else " unknown"]


def test_compile_chooses_the_retriever_that_finds_the_answers(tmp_path):
    """Retrievers are a dimension of the search: the compiled program keeps the one chosen (saved by its spec)."""
    from programs.open_qa import retrieve_then_read

    good = dsp.rm_from_spec(f"bm25:{_passages(tmp_path / 'good.jsonl', True)}")
    bad = dsp.rm_from_spec(f"bm25:{_passages(tmp_path / 'bad.jsonl', False)}")
    train = [dsp.Example(question=f"what is q{i}?", answer=[f"a{i}"]) for i in range(40)]
    space = Space(demos=DemoSpace(kinds=("raw",), ks=(2,), selects=("random",), seeds=1), rms=["good"])
    with dsp.settings.context(lm=ScriptedLM(read_respond), rm=bad):
        compiled = dsp.compile(retrieve_then_read, train, dsp.EM, dsp.CompileConfig(space=space, candidates=4, val=10,
                               progress=False), rms={"good": good})
        # The program as written is searched with the other retriever too (its own demos, the good RM).
        assert sorted(row["key"] for row in compiled.table) == ["baseline", "baseline-rm_good", "raw2-random0",
                                                                 "raw2-random0-rm_good"]
        assert compiled.candidate["rm"] == "good" and compiled.rm_spec == good.spec
        assert {row["key"]: row["score"] for row in compiled.table}["raw2-random0"] == 0.0
        loaded = dsp.load_compiled(compiled.save(tmp_path / "c.json"))
        assert loaded.rm_spec == good.spec and loaded.digest() == compiled.digest()
        assert loaded("what is q77?").answer == "a77"  # the current RM (bad) is not the one it uses
        assert dsp.retrieve("what is q77?", k=1)[0].endswith("nobody knows what q77 is")
    unsaved = dsp.Compiled(retrieve_then_read, {}, [], rm=dsp.BM25(["A | text"]))
    with pytest.raises(ValueError, match="has no spec to save it by"):
        unsaved.save(tmp_path / "x.json")


def test_dsp_compile_searches_other_retrievers_and_run_uses_the_chosen_one(data_dir, tmp_path, monkeypatch, capsys):
    from programs.cli import main

    _patch_cli_lm(monkeypatch, "scripted-rms")
    other = _passages(tmp_path / "good.jsonl", True)
    out = tmp_path / "nq-rtr.json"
    assert main(["compile", "retrieve_then_read", "--dataset", "nq", "--candidates", "5", "--val", "10",
                 "--bootstrap", "0", "--rms", f"bm25:{other}", "--out", str(out), "--no-racing"]) == 0
    compiled = dsp.load_compiled(out)
    assert any(row["key"].endswith("-rm_bm25") for row in compiled.table)
    assert any(not row["key"].endswith("-rm_bm25") for row in compiled.table[1:])
    from programs.cli.compile import _named_rms
    _passages(tmp_path / "bad.jsonl", False)
    named = _named_rms([f"bm25:{other}", f"hybrid:{other}", f"bm25:{tmp_path / 'bad.jsonl'}"])
    assert list(named) == ["bm25", "hybrid", "bm25_2"] and named["bm25_2"].endswith("bad.jsonl")
    # A compiled program that chose another retriever runs with it (and says so in its results file).
    compiled.rm_spec = f"bm25:{other}"
    compiled.save(out)
    runs = tmp_path / "runs"
    assert main(["run", "retrieve_then_read", "--dataset", "nq", "--n", "2", "--compiled", str(out),
                 "--out", str(runs)]) == 0
    identity, rows = dsp.evaluation.read_run(next(runs.glob("nq-retrieve_then_read-compiled_*.jsonl")))
    assert identity["rm"] == dsp.evaluation.describe(dsp.rm_from_spec(f"bm25:{other}"))
    assert all(passage.startswith("Q") for row in rows for passage in row["context"])
    capsys.readouterr()
    for argv, message in [(["run", "retrieve_then_read", "--dataset", "nq", "--n", "2", "--compiled", str(out),
                            "--rm", f"bm25:{other}"], "chose its retriever"),
                          (["compile", "retrieve_then_read", "--dataset", "nq", "--out", str(tmp_path / "y.json"),
                            "--rms", "nosuch:x"], "--rms: ")]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


def test_dsp_compile_search_names_the_options_to_search(data_dir, tmp_path, monkeypatch, capsys):
    """--search replaces the program's SEARCH, typed by its signature; a preset's value stays the baseline's."""
    from programs.cli import main

    _patch_cli_lm(monkeypatch, "scripted-search")
    out = tmp_path / "nq-dsp.json"
    assert main(["compile", "dsp", "--dataset", "nq", "--preset", "small", "--search", "k=1,2", "--candidates", "6",
                 "--val", "10", "--bootstrap", "0", "--out", str(out), "--no-racing"]) == 0
    compiled = dsp.load_compiled(out)
    searched = [row["options"] for row in compiled.table if row["key"] != "baseline"]
    assert {tuple(sorted(o)) for o in searched} == {("k",)} and {o["k"] for o in searched} == {1, 2}
    assert compiled.options["n"] == 5 and compiled.options["k"] in (1, 2)  # the preset, and a searched k
    capsys.readouterr()
    base = ["compile", "dsp", "--dataset", "nq", "--out", str(tmp_path / "x.json")]
    for argv, message in [(["--search", "k=1,two"], "--search k: takes an integer, got 'two'"),
                          (["--search", "depth=1,2"], "--search: program 'dsp' has no option 'depth'"),
                          (["--search", "k"], "--search takes key=value,value"),
                          (["--search", "k=1,1"], "a value is given twice"),
                          (["--search", "k=1,2", "--set", "k=3"], "--set and --search both name k"),
                          (["--preset", "small", "--search", "order=relevance,lost_in_the_middle"],
                           "--search order: has no effect with k=1")]:
        assert main([*base, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


def _conversations(count: int = 12) -> list[dsp.Example]:
    """Turns 1-3 of `count` conversations, in order, each answered by its question's number."""
    return [dsp.Example(Conversation_no=c, Turn_no=t, question=f"what is q{10 * c + t}?", answer=[f"a{10 * c + t}"])
            for c in range(1, count + 1) for t in (1, 2, 3)]


def _turn_reader(question, history, train, demos=None):
    """A conversational program without an LM: right on every turn, whatever its history."""
    return dsp.Example(answer="a" + question.split("q")[1].rstrip("?"))


def test_a_conversational_compile_holds_whole_conversations_out():
    """QReCC's seed-1 compile held out turn (13, 2) without (13, 1), and every candidate failed on it: with
    the family's `group`, validation and pool never share a conversation, so each turn's history is there."""
    from programs.conversational import by_turns

    turns = _conversations()
    space = Space(demos=DemoSpace(kinds=("raw",), ks=(1,), selects=("random",), seeds=1))
    split_by_turn = [seed for seed in range(5)
                     if {e.Conversation_no for e in split_train(turns, 10, seed)[0]}
                     & {e.Conversation_no for e in split_train(turns, 10, seed)[1]}]
    assert split_by_turn, "some seed must cut a conversation, or this test shows nothing"
    seed = split_by_turn[0]
    config = dsp.CompileConfig(space=space, candidates=2, val=10, racing=False, seed=seed, progress=False)
    fields = dsp.Fields(inputs=("Conversation_no", "Turn_no", "question"))
    with dsp.settings.context(lm=ScriptedLM(wrong_respond)):
        with pytest.raises(dsp.compiling.CandidateFailed, match="needs turns"):
            dsp.compile(_turn_reader, turns, dsp.EM, config, fields=fields, wrap=by_turns)
        grouped = dataclasses.replace(config, group="Conversation_no")
        compiled = dsp.compile(_turn_reader, turns, dsp.EM, grouped, fields=fields, wrap=by_turns)
    pool, heldout = split_train(turns, 10, seed, "Conversation_no")
    assert not {e.Conversation_no for e in pool} & {e.Conversation_no for e in heldout}
    assert len(heldout) == 12 and all(row["errors"] == 0 and row["score"] == 100.0 for row in compiled.table)
