"""The `dsp` command and the client specs: one parser, arguments checked before any model loads (one line,
exit 2, no traceback), runs that can never report stale rows, failed examples that fail the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ListRM, ScriptedLM
from slow_lm_server import SlowLMServer

import dsp
from dsp.clients.specs import (
    SpecError, check_lm_spec, llamacpp_options, lm_from_spec, parse_spec, rm_from_spec, with_options,
)
from programs.cli import build_parser, main
from programs.tasks import TASKS


def test_specs_build_clients_and_name_the_valid_kinds(tmp_path):
    assert parse_spec("bm25:/x/y.jsonl") == ("bm25", "/x/y.jsonl", {})
    lm = lm_from_spec("openai-compatible:http://127.0.0.1:9/v1,model=gemma,type=chat")
    assert (lm.model, lm.model_type, lm.spec) == ("gemma", "chat", "openai-compatible:http://127.0.0.1:9/v1,model=gemma,type=chat")
    assert lm.name == "openai:gemma"
    with pytest.raises(SpecError, match="unknown LM 'gpt5'.*valid LMs: llamacpp, openai, openai-compatible"):
        lm_from_spec("gpt5:x")
    with pytest.raises(SpecError, match="unknown RM 'es'.*valid RMs: bm25, dense, colbertv2, hybrid, replay"):
        rm_from_spec("es:http://x")
    with pytest.raises(SpecError, match="'bm25:' needs passages file or index dir"):
        rm_from_spec("bm25:")
    with pytest.raises(SpecError, match="openai spec: unknown option.*n_ctx.*it takes type"):
        check_lm_spec("openai:gpt-4o-mini,n_ctx=8")
    passages = tmp_path / "p.jsonl"
    passages.write_text(json.dumps({"id": "a", "title": "T", "text": "some text"}) + "\n")
    rm = rm_from_spec(f"bm25:{passages}")
    rm.save(tmp_path / "index")
    assert rm_from_spec(f"bm25:{tmp_path / 'index'}")("text", k=1)[0]["id"] == "a"
    with pytest.raises(SpecError, match="neither a passages file nor a saved index"):
        rm_from_spec(f"bm25:{tmp_path / 'missing.jsonl'}")


def test_llamacpp_spec_options_are_checked():
    _, _, options = parse_spec("llamacpp:,n_ctx=8192,n_threads=2,flash_attn=true")
    assert llamacpp_options(options) == {"n_ctx": 8192, "n_threads": 2, "flash_attn": True}
    assert llamacpp_options({"flash_attn": "0"}) == {"flash_attn": False}
    with pytest.raises(SpecError, match="n_ctx must be an integer, got '8k'"):
        llamacpp_options({"n_ctx": "8k"})
    with pytest.raises(SpecError, match="flash_attn must be 1 or 0, got 'maybe'"):
        llamacpp_options({"flash_attn": "maybe"})
    assert llamacpp_options({"n_seq": "1"}) == {"n_seq": 1}  # one completion at a time, no batching
    for bad, why in (("0", "n_seq must be an integer >= 1"), ("999", "n_seq must be at most 256")):
        with pytest.raises(SpecError, match=why):
            llamacpp_options({"n_seq": bad})
    with pytest.raises(SpecError, match="unknown option.*n_gpu_layers.*takes n_ctx, n_threads, flash_attn"):
        lm_from_spec("llamacpp:,n_gpu_layers=99")
    with pytest.raises(SpecError, match="llamacpp: /nowhere/m.gguf is not a file"):
        check_lm_spec("llamacpp:/nowhere/m.gguf")
    # one spec builder: command-line options become spec options, so the spec rebuilds the same client
    assert with_options("llamacpp:,flash_attn=1", n_ctx=8192, n_threads=2) == "llamacpp:,flash_attn=1,n_ctx=8192,n_threads=2"



BAD_ARGUMENTS = [
    (["run", "vanilla", "--n", "-5"], "--n: must be a positive integer, got '-5'"),
    (["run", "vanilla", "--n", "0"], "--n: must be a positive integer, got '0'"),
    (["run", "vanilla", "--shots", "-1"], "--shots: must be an integer >= 0, got '-1'"),
    (["run", "vanilla", "--seeds", "a,b"], "--seed/--seeds: takes comma-separated integers, got 'a,b'"),
    (["run", "vanilla", "--threads", "0"], "--threads: must be a positive integer, got '0'"),
    (["run", "vanilla", "--lm", "foo:bar"], "--lm: unknown LM 'foo' in 'foo:bar'; valid LMs: llamacpp"),
    (["run", "vanilla", "--lm", "llamacpp:/nowhere/model.gguf"], "llamacpp: /nowhere/model.gguf is not a file"),
    (["run", "vanilla", "--lm", "openai:gpt-4o-mini", "--n-ctx", "8192"],
     "--n-ctx apply to the embedded llamacpp model, not to --lm openai:gpt-4o-mini"),
    (["run", "vanilla", "--rm", "bm25:/nowhere/passages.jsonl"],
     "--rm: bm25: /nowhere/passages.jsonl is neither a passages file nor a saved index directory"),
    (["run", "vanilla", "--dataset", "trivia"], "argument --dataset: invalid choice: 'trivia'"),
    (["run", "rag"], "dataset nq has no program 'rag'; choose one of: vanilla, retrieve_then_read, self_ask, dsp"),
    (["run", "dsp", "--preset", "huge"], "no preset 'huge' for nq; presets: paper, small"),
    (["run", "retrieve_then_read", "--preset", "small"], "preset 'small' is for the dsp program; program "
                                                          "'retrieve_then_read' has no option"),
    (["run", "vanilla", "--set", "bogus=1"], "program 'vanilla' has no option 'bogus'; its options: n_demos"),
    (["run", "retrieve_then_read", "--set", "k=abc"], "--set k: takes an integer, got 'abc'"),
    (["run", "dsp", "--set", "cot=perhaps"], "--set cot: takes true or false, got 'perhaps'"),
    (["run", "dsp", "--set", "k"], "--set takes key=value, got 'k'"),
    (["run", "vanilla", "--shots", "100000"], "--shots 100000: the training pool has only"),
    (["run", "vanilla", "--ray-address", "auto"], "--ray-address, --batch-size and --global-concurrency need --backend ray"),
    (["ask", "who?", "--program", "nosuch"], "dataset nq has no program 'nosuch'"),
    (["index", "--passages", "/nowhere/p.jsonl", "--out", "x"], "argument --passages: /nowhere/p.jsonl: no such file"),
    (["serve", "--index", "/nowhere/index"], "argument --index: /nowhere/index: no such file or directory"),
    (["demo", "--n", "-5"], "--n: must be a positive integer, got '-5'"),
    (["demo", "--programs", "vanilla,nosuch"], "--programs: unknown nosuch"),
    (["recall", "--n", "0"], "--n: must be a positive integer, got '0'"),
]


@pytest.mark.parametrize("argv, message", BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_a_bad_argument_is_one_line_and_exit_2_before_any_model_loads(argv, message, data_dir, no_model, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert message in err, err
    assert "\n" not in err and "Traceback" not in captured.err + captured.out
    assert err.startswith(f"dsp {argv[0]}: error: ")


def test_a_bad_argument_in_a_real_process_prints_no_traceback():
    out = subprocess.run([sys.executable, "-m", "programs.cli", "run", "vanilla", "--n", "-5"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_output_closed_by_its_reader_ends_quietly(tmp_path):
    """`dsp compare ... | head`: the reader is gone before the table is written; no traceback, status 141."""
    path = tmp_path / "a.jsonl"
    dsp.evaluate(lambda question: "x", [dsp.Example(question="q", answer="x")], dsp.EM, out=path, run={"task": "t"},
                 progress=False, display=False)
    read, write = os.pipe()
    os.close(read)  # the reader has gone before anything is written: the first write fails
    try:
        out = subprocess.run([sys.executable, "-m", "programs.cli", "compare", str(path)], stdout=write,
                             stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert out.returncode == 141 and out.stderr == ""


def test_help_shows_defaults_and_the_right_program_names(capsys):
    assert main(["serve", "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: dsp serve") and "(default: 8893)" in " ".join(text.split())
    assert main(["run", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--lm", "--rm", "--n", "--threads", "--out", "--seed"):
        assert option in text
    flat = " ".join(text.split())
    assert "(default: runs)" in flat and "(default: nq)" in flat and "(default: None)" not in flat


def test_no_help_text_shows_a_doubled_percent_sign(capsys):
    """argparse %-formats option help but prints a description as written: "95%%" there stays doubled."""
    commands = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them only here
    for name in commands:
        assert main([name, "--help"]) == 0
        assert "%%" not in capsys.readouterr().out, name
    assert main(["run", "--help"]) == 0
    assert "95% interval" in capsys.readouterr().out


def test_every_subcommand_shares_the_option_names():
    """--n, --threads, --out and the LM options mean the same everywhere; no --limit or --n-threads left."""
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them only here
    seen = {}
    for name, sub in commands.items():
        options = {o for action in sub._actions for o in action.option_strings}
        seen[name] = options
        assert not options & {"--limit", "--n-threads", "--num-threads"}, name
    for name in ("run", "ask", "demo", "recall"):
        assert {"--lm", "--n-ctx", "--lm-threads"} <= seen[name], name
    assert {"--n", "--threads", "--out"} <= seen["run"] and {"--n", "--threads", "--out"} <= seen["demo"]


def test_the_console_script_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "programs.cli", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for command in ("run", "ask", "index", "serve", "recall", "litm", "detectiveqa", "demo"):
        assert command in out


def _rows(path):
    return dsp.evaluation.read_run(path)[1]


def test_a_changed_run_never_yields_rows_of_the_old_one(data_dir, tmp_path, capsys):
    """The issue's case: `--set k=3` into an --out holding k=1 rows printed the old score with 0 LM requests."""
    out = str(tmp_path)
    with SlowLMServer(delay=0.0) as server:
        base = ["run", "retrieve_then_read", "--dataset", "nq", "--n", "3", "--shots", "4", "--lm", server.spec,
                "--out", out]
        assert main([*base, "--set", "k=1"]) == 0
        first = capsys.readouterr().out
        assert "'requests': 3" in first  # one LM call per question
        assert main([*base, "--set", "k=3"]) == 0  # its own file: runs, never reuses the k=1 rows
        again = capsys.readouterr().out
        assert "resumed" not in again and "'requests': 3" in again
        assert (tmp_path / "nq-retrieve_then_read-shots4-seed0.jsonl").exists()   # k=1 is the default: no suffix
        assert (tmp_path / "nq-retrieve_then_read-k3-shots4-seed0.jsonl").exists()
        k3 = _rows(tmp_path / "nq-retrieve_then_read-k3-shots4-seed0.jsonl")
        assert all(len(r["context"]) == 3 for r in k3)
        # the same command resumes, and says from where
        assert main([*base, "--set", "k=3"]) == 0
        resumed = capsys.readouterr().out
        assert "resumed 3 rows from" in resumed and "'requests': 0" in resumed
        port = server.spec
    with SlowLMServer(delay=0.0) as other:  # another LM (another server) on the same --out is refused
        assert other.spec != port
        argv = ["run", "retrieve_then_read", "--dataset", "nq", "--n", "3", "--shots", "4", "--lm", other.spec,
                "--out", out, "--set", "k=3"]
        assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "holds rows of another run (lm.lm.base_url:" in err and "\n" not in err
    assert len(_rows(tmp_path / "nq-retrieve_then_read-k3-shots4-seed0.jsonl")) == 3  # nothing mixed in


