"""The peer harness's own glue (bench/peer/), without DSPy: a DSPy run's raw rows become a results file of
the project's format that `dsp compare` pairs with a `dsp run` file on the same test questions, with its
parse failures counted; the gate fills the generation policy; the unit selection of run.sh."""

from __future__ import annotations

import argparse
import contextlib
import doctest
import io
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.request import Request, urlopen

import pytest
from helpers import ScriptedLM

import dsp
from dsp.evaluation import identity_diff, read_run
from dsp.evaluation.compare import compare_runs, format_comparison
from programs.cli import main

PEER = Path(__file__).resolve().parents[1] / "bench" / "peer"
sys.path.insert(0, str(PEER))

import config  # noqa: E402  (bench/peer on the path)
import gate  # noqa: E402
import peer  # noqa: E402
import dspy_side  # noqa: E402
from dspy_side import CompileLedger, HashingTfidf, parse_config  # noqa: E402


def _raw_file(path: Path, data: dict, rows: list[dict], seed: int = 0) -> Path:
    """A raw file as dspy_side.py writes it: its header, then one row per question."""
    header = {"system": "dspy", "dspy_version": config.DSPY_VERSION, "config": "rtr_predict-labeled-chat",
              "program": "rtr_predict", "optimizer": {"name": "labeled"}, "adapter": "ChatAdapter", "seed": seed,
              "lm": {"model": "openai/gemma-3-270m", "api_base": "http://127.0.0.1:18800/lm/v1",
                     "generation": dict(config.GENERATION)},
              "rm": {"colbertv2": "http://127.0.0.1:18800/rm/api/search"}, "k": config.DSPY_K,
              "train": {"items": 200, "sha256": f"train{seed}"}, "val": {"items": 80, "sha256": f"val{seed}"},
              "task": data["task"], "split": data["split"]}
    lines = [json.dumps({"dspy_raw": header})] + [json.dumps(r) for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row(data: dict, index: int, prediction: str | None, **extra) -> dict:
    test = data["test"][index]
    return {"index": index, "id": test["id"], "fingerprint": test["fingerprint"], "prediction": prediction,
            "error": None, "parse_failure": False, "usage": {"lm_calls": 1}, "seconds": 0.1, "raw": "x", **extra}


@pytest.fixture
def column(data_dir, tmp_path, monkeypatch, capsys):
    """A column of 3 nq test questions: data.json, and a `dsp run vanilla --split test` file made with a
    scripted LM that answers only the first question right."""
    data = peer.prepare_data("nq", 3, tmp_path / "work")
    first = data["test"][0]

    def respond(prompt: str, request: dict) -> list[str]:
        asked = prompt.rsplit("Question:", 1)[-1]
        return [f" {first['gold'][0]}" if first["question"] in asked else " nothing"] * int(request.get("n") or 1)

    def scripted(spec=None):
        lm = ScriptedLM(respond, model="scripted-peer")
        lm.spec = "scripted"
        return lm

    monkeypatch.setattr(dsp, "lm_from_spec", scripted)
    passages = tmp_path / "passages.jsonl"  # vanilla retrieves nothing: a tiny corpus spares building BM25
    passages.write_text(json.dumps({"id": "a", "title": "Paris", "text": "Paris is the capital of France."}) + "\n")
    assert main(["run", "vanilla", "--dataset", "nq", "--split", "test", "--n", "3", "--rm", f"bm25:{passages}",
                 "--out", str(tmp_path / "runs")]) == 0
    capsys.readouterr()
    ours = tmp_path / "runs" / f"{data['stem']}-vanilla-seed0.jsonl"
    return data, ours


def test_a_converted_dspy_run_pairs_with_a_dsp_run_and_counts_parse_failures(column, tmp_path):
    data, ours = column
    rows = [_row(data, 0, "something else"), _row(data, 1, data["test"][1]["gold"][0]),
            _row(data, 2, None, error="AdapterParseError: no [[ ## answer ## ]]", parse_failure=True)]
    raw = _raw_file(tmp_path / "work" / "dspy" / "nq-test-dspy-rtr_predict-labeled-chat-seed0.raw.jsonl", data, rows)
    out = tmp_path / "results" / "nq-test-dspy-rtr_predict-labeled-chat-seed0.jsonl"
    counts = peer.convert_raw(raw, data, out)
    assert counts == {"rows": 3, "parse_failures": 1, "errors": 0, "right": 1}

    identity, converted = read_run(out)
    mine, _ = read_run(ours)
    # The keys dsp compare requires to agree, and those of the split, are exactly those of `dsp run`.
    shared = ("metric", "task", "split", "test", "dev", "fields")
    assert identity_diff({k: mine.get(k) for k in shared}, {k: identity.get(k) for k in shared}) == []
    assert identity["metric"] == "dsp.metrics.EM" and identity["split"] == "test" and identity["task"] == "nq"
    assert identity["system"] == "dspy" and identity["dspy_version"] == config.DSPY_VERSION
    assert identity["adapter"] == "ChatAdapter" and identity["optimizer"]["name"] == "labeled"
    assert identity["program_name"] == "dspy-rtr_predict" and identity["lm"]["defaults"] == config.GENERATION
    assert [r["index"] for r in converted] == [0, 1, 2]
    failed = converted[2]
    assert failed["prediction"] is None and failed["score"] == 0.0 and failed["parse_failure"] is True
    assert failed["error"].startswith("AdapterParseError")
    assert [r["score"] for r in converted] == [0.0, 1.0, 0.0]  # scored by dsp.EM against every gold answer
    _, our_rows = read_run(ours)
    assert [(r["id"], r["fingerprint"]) for r in converted] == [(r["id"], r["fingerprint"]) for r in our_rows]

    table = compare_runs([ours, out], n=3)
    first, dspy_run = table.runs
    assert (first.score, dspy_run.score) == (pytest.approx(100 / 3), pytest.approx(100 / 3))
    assert (dspy_run.paired["a_only"], dspy_run.paired["b_only"]) == (1, 1) and dspy_run.errors == 1
    assert "1 of its examples failed (scored 0)" in format_comparison(table)
    assert peer.parse_failures([ours, out]) == [(out.name, 3, 1)]

    # The results folder's copy drops the raw completions, as results/ drops traces, and still pairs.
    cut = tmp_path / "cut" / out.name
    peer.cut_traces(out, cut)
    assert all("raw" not in r for r in read_run(cut)[1]) and compare_runs([ours, cut], n=3).runs[1].n == 3

    # Converted again from the same raw rows (each run.sh unit converts every raw file), the committed copy
    # stays byte for byte: only a new header stamp would differ. A changed row is written.
    before = cut.read_bytes()
    header = json.loads(before.splitlines()[0])
    header["dsp_run"]["created"] = "2000-01-01T00:00:00+0000"
    cut.write_bytes(json.dumps(header).encode() + b"\n" + before.split(b"\n", 1)[1])
    kept = cut.read_bytes()
    peer.convert_raw(raw, data, out)
    peer.cut_traces(out, cut)
    assert cut.read_bytes() == kept and not cut.with_name(cut.name + ".tmp").exists()
    _raw_file(raw, data, [*rows[:2], _row(data, 2, data["test"][2]["gold"][0])])
    peer.convert_raw(raw, data, out)
    peer.cut_traces(out, cut)
    assert [r["score"] for r in read_run(cut)[1]] == [0.0, 1.0, 1.0]


def test_conversion_keeps_the_last_finished_row_and_skips_stale_and_torn_ones(column, tmp_path):
    data, ours = column
    rows = [_row(data, 0, None, error="LMTransportError: refused"),           # retried later ...
            _row(data, 0, data["test"][0]["gold"][0]),                      # ... and finished
            _row(data, 1, "wrong"),
            {**_row(data, 2, data["test"][2]["gold"][0]), "fingerprint": "another-question"}]
    raw = _raw_file(tmp_path / "raw.jsonl", data, rows)
    with raw.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(_row(data, 2, "torn"))[:30])  # a kill mid-write
    out = tmp_path / "out.jsonl"
    assert peer.convert_raw(raw, data, out) == {"rows": 2, "parse_failures": 0, "errors": 0, "right": 1}
    assert peer.convert_raw(raw, data, out)["rows"] == 2  # rewritten whole, not appended
    assert [(r["index"], r["score"]) for r in read_run(out)[1]] == [(0, 1.0), (1, 0.0)]
    # Seeds of one DSPy configuration group as our training seeds do.
    other = _raw_file(tmp_path / "raw1.jsonl", data, [_row(data, i, "wrong") for i in range(2)], seed=1)
    peer.convert_raw(other, data, tmp_path / "out-seed1.jsonl")
    table = compare_runs([out, tmp_path / "out-seed1.jsonl"], n=2)
    assert len(table.groups) == 1 and table.groups[0].seeds == (0, 1)


