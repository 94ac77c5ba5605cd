"""Issue 29, items 6 and 7: no credential from an --lm/--rm URL is ever written or shown.

- a compiled file's specs (`rm`, `meta.lm`, `meta.rm`, `meta.lm_spec`, `meta.rm_spec`) are redacted by the
  one redaction function (`dsp.clients.retry.redact_urls`), as are results headers, logs and errors; a
  redacted spec cannot be rebuilt, and says how to give the credentials back;
- ``openai-compatible:http://user:pass@host/v1`` without ``model=`` lists the server's models with the
  credentials sent as the client sends them (Basic auth), and no error shows the password.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading

import pytest
from compile_programs import reader
from helpers import ListRM

import dsp
from dsp.clients.retry import RetriesExhausted, RetryPolicy, redact_urls
from dsp.clients.specs import SpecError, check_lm_spec
from dsp.compiling import Compiled, DemoSpace, Space
from loopback_server import JSONHandler, LoopbackServer
from slow_lm_server import SlowLMServer

PASSWORD = "pa55-W0rd-s3cret"
TOKEN = "tok-9f8e7d6c5b4a"
BASIC = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


def _with_credentials(url: str) -> str:
    """http://127.0.0.1:PORT/v1 -> http://alice:PASSWORD@127.0.0.1:PORT/v1"""
    return url.replace("http://", f"http://alice:{PASSWORD}@", 1)


def _secret_free(text: str) -> bool:
    return PASSWORD not in text and TOKEN not in text and BASIC.split()[1] not in text


def test_redact_urls_blanks_userinfo_and_secret_parameters_only():
    assert redact_urls(f"openai-compatible:http://alice:{PASSWORD}@h:8000/v1,model=m") == \
        "openai-compatible:http://***@h:8000/v1,model=m"
    assert redact_urls(f"colbertv2:https://h/api/search?k=3&api_key={TOKEN},post=1") == \
        "colbertv2:https://h/api/search?k=3&api_key=***,post=1"
    assert redact_urls("bm25:/data/sk-passages-2018.jsonl.gz") == "bm25:/data/sk-passages-2018.jsonl.gz"
    assert redact_urls("llamacpp:,n_ctx=8192") == "llamacpp:,n_ctx=8192"


def test_a_compiled_file_holds_no_credential(tmp_path):
    with SlowLMServer(delay=0) as server:
        lm_spec = f"openai-compatible:{_with_credentials(server.url)},model=slow"
        rm_spec = f"colbertv2:http://bob:{PASSWORD}@127.0.0.1:9/api/search?token={TOKEN}"
        lm = dsp.lm_from_spec(lm_spec)
        rm = ListRM([("a passage", 1.0)])
        rm.spec = rm_spec
        train = [dsp.Example(question=f"what is q{i}?", answer=[f"a{i}"]) for i in range(20)]
        space = Space(demos=DemoSpace(kinds=("raw",), ks=(1,), selects=("random",), seeds=1))
        with dsp.settings.context(lm=lm, rm=rm):
            compiled = dsp.compile(reader, train, dsp.EM, dsp.CompileConfig(space=space, candidates=2, val=10, progress=False))
            # The results header of a run with these clients: no credential either.
            dsp.evaluate(compiled, train[:2], dsp.EM, out=tmp_path / "run.jsonl", progress=False, display=False)
    assert compiled.meta["lm"] == lm_spec and compiled.meta["rm"] == rm_spec  # in memory, as given
    compiled.meta.update(lm_spec=lm_spec, rm_spec=rm_spec)  # what `dsp compile` adds
    compiled.rm_spec = rm_spec
    path = compiled.save(tmp_path / "c.json")
    text = path.read_text()
    assert _secret_free(text), text
    saved = json.loads(text)
    assert saved["meta"]["lm"] == saved["meta"]["lm_spec"] == redact_urls(lm_spec)
    assert saved["rm"] == saved["meta"]["rm"] == saved["meta"]["rm_spec"] == "colbertv2:http://***@127.0.0.1:9/api/search?token=***"
    assert _secret_free((tmp_path / "run.jsonl").read_text())
    # The digest is of what is saved: the same program in memory and loaded back.
    loaded = dsp.load_compiled(path)
    assert loaded.digest() == compiled.digest()
    # A redacted spec cannot be built again: the error says how to give the credentials back.
    with pytest.raises(SpecError, match=r"saved with its credentials blanked \(\*\*\*\).*--rm"):
        loaded.retriever()


