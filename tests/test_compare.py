"""`dsp.compare_runs` / `dsp compare`: results files side by side, paired on the examples they share."""

import json
import re

import pytest

import dsp
from dsp.evaluation.compare import compare_runs, format_comparison
from dsp.stats import mcnemar_exact

EXAMPLES = [dsp.Example(question=f"q{i}", answer=f"a{i}") for i in range(20)]


def _answers(right: set[int], partial: set[int] = frozenset()):
    def program(question: str) -> str:
        i = int(question[1:])
        return f"a{i}" if i in right else f"a{i} and more" if i in partial else "wrong"
    return program


def _run(path, right, seed=0, metric=dsp.EM, partial=frozenset(), **identity):
    dsp.evaluate(_answers(right, partial), EXAMPLES, metric, out=path, run={"task": "toy", **identity}, seed=seed,
                 progress=False, display=False)
    return path


def test_scores_and_paired_counts_come_from_the_rows(tmp_path):
    a = _run(tmp_path / "a.jsonl", set(range(0, 12)), program_name="a")          # 12 right
    b = _run(tmp_path / "b.jsonl", set(range(8, 17)), program_name="b")          # 9 right
    table = compare_runs([a, b])
    first, second = table.runs
    assert (first.n, first.score, second.score) == (20, 60.0, 45.0)
    assert first.paired is None
    # Right only in a: 0..7 (8); only in b: 12..16 (5).
    assert (second.paired["a_only"], second.paired["b_only"]) == (8, 5)
    assert second.paired["p"] == pytest.approx(mcnemar_exact(8, 5))
    low, high = dsp.stats.wilson_interval(12, 20)
    assert (first.low, first.high) == pytest.approx((100 * low, 100 * high))
    assert table.binary and not table.groups
    text = format_comparison(table)
    assert "a  " in text and "8 / 5" in text and "p: exact McNemar test on the 20 examples" in text
    assert format_comparison(table, markdown=True).splitlines()[1] == "|---|---|---|---|---|---|"


def test_the_first_n_examples_and_the_shared_ones(tmp_path):
    a = _run(tmp_path / "a.jsonl", {0, 1, 2})
    short = tmp_path / "short.jsonl"
    dsp.evaluate(_answers({0, 5}), EXAMPLES[:10], dsp.EM, out=short, run={"task": "toy"}, seed=0, progress=False,
                 display=False)
    table = compare_runs([a, short], n=10)
    assert [r.n for r in table.runs] == [10, 10] and [r.score for r in table.runs] == [30.0, 20.0]
    with pytest.raises(dsp.IncompleteRun, match=r"short.jsonl: has 10 of the first 20 examples .*index 10"):
        compare_runs([a, short], n=20)
    shared = compare_runs([a, short])  # no n: the examples every file has, said in a note
    assert shared.n == 10 and any("a: 20 examples, compared on the 10 every run has" in n for n in shared.notes)
    # skip: examples 2..9 only (a is right on 2; short on 5), said in a note
    rest = compare_runs([a, short], n=10, skip=2)
    assert [r.n for r in rest.runs] == [8, 8] and [r.score for r in rest.runs] == [12.5, 12.5]
    assert rest.notes[0] == "the first 2 examples left out"
    with pytest.raises(dsp.IncompleteRun, match=r"short.jsonl: has 5 of examples 5 to 14 .*index 10"):
        compare_runs([a, short], n=15, skip=5)
    with pytest.raises(ValueError, match="skip must be a non-negative integer below n"):
        compare_runs([a, short], n=10, skip=10)