def test_a_fresh_work_folder_resumes_a_dspy_unit_from_its_committed_results_file(column, tmp_path):
    """A new machine has no raw rows: `restore` rebuilds them from the committed (cut) results file, with
    the header dspy_side.py would write, so the unit skips what it finished and loads its program."""
    data, _ = column
    gate_url = "http://127.0.0.1:18800"
    header = dspy_side.unit_header(data, "rtr_predict-bootstrap-json", 0, config.dspy_model("gemma"), gate_url, None)
    rows = [_row(data, 0, data["test"][0]["gold"][0]),
            _row(data, 1, None, error="AdapterParseError: no JSON", parse_failure=True),
            _row(data, 2, None, error="LMTransportError: refused")]  # unfinished: to run again
    old = tmp_path / "old-work"
    stem = f"{data['stem']}-dspy-rtr_predict-bootstrap-json-seed0"
    raw = old / "dspy" / f"{stem}.raw.jsonl"
    raw.parent.mkdir(parents=True)
    raw.write_text("".join(json.dumps(r) + "\n" for r in [{"dspy_raw": header}, *rows]), encoding="utf-8")
    (old / "dspy" / f"{stem}.program.json").write_text('{"predict": {"demos": []}}', encoding="utf-8")
    (old / "data.json").write_text(json.dumps(data), encoding="utf-8")
    results = tmp_path / "results"
    peer.convert_all(old, results)  # what run.sh commits: rows cut, program copied

    fresh = tmp_path / "work"  # the column fixture's own work folder: data.json, no dspy/
    assert not (fresh / "dspy").exists()
    said = peer.restore_dspy(fresh, results)
    assert said == [f"{stem}.jsonl: 3 rows", f"{stem}.program.json"]
    restored = fresh / "dspy" / f"{stem}.raw.jsonl"
    # dspy_side's own resume check accepts it: same header; the two finished rows are done, not the third.
    done = dspy_side._read_raw(restored, header)
    assert sorted(done) == [0, 1] and done[1]["parse_failure"] is True and done[0]["raw"] is None
    assert (fresh / "dspy" / f"{stem}.program.json").read_text() == '{"predict": {"demos": []}}'
    # Converted again, the committed file is kept byte for byte: the restored rows are the committed rows,
    # and the header still names the machine that made them (this test's stands in for another machine).
    committed = results / f"{stem}.jsonl"
    top, rest = committed.read_bytes().split(b"\n", 1)
    header_line = json.loads(top)
    header_line["dsp_run"]["machine"] = {"system": "another machine"}
    committed.write_bytes(json.dumps(header_line).encode() + b"\n" + rest)
    before = committed.read_bytes()
    peer.convert_all(fresh, results)
    assert committed.read_bytes() == before
    assert peer.restore_dspy(fresh, results) == []  # nothing is overwritten

    # A file whose identity this column's unit would not write is refused, naming it, and nothing is written.
    lines = before.decode().splitlines()
    top = json.loads(lines[0])
    top["dsp_run"]["identity"]["config"] = "rtr_predict-labeled-json"  # the file name says bootstrap
    forged = results / f"{data['stem']}-dspy-rtr_predict-bootstrap-chat-seed0.jsonl"
    forged.write_text("\n".join([json.dumps(top), *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="rtr_predict-bootstrap-chat-seed0.jsonl"):
        peer.restore_dspy(fresh, results)
    top["dsp_run"]["identity"]["config"] = "rtr_predict-bootstrap-chat"
    top["dsp_run"]["identity"]["seed"] = 1  # the draw's digest no longer matches the seed
    forged.write_text("\n".join([json.dumps(top), *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not what this column's unit"):
        peer.restore_dspy(fresh, results)
    assert not (fresh / "dspy" / forged.name.replace(".jsonl", ".raw.jsonl")).exists()


class _Upstream(BaseHTTPRequestHandler):
    """A fake LM server: echoes the request body it got, with usage."""

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        out = json.dumps({"choices": [{"text": "ok"}], "got": body, "port": self.server.server_address[1],
                          "usage": {"prompt_tokens": 7, "completion_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def test_the_gate_fills_the_policy_and_counts_what_reaches_the_server():
    upstream = HTTPServer(("127.0.0.1", 0), _Upstream)
    server = gate.Gate(0, f"http://127.0.0.1:{upstream.server_address[1]}", "http://127.0.0.1:9")
    for s in (upstream, server):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        def post(body: dict) -> dict:
            request = Request(f"{url}/lm/v1/chat/completions", json.dumps(body).encode(),
                              {"Content-Type": "application/json"})
            with urlopen(request, timeout=10) as response:
                return json.load(response)["got"]

        dspy_like = post({"messages": [], "temperature": 0.0, "max_completion_tokens": 150})
        assert dspy_like["max_tokens"] == 150 and "max_completion_tokens" not in dspy_like
        dsp_like = post({"prompt": "Q:", "temperature": 0.3, "n": 5})
        assert {k: dsp_like[k] for k in gate.POLICY} == {**gate.POLICY, "temperature": 0.3}
        with urlopen(f"{url}/gate/stats", timeout=10) as response:
            stats = json.load(response)
        assert (stats["lm_requests"], stats["prompt_tokens"], stats["completion_tokens"]) == (2, 14, 4)
        assert stats["filled"]["max_completion_tokens->max_tokens"] == 1 and "temperature" not in stats["filled"]
        with pytest.raises(OSError, match="502"):  # nothing listens behind /rm: a 502 naming it, no hang
            urlopen(f"{url}/rm/api/search?query=q&k=1", timeout=10)
    finally:
        for s in (server, upstream):
            s.shutdown()
            s.server_close()


def test_the_gate_keeps_each_prompt_family_on_a_server_of_its_own():
    """Two LM servers behind the gate: DSPy's ChatAdapter prompts and its JSONAdapter retries (other
    instructions, the same demos) alternate, and each family settles on one server, where its demos are
    the prefix llama.cpp reuses; one generation at a time; the counters still add up over both."""
    upstreams = [HTTPServer(("127.0.0.1", 0), _Upstream) for _ in range(2)]
    server = gate.Gate(0, [f"http://127.0.0.1:{u.server_address[1]}" for u in upstreams], "http://127.0.0.1:9",
                       merge_system=True)
    for s in (*upstreams, server):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    ports = [u.server_address[1] for u in upstreams]
    demos = [{"role": "user", "content": f"[[ ## question ## ]] demo {i} " * 20} for i in range(4)]
    try:
        def ask(system: str, question: str) -> int:
            body = {"messages": [{"role": "system", "content": system}, *demos, {"role": "user", "content": question}]}
            request = Request(f"{url}/lm/v1/chat/completions", json.dumps(body).encode(),
                              {"Content-Type": "application/json"})
            with urlopen(request, timeout=10) as response:
                return ports.index(json.load(response)["port"])

        chat, js = "Respond with [[ ## answer ## ]], then [[ ## completed ## ]].", "Respond with a JSON object."
        assert [ask(family, f"Q{i}") for i in range(3) for family in (chat, js)] == [0, 1, 0, 1, 0, 1]
        # A run of one family stays on its server (not taken in turns).
        assert [ask(chat, "Q7"), ask(chat, "Q8"), ask(js, "Q8")] == [0, 0, 1]
        with urlopen(f"{url}/gate/stats", timeout=10) as response:
            stats = json.load(response)
        assert stats["lm_servers"] == [5, 4] and stats["lm_requests"] == 9 and stats["prompt_tokens"] == 63
        assert stats["filled"]["system->first user message"] == 9
    finally:
        for s in (server, *upstreams):
            s.shutdown()
            s.server_close()
    with pytest.raises(ValueError, match="no LM server"):
        gate.Gate(0, [], "http://127.0.0.1:9")


def test_the_gate_answers_a_compiles_requests_again_from_its_replay_log(tmp_path):
    """DSPy's compiles call the LM through the gate's replay route: the gate keeps each answer in the named
    log and answers the same request from it, on a later gate (another machine) with no LM server behind
    it too; replayed answers are counted apart, never as requests or tokens; requests through /lm are
    never kept; a bad name or a malformed log is refused, naming it."""
    upstream = HTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    logs = tmp_path / "dspy"
    live = gate.Gate(0, f"http://127.0.0.1:{upstream.server_address[1]}", "http://127.0.0.1:9", replay_dir=logs)
    threading.Thread(target=live.serve_forever, daemon=True).start()
    name = "nq-test-dspy-rtr_predict-rs-chat-seed0.compile-replay"
    body = {"messages": [{"role": "user", "content": "Q1"}], "temperature": 0.0, "max_completion_tokens": 150}

    def post(server, payload, replay=name):
        at = f"http://127.0.0.1:{server.server_address[1]}"
        base = gate.replay_base(at, replay) if replay else f"{at}/lm/v1"
        request = Request(f"{base}/chat/completions", json.dumps(payload).encode(), {"Content-Type": "application/json"})
        with urlopen(request, timeout=10) as response:
            return json.load(response)

    def stats(server):
        with urlopen(f"http://127.0.0.1:{server.server_address[1]}/gate/stats", timeout=10) as response:
            return json.load(response)

    try:
        first = post(live, body)
        assert post(live, body) == first  # the same request: from the log, not the server
        post(live, {**body, "messages": [{"role": "user", "content": "Q2"}]})
        post(live, {**body, "messages": [{"role": "user", "content": "Q3"}]}, replay=None)  # a test question
        counted = stats(live)
        assert (counted["lm_requests"], counted["lm_replayed"], counted["prompt_tokens"]) == (3, 1, 21)
        log = logs / f"{name}.jsonl"
        assert len(log.read_text().splitlines()) == 2  # Q1 and Q2; Q3 went through /lm
        with pytest.raises(ValueError, match="letters, digits"):
            gate.replay_base("http://127.0.0.1:1", "../elsewhere")
        escape = Request(f"http://127.0.0.1:{live.server_address[1]}/replay/..%2Felsewhere/lm/v1/chat/completions",
                         json.dumps(body).encode(), {"Content-Type": "application/json"})
        with pytest.raises(OSError, match="400"):
            urlopen(escape, timeout=10)
        assert not list(tmp_path.glob("*elsewhere*")) and post(live, body) == first  # the connection still serves
    finally:
        for s in (live, upstream):
            s.shutdown()
            s.server_close()

    # Another machine: the committed log and no LM server at all (port 9); a kill had torn its last line.
    with log.open("a", encoding="utf-8") as handle:
        handle.write('{"key": "0123')
    later = gate.Gate(0, "http://127.0.0.1:9", "http://127.0.0.1:9", replay_dir=logs)
    threading.Thread(target=later.serve_forever, daemon=True).start()
    try:
        assert post(later, body) == first
        assert (stats(later)["lm_requests"], stats(later)["lm_replayed"]) == (0, 1)
        assert log.read_text().endswith("}\n") and len(log.read_text().splitlines()) == 2  # the torn line is gone
        with pytest.raises(OSError, match="502"):  # a request the log lacks goes to the (absent) server
            post(later, {**body, "messages": [{"role": "user", "content": "Q4"}]})
        (logs / "forged.jsonl").write_text('{"key": "not a digest", "response": {}}\n', encoding="utf-8")
        with pytest.raises(OSError) as refused:
            post(later, body, replay="forged")
        assert "forged.jsonl: line 1 is not a replay record" in refused.value.read().decode()
    finally:
        later.shutdown()
        later.server_close()
    keeps_none = gate.Gate(0, "http://127.0.0.1:9", "http://127.0.0.1:9")
    with pytest.raises(ValueError, match="keeps none"):
        keeps_none.replay(name)
    keeps_none.server_close()


_SITTING = {"wall_seconds": 600.0, "lm_calls": 70, "server": dict.fromkeys(dspy_side.SERVER_KEYS, 70), "replayed": 0}


def _compile_sitting(data: dict, work: Path, unit: str) -> tuple[str, Path]:
    """A work folder whose DSPy unit `unit` (seed 0) stopped after one sitting of its compile: data.json
    and the compile's ledger. Returns the unit's stem and the ledger's path."""
    stem = f"{data['stem']}-dspy-{unit}-seed0"
    (work / "dspy").mkdir(parents=True)
    (work / "data.json").write_text(json.dumps(data), encoding="utf-8")
    header = dspy_side.unit_header(data, unit, 0, config.dspy_model("gemma"), "http://127.0.0.1:18800", None)
    ledger = work / "dspy" / f"{stem}.compile-ledger.json"
    ledger.write_text(json.dumps({"header": header, "invocations": [_SITTING]}))
    return stem, ledger


def test_an_unfinished_dspy_compile_is_committed_and_goes_on_in_a_fresh_work_folder(column, tmp_path):
    """A compile stopped mid-way (a random search outlasts a sitting): `convert` commits its ledger and the
    gate's replay log, `restore` gives them to a fresh work folder (each checked first, nothing
    overwritten), and once the program is saved they leave the results folder."""
    data, _ = column
    old, results, fresh = tmp_path / "old-work", tmp_path / "results", tmp_path / "work"
    stem, ledger = _compile_sitting(data, old, "rtr_predict-rs-chat")
    header = json.loads(ledger.read_text())["header"]
    replay = gate.ReplayLog(old / "dspy" / f"{stem}.compile-replay.jsonl")
    replay.put("a" * 64, {"choices": [{"message": {"content": "[[ ## answer ## ]]\nParis"}}]})
    peer.convert_all(old, results)
    committed = sorted(p.name for p in (results / "dspy").iterdir())
    assert committed == [f"{stem}.compile-ledger.json", f"{stem}.compile-replay.jsonl"]

    said = peer.restore_dspy(fresh, results)
    assert said == [f"{stem}.compile-ledger.json", f"{stem}.compile-replay.jsonl"]
    assert gate.ReplayLog(fresh / "dspy" / f"{stem}.compile-replay.jsonl").get("a" * 64) is not None
    assert peer.restore_dspy(fresh, results) == []  # nothing overwritten
    # dspy_side's ledger takes it as this compile's earlier invocation, and sums it with the next one.
    served, calls = {"lm_requests": 100, "lm_replayed": 0}, [0]
    resumed = CompileLedger(fresh / "dspy" / f"{stem}.compile-ledger.json", header, lambda: dict(served),
                            lambda: calls[0])
    resumed.start()
    served["lm_requests"] += 30; served["lm_replayed"] += 70; calls[0] += 100  # noqa: E702
    total = resumed.finish()
    assert (total["server"]["lm_requests"], total["replayed"], total["lm_calls"]) == (100, 70, 100)
    (fresh / "dspy" / f"{stem}.program.json").write_text('{"predict": {"demos": []}}', encoding="utf-8")
    assert peer.restore_dspy(fresh, results) == []  # finished here: its spent ledger is not given back

    # A replay log that is not one is refused, naming the committed file, and nothing is written.
    other = tmp_path / "other-work"
    (results / "dspy" / f"{stem}.compile-replay.jsonl").write_text("{\"key\": 1}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"results/dspy/{stem}.compile-replay.jsonl: line 1"):
        peer.restore_dspy(other, results)
    assert not (other / "dspy").exists()  # not the ledger either, nor a temporary file

    # The compile finishes: its program and cost are committed, its ledger and replay log leave.
    (old / "dspy" / f"{stem}.program.json").write_text('{"predict": {"demos": []}}', encoding="utf-8")
    ledger.unlink()  # CompileLedger.finish removes it
    peer.convert_all(old, results)
    assert sorted(p.name for p in (results / "dspy").iterdir()) == [f"{stem}.program.json"]


def test_a_failed_dspy_compile_is_committed_as_its_record_and_log_and_not_run_again(column, tmp_path):
    """A compile DSPy ended on a completion it could not parse (MIPROv2's proposer on a tiny model) has no
    program: `convert` commits its record (spend, error, where) with its replay log, the earlier sitting's
    ledger leaves, `restore` gives both back (a rerun from the log reaches the same end with no server),
    and the report names it."""
    data, _ = column
    work, results, fresh = tmp_path / "work", tmp_path / "results", tmp_path / "fresh"
    stem, ledger = _compile_sitting(data, work, "rtr_predict-mipro-chat")
    log = gate.ReplayLog(work / "dspy" / f"{stem}.compile-replay.jsonl")
    log.put("a" * 64, {"choices": [{"message": {"content": "[[ ## answer ## ]]\nParis"}}]})
    peer.convert_all(work, results)  # the first sitting, unfinished
    assert (results / "dspy" / ledger.name).exists()

    # The second sitting ends in the proposer: dspy_side writes the record, its ledger is finished.
    log.put("b" * 64, {"choices": [{"message": {"content": "Select a language model."}}]})
    try:
        raise ValueError("LM Response: Select a language model.")
    except ValueError as error:
        failure = dspy_side.compile_failure(error)
    record = {"system": "dspy", "config": "rtr_predict-mipro-chat", "seed": 0, "wall_seconds": 900.0,
              "lm_calls": 140, "server": dict.fromkeys(dspy_side.SERVER_KEYS, 140), "replayed": 70,
              "invocations": [_SITTING, _SITTING], "failed": {**failure, "step": "dspy/propose/grounded_proposer.py:231 forward"}}
    failed = work / "dspy" / f"{stem}.compile-failed.json"
    failed.write_text(json.dumps(record), encoding="utf-8")
    ledger.unlink()
    peer.convert_all(work, results)
    assert sorted(p.name for p in (results / "dspy").iterdir()) == [failed.name, f"{stem}.compile-replay.jsonl"]
    assert len(gate.ReplayLog(results / "dspy" / f"{stem}.compile-replay.jsonl")) == 2  # the whole log

    (fresh / "data.json").parent.mkdir(parents=True)
    (fresh / "data.json").write_text(json.dumps(data), encoding="utf-8")
    assert peer.restore_dspy(fresh, results) == [failed.name, f"{stem}.compile-replay.jsonl"]
    assert json.loads((fresh / "dspy" / failed.name).read_text())["failed"]["type"] == "ValueError"
    assert peer.restore_dspy(fresh, results) == []  # nothing overwritten

    (results / "retrieve_then_read.jsonl").write_text((column[1]).read_text(encoding="utf-8"), encoding="utf-8")
    text = peer.report("gemma", "nq", results, None)
    assert f"| {stem} | ValueError in `dspy/propose/grounded_proposer.py:231 forward` | 2 | 900.0 | 140 | 140 | 140 | 140 |" in text
    failed_out = results / "dspy" / failed.name
    failed_out.write_text('{"wall_seconds": 1}', encoding="utf-8")
    with pytest.raises(ValueError, match=f"{failed.name}: not a failed compile's record"):
        peer.report("gemma", "nq", results, None)
    # Its record deleted, to see a rerun fail the same way: the log alone is still given back to replay.
    failed_out.unlink()
    assert peer.restore_dspy(tmp_path / "again", results) == [f"{stem}.compile-replay.jsonl"]


def test_units_selection_configs_and_the_matched_budget(tmp_path):
    nq, hotpot = config.units("nq"), config.units("hotpotqa")
    assert nq[:10] == ["dsp:vanilla-seed0", *(f"dsp:rtr-seed{s}" for s in range(5)), "dsp:small-seed0",
                       "dsp:compiled-seed0", "dsp:compiled-seed1", "dsp:compiled-seed2"]
    assert not any("multihop" in u for u in nq) and any(u.startswith("dspy:multihop-") for u in hotpot)
    picked = [u for u in nq if config.selected(u, ["dspy:rtr_predict-labeled", "dsp:vanilla"], [])]
    assert picked == ["dsp:vanilla-seed0", "dspy:rtr_predict-labeled-chat-seed0", "dspy:rtr_predict-labeled-json-seed0"]
    assert parse_config("multihop-rsmatched-json") == ("multihop", "rsmatched", "json")
    with pytest.raises(ValueError, match="PROGRAM-OPTIMIZER-ADAPTER"):
        parse_config("rtr_predict-labeled")
    assert config.dsp_lm_spec("gemma", "http://127.0.0.1:18800") == \
        "openai-compatible:http://127.0.0.1:18800/lm/v1,model=gemma-3-270m,type=text"
    # SmolLM2 twice: dsp through the chat template (with DSPy's units) and through /v1/completions (dsp's
    # units only: DSPy calls the chat endpoint either way), one served model, two columns and ports.
    text = config.units("nq", lm="smollm2-text")
    assert text == nq[:10] and config.units("nq", lm="smollm2") == nq
    assert config.dsp_lm_spec("smollm2-text", "http://127.0.0.1:18820").endswith("model=smollm2-135m-instruct,type=text")
    assert config.dsp_lm_spec("smollm2", "http://127.0.0.1:18810").endswith("type=chat")
    assert config.MODELS["smollm2-text"].serve_args == config.MODELS["smollm2"].serve_args
    assert len({config.column_port(lm, "nq") for lm in config.MODELS}) == len(config.MODELS)
    cost = tmp_path / "c.cost.json"
    cost.write_text(json.dumps({"lm_usage": {"requests": 700, "cached_requests": 100}}))
    assert peer.matched_candidates([cost], 80) == 7  # 800 calls / 80 per candidate, less DSPy's 3 fixed ones


@pytest.mark.parametrize("lm", sorted(config.MODELS))
def test_llama_cpp_server_reads_each_columns_serve_args_as_meant(lm, monkeypatch):
    """run.sh passes `config.py serve-args LM` to dsp.serve_lm, which hands them to llama_cpp.server: its own
    parser must take every one (a misspelt option would stop the server at start), and the server stays the
    one every unit so far ran on: no prompt cache, llama_cpp.server's logits (bench/bench_serve_cache.py:
    the cache's setting changes some of Gemma's greedy completions, where two plain servers change none)."""
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        config._main(["serve-args", lm])
    args = printed.getvalue().split()
    args = [a for i, a in enumerate(args) if not (a == "--model" or i and args[i - 1] == "--model")]
    parser = argparse.ArgumentParser()
    add_args_from_model(parser, ModelSettings)
    settings = parse_model_from_args(ModelSettings, parser.parse_args(["--model", "m.gguf", *args]))
    assert (settings.n_ctx, settings.n_threads, settings.model_alias) == (8192, 2, config.MODELS[lm].alias)
    assert settings.cache is False and settings.logits_all is True


def test_config_names_a_bad_argument_instead_of_a_traceback(capsys):
    """run.sh reads every setting from `config.py KEY ARGS`: a missing or unknown argument is an exit 2 and a
    message naming what was asked, not a Python traceback in the middle of a column's log."""
    assert config._main([]) == 2 and "usage" in capsys.readouterr().err
    assert config._main(["serve-args", "nosuch-lm"]) == 2 and "'serve-args nosuch-lm'" in capsys.readouterr().err
    assert config._main(["port", "gemma"]) == 2 and "'port gemma'" in capsys.readouterr().err
    assert config._main(["nosuch-key"]) == 2 and "unknown key 'nosuch-key'" in capsys.readouterr().err
    assert config._main(["models"]) == 0 and capsys.readouterr().out.split() == list(config.MODELS)


def test_the_knn_vectorizer_is_offline_and_finds_the_near_question():
    questions = ["who wrote the novel hamlet", "when did the titanic sink", "capital city of france"]
    embed = HashingTfidf(questions)
    vectors = embed([f"question: {q}" for q in questions])
    query = embed(["question: in what year did the titanic sink"])
    assert vectors.shape == (3, embed.dims) and int((vectors @ query.T).argmax()) == 1


def test_the_gate_renders_a_system_message_as_gemmas_template_does_and_the_doctests_hold():
    body = {"messages": [{"role": "system", "content": "Fields: answer."}, {"role": "user", "content": "Q1"},
                         {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]}
    assert gate.merge_system(body) and [m["content"] for m in body["messages"]] == ["Fields: answer.\n\nQ1", "A1", "Q2"]
    assert not gate.merge_system({"messages": [{"role": "user", "content": "Q"}]})
    assert config.MODELS["gemma"].merge_system and not config.MODELS["smollm2"].merge_system
    for module in (config, gate, peer, dspy_side):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_the_report_summarizes_each_compile_setting_over_its_seeds_apart(column, tmp_path):
    # run.sh's compiles and a tagged trial's (or an earlier compiler's) are different settings: their seeds'
    # mean and spread are given apart, never mixed into one.
    data, ours = column
    out = tmp_path / "column"
    out.mkdir()
    stem = data["stem"]
    names = [f"{stem}-dsp-compiled_nq-dsp-small-seed{s}-seed0.jsonl" for s in (0, 1)]
    names += [f"{stem}-dsp-compiled_nq-dsp-small-pre-tiefix-seed{s}-seed0.jsonl" for s in (0, 1, 2)]
    for name in names:
        (out / name).write_bytes(ours.read_bytes())
    text = peer.report("gemma", "nq", out, 3)
    summaries = [line for line in text.splitlines() if line.startswith("dsp compile over")]
    assert len(summaries) == 2
    assert summaries[0].startswith(f"dsp compile over 2 seeds ({stem}-dsp-compiled_nq-dsp-small):")
    assert summaries[1].startswith(f"dsp compile over 3 seeds ({stem}-dsp-compiled_nq-dsp-small-pre-tiefix):")
    assert "mean 33.3, sd 0.0" in summaries[1]
    assert (out / "report.md").read_text(encoding="utf-8") == text + "\n"
    # run.sh --compile-tag names the compiler whose seed 0 leads the comparison (every run paired with it)
    (out / f"{stem}-dsp-compiled_nq-dsp-small-readings-seed0-seed0.jsonl").write_bytes(ours.read_bytes())
    for tag, lead in (("", "nq-dsp-small-seed0"), ("readings", "nq-dsp-small-readings-seed0")):
        rows = peer.report("gemma", "nq", out, 3, tag).split("```")[1].strip().splitlines()
        assert rows[0].startswith("run ") and rows[1].startswith(f"{stem}-dsp-compiled_{lead}-seed0 "), (tag, rows[1])
    # a run not extended to --n yet is named apart, not compared on part of the questions (nor a failure)
    short = out / f"{stem}-retrieve_then_read-seed0.jsonl"
    short.write_text("".join(ours.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")
    text = peer.report("gemma", "nq", out, 3)
    assert short.stem not in text.split("```")[1] and "Left out at --n 3 (fewer questions so far" in text
    assert f"{short.name} (2)" in text and short.stem in peer.report("gemma", "nq", out, 2).split("```")[1]
    # a DSPy compile's cost has none of dsp's search rows: those cells say so ("—"), never "None"
    (out / "dspy").mkdir()
    bootstrap = f"{stem}-dspy-rtr_predict-bootstrap-chat-seed0"
    (out / "dspy" / f"{bootstrap}.cost.json").write_text(json.dumps(
        {"wall_seconds": 907.4, "lm_calls": 191,
         "server": {"lm_requests": 191, "prompt_tokens": 300416, "completion_tokens": 28650}}))
    assert f"| {bootstrap} | 907.4 | — | 191 | 191 | — | 300416 | 28650 |" in peer.report("gemma", "nq", out, 3)
    # a DSPy compile committed unfinished is named with what it has spent so far, over its sittings
    mipro = f"{stem}-dspy-rtr_predict-mipro-chat-seed0"
    sitting = {"wall_seconds": 600.0, "lm_calls": 40, "replayed": 0,
               "server": {"lm_requests": 40, "prompt_tokens": 9000, "completion_tokens": 600}}
    (out / "dspy" / f"{mipro}.compile-ledger.json").write_text(json.dumps({"header": {}, "invocations": [sitting] * 2}))
    (out / "dspy" / f"{mipro}.compile-replay.jsonl").write_text('{"key": "a"}\n' * 80 + '{"key": "torn')
    assert f"| {mipro} | 2 | 1200 | 80 | 18000 | 1200 | 80 |" in peer.report("gemma", "nq", out, 3)
    (out / "dspy" / f"{mipro}.compile-ledger.json").write_text('{"header": {}, "invocations": 3}')
    with pytest.raises(ValueError, match=f"dspy/{mipro}.compile-ledger.json: not a compile ledger"):
        peer.report("gemma", "nq", out, 3)


def test_a_compile_rerun_on_a_warm_cache_keeps_the_first_runs_cost(tmp_path):
    compiled = tmp_path / "nq-dsp-small-seed0.json"
    compiled.write_text(json.dumps({"meta": {"seed": 0, "lm_usage": {"requests": 0, "cached_requests": 0},
                                             "rows_usage": {"requests": 3326}}}))
    counters = {name: tmp_path / f"{name}.json" for name in ("zero", "first", "again")}
    counters["zero"].write_text(json.dumps({"lm_requests": 0, "prompt_tokens": 0}))
    counters["first"].write_text(json.dumps({"lm_requests": 3000, "prompt_tokens": 2_600_000}))
    counters["again"].write_text(json.dumps({"lm_requests": 3000, "prompt_tokens": 2_600_000}))
    out = tmp_path / "c.cost.json"
    assert peer.main(["compile-cost", "--compiled", str(compiled), "--before", str(counters["zero"]),
                      "--after", str(counters["first"]), "--wall", "2222", "--out", str(out)]) == 0
    first = json.loads(out.read_text())
    assert first["server"]["lm_requests"] == 3000 and "rerun" not in first
    # The rerun reached the server 0 times: the first measurement stays, the rerun's goes under "rerun".
    assert peer.main(["compile-cost", "--compiled", str(compiled), "--before", str(counters["first"]),
                      "--after", str(counters["again"]), "--wall", "3", "--previous", str(out),
                      "--out", str(out)]) == 0
    kept = json.loads(out.read_text())
    assert kept["server"]["lm_requests"] == 3000 and kept["wall_seconds"] == 2222
    assert kept["rerun"]["server"]["lm_requests"] == 0 and kept["rerun"]["wall_seconds"] == 3
    assert peer.compile_calls(kept) == 3326
    # Without the earlier cost, a rerun is what it is.
    assert peer.main(["compile-cost", "--compiled", str(compiled), "--before", str(counters["first"]),
                      "--after", str(counters["again"]), "--wall", "3", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["server"]["lm_requests"] == 0


@pytest.mark.parametrize("extra, code, said", [
    (["--compile-tag", "readings", "--compile-only"], 0, "dsp:compiled-seed2"),
    (["--compile-tag", "new compiler"], 2, "--compile-tag takes letters, digits and _"),
])
def test_run_sh_takes_a_compile_tag_and_compile_only(extra, code, said):
    """A changed compiler's files get a name of their own (-TAG); a tag that would break a file name is refused
    before anything starts (--list: the units only, no server)."""
    script = Path(__file__).resolve().parents[1] / "bench" / "peer" / "run.sh"
    done = subprocess.run(["bash", str(script), "--lm", "gemma", "--dataset", "squad", "--only", "dsp:compiled",
                           *extra, "--list"], capture_output=True, text=True, timeout=60)
    assert done.returncode == code and said in done.stdout + done.stderr, done.stderr


_KILLED_COMPILE = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from dspy_side import CompileLedger, _keep_ledger
counters = Path(sys.argv[2])
ledger = CompileLedger(Path(sys.argv[3]), {"config": "rtr_predict-rs-chat"},
                       lambda: json.loads(counters.read_text()), lambda: 120)
ledger.start()
_keep_ledger(ledger, every=3600)  # only SIGTERM checkpoints here
counters.write_text(json.dumps({"lm_requests": 400, "prompt_tokens": 90000}))
print("compiling", flush=True)
time.sleep(60)
"""


def test_a_dspy_compile_stopped_by_sigterm_and_resumed_reports_the_spend_of_both_invocations(tmp_path):
    counters, ledger_path = tmp_path / "gate.json", tmp_path / "c.compile-ledger.json"
    counters.write_text(json.dumps({"lm_requests": 100, "prompt_tokens": 10000}))
    child = subprocess.Popen([sys.executable, "-c", _KILLED_COMPILE, str(PEER), str(counters), str(ledger_path)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "compiling"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 128 + signal.SIGTERM
    (first,) = json.loads(ledger_path.read_text())["invocations"]
    assert first["server"] == {"lm_requests": 300, "prompt_tokens": 80000, "completion_tokens": 0,
                               "rm_requests": 0, "lm_errors": 0}

    # Resumed: 300 of its calls replayed from the cache, 50 new ones reach the server.
    calls = [0]
    resumed = CompileLedger(ledger_path, {"config": "rtr_predict-rs-chat"},
                            lambda: json.loads(counters.read_text()), lambda: calls[0])
    resumed.start()
    counters.write_text(json.dumps({"lm_requests": 450, "prompt_tokens": 95000}))
    calls[0] = 350
    spent = resumed.finish()
    assert spent["server"]["lm_requests"] == 350 and spent["server"]["prompt_tokens"] == 85000
    assert spent["lm_calls"] == 350 and len(spent["invocations"]) == 2 and not ledger_path.exists()
    assert peer.compile_calls(spent) == 350

    # A compile that raises stops its checkpoints with release(), which writes its last counts first.
    served = {"lm_requests": 0}
    raised = CompileLedger(ledger_path, {"config": "rtr_predict-rs-chat"}, lambda: dict(served), lambda: 8)
    raised.start()
    release = dspy_side._keep_ledger(raised, every=3600)
    served["lm_requests"] = 8
    release()
    assert json.loads(ledger_path.read_text())["invocations"][-1]["server"]["lm_requests"] == 8
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    # Another configuration's ledger is refused, not summed into this one.
    ledger_path.write_text(json.dumps({"header": {"config": "rtr_predict-mipro-chat"}, "invocations": [first]}))
    other = CompileLedger(ledger_path, {"config": "rtr_predict-rs-chat"}, lambda: {}, lambda: 0)
    with pytest.raises(SystemExit, match="another configuration"):
        other.start()


def test_results_md_states_where_each_column_stands_as_the_committed_files_say():
    """RESULTS.md's "Where each column stands" is `peer.py scoreboard` over results/peer, row for row."""
    rows = peer.scoreboard(PEER.parents[1] / "results" / "peer").splitlines()
    results = (PEER.parents[1] / "RESULTS.md").read_text(encoding="utf-8")
    assert len(rows) > 2
    missing = [row for row in rows if row not in results.splitlines()]
    assert not missing, "RESULTS.md lacks (rerun bench/peer/peer.py scoreboard):\n" + "\n".join(missing)
