"""Issue 29, items 20, 22 and 23: program options from the command line.

- 20: option values are checked against the ranges each family declares (`BOUNDS`, beside PROGRAMS,
  PRESETS, SEARCH and MOOT) at parse time, in `dsp run`, `ask` and `compile` (--set, --preset, --search):
  one line, exit status 2, before any model loads. `dsp ask "q" --set k=-1` used to load the model and
  end in a traceback; `dsp run ... --set k=-1` started a run that failed every example.
- 22: an option set to its default (`--set k=1`) is the same run as leaving it out: the same file and the
  same identity, so it resumes, and the published results/ files still resume.
- 23: a results file's name never makes two settings look alike (`--set k=-1` was named `k_1`).
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import typing
from pathlib import Path

import pytest
from slow_lm_server import SlowLMServer

import dsp
from dsp.evaluation import identity_diff, read_run, run_identity
from programs import conversational, multihop, open_qa
from programs.cli import build_parser, main
from programs.cli.options import parse_set
from programs.cli.run import (
    FIXED, _bound, _train, run_examples, effective_options, resolve_program, results_name, run_entries,
)
from programs.tasks import FAMILIES, TASKS

__all__: list[str] = []

RESULTS = Path(__file__).resolve().parents[1] / "results"
MODULES = {"open_qa": open_qa, "multihop": multihop, "conversational": conversational}



# -- item 20: ranges, declared per family, checked before any model loads --------------------------------

OUT_OF_RANGE = [
    (["ask", "q", "--set", "k=-1"], "--set k: must be at least 1, got -1"),
    (["ask", "q", "--set", "n=0"], "--set n: must be at least 1, got 0"),
    (["ask", "q", "--program", "retrieve_then_read", "--set", "k=0"], "--set k: must be at least 1, got 0"),
    (["run", "retrieve_then_read", "--set", "k=-1"], "--set k: must be at least 1, got -1"),
    (["run", "dsp", "--set", "n=0"], "--set n: must be at least 1, got 0"),
    (["run", "dsp", "--set", "temperature=-0.5"], "--set temperature: must be at least 0, got -0.5"),
    (["run", "dsp", "--set", "temperature=nan"], "--set temperature: takes a finite number, got 'nan'"),
    (["run", "dsp", "--set", "temperature=inf"], "--set temperature: takes a finite number, got 'inf'"),
    (["run", "dsp", "--set", "n_demos=-1"], "--set n_demos: must be at least 0, got -1"),
    (["run", "dsp", "--set", "demo_k=0"], "--set demo_k: must be at least 1, got 0"),
    (["run", "dsp", "--preset", "small", "--set", "n_raw=-2"], "--set n_raw: must be at least 0, got -2"),
    (["run", "vanilla", "--set", "n_demos=-3"], "--set n_demos: must be at least 0, got -3"),
    (["run", "self_ask", "--set", "k=0"], "--set k: must be at least 1, got 0"),
    (["run", "dsp", "--dataset", "hotpotqa", "--set", "hops=0"], "--set hops: must be at least 1, got 0"),
    (["run", "dsp", "--dataset", "hotpotqa", "--set", "n_queries=0"], "--set n_queries: must be at least 1, got 0"),
    (["run", "dsp", "--dataset", "qrecc", "--set", "k=0"], "--set k: must be at least 1, got 0"),
    (["run", "dsp", "--dataset", "qrecc", "--set", "temperature=-1"],
     "--set temperature: must be at least 0, got -1.0"),
    (["compile", "dsp", "--out", "x.json", "--set", "k=-1"], "--set k: must be at least 1, got -1"),
    (["compile", "dsp", "--out", "x.json", "--search", "k=0,1"], "--search k: must be at least 1, got 0"),
    (["compile", "dsp", "--out", "x.json", "--search", "temperature=0.3,-0.7"],
     "--search temperature: must be at least 0, got -0.7"),
    (["compile", "dsp", "--dataset", "hotpotqa", "--out", "x.json", "--search", "n_queries=0,3"],
     "--search n_queries: must be at least 1, got 0"),
]


@pytest.mark.parametrize("argv, message", OUT_OF_RANGE, ids=[" ".join(a) for a, _ in OUT_OF_RANGE])
def test_an_option_out_of_its_range_is_one_line_and_exit_2_before_any_model_loads(argv, message, no_model, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert message in err, err
    assert "\n" not in err and "Traceback" not in captured.err + captured.out
    assert err.startswith(f"dsp {argv[0]}: error: ")


def _numeric(program, name: str) -> bool:
    """Whether option `name` of `program` takes a number (int or float, not bool), as --set types it."""
    parameter = inspect.signature(program).parameters[name]
    hint = typing.get_type_hints(program).get(name)
    kind = type(parameter.default) if parameter.default not in (inspect.Parameter.empty, None) else hint
    return kind in (int, float)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_numeric_option_of_every_program_declares_its_range(family):
    module = MODULES[family]
    bounds = module.BOUNDS
    options = {name for program in module.PROGRAMS.values() for name in inspect.signature(program).parameters
               if name not in FIXED}
    numeric = {name for program in module.PROGRAMS.values() for name in inspect.signature(program).parameters
               if name not in FIXED and _numeric(program, name)}
    assert numeric - bounds.keys() == set(), f"{family}: numeric options with no declared range"
    assert bounds.keys() <= options, f"{family}: ranges declared for options no program has"
    for name, (least, greatest) in bounds.items():
        assert least is None or greatest is None or least <= greatest
    # Every value the family itself uses is in range: defaults, presets and searched values.
    for name, program in module.PROGRAMS.items():
        for option, parameter in inspect.signature(program).parameters.items():
            if option in bounds and parameter.default is not inspect.Parameter.empty:
                least, greatest = bounds[option]
                assert (least is None or parameter.default >= least) and \
                    (greatest is None or parameter.default <= greatest), (name, option)
    used = [(k, v) for preset in module.PRESETS.values() for k, v in preset.items()]
    used += [(k, v) for search in module.SEARCH.values() for k, values in search.items() for v in values]
    for option, value in used:
        if option in bounds and not isinstance(value, bool):
            least, greatest = bounds[option]
            assert (least is None or value >= least) and (greatest is None or value <= greatest), (option, value)


def test_values_at_the_edge_of_a_range_are_accepted():
    program, options = resolve_program(TASKS["nq"], "dsp", None, {"k": "1", "n": "1", "temperature": "0",
                                                                  "n_demos": "0", "n_raw": "0", "pool": "0"})
    assert options == {"k": 1, "n": 1, "temperature": 0.0, "n_demos": 0, "n_raw": 0, "pool": 0}
    for preset in open_qa.PRESETS:
        resolve_program(TASKS["nq"], "dsp", preset, {})
    for preset in multihop.PRESETS:
        resolve_program(TASKS["hotpotqa"], "dsp", preset, {})


# -- item 22: an option set to its default is the same run --------------------------------------------------

def _identity(argv: list[str], seed: int = 0) -> dict:
    """The identity `dsp run` gives the rows of `argv` (seed `seed`), without the LM and RM: what decides
    the rows besides the models, built by the code `cmd_run` runs."""
    args = build_parser().parse_args(argv)
    task = TASKS[args.dataset]
    program, options = resolve_program(task, args.program, args.preset, parse_set(args.set))
    pool, dev, examples = run_examples(task, args)
    bound = _bound(task, program, _train(pool, args.shots, seed), options, dev)
    with dsp.settings.context(lm=None, rm=None):
        identity = run_identity(bound, task.metric, fields=task.fields, seed=seed,
                                run=run_entries(task, args, program, options, examples))
    return {k: v for k, v in identity.items() if k not in ("lm", "rm")}


def _published(name: str) -> dict:
    identity, _ = read_run(RESULTS / name)
    return {k: v for k, v in identity.items() if k not in ("lm", "rm")}


@pytest.mark.parametrize("extra", [[], ["--set", "k=1"], ["--set", "k=1", "n_demos=5", "order=relevance"]],
                         ids=["as-published", "k-at-its-default", "every-option-at-its-default"])
def test_the_published_retrieve_then_read_file_is_the_same_run(extra, data_dir):
    argv = ["run", "retrieve_then_read", "--dataset", "squad", "--seed", "0", *extra]
    assert identity_diff(_published("squad-retrieve_then_read-seed0.jsonl"), _identity(argv)) == []
    program, options = resolve_program(TASKS["squad"], "retrieve_then_read", None,
                                       parse_set(build_parser().parse_args(argv).set))
    assert results_name(TASKS["squad"], "retrieve_then_read", None, program, options, 16, 0) == \
        "squad-retrieve_then_read-seed0.jsonl"


@pytest.mark.parametrize("extra", [[], ["--set", "k=1"], ["--set", "k=1", "temperature=0.3"]],
                         ids=["as-published", "k-at-the-presets-value", "two-at-the-presets-values"])
def test_the_published_preset_file_is_the_same_run(extra, data_dir):
    argv = ["run", "dsp", "--dataset", "squad", "--preset", "small", "--seed", "0", *extra]
    assert identity_diff(_published("squad-dsp-small-seed0.jsonl"), _identity(argv)) == []


def test_an_option_set_otherwise_is_another_run(data_dir):
    published = _published("squad-retrieve_then_read-seed0.jsonl")
    diff = identity_diff(published, _identity(["run", "retrieve_then_read", "--dataset", "squad", "--set", "k=3"]))
    assert diff == ["options.k: 1 -> 3", "program.keywords.k: (unset) -> 3"]
    # The preset's k set back to the program's default: another run than the preset's, named so.
    small = _published("squad-dsp-small-seed0.jsonl")
    diff = identity_diff(small, _identity(["run", "dsp", "--dataset", "squad", "--preset", "small", "--set", "k=7"]))
    assert diff == ["options.k: 1 -> 7", "program.keywords.k: 1 -> (unset)"]
    program, options = resolve_program(TASKS["squad"], "dsp", "small", {"k": "7"})
    assert results_name(TASKS["squad"], "dsp", "small", program, options, 16, 0) == "squad-dsp-small-k7-seed0.jsonl"


def test_set_k_1_resumes_the_file_of_the_run_without_it(data_dir, tmp_path, capsys):
    out = tmp_path / "runs"
    with SlowLMServer(delay=0.0) as server:
        base = ["run", "retrieve_then_read", "--dataset", "nq", "--n", "2", "--shots", "4", "--lm", server.spec,
                "--out", str(out)]
        assert main(base) == 0
        assert "'requests': 2" in capsys.readouterr().out
        assert main([*base, "--set", "k=1"]) == 0  # k=1 is the default: the same run, resumed
        again = capsys.readouterr()
        assert "resumed 2 rows from" in again.out and "'requests': 0" in again.out, again.err
        assert main([*base, "--set", "k=1", "n_demos=5", "demo_context=true"]) == 0
        assert "resumed 2 rows from" in capsys.readouterr().out
    assert [p.name for p in out.glob("*.jsonl")] == ["nq-retrieve_then_read-shots4-seed0.jsonl"]


# -- item 23: a name never makes two settings look alike ------------------------------------------------------

def _rtr(question, train, k: int = 1, order: str = "relevance", temperature: float = 0.0, note: str = "",
         demos: list | None = None):
    """A stand-in program with options of each kind the slug must keep apart."""


def _name(options: dict, program=_rtr) -> str:
    return results_name(TASKS["nq"], "rtr", None, program, options, 16, 0)


def test_settings_that_differ_only_in_sign_or_punctuation_get_distinct_names():
    settings = [
        {"k": -1}, {"k": 1 + 0}, {"k": 2}, {"note": "_1"}, {"k": -1, "note": "x"},
        {"temperature": -0.5}, {"temperature": 0.5}, {"temperature": 1e-05}, {"temperature": 1e5},
        {"note": "a b"}, {"note": "a/b"}, {"note": "a_b"}, {"note": "a-b"}, {"note": "a:b"}, {"note": "a b "},
        {"note": "x_k3"}, {"k": 3, "note": "x"}, {"note": "3"}, {"demos": 3}, {"demos": "3"}, {"demos": [3]},
        {"note": "é"}, {"note": "e"}, {"note": "ü"}, {"note": "x" * 80}, {"note": "x" * 79 + "y"},
        {"note": "/" * 80}, {"note": "\\" * 80}, {"note": "opts0123456789"},
    ]
    names = [_name(s) for s in settings]
    assert len(set(names)) == len(names), [n for n in names if names.count(n) > 1]
    for name in names:
        assert name.endswith("-seed0.jsonl") and "/" not in name and "\\" not in name and " " not in name
        assert len(name) < 100
    assert _name({"k": -1}) != "nq-rtr-k_1-seed0.jsonl"  # the name: another setting could have it


def test_names_that_lose_nothing_stay_as_they_were():
    # Existing files keep resuming: a plain setting is named as before, a long plain one by the same digest.
    assert _name({"k": 3}) == "nq-rtr-k3-seed0.jsonl"
    assert _name({"k": 3, "order": "lost_in_the_middle"}) == "nq-rtr-k3_orderlost_in_the_middle-seed0.jsonl"
    assert _name({"temperature": 0.5}) == "nq-rtr-temperature0.5-seed0.jsonl"
    long = {"note": "n" * 70}
    text = "note" + "n" * 70
    assert _name(long) == f"nq-rtr-opts{hashlib.sha256(text.encode()).hexdigest()[:10]}-seed0.jsonl"
    program, options = resolve_program(TASKS["nq"], "dsp", "small", {"extractive": "true"})
    assert results_name(TASKS["nq"], "dsp", "small", program, options, 16, 0) == \
        "nq-dsp-small-extractiveTrue-seed0.jsonl"
    # A lossy name still says what it can, then a digest of the exact values after a "~".
    assert _name({"k": -1}).startswith("nq-rtr-k_1~")


def test_no_two_option_sets_of_a_real_program_share_a_name():
    values = {"k": [1, 2, 3, 12], "n": [1, 2, 12, 21], "n_raw": [0, 2], "n_demos": [0, 2, 21],
              "order": ["relevance", "lost_in_the_middle"]}
    keys = sorted(values)
    seen: dict[str, dict] = {}
    for mask in range(1, 1 << len(keys)):
        chosen = [k for i, k in enumerate(keys) if mask >> i & 1]
        for combo in itertools.product(*(values[k] for k in chosen)):
            options = dict(zip(chosen, combo))
            name = _name(options, open_qa.dsp_program)
            # One name per setting: the options as the program runs with them (a default named or not).
            effective = effective_options(open_qa.dsp_program, options)
            assert seen.setdefault(name, effective) == effective, (name, seen[name], effective)
    assert len(seen) == len({json.dumps(e, sort_keys=True) for e in seen.values()}) > 500
