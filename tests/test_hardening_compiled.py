"""Issue 29, item 5 (and "Also settle"): a compiled file is data, never code.

`load_compiled` checks every field before it uses any, resolves the program only among registered
programs or the one the caller passes (a module the file names, even one placed beside it, is never
imported), and refuses options the program does not take. A compiled `rm` spec naming an arbitrary file,
and `dsp serve --index` given one, never print that file's lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compile_programs import reader

import dsp
from dsp.clients.specs import SpecError

ROOT = Path(__file__).resolve().parents[1]
SECRET_LINE = "root:$6$s3cr3tHash:19000:0:99999:7:::"


def _valid(program: str = "compile_programs.reader", **fields) -> dict:
    data = {"format": 1, "program": program, "options": {"n_demos": 1}, "candidate": {"key": "raw1"},
            "demos": [{"question": "q1?", "answer": ["a1"]}], "knn": None,
            "train": [{"question": "q2?", "answer": ["a2"]}], "rm": None, "table": [], "meta": {"seed": 0}}
    data.update(fields)
    return data


def _hostile(folder: Path, module: str = "evil_beside") -> tuple[Path, Path]:
    """A module that leaves a marker file when imported, and a compiled file naming a function of it."""
    marker = folder / "IMPORTED"
    (folder / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                         "def retrieve_then_read(question, train, k=1):\n    return question\n")
    path = folder / "hostile.json"
    path.write_text(json.dumps(_valid(f"{module}.retrieve_then_read", options={"k": 1})))
    return path, marker


def test_loading_a_hostile_compiled_file_imports_nothing(tmp_path, monkeypatch):
    path, marker = _hostile(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # importable, as a module beside a script would be
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as raised:
        dsp.load_compiled(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "evil_beside.retrieve_then_read" in message
    assert "not registered" in message and "\n" not in message
    assert not marker.exists() and "evil_beside" not in sys.modules
    # Passing a program, or a table of them, never imports the named one either.
    with pytest.raises(ValueError, match="holds evil_beside.retrieve_then_read, not compile_programs.reader"):
        dsp.load_compiled(path, program=reader)
    with pytest.raises(ValueError, match="not among the 1 given"):
        dsp.load_compiled(path, programs={"reader": reader})
    assert not marker.exists()


def test_the_cli_refuses_a_hostile_compiled_file_without_importing_it(tmp_path):
    path, marker = _hostile(tmp_path, module="evil_cli")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    # cwd = the file's folder: `python -m` puts it first on sys.path, so the old loader imported the module.
    done = subprocess.run([sys.executable, "-m", "programs.cli", "run", "retrieve_then_read", "--dataset", "nq",
                           "--compiled", str(path), "--n", "1"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "evil_cli.retrieve_then_read" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not marker.exists()


def test_a_name_nobody_registered_is_refused_even_when_importable(tmp_path, monkeypatch):
    """json.dumps is importable and harmless; what matters is that it was never registered."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_valid("json.decoder.scanstring", options={})))
    with pytest.raises(ValueError, match="'json.decoder.scanstring', which is not registered"):
        dsp.load_compiled(path)


@dsp.register_program
def registered_reader(question: str, train: list, demos: list | None = None, n_demos: int = 2) -> str:
    return question


def unregistered_reader(question: str, train: list, demos: list | None = None, n_demos: int = 2) -> str:
    return question


def test_registered_and_passed_programs_load(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_valid(f"{__name__}.unregistered_reader")))
    with pytest.raises(ValueError, match="not registered"):  # importable, loaded, yet not registered
        dsp.load_compiled(path)
    assert dsp.load_compiled(path, program=unregistered_reader).program is unregistered_reader
    path.write_text(json.dumps(_valid(f"{__name__}.registered_reader")))
    loaded = dsp.load_compiled(path)
    assert loaded.program is registered_reader and loaded.options == {"n_demos": 1}
    assert [d.question for d in loaded.demos] == ["q1?"] and [e.question for e in loaded.train] == ["q2?"]
    assert dsp.load_compiled(path, programs=[unregistered_reader, registered_reader]).program is registered_reader
    assert dsp.load_compiled(path, programs={"r": registered_reader}).program is registered_reader
    with pytest.raises(TypeError, match="lambdas and nested functions"):
        dsp.register_program(lambda question, train: question)


def test_the_bundled_programs_register_themselves():
    from dsp.compiling import registered_program
    from programs import conversational, intro, multihop, open_qa

    for family in (open_qa, multihop, conversational, intro):
        for program in family.PROGRAMS.values():
            assert registered_program(dsp.compiling.program_name(program)) is program