def test_a_run_with_failed_examples_exits_non_zero_and_names_the_first_error(data_dir, tmp_path, capsys):
    recording = data_dir / "dsp_v1" / "dsp_v1_intro_lm.jsonl"  # holds none of these NQ prompts
    code = main(["run", "vanilla", "--dataset", "nq", "--n", "2", "--shots", "2", "--lm", f"replay:{recording}",
                 "--out", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert "2 example(s) failed; the first (example 0 in" in err and "UnrecordedRequest" in err


def test_run_and_resume_with_the_embedded_model(data_dir, tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    args = ["run", "retrieve_then_read", "--dataset", "nq", "--n", "2", "--out", str(tmp_path), "--set", "k=1"]
    assert main(args) == 0
    first = capsys.readouterr().out
    rows = _rows(tmp_path / "nq-retrieve_then_read-seed0.jsonl")
    assert [r["index"] for r in sorted(rows, key=lambda r: r["index"])] == [0, 1]
    assert all(r["context"] and r["trace"] and r["usage"]["requests"] + r["usage"]["cached_requests"] >= 1 for r in rows)
    assert "95% CI" in first and "retrieve_then_read on nq" in first
    assert main(args) == 0  # resumed: nothing left to run
    assert "'requests': 0" in capsys.readouterr().out


def test_ask_shows_the_models_raw_text_and_marks_a_cut_prompt(data_dir, capsys):
    with SlowLMServer(delay=0.0) as server:
        assert main(["ask", "who wrote hamlet", "--program", "retrieve_then_read", "--lm", server.spec,
                     "--set", "k=3"]) == 0
    out = capsys.readouterr().out
    assert "--- stage qa: prompt (" in out and "earlier characters not shown; --full prints the whole prompt" in out
    marker = out.index("earlier characters not shown")
    shown = out[out.index("\n", marker) + 1:]
    assert shown.splitlines()[0] == "" or not shown.startswith(" ")  # the cut falls at a line start
    assert "Question: who wrote hamlet" in out and "answer:" in out


def test_hotpotqa_retrieves_from_a_pool_holding_its_supporting_pages(data_dir):
    from programs.cli.run import build_rm

    task = TASKS["hotpotqa"]
    _, dev = task.load(20, 0)
    rm = build_rm(task, None)
    # One query per question already finds a supporting page in the top 5 for nearly every question;
    # both pages need the second hop (measured on the 100-question sample: 99 and 53 of 100).
    found = [set(e.gold_titles) & {p.title for p in rm(e.question, k=5)} for e in dev]
    assert sum(bool(f) for f in found) >= 18 and sum(len(f) == 2 for f in found) < 20


# -- families are data: the command names none, and a small LM gets the small-model preset ----------------

def test_no_code_of_the_command_names_a_family_or_a_program():
    """Help texts, choices and compile settings come from the families' declarations (programs.family): the
    code under programs/cli/ holds no family's or program's name (docstrings may show example commands)."""
    import ast
    from pathlib import Path

    from programs.tasks import FAMILIES

    # "dsp" is also the package and the command: it cannot be told apart from the program of that name.
    names = set(FAMILIES) | ({p for family in FAMILIES.values() for p in family.programs} - {"dsp"})
    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "programs" / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            texts = {ast.Constant: lambda n: [n.value] if isinstance(n.value, str) and id(n) not in docstrings else [],
                     ast.Name: lambda n: [n.id], ast.Attribute: lambda n: [n.attr],
                     ast.alias: lambda n: [n.name, n.asname or ""], ast.ImportFrom: lambda n: [n.module or ""],
                     ast.keyword: lambda n: [n.arg or ""]}.get(type(node), lambda n: [])(node)
            found += [(path.name, node.lineno, text) for text in texts if any(name in text for name in names)]
    assert found == []


class SmallLM(ScriptedLM):
    small = True  # declared as the embedded llama.cpp client declares it


def _ask(monkeypatch, capsys, lm, *argv):
    """`dsp ask` on a scripted pool, LM and RM (no data, no model): (its LM's requests, what it printed)."""
    from programs.cli import run
    from programs.tasks import Task

    pool = [dsp.Example(question=f"train question {i}?", answer=[f"answer {i}"]) for i in range(20)]
    monkeypatch.setattr(Task, "load", lambda self, n=None, dev_seed=0, split="dev": (pool, []))
    monkeypatch.setattr(dsp, "lm_from_spec", lambda spec: lm)
    monkeypatch.setattr(run, "build_rm", lambda task, spec: ListRM([("Paris | Paris is the capital of France.", 1.0)]))
    assert main(["ask", "What is the capital of France?", "--lm", "openai-compatible:http://127.0.0.1:9/v1",
                 *argv]) == 0
    return list(lm.history), capsys.readouterr().out


def _answering(calls):
    """The call that answers the question asked (not an annotation of a training question, nor a follow-up
    filling in a field the samples left out)."""
    return next(call for call in calls if "Question: What is the capital of France?" in call["prompt"])


def test_ask_with_a_small_lm_runs_the_small_model_preset(monkeypatch, capsys):
    """The issue's case: the embedded model on the paper's settings rambled a rationale and answered nothing."""
    calls, out = _ask(monkeypatch, capsys, SmallLM(lambda prompt, request: [" Paris"] * request.get("n", 1)))
    small = dict(TASKS["nq"].family.presets["small"])
    assert "preset small: scripted:scripted declares itself a small model" in out and "answer: Paris" in out
    assert len(calls) == 1  # gold-labelled demos need no annotation call
    params = calls[0]["params"]
    assert (params["n"], params["temperature"]) == (small["n"], small["temperature"]) == (5, 0.3)
    assert "step by step" not in calls[0]["prompt"]  # no chain of thought
    # An explicit preset wins; another program has no preset to take.
    calls, out = _ask(monkeypatch, capsys, SmallLM(lambda prompt, request: [" Paris"] * request.get("n", 1)),
                      "--preset", "paper")
    assert "preset small" not in out and _answering(calls)["params"]["n"] == 20
    calls, out = _ask(monkeypatch, capsys, SmallLM(lambda prompt, request: [" Paris"]), "--program", "vanilla")
    assert "preset small" not in out and len(calls) == 1 and "answer: Paris" in out


def test_ask_with_a_remote_lm_keeps_the_papers_settings(monkeypatch, capsys):
    calls, out = _ask(monkeypatch, capsys, ScriptedLM(lambda prompt, request: [" Paris"] * request.get("n", 1)))
    assert "preset" not in out
    answering = _answering(calls)
    assert (answering["params"]["n"], answering["params"]["temperature"]) == (20, 0.7)
    assert answering["prompt"].endswith("step by step.")  # chain of thought