def test_runs_of_another_metric_or_task_are_refused(tmp_path):
    a = _run(tmp_path / "a.jsonl", {0})
    f1 = _run(tmp_path / "f1.jsonl", {0}, metric=dsp.F1)
    other = tmp_path / "other.jsonl"
    dsp.evaluate(_answers({0}), EXAMPLES, dsp.EM, out=other, run={"task": "another"}, seed=0, progress=False,
                 display=False)
    with pytest.raises(dsp.RunMismatch, match=r"f1.jsonl and .*a.jsonl were not scored alike \(metric:"):
        compare_runs([a, f1])
    with pytest.raises(dsp.RunMismatch, match=r"task: \"toy\" -> \"another\""):
        compare_runs([a, other])
    headerless = tmp_path / "plain.jsonl"
    headerless.write_text(json.dumps({"index": 0, "score": 1.0}) + "\n")
    with pytest.raises(dsp.RunMismatch, match="plain.jsonl: not a results file"):
        compare_runs([a, headerless])
    with pytest.raises(FileNotFoundError, match="none.jsonl"):
        compare_runs([a, tmp_path / "none.jsonl"])


def test_runs_that_differ_only_by_seed_are_one_setting(tmp_path):
    seeds = [_run(tmp_path / f"rtr-seed{s}.jsonl", set(range(s + 2)), seed=s, program_name="rtr") for s in range(3)]
    other = _run(tmp_path / "rtr-k3-seed0.jsonl", set(range(5)), seed=0, program_name="rtr", options={"k": 3})
    table = compare_runs([other, *seeds])
    assert len(table.groups) == 1
    group = table.groups[0]
    assert group.members == ("rtr-seed0", "rtr-seed1", "rtr-seed2") and group.seeds == (0, 1, 2)
    assert group.mean == pytest.approx(15.0) and group.sd == pytest.approx(5.0)
    assert (group.best, group.best_score) == ("rtr-seed2", 20.0)
    assert "rtr (3 seeds): mean 15.0, sd 5.0, best 20.0 (rtr-seed2)" in format_comparison(table)


def test_files_of_one_identity_and_one_seed_are_named_repeats_not_seeds(tmp_path):
    # One compiled program chosen by several compile seeds, each file run at evaluation seed 0.
    runs = [_run(tmp_path / f"compiled-c{c}-seed0.jsonl", {0, 1}, seed=0, program_name="dsp") for c in range(3)]
    table = compare_runs(runs)
    assert [group.seeds for group in table.groups] == [(0, 0, 0)]
    assert "compiled (3 runs, seed 0): mean" in format_comparison(table)


def test_groups_that_share_a_name_list_their_members(tmp_path):
    # One compiler's seeds chose two programs; another compiler's seeds chose the second one as well.
    first = [_run(tmp_path / f"c-small-seed{c}-seed0.jsonl", {0, 1}, seed=0, program_name="dsp",
                  options={"extractive": True}) for c in range(2)]
    second = [_run(tmp_path / name, {0}, seed=0, program_name="dsp")
              for name in ("c-small-seed2-seed0.jsonl", "c-small-held-seed0-seed0.jsonl", "c-small-held-seed1-seed0.jsonl")]
    text = format_comparison(compare_runs([*first, *second]))
    assert "c-small (2 runs, seed 0: c-small-{seed0-seed0, seed1-seed0}): mean 10.0" in text
    assert "c-small (3 runs, seed 0: c-small-{seed2-seed0, held-seed0-seed0, held-seed1-seed0}): mean 5.0" in text


def test_repeats_over_several_seeds_list_the_seeds_in_numeric_order(tmp_path):
    runs = [_run(tmp_path / f"rtr-r{i}-seed{s}.jsonl", {0, 1}, seed=s, program_name="rtr")
            for i, s in enumerate([10, 2, 2])]
    table = compare_runs(runs)
    assert "rtr (3 runs, seeds 2, 10): mean" in format_comparison(table)  # not "rtr-r": a name cut mid-word


def test_a_group_is_named_by_whole_words_of_its_members(tmp_path):
    # Two compilers' seeds chose one program: the common prefix "c-small-s" is cut back to "c-small".
    runs = [_run(tmp_path / name, {0, 1}, seed=0, program_name="dsp")
            for name in ("c-small-scored-seed0-seed0.jsonl", "c-small-seed0-seed0.jsonl", "c-small-seed1-seed0.jsonl")]
    text = format_comparison(compare_runs(runs))
    assert "c-small (3 runs, seed 0): mean 10.0" in text and "c-small-s " not in text


