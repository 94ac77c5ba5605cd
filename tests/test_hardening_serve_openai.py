"""dsp.OpenAI with credentials in its base URL (issue 15, fault 10): ``http://user:secret@host/v1`` still
authenticates as before, and the password is in no log record (the HTTP layer's included), repr, error,
retry message or cache entry."""

from __future__ import annotations

import base64
import json
import logging
import secrets
import string
import traceback
from urllib.parse import quote

import pytest

import dsp
from dsp.clients.openai import OpenAI, normalize_base_url
from dsp.clients.retry import RequestRejected, RetriesExhausted, RetryPolicy, ServiceError
from fault_server import FaultServer, expected_text
from serve_helpers import closed_port

__all__: list[str] = []

FAST = RetryPolicy(max_retries=2, base_delay=0.001, max_delay=0.01)
USER = "dsp-user"


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def password() -> str:
    # '@', ':' and '/' must be percent-encoded in a URL: the decoded and the encoded form are both secrets.
    return "pw@:/" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(24))


def with_userinfo(url: str, password: str) -> str:
    return url.replace("http://", f"http://{USER}:{quote(password, safe='')}@", 1)


def secret_forms(password: str) -> list[str]:
    """Every way the password could show: as given, percent-encoded, its tail, and the Basic token."""
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    return [password, quote(password, safe=""), password[5:], token]


def scan(texts: list[str], password: str) -> None:
    for text in texts:
        for form in secret_forms(password):
            assert form not in text, f"the password shows in: {text[:300]!r}"


def test_userinfo_in_base_url_authenticates_and_never_shows(password, tmp_path, caplog):
    key = "sk-test-" + secrets.token_hex(12)
    cache_dir = tmp_path / "cache"
    errors: list[BaseException] = []
    with FaultServer(fault_rate=0.3, seed=5, kinds=("500", "503", "reset")) as server, \
            dsp.settings.context(cache_dir=str(cache_dir)), caplog.at_level(logging.DEBUG):
        url = with_userinfo(server.url, password)
        text_lm = OpenAI("fault-model", base_url=url, api_key=key, model_type="text", retry_policy=FAST)
        chat_lm = OpenAI("fault-model", base_url=url, api_key=key, model_type="chat", retry_policy=FAST)
        for i in range(6):
            for lm in (text_lm, chat_lm):
                try:
                    assert lm(f"Question {i}?\nAnswer:") == [expected_text(f"Question {i}?\nAnswer:")]
                except ServiceError as error:
                    errors.append(error)
        # As before: the URL's user and password go as HTTP Basic credentials (which take the
        # Authorization header's place), percent-decoded.
        token = base64.b64encode(f"{USER}:{password}".encode()).decode()
        assert server.authorizations == {f"Basic {token}"}
        plain = OpenAI("fault-model", base_url=server.url, api_key=key, model_type="text", retry_policy=FAST)
        assert text_lm.cache_identity() == plain.cache_identity()  # the cache key holds no userinfo
        assert text_lm.base_url == server.url

        with FaultServer(always=(500, "boom", None)) as failing:
            with pytest.raises(RetriesExhausted) as exhausted:
                OpenAI("fault-model", base_url=with_userinfo(failing.url, password), api_key=key,
                       model_type="text", retry_policy=FAST)("Question: fail?\nAnswer:")
            errors.append(exhausted.value)
        with FaultServer(always=(401, "Incorrect credentials", "invalid_api_key")) as refusing:
            with pytest.raises(RequestRejected) as rejected:
                OpenAI("fault-model", base_url=with_userinfo(refusing.url, password), api_key=key,
                       model_type="text", retry_policy=FAST)("Question: who?\nAnswer:")
            errors.append(rejected.value)
        unreachable = OpenAI("fault-model", base_url=with_userinfo(f"http://127.0.0.1:{closed_port()}/v1", password),
                             api_key=key, model_type="text", retry_policy=FAST)
        with pytest.raises(RetriesExhausted) as refused:
            unreachable("Question: anyone there?\nAnswer:")
        errors.append(refused.value)
    assert text_lm.retries + chat_lm.retries > 0  # retry warnings were logged, and are scanned below
    assert any(r.name.startswith("httpx") for r in caplog.records)  # the HTTP layer's records were captured
    assert len(errors) >= 3

    seen = [caplog.text, *(r.getMessage() for r in caplog.records), *(repr(r.args) for r in caplog.records)]
    for lm in (text_lm, chat_lm, unreachable):
        seen += [repr(lm), str(lm), repr(vars(lm)), json.dumps(lm.cache_identity()), lm._retrier.service,
                 json.dumps(list(lm.history), default=str), repr(lm.retry_stats)]
    seen += ["".join(traceback.format_exception(e)) + repr(e) + repr(vars(e)) for e in errors]
    scan(seen, password)
    files = [p for p in cache_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        scan([path.read_bytes().decode("utf-8", "replace")], password)


@pytest.mark.parametrize("template", [
    "http://{u}:{p}@host:99999/v1",      # a bad port
    "ftp://{u}:{p}@host/v1",             # not http(s)
    "http://{u}:{p}@/v1",                # no host
])
def test_a_bad_base_url_is_named_without_its_password(password, template):
    url = template.format(u=USER, p=quote(password, safe=""))
    with pytest.raises(ValueError) as error:
        normalize_base_url(url)
    with pytest.raises(ValueError) as from_client:
        OpenAI("m", base_url=url, api_key="sk-x")
    for raised in (error.value, from_client.value):
        shown = str(raised) + "".join(traceback.format_exception(raised))
        scan([shown], password)
        assert "***@" in str(raised)  # the URL is still named, its userinfo redacted


def test_a_user_without_password_is_kept_as_before(tmp_path):
    with FaultServer() as server:
        lm = OpenAI("fault-model", base_url=server.url.replace("http://", "http://only-user@"), api_key="sk-x",
                    model_type="text", retry_policy=FAST)
        assert lm("Q: hi?\nA:") == [expected_text("Q: hi?\nA:")]
        assert server.authorizations == {"Basic " + base64.b64encode(b"only-user:").decode()}
        assert "only-user" not in repr(lm) and "only-user" not in json.dumps(lm.cache_identity())
