"""dsp.serve: any RM behind the ColBERTv2 server API, checked over loopback with the standard library only."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from dsp.clients.bm25 import BM25
from dsp.serve import MAX_K, load_index, make_server
from serve_helpers import PASSAGES, TinyRM, served

ROOT = Path(__file__).resolve().parent.parent


def fetch(url: str, body: Any = None, method: str | None = None, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def expected_topk(rm: TinyRM, query: str, k: int) -> list[dict[str, Any]]:
    """What the API must answer: the RM's own passages in the ColBERTv2 shape."""
    return [{"text": p.long_text, "pid": p.id, "rank": p.rank, "score": p.score, "prob": p.prob}
            for p in rm(query, k=k, cache=False)]


@pytest.fixture
def server():
    with served(TinyRM()) as running:
        yield running


@pytest.mark.parametrize("path", ["/", "/api/search", "/api/search/"])
def test_get_answers_like_the_rm(server, path):
    query = "Who wrote the tragedy Hamlet?"
    status, payload = fetch(f"{server.url}{path}?{urlencode({'query': query, 'k': 3})}")
    assert status == 200
    assert payload["query"] == query and payload["k"] == 3
    assert payload["topk"] == expected_topk(TinyRM(), query, 3)
    first = payload["topk"][0]
    assert first["pid"] == "p0" and first["text"].startswith("Hamlet | Hamlet is a tragedy")
    assert [p["rank"] for p in payload["topk"]] == [1, 2, 3]
    assert sum(p["prob"] for p in payload["topk"]) == pytest.approx(1.0)


def test_post_json_body_answers_like_get(server):
    query = "capital city of Italy"
    status, posted = fetch(f"{server.url}/api/search", {"query": query, "k": 4})
    assert status == 200
    _, got = fetch(f"{server.url}/api/search?{urlencode({'query': query, 'k': 4})}")
    assert posted == got
    assert posted["topk"][0]["pid"] == "p4"  # Rome
    status, at_root = fetch(f"{server.url}/", {"query": query, "k": 4})
    assert status == 200 and at_root == posted


def test_k_is_honoured_defaulted_and_capped():
    rm = TinyRM()
    with served(rm, max_k=5) as server:
        for k in (1, 2, 5):
            _, payload = fetch(f"{server.url}/?query=river+Europe&k={k}")
            assert len(payload["topk"]) == k and payload["k"] == k
        _, capped = fetch(f"{server.url}/?query=river+Europe&k=9")
        assert capped["k"] == 5 and len(capped["topk"]) == 5
    with served(rm) as server:
        _, default = fetch(f"{server.url}/?query=river+Europe")
        assert default["k"] == 10 and len(default["topk"]) == 10
        _, everything = fetch(f"{server.url}/?query=river+Europe&k=500")
        assert everything["k"] == MAX_K and len(everything["topk"]) == len(PASSAGES)


@pytest.mark.parametrize("params, message", [
    ({"k": 3}, "missing 'query'"),
    ({"query": "", "k": 3}, "query is empty"),
    ({"query": "   ", "k": 3}, "query is empty"),
    ({"query": "rivers", "k": 0}, "k must be a positive integer"),
    ({"query": "rivers", "k": -2}, "k must be a positive integer"),
    ({"query": "rivers", "k": "three"}, "k must be a positive integer"),
    ({"query": "rivers", "k": "2.5"}, "k must be a positive integer"),
    ({"query": "rivers", "k": ""}, "k must be a positive integer"),
])
def test_bad_get_requests_are_400_with_a_json_error(server, params, message):
    status, payload = fetch(f"{server.url}/api/search?{urlencode(params)}")
    assert status == 400
    assert message in payload["error"]
    assert server.searches == 0  # rejected before reaching the RM


@pytest.mark.parametrize("raw, message", [
    (b'{"query": "rivers", "k": 2.0}', "k must be a positive integer"),
    (b'{"query": "rivers", "k": true}', "k must be a positive integer"),
    (b'{"query": 42, "k": 2}', "'query' must be text"),
    (b'{"query": "rivers"', "not valid JSON"),
    (b'["rivers", 2]', "must be a JSON object"),
    (b'', "must be a JSON object"),
])
def test_bad_post_bodies_are_400(server, raw, message):
    status, payload = fetch(f"{server.url}/api/search", raw=raw, method="POST")
    assert status == 400
    assert message in payload["error"]


def test_unknown_paths_methods_and_health(server):
    status, payload = fetch(f"{server.url}/search?query=x")
    assert status == 404 and "/api/search" in payload["error"]
    status, payload = fetch(f"{server.url}/api/search", {"query": "x"}, method="PUT")
    assert status == 405 and "PUT" in payload["error"]
    fetch(f"{server.url}/?query=rivers&k=1")
    status, health = fetch(f"{server.url}/health")
    assert status == 200 and health["status"] == "ok" and health["searches"] == 1
    assert "TinyRM" in health["rm"]


def test_rm_failure_is_a_500_and_the_server_keeps_serving():
    class Flaky(TinyRM):
        def _search(self, query, k, **params):
            if "explode" in query:
                raise RuntimeError("index shard 3 is missing")
            return super()._search(query, k)

    with served(Flaky()) as server:
        status, payload = fetch(f"{server.url}/?query=explode&k=2")
        assert status == 500
        assert "RuntimeError" in payload["error"] and "index shard 3 is missing" in payload["error"]
        status, payload = fetch(f"{server.url}/?query=rivers&k=2")
        assert status == 200 and len(payload["topk"]) == 2