def test_errors_and_logs_show_no_credential(caplog):
    with pytest.raises(SpecError) as raised:
        check_lm_spec(f"nosuch:http://alice:{PASSWORD}@h/v1")
    assert _secret_free(str(raised.value)) and "***@h" in str(raised.value)
    with pytest.raises(SpecError, match="saved with its credentials blanked"):
        dsp.lm_from_spec("openai-compatible:http://***@127.0.0.1:9/v1,model=m")
    # Nothing listens on the port: every retry is logged, then one error; the password in none of them.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lm = dsp.OpenAI("m", base_url=f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1?api_key={TOKEN}", model_type="text",
                    retry_policy=RetryPolicy(max_retries=1, base_delay=0.0), timeout=2)
    with caplog.at_level(logging.WARNING, logger="dsp.retry"), pytest.raises(RetriesExhausted) as raised:
        lm("Question: q?\nAnswer:", cache=False)
    assert caplog.records and all(_secret_free(r.getMessage()) for r in caplog.records)
    assert _secret_free(str(raised.value)) and _secret_free(repr(lm))


class _AuthHandler(JSONHandler):
    """/v1/models for Basic-auth credentials only; a 401 echoes what it got, as careless servers do."""

    def do_GET(self) -> None:
        owner: AuthServer = self.server.owner
        with owner.lock:
            owner.seen.append((self.path, self.headers.get("Authorization")))
        if self.route != "/v1/models":
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
        elif self.headers.get("Authorization") != BASIC:
            self.send_json(401, {"error": {"message": f"bad credentials: {self.headers.get('Authorization')}"}})
        else:
            self.send_json(200, {"object": "list", "data": [{"id": "auth-model", "object": "model"}]})


class AuthServer(LoopbackServer):
    handler = _AuthHandler
    name = "auth-server"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()


def test_listing_models_sends_the_urls_credentials_as_basic_auth():
    with AuthServer() as server:
        lm = dsp.lm_from_spec(f"openai-compatible:{_with_credentials(server.url)}")
        assert lm.model == "auth-model"
        assert server.seen == [("/v1/models", BASIC)]  # in the header, never in the request's URL
        assert _secret_free(repr(lm)) and _secret_free(json.dumps(lm.cache_identity()))


def test_a_failed_model_listing_never_shows_the_password():
    with AuthServer() as server:
        wrong = server.url.replace("http://", "http://alice:not-the-pa55word@", 1)
        with pytest.raises(SpecError) as raised:
            dsp.lm_from_spec(f"openai-compatible:{wrong}")
        message = str(raised.value)
        assert "cannot list the models of http://***@127.0.0.1" in message and "name one with ,model=NAME" in message
        assert "not-the-pa55word" not in message and "\n" not in message
        assert base64.b64encode(b"alice:not-the-pa55word").decode() not in message  # the server's echo, blanked
    # Nothing listening any more: the connection error names the URL without its credentials.
    with pytest.raises(SpecError) as raised:
        dsp.lm_from_spec(f"openai-compatible:{_with_credentials(server.url)}")
    assert "cannot list the models of http://***@127.0.0.1" in str(raised.value) and _secret_free(str(raised.value))


def test_run_compiled_with_a_redacted_retriever_takes_its_credentials_from_rm(data_dir, tmp_path, capsys):
    """The compiled file keeps `colbertv2:http://***@host/...`; `dsp run --compiled` refuses to build it
    (before any model loads) and accepts `--rm` with that spec's credentials, and no other --rm."""
    from programs import open_qa
    from programs.cli import main
    from serve_helpers import TinyRM, served

    with served(TinyRM()) as rm_server, SlowLMServer(delay=0) as lm_server:
        full = f"colbertv2:{_with_credentials(rm_server.url)}/api/search"
        compiled = Compiled(open_qa.retrieve_then_read, {"k": 1}, [dsp.Example(question="q?", answer=["a"])],
                            rm_spec=full)
        path = compiled.save(tmp_path / "c.json")
        assert _secret_free(path.read_text())
        base = ["run", "retrieve_then_read", "--dataset", "nq", "--n", "1", "--compiled", str(path),
                "--lm", lm_server.spec, "--out", str(tmp_path / "runs")]
        assert main(base) == 2
        err = capsys.readouterr().err
        assert "saved with its credentials blanked" in err and err.count("\n") == 1 and _secret_free(err), err
        assert main(base + ["--rm", f"colbertv2:{rm_server.url}/other"]) == 2
        assert "chose its retriever" in capsys.readouterr().err
        assert main(base + ["--rm", full]) == 0
    shown = capsys.readouterr()
    assert _secret_free(shown.out + shown.err)
    (results,) = (tmp_path / "runs").glob("*.jsonl")
    assert _secret_free(results.read_text())