@pytest.mark.parametrize("fields, problem", [
    ({"program": 123}, "field 'program' must be a program's name"),
    ({"program": ""}, "field 'program' must be a program's name"),
    ({"options": ["k", 1]}, "field 'options' must be an object of option values, got list"),
    ({"demos": ["a demo as text"]}, "field 'demos': item 0 must be an example object, got string"),
    ({"demos": {"question": "q"}}, "field 'demos' must be a list of example objects, got object"),
    ({"knn": [1, 2]}, "field 'knn' must be null or an object"),
    ({"knn": {"pool": [{"question": "q"}], "k": 0, "vectorizer": "hashing"}}, "field 'knn.k' must be a positive integer"),
    ({"knn": {"pool": [{"question": "q"}], "k": True, "vectorizer": "hashing"}}, "field 'knn.k' must be a positive"),
    ({"knn": {"pool": [{"question": "q"}], "k": 2, "vectorizer": "word2vec"}}, "field 'knn.vectorizer' must be one of"),
    ({"knn": {"pool": "x", "k": 2, "vectorizer": "e5"}}, "field 'knn.pool' must be a list"),
    ({"knn": {"pool": [], "k": 2, "vectorizer": "e5"}}, "field 'knn.pool' is empty"),
    ({"knn": {"pool": [{"q": 1}], "k": 2}}, "field 'knn' must have exactly pool, k and vectorizer"),
    ({"train": {"question": "q"}}, "field 'train' must be a list of example objects, got object"),
    ({"train": [1]}, "field 'train': item 0 must be an example object, got number"),
    ({"rm": 5}, "field 'rm' must be null or a retriever spec"),
    ({"rm": "python:os.system"}, "field 'rm' names an unknown retriever kind 'python'"),
    ({"table": {"key": "x"}}, "field 'table' must be a list of candidate rows, got object"),
    ({"table": ["x"]}, "field 'table': row 0 must be an object"),
    ({"meta": []}, "field 'meta' must be an object, got list"),
    ({"candidate": "raw1"}, "field 'candidate' must be an object, got string"),
    ({"pickle": "gASVAAAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjAJpZJSFlFKULg=="}, "unknown field(s) 'pickle'"),
    ({"options": {"n_demos": 1, "nonsense": 3}}, "takes no option(s) nonsense"),
    ({"options": {"train": []}}, "field 'options' sets train, which the compiled program binds itself"),
])
def test_ill_typed_fields_are_one_line_errors_naming_the_file_and_the_field(tmp_path, fields, problem):
    dsp.register_program(reader)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_valid(**fields)))
    with pytest.raises(ValueError) as raised:
        dsp.load_compiled(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message, message


def test_the_cli_refuses_ill_typed_fields_and_unknown_options_in_one_line(tmp_path, capsys):
    from programs.cli import main

    path = tmp_path / "c.json"
    for fields, problem in [({"options": ["k"]}, "field 'options'"), ({"options": {"kk": 1}}, "no option(s) kk"),
                            ({"train": {"q": 1}}, "field 'train'")]:
        path.write_text(json.dumps(_valid("programs.open_qa.retrieve_then_read", **fields)))
        assert main(["run", "retrieve_then_read", "--dataset", "nq", "--compiled", str(path), "--n", "1"]) == 2
        err = capsys.readouterr().err
        assert problem in err and err.count("\n") == 1 and str(path) in err, err


def _secret_file(folder: Path) -> Path:
    path = folder / "shadow"
    path.write_text(SECRET_LINE + "\nbin:*:19000:0:99999:7:::\n")
    return path


def test_a_compiled_rm_naming_an_arbitrary_file_never_prints_its_lines(tmp_path):
    dsp.register_program(reader)
    secret = _secret_file(tmp_path)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_valid(rm=f"bm25:{secret}")))
    compiled = dsp.load_compiled(path)  # a spec is text: loading opens nothing
    with pytest.raises(SpecError) as raised:
        compiled.retriever()
    message = str(raised.value)
    assert str(secret) in message and "s3cr3tHash" not in message and "root:" not in message, message


def test_run_compiled_with_an_rm_naming_an_arbitrary_file_never_prints_its_lines(data_dir, tmp_path, capsys):
    from programs.cli import main
    from slow_lm_server import SlowLMServer

    secret = _secret_file(tmp_path)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_valid("programs.open_qa.retrieve_then_read", options={"k": 1}, rm=f"bm25:{secret}")))
    with SlowLMServer(delay=0) as server:
        code = main(["run", "retrieve_then_read", "--dataset", "nq", "--compiled", str(path), "--n", "1",
                     "--lm", server.spec, "--out", str(tmp_path / "runs")])
    shown = capsys.readouterr()
    assert code == 2 and str(secret) in shown.err and shown.err.count("\n") == 1, shown.err
    assert "s3cr3tHash" not in shown.out + shown.err


def test_serve_index_naming_an_arbitrary_file_never_prints_its_lines(tmp_path, capsys):
    from programs.cli import main

    secret = _secret_file(tmp_path)
    assert main(["serve", "--index", str(secret), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert str(secret) in err and "neither a saved index nor a passages file" in err and err.count("\n") == 1
    assert "s3cr3tHash" not in err and "root:" not in err, err