def test_keep_alive_serves_several_requests_on_one_connection(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    try:
        answers = []
        for query in ("Hamlet", "Python creator", "highest mountain"):
            connection.request("GET", f"/?{urlencode({'query': query, 'k': 2})}")
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("Connection") != "close"
            answers.append(json.loads(response.read())["topk"][0]["pid"])
            # http.client reopens a closed connection silently; the same socket object shows it did not.
            if len(answers) == 1:
                sock = connection.sock
            assert connection.sock is sock
        queries = ("Hamlet", "Python creator", "highest mountain")
        assert answers == [TinyRM()(q, k=2, cache=False)[0].id for q in queries] == ["p0", "p6", "p10"]
    finally:
        connection.close()


def test_a_duck_typed_rm_is_served_with_ranks_and_probs():
    def rm(query: str, k: int) -> list[Any]:
        return [{"text": "A | first", "score": 2.0, "id": 7}, "a bare string passage"][:k]

    with served(rm) as server:
        status, payload = fetch(f"{server.url}/?query=anything&k=2")
    assert status == 200
    topk = payload["topk"]
    assert [p["text"] for p in topk] == ["A | first", "a bare string passage"]
    assert [p["pid"] for p in topk] == [7, None]
    assert [p["rank"] for p in topk] == [1, 2]
    assert topk[0]["prob"] > topk[1]["prob"] and sum(p["prob"] for p in topk) == pytest.approx(1.0)


def test_concurrent_requests_all_get_their_own_answer(server):
    queries = ["Hamlet", "Paris France", "Danube river", "K2 mountain", "Guido Python", "Berlin Germany"] * 3
    results: dict[int, str] = {}

    def ask(i: int, query: str) -> None:
        _, payload = fetch(f"{server.url}/?{urlencode({'query': query, 'k': 1})}")
        results[i] = payload["topk"][0]["pid"]

    threads = [threading.Thread(target=ask, args=(i, q)) for i, q in enumerate(queries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    expected = {q: TinyRM()(q, k=1, cache=False)[0].id for q in set(queries)}
    assert results == {i: expected[q] for i, q in enumerate(queries)}


def test_make_server_rejects_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        make_server("not an rm", port=0)
    with pytest.raises(ValueError, match="max_k"):
        make_server(TinyRM(), port=0, max_k=0)
    with pytest.raises(ValueError, match="port"):
        make_server(TinyRM(), port=70000)


def test_a_port_in_use_is_a_clear_error(server):
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{server.server_address[1]}"):
        make_server(TinyRM(), port=server.server_address[1])


def test_a_missing_index_is_named(capsys, tmp_path):
    from programs.cli import main

    assert main(["serve", "--index", str(tmp_path / "nowhere.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "nowhere.jsonl: no such file or directory" in err and err.count("\n") == 1
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl: no such file"):
        load_index(tmp_path / "nowhere.jsonl")
    with pytest.raises(ValueError, match="needs a checkpoint"):
        load_index(tmp_path, backend="colbert")


# -- with the project's BM25 and the wiki17 sample (skipped only when DSP_DATA_DIR is unset) -----------------

def test_bm25_over_wiki17_served_like_direct_calls(data_dir):
    rm = BM25(data_dir / "hotpotqa" / "wiki17_abstracts_sample.jsonl.gz")
    queries = ["Who was born first, Tony Kaye or Deepa Mehta?", "Gordon Warnecke My Beautiful Laundrette"]
    with served(rm) as server:
        for query in queries:
            _, payload = fetch(f"{server.url}/api/search", {"query": query, "k": 5})
            direct = rm(query, k=5, cache=False)
            assert payload["topk"] == [{"text": p.long_text, "pid": p.id, "rank": p.rank, "score": p.score,
                                        "prob": p.prob} for p in direct]
            assert all(p["pid"].startswith("wiki17-") and " | " in p["text"] for p in payload["topk"])


@pytest.mark.parametrize("backend", [["--backend", "bm25"], ["--backend", "dense", "--vectorizer", "hashing"]],
                         ids=["bm25", "dense"])
def test_command_line_serves_a_passages_file(data_dir, tmp_path, backend):
    passages = data_dir / "hotpotqa" / "wiki17_abstracts_sample.jsonl.gz"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DSP_CACHE": "0"}
    process = subprocess.Popen(
        [sys.executable, "-m", "programs.cli", "serve", "--index", str(passages), *backend, "--port", "0",
         "--log-level", "INFO"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        for line in process.stderr:  # the server logs where it listens once it is ready
            found = re.search(r"serving .* at (http://127\.0\.0\.1:\d+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "the server exited without saying where it listens"
        status, payload = fetch(f"{url}/api/search?{urlencode({'query': 'Gordon Warnecke actor', 'k': 3})}")
        assert status == 200 and len(payload["topk"]) == 3
        assert all(p["pid"].startswith("wiki17-") and " | " in p["text"] for p in payload["topk"])
        if backend[1] == "bm25":
            assert payload["topk"][0]["text"].startswith("Gordon Warnecke | ")
        assert fetch(f"{url}/health")[1]["status"] == "ok"
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stderr.close()
