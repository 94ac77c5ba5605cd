"""The declared test splits (issue 28): their sizes and ids, disjoint from the training pool, from the dev
split and from every question of the published dev runs in results/; a default dev run unchanged (its
questions and its results file's identity); `--split test` refused where a task declares none and by
`dsp compile`; a test run in a file of its own whose identity names the split. On the real data."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path

import pytest
from helpers import ScriptedLM

import dsp
from dsp import datasets
from dsp.evaluation import identity_diff, read_run
from programs.cli import build_parser, main
from programs.cli.run import run_examples
from programs.tasks import TASKS, Task

RESULTS = Path(__file__).resolve().parents[1] / "results"
WITH_TEST = [name for name, task in TASKS.items() if "test" in task.splits]


@pytest.fixture(autouse=True)
def _data(data_dir):
    """Every test here reads the real data (skipped only when DSP_DATA_DIR is unset)."""


def _ids(examples):
    return [e.id for e in examples]


@functools.lru_cache(maxsize=None)
def _cached(name: str) -> Task:
    """TASKS[name] reading its files once (SQuAD's takes a second to parse); splits are made as ever."""
    return dataclasses.replace(TASKS[name], source=functools.lru_cache(maxsize=None)(TASKS[name].source))


def _load(name: str, n: int | None = None, dev_seed: int = 0, split: str = "dev") -> tuple[list, list]:
    return _cached(name).load(n, dev_seed, split)


def _published(task: str) -> dict[Path, list[str]]:
    """{results file: its rows' ids in index order} of the dev runs of `task` kept in results/."""
    out = {}
    for path in sorted(RESULTS.glob(f"{task}-*.jsonl")):
        identity, rows = read_run(path)
        if identity and identity.get("task") == task and identity.get("split", "dev") == "dev":
            out[path] = [row["id"] for row in sorted(rows, key=lambda r: r["index"])]
    return out


def test_the_declared_splits_are_nq_and_squad():
    assert WITH_TEST == ["nq", "squad"]
    assert {name: TASKS[name].splits for name in TASKS} == {
        "nq": ("dev", "test"), "nq-open": ("dev",), "squad": ("dev", "test"), "hotpotqa": ("dev",), "qrecc": ("dev",)}


def test_nq_test_is_lines_1000_to_1999_and_dev_the_first_1000():
    pool, test = _load("nq", split="test")
    assert _ids(test) == [f"litm-oracle-{i}" for i in range(1000, 2000)]
    _, dev = _load("nq")
    assert _ids(dev) == [f"litm-oracle-{i}" for i in range(1000)]
    assert _ids(_load("nq", 300)[1]) == _ids(dev)[:300]  # the first n, as before
    assert _ids(pool)[0] == "litm-oracle-2000" and len(pool) == 655
    assert _ids(_load("nq", 2, split="test")[1]) == ["litm-oracle-1000", "litm-oracle-1001"]


def test_nq_dev_refuses_to_read_into_the_test_split():
    with pytest.raises(ValueError, match=r"dataset nq: its dev split has 1000 questions, asked for 1001 "
                                         r"\(the 1000 after them are its test split\)"):
        _load("nq", 1001)
    with pytest.raises(ValueError, match="its test split has 1000 questions, asked for 1001"):
        _load("nq", 1001, split="test")


@pytest.mark.parametrize("name", WITH_TEST)
def test_sizes_and_pairwise_disjointness_of_pool_dev_and_test(name):
    pool, test = _load(name, split="test")
    _, dev = _load(name, 1000)
    _, every_dev = _load(name)  # with n None: all the dev questions, never a test one
    assert len(test) == 1000 and len(dev) == 1000
    pool_ids, dev_ids, test_ids = set(_ids(pool)), set(_ids(dev)), set(_ids(test))
    assert len(test_ids) == 1000 and len(dev_ids) == 1000  # ids are unique
    assert not pool_ids & dev_ids and not pool_ids & test_ids and not dev_ids & test_ids
    assert dev_ids <= set(_ids(every_dev)) and not set(_ids(every_dev)) & (test_ids | pool_ids)
    assert set(_ids(_load(name, 3, split="test")[1])) <= test_ids


def test_squad_dev_with_any_seed_never_draws_a_test_question():
    name = "squad"
    task = TASKS[name]
    test_ids = set(_ids(_load(name, split="test")[1]))
    for dev_seed, n in ((0, 1000), (0, 1001), (0, 5000), (1, 1000), (7, 300), (3, None)):
        _, dev = _load(name, n, dev_seed)
        assert not set(_ids(dev)) & test_ids, (dev_seed, n)
    # The dev-seed 0 draws of n <= 1,000 are those of before the test split: any n, seed 0, from the dev list.
    pool, full = datasets.split_pool(datasets.load_squad(), 1000, seed=0)
    for n in (1, 2, 17, 300, 999, 1000):
        assert _ids(_load(name, n, 0)[1]) == _ids(datasets.downsample(full, n, 0)), n
    kept, _ = task.test.indices(len(full), "sample")
    assert all(set(datasets.sample_indices(len(full), n, 0)) <= set(kept) for n in range(1, 1001))


def test_squad_test_is_drawn_outside_the_pool_and_the_published_dev_sample():
    name = "squad"
    task = TASKS[name]
    pool, full = datasets.split_pool(datasets.load_squad(), 1000, seed=0)
    published = set(_ids(datasets.downsample(full, 1000, 0)))
    test = _load(name, split="test")[1]
    assert not set(_ids(test)) & (published | set(_ids(pool)))
    assert task.test.seed == 0
    assert task.test.describe("sample") == {"order": "sample", "dev": 1000, "size": 1000, "seed": 0,
                                            "evaluated_in": "draw order"}


def test_squad_test_extends_by_its_draw_order_and_its_first_500_are_the_first_runs_questions():
    """Any n is a prefix of a larger n (a run over 1,000 resumes one over 500), and the first 500 are the
    questions the first test runs answered (`results/peer/gemma/squad/`, 2026-12-04, in list order then:
    their ids' digest is pinned below, so the files rerun in the draw's order cannot make this pass)."""
    test = _ids(_load("squad", split="test")[1])
    for n in (1, 10, 86, 500, 999):
        assert _ids(_load("squad", n, split="test")[1]) == test[:n], n
    _, full = datasets.split_pool(datasets.load_squad(), 1000, seed=0)
    assert test != [e.id for e in full if e.id in set(test)]  # not in list order
    first = RESULTS / "peer" / "gemma" / "squad" / "squad-test-retrieve_then_read-seed0.jsonl"
    identity, rows = read_run(first)
    assert identity["split"] == "test" and len(rows) >= 500
    assert {row["id"] for row in rows if row["index"] < 500} == set(test[:500])
    assert hashlib.sha256("\n".join(sorted(test[:500])).encode()).hexdigest()[:16] == "661190e04819f907"


@pytest.mark.parametrize("name", WITH_TEST)
def test_the_test_split_is_deterministic(name):
    first = _ids(_load(name, split="test")[1])
    assert _ids(TASKS[name].load(split="test")[1]) == first  # loaded afresh, not the cached lists
    assert _ids(TASKS[name].load(10, split="test")[1]) == _ids(_load(name, 10, split="test")[1])
    digest = hashlib.sha256("\n".join(first).encode()).hexdigest()[:16]
    # Pinned: a changed definition (seed, size, source) must be a decision, never an accident.
    assert digest == {"nq": NQ_TEST_DIGEST, "squad": SQUAD_TEST_DIGEST}[name]


NQ_TEST_DIGEST = hashlib.sha256("\n".join(f"litm-oracle-{i}" for i in range(1000, 2000)).encode()).hexdigest()[:16]
# In its draw's order since 2026-12-04 (the same 1,000 questions in list order were "f05979eb1f076b7f").
SQUAD_TEST_DIGEST = "1778a9d6fb21604c"


@pytest.mark.parametrize("name", WITH_TEST)
def test_no_question_of_a_published_dev_run_is_in_the_test_split(name):
    test_ids = set(_ids(_load(name, split="test")[1]))
    for path, ids in _published(name).items():
        assert ids and not set(ids) & test_ids, path


@pytest.mark.parametrize("name", ["squad", "hotpotqa"])
def test_the_published_dev_seed_0_questions_are_still_the_dev_ones(name):
    runs = _published(name)
    assert runs
    for path, ids in runs.items():
        assert _ids(_load(name, len(ids), 0)[1]) == ids, path


def test_a_default_dev_run_has_the_identity_of_the_published_files():
    """The keys `dsp run` writes about which questions ran: a default dev run's equal the header's, so
    results/ still resumes (and `dsp compare` still pairs its files)."""
    identity, _ = read_run(RESULTS / "squad-vanilla-seed0.jsonl")
    args = build_parser().parse_args(["run", "vanilla", "--dataset", "squad", "--n", "1000"])
    pool, dev, entries = run_examples(TASKS["squad"], args)
    assert entries == {"dev": identity["dev"]} == {"dev": {"order": "sample", "seed": 0}}
    assert "split" not in identity and identity_diff(identity, {**identity, **entries}) == []
    header = json.loads((RESULTS / "squad-vanilla-seed0.jsonl").read_text().split("\n", 1)[0])
    assert header["dsp_run"]["identity"]["task"] == "squad" and len(dev) == 1000


def _quiet_one_line(argv, capsys, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert message in err and "\n" not in err and "Traceback" not in captured.err + captured.out, err
    assert err.startswith(f"dsp {argv[0]}: error: ")



REFUSED = [
    (["run", "vanilla", "--dataset", "qrecc", "--split", "test"],
     "--split test: dataset qrecc declares no test split: its 36 turns are its 16 dev turns"),
    (["run", "vanilla", "--dataset", "nq-open", "--split", "test"],
     "--split test: dataset nq-open declares no test split: its questions are NQ-open dev less nq's test questions"),
    (["run", "vanilla", "--dataset", "hotpotqa", "--split", "test"],
     "--split test: dataset hotpotqa declares no test split: the mirror's 100 distractor-setting questions"),
    (["run", "vanilla", "--dataset", "nq", "--split", "test", "--dev-seed", "0"],
     "--dev-seed draws dev questions; the test split of nq is fixed: drop --dev-seed"),
    (["run", "vanilla", "--dataset", "nq", "--n", "1001"],
     "--n 1001: dataset nq: its dev split has 1000 questions, asked for 1001 (the 1000 after them are its test"),
    (["run", "vanilla", "--dataset", "nq", "--split", "train"], "argument --split: invalid choice: 'train'"),
    (["compile", "vanilla", "--dataset", "nq", "--split", "test", "--out", "x.json"],
     "--split test: dsp compile reads only the task's training pool, never a dev or test question; test a "
     "compiled program with dsp run PROGRAM --compiled FILE.json --split test"),
]


@pytest.mark.parametrize("argv, message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_split_refusals_are_one_line_and_exit_2_before_any_model_loads(argv, message, no_model, capsys):
    _quiet_one_line(argv, capsys, message)


def _scripted(monkeypatch):
    def scripted(spec=None):
        lm = ScriptedLM(lambda prompt, request: [" Paris"] * int(request.get("n") or 1), model="scripted-splits")
        lm.spec = "scripted"
        return lm

    monkeypatch.setattr(dsp, "lm_from_spec", scripted)


def test_a_test_run_has_its_own_file_and_names_the_split(tmp_path, monkeypatch, capsys):
    _scripted(monkeypatch)
    passages = tmp_path / "passages.jsonl"  # vanilla retrieves nothing: a tiny corpus spares building BM25
    passages.write_text(json.dumps({"id": "a", "title": "Paris", "text": "Paris is the capital of France."}) + "\n")
    out = tmp_path / "runs"
    common = ["run", "vanilla", "--dataset", "nq", "--n", "2", "--rm", f"bm25:{passages}", "--out", str(out)]
    assert main([*common, "--split", "test"]) == 0
    assert "== vanilla on nq-test: 2 examples" in capsys.readouterr().out
    identity, rows = read_run(out / "nq-test-vanilla-seed0.jsonl")
    assert identity["split"] == "test" and identity["test"] == {"order": "head", "dev": 1000, "size": 1000}
    assert "dev" not in identity and identity["task"] == "nq"
    assert sorted(row["id"] for row in rows) == ["litm-oracle-1000", "litm-oracle-1001"]
    assert main(common) == 0  # the dev run: its own file, as named before test splits existed
    capsys.readouterr()
    identity, rows = read_run(out / "nq-vanilla-seed0.jsonl")
    assert "split" not in identity and identity["dev"] == {"order": "head", "seed": 0}
    assert sorted(row["id"] for row in rows) == ["litm-oracle-0", "litm-oracle-1"]
    assert sorted(p.name for p in out.glob("*.jsonl")) == ["nq-test-vanilla-seed0.jsonl", "nq-vanilla-seed0.jsonl"]
    assert main([*common, "--split", "test"]) == 0  # the same command resumes the test file
    assert "resumed 2 rows from" in capsys.readouterr().out


def test_a_compiled_program_is_tested_with_run_compiled_split_test(tmp_path, monkeypatch, capsys):
    from programs import open_qa

    _scripted(monkeypatch)
    dsp.register_program(open_qa.dsp_program)  # the program the file names (registering twice is harmless)
    compiled = RESULTS / "compiled" / "squad-dsp-small2.json"
    out = tmp_path / "runs"
    assert main(["run", "dsp", "--dataset", "squad", "--compiled", str(compiled), "--split", "test", "--n", "2",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    identity, rows = read_run(out / "squad-test-dsp-compiled_squad-dsp-small2-seed0.jsonl")
    assert identity["split"] == "test" and "compiled" in identity and len(rows) == 2
    test_ids = set(_ids(_load("squad", split="test")[1]))
    assert {row["id"] for row in rows} <= test_ids


def test_nq_open_never_holds_a_question_of_nq_s_test_split(data_dir):
    """NQ's test questions are NQ-open dev questions: nq-open leaves them out of its pool and its dev list,
    so a compile or a run on nq-open never sees one."""
    _, test = TASKS["nq"].load(split="test")
    held = {dsp.normalize_text(q.question) for q in test}
    pool, dev = TASKS["nq-open"].load()
    assert len(pool) == 500 and len(dev) > 2000
    assert not held & {dsp.normalize_text(q.question) for q in [*pool, *dev]}
    # before, 869 of them were in its dev list and 131 in its pool: the full NQ-open dev holds all 1,000
    assert len(held & {dsp.normalize_text(q.question) for q in dsp.datasets.load_nq_open()}) == 1000