def test_a_retried_example_counts_once_with_its_finished_row(tmp_path):
    path = _run(tmp_path / "a.jsonl", {0, 1})
    lines = path.read_text().splitlines()
    # An earlier attempt of example 1 that failed, before the row that finished.
    failed = {**json.loads(lines[2]), "score": 0.0, "error": "TimeoutError: slow", "prediction": None}
    path.write_text("\n".join([lines[0], json.dumps(failed), *lines[1:]]) + "\n")
    run = compare_runs([path]).runs[0]
    assert (run.n, run.score, run.errors) == (20, 10.0, 0)


def test_graded_scores_get_the_sign_test(tmp_path):
    a = _run(tmp_path / "a.jsonl", {0, 1}, metric=dsp.F1, partial={2})   # example 2: F1 0.5
    b = _run(tmp_path / "b.jsonl", {1, 2, 3}, metric=dsp.F1)
    table = compare_runs([a, b])
    assert not table.binary and table.runs[0].score == pytest.approx(100 * 2.5 / 20)
    # Higher in a: example 0; in b: 2 (1.0 > 0.5) and 3; example 1 is a tie.
    assert (table.runs[1].paired["a_only"], table.runs[1].paired["b_only"]) == (1, 2)
    assert "p: exact sign test on the 20 examples" in format_comparison(table)


def test_the_cli_prints_the_table_and_refuses_bad_files_in_one_line(tmp_path, capsys):
    from programs.cli import main

    a = _run(tmp_path / "a.jsonl", set(range(10)))
    b = _run(tmp_path / "b.jsonl", set(range(5)))
    assert main(["compare", str(a), str(b), "--n", "20"]) == 0
    out = capsys.readouterr().out
    assert "a    20   50.0" in out and "5 / 0" in out
    assert main(["compare", str(a), str(b), "--n", "30"]) == 2
    assert "b.jsonl: has 20 of the first 30" in capsys.readouterr().err  # every incomplete file is named
    for argv, message in [([str(a), str(b), "--n", "30"], "b.jsonl: has 20 of the first 30"),
                          ([str(a), str(tmp_path / "none.jsonl")], "none.jsonl: no such results file"),
                          ([str(a), str(tmp_path)], "a directory; give its results files"),
                          ([str(a), "--n", "0"], "--n"),
                          ([str(a), "--n", "5", "--skip", "5"], "--skip 5 leaves none of the first --n 5"),
                          ([str(a), "--skip", "-1"], "--skip")]:
        assert main(["compare", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


def test_an_option_added_at_its_none_or_off_default_resumes_an_older_file(tmp_path):
    """A file written before a program gained an option (demos=None, extractive=False) is the same run,
    not another one; the same option switched on, or a new numeric option at 0, is another run."""
    path = tmp_path / "old.jsonl"
    _run(path, {0, 1}, options={"k": 1})
    header = json.loads(path.read_text().splitlines()[0])
    assert "demos" not in header["dsp_run"]["identity"]["options"]
    result = dsp.evaluate(_answers({0, 1}), EXAMPLES, dsp.EM, out=path,
                          run={"task": "toy", "options": {"k": 1, "demos": None, "extractive": False}}, seed=0,
                          progress=False, display=False)
    assert result.score == 10.0
    for added, shown in [({"extractive": True}, "options.extractive: (unset) -> true"),
                         ({"shots": 0}, "options.shots: (unset) -> 0")]:
        with pytest.raises(dsp.RunMismatch, match=re.escape(shown)):
            dsp.evaluate(_answers({0, 1}), EXAMPLES, dsp.EM, out=path, run={"task": "toy", "options": {"k": 1, **added}},
                         seed=0, progress=False, display=False)
    with pytest.raises(dsp.RunMismatch, match=r"options.k: 1 -> 2"):
        dsp.evaluate(_answers({0, 1}), EXAMPLES, dsp.EM, out=path, run={"task": "toy", "options": {"k": 2}},
                     seed=0, progress=False, display=False)
