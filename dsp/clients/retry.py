"""Visible retries for HTTP clients: exponential backoff with full jitter, Retry-After honoured, clear errors.

The loop is tenacity's (`tenacity.Retrying`); this module decides what is retried, how long to wait
(`RetryPolicy.wait`), what is logged and counted, and which error a caller finally sees.

An *attempt* is a function that sends one request. When it fails it raises `Failure` (built with
`Failure.from_status` for an HTTP error status), or lets a standard-library network error escape
(`TimeoutError`, `ConnectionError`, `urllib.error.HTTPError`, a `json` decoding error, ...).
`Retrier.call(attempt)` then:

- retries what is worth retrying (HTTP 408/429/500/502/503/504, timeouts, connection errors and resets,
  unparseable or truncated bodies), after a jittered exponential wait that is never shorter than the
  server's Retry-After; every retry is a warning on the ``dsp.retry`` logger and a count on the retrier;
- raises `RetriesExhausted` when `max_retries` retries did not help;
- raises `RequestRejected` at once for what a retry cannot fix (400, 401/403 bad credentials, 404
  unknown model or wrong URL, ...), and `dsp.clients.lm.ContextLengthExceeded` (the one error every
  client raises for it) when the server says the prompt is too long.

Messages name the service, the model, the URL, the status and the attempts; known secrets are blanked
from every message this module logs or raises. `redact_urls` is the one function that blanks the
credentials a URL or a client spec may carry (``user:password@``, ``?api_key=...``): compiled files,
results headers, logs and error messages all show specs through it.

>>> retrier = Retrier(RetryPolicy(max_retries=2, base_delay=0.0), service="demo server", sleep=lambda s: None)
>>> outcomes = iter([Failure.from_status(503, "busy"), "ok"])
>>> def attempt():
...     outcome = next(outcomes)
...     if isinstance(outcome, Failure):
...         raise outcome
...     return outcome
>>> retrier.call(attempt)
'ok'
>>> retrier.retries, dict(retrier.failed_attempts)
(1, {'HTTP 503': 1})
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import math
import random
import re
import threading
import time
import urllib.error
from collections import Counter
from dataclasses import dataclass
from datetime import timezone
from typing import Any, Callable, Iterable, Mapping, TypeVar

import tenacity

from ..utils import check_nonnegative_int, is_number
from .lm import ContextLengthExceeded

__all__ = [
    "RetryPolicy", "Retrier", "Failure", "ServiceError", "RetriesExhausted", "RequestRejected",
    "RETRY_STATUSES", "parse_retry_after", "retry_after_from_headers", "classify_exception", "redact",
    "redact_urls", "SECRET_PARAMS", "REDACTED",
]

log = logging.getLogger("dsp.retry")
T = TypeVar("T")

# Statuses a later attempt can succeed on: overload, rate limits, gateway hiccups, request timeouts.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
RETRYABLE_KINDS = frozenset({"rate_limited", "server_error", "timeout", "connection", "bad_response"})

# What servers (OpenAI, vLLM, llama.cpp, TGI, Ollama) say when the prompt does not fit the context window.
_CONTEXT_TOO_LONG = re.compile(
    r"context[_ ]length|maximum context|context window|context size|exceeds? (the )?(model'?s? )?context|n_ctx|"
    r"too many tokens|prompt is too long|input is too long|reduce (the length|your prompt)",
    re.IGNORECASE,
)
# Key-shaped strings a server may echo back ("Incorrect API key provided: sk-...").
_KEY_SHAPED = re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-*]{6,}|\bBearer\s+\S+", re.IGNORECASE)
_MESSAGE_LIMIT = 300  # server messages are quoted up to this many characters


REDACTED = "***"  # what a blanked credential reads as
# Query parameters whose values are credentials (OpenAI-style gateways, Azure SAS, signed URLs, tokens).
SECRET_PARAMS = frozenset({"key", "api_key", "api-key", "apikey", "x-api-key", "token", "access_token", "auth",
                           "authorization", "sig", "signature", "code", "password", "secret"})
# user[:password]@ right after a URL's scheme: greedy up to the authority's last "@" (a raw "@" in a
# password), never past the path, the query or the end of the quoted URL.
_USERINFO = re.compile(r"""([A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#'"]*@""")
# name=value in a query; in a spec the value ends at the next ",option=" (a comma inside a value stays in it).
_QUERY_PARAM = re.compile(r"""([?&;])([^=&\s#'"?]+)=((?:[^&\s#'",]|,(?![A-Za-z_][\w-]*=))*)""")


def redact_urls(text: str) -> str:
    """`text` (a URL, a client spec, a message) with every URL's ``user:password@`` and secret query values
    blanked; the rest, paths included, is left as it is. The one redaction of specs, wherever one is written.

    >>> redact_urls("openai-compatible:http://me:p@ss@host/v1?api_key=abc&v=2,model=x")
    'openai-compatible:http://***@host/v1?api_key=***&v=2,model=x'
    >>> redact_urls("bm25:/data/pk-passages.jsonl")
    'bm25:/data/pk-passages.jsonl'
    """
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _QUERY_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}" if m.group(2).lower() in SECRET_PARAMS
                            else m.group(0), text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every given secret, anything key-shaped (``sk-...``, ``Bearer ...``) and URL credentials
    (`redact_urls`) blanked.

    >>> redact("Incorrect API key provided: sk-abc123456789", ["sk-abc123456789"])
    'Incorrect API key provided: ***'
    """
    for secret in secrets:
        if secret and len(secret) >= 4:  # a tiny "secret" would blank ordinary words
            text = text.replace(secret, REDACTED)
    return redact_urls(_KEY_SHAPED.sub(REDACTED, text))


def _shorten(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "..."


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value: a number of seconds or an HTTP date; None if unusable.

    >>> parse_retry_after("2"), parse_retry_after("0.05"), parse_retry_after("soon")
    (2.0, 0.05, None)
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0)
    10.0
    """
    if value is None:
        return None
    value = str(value).strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # HTTP dates are GMT; a naive one from a sloppy server is too
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    try:
        value = headers.get(name)  # httpx, requests and urllib headers match names case-insensitively
    except AttributeError:
        return None
    if value is None and isinstance(headers, Mapping):  # a plain dict does not
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return value


def retry_after_from_headers(headers: Any, now: float | None = None) -> float | None:
    """The wait a response asks for: ``retry-after-ms`` (OpenAI's, in ms) or ``Retry-After``; else None.

    >>> retry_after_from_headers({"Retry-After": "2"}), retry_after_from_headers({"retry-after-ms": "250"})
    (2.0, 0.25)
    """
    milliseconds = _header(headers, "retry-after-ms")
    if milliseconds is not None:
        seconds = parse_retry_after(milliseconds, now)
        if seconds is not None:
            return seconds / 1000.0
    return parse_retry_after(_header(headers, "retry-after"), now)


class Failure(Exception):
    """One failed attempt, as the attempt reports it. `kind` decides whether it is retried.

    Kinds: ``rate_limited``, ``server_error``, ``timeout``, ``connection``, ``bad_response`` (retried);
    ``context_length``, ``bad_request``, ``auth``, ``not_found``, ``rejected`` (not retried).
    """

    def __init__(self, kind: str, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS

    @property
    def label(self) -> str:
        """How the failure is counted: ``HTTP 503``, ``timeout``, ``connection``, ``bad_response``."""
        return f"HTTP {self.status}" if self.status is not None else self.kind

    @classmethod
    def from_status(cls, status: int, message: str = "", headers: Any = None) -> "Failure":
        """Classify an HTTP error status; `message` is the server's error text, `headers` give Retry-After.

        >>> Failure.from_status(400, "This model's maximum context length is 2048 tokens").kind
        'context_length'
        """
        message = _shorten(message)
        if status == 429:
            return cls("rate_limited", message, status=status, retry_after=retry_after_from_headers(headers))
        if status in RETRY_STATUSES:
            return cls("server_error", message, status=status, retry_after=retry_after_from_headers(headers))
        if status in (400, 413, 422) and _CONTEXT_TOO_LONG.search(message or ""):
            return cls("context_length", message, status=status)
        if status == 400:
            return cls("bad_request", message, status=status)
        if status in (401, 403):
            return cls("auth", message, status=status)
        if status == 404:
            return cls("not_found", message, status=status)
        return cls("rejected", message, status=status)

    def describe(self) -> str:
        """One line for a log or an error: ``HTTP 429 (rate limited): slow down``."""
        what = {
            "rate_limited": "rate limited", "server_error": "server error", "timeout": "timed out",
            "connection": "connection failed", "bad_response": "unusable response",
        }.get(self.kind)
        head = self.label if what is None else (f"{self.label} ({what})" if self.status is not None else what)
        return f"{head}: {self.message}" if self.message else head


def classify_exception(error: BaseException) -> Failure | None:
    """A `Failure` for a standard-library network or decoding error; None for anything else (a bug).

    >>> classify_exception(ConnectionResetError(104, "reset")).kind, classify_exception(KeyError("x"))
    ('connection', None)
    """
    if isinstance(error, Failure):
        return error
    if isinstance(error, urllib.error.HTTPError):
        try:
            body = error.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            body = ""
        return Failure.from_status(error.code, body or str(error.reason), error.headers)
    if isinstance(error, urllib.error.URLError):
        reason = error.reason
        if isinstance(reason, BaseException):
            return classify_exception(reason) or Failure("connection", f"{type(reason).__name__}: {reason}")
        return Failure("connection", str(reason))
    if isinstance(error, TimeoutError):  # socket.timeout is TimeoutError since Python 3.10
        return Failure("timeout", str(error) or "no response in time")
    if isinstance(error, (ConnectionError, http.client.IncompleteRead, http.client.BadStatusLine)):
        return Failure("connection", f"{type(error).__name__}: {error}")
    if isinstance(error, json.JSONDecodeError):
        return Failure("bad_response", f"the response is not valid JSON (truncated?): {error}")
    return None


class ServiceError(RuntimeError):
    """A request to a model or index server failed for good. Names the service, status and attempts."""

    def __init__(
        self, message: str, *, service: str, kind: str, attempts: int, status: int | None = None,
        model: str | None = None, base_url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.service = service
        self.kind = kind
        self.attempts = attempts
        self.status = status
        self.model = model
        self.base_url = base_url


class RetriesExhausted(ServiceError):
    """Every allowed attempt failed with a retryable error (rate limit, overload, timeout, ...)."""


class RequestRejected(ServiceError):
    """The server refused the request in a way a retry cannot fix (400, 401, 403, 404, ...)."""


_ADVICE = {
    "context_length": "the prompt is too long for the model's context window; shorten it (fewer demos or "
                      "passages) or ask for fewer max_tokens",
    "bad_request": "the server rejected the request as invalid",
    "auth": "the server rejected the credentials; check the API key (api_key= or OPENAI_API_KEY)",
    "not_found": "not found: the model name is unknown to this server, or the base URL is wrong",
    "rejected": "the server refused the request",
}


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying: up to `max_retries` retries after the first attempt.

    The wait before retry i (from 0) is uniform in [0, min(max_delay, base_delay * 2**i)] ("full
    jitter": concurrent clients spread out instead of retrying in lockstep). When the server sends
    Retry-After, the wait is that plus up to `base_delay` of jitter; a server that asks for more than
    `max_retry_after` seconds gets a `RetriesExhausted` at once rather than a silent long stall.

    >>> RetryPolicy(base_delay=0.5, max_delay=4.0).wait(10, None, random.Random(0)) <= 4.0
    True
    """

    max_retries: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 120.0

    def __post_init__(self) -> None:
        check_nonnegative_int(self.max_retries, "max_retries")
        for name in ("base_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if not is_number(value) or not value >= 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")

    def wait(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry number `retry` (0 for the first retry)."""
        if retry_after is not None:
            return retry_after + rng.uniform(0.0, self.base_delay)
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** min(retry, 60))  # 2**60: no float overflow
        return rng.uniform(0.0, ceiling)


def _failure_of(state: tenacity.RetryCallState) -> Failure:
    """The retryable `Failure` the attempt just ended with (tenacity retries nothing else)."""
    error = state.outcome.exception() if state.outcome is not None else None
    if not isinstance(error, Failure):
        raise TypeError(f"a retry after something other than a Failure: {error!r:.120}")
    return error


class _PolicyWait(tenacity.wait.wait_base):
    """tenacity's wait as `RetryPolicy.wait` says: the server's Retry-After (plus jitter), else full jitter."""

    def __init__(self, policy: RetryPolicy, rng: random.Random, lock: threading.Lock) -> None:
        self.policy, self.rng, self.lock = policy, rng, lock

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        with self.lock:  # one Random shared by the client's threads
            return self.policy.wait(retry_state.attempt_number - 1, _failure_of(retry_state).retry_after, self.rng)


class _StopOnLongRetryAfter(tenacity.stop.stop_base):
    """Stop when the server asks for a longer wait than `policy.max_retry_after`: a loud error beats a stall."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        retry_after = _failure_of(retry_state).retry_after
        return retry_after is not None and retry_after > self.policy.max_retry_after


class Retrier:
    """Runs attempts under a `RetryPolicy`, logging and counting every retry. Thread-safe.

    `service` names the target in messages (e.g. ``OpenAI model 'gpt-4o-mini' at https://...``);
    `model`/`base_url` are copied onto the errors; `secrets` are blanked from every message;
    `classify` turns an escaped exception into a `Failure` (None: not a network failure, re-raised);
    `sleep` is `time.sleep` (replaceable, e.g. to record the waits).

    Counters: `attempts` (requests sent), `retries` (retries made), `failed_attempts` (by label, e.g.
    ``{"HTTP 429": 3}``, every failed attempt including final ones), `exhausted` and `rejected` (calls
    that raised).
    """

    def __init__(
        self, policy: RetryPolicy | None = None, *, service: str, model: str | None = None,
        base_url: str | None = None, secrets: Iterable[str] = (),
        classify: Callable[[BaseException], Failure | None] = classify_exception,
        sleep: Callable[[float], Any] = time.sleep, rng: random.Random | None = None,
    ) -> None:
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a RetryPolicy, got {type(policy).__name__}: {policy!r:.80}")
        self.policy = policy or RetryPolicy()
        self.service = service
        self.model = model
        self.base_url = base_url
        self._secrets = tuple(s for s in secrets if s)
        self.classify = classify
        self.sleep = sleep
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self.attempts = 0
        self.retries = 0
        self.failed_attempts: Counter[str] = Counter()
        self.exhausted = 0
        self.rejected = 0

    def stats(self) -> dict[str, Any]:
        """A snapshot of the counters."""
        with self._lock:
            return {"attempts": self.attempts, "retries": self.retries, "failed_attempts": dict(self.failed_attempts),
                    "exhausted": self.exhausted, "rejected": self.rejected}

    def call(self, attempt: Callable[[], T]) -> T:
        """`attempt()`'s result, retrying retryable failures; raises `RetriesExhausted` or `RequestRejected`."""
        policy = self.policy
        # The policy is read once per call (a client may be given another between calls); `self.sleep` at
        # each wait, so a test may swap it on a live client.
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda error: isinstance(error, Failure) and error.retryable),
            stop=tenacity.stop_after_attempt(policy.max_retries + 1) | _StopOnLongRetryAfter(policy),
            wait=_PolicyWait(policy, self._rng, self._lock), before_sleep=self._log_retry,
            sleep=lambda seconds: self.sleep(float(seconds)), reraise=True)
        tried = [0]  # attempts in this call, for the final message
        try:
            return retrying(self._attempt_once, attempt, tried)
        except Failure as failure:
            if not failure.retryable:
                raise self._final(RequestRejected, failure, tried[0]) from None
            if tried[0] > policy.max_retries:
                raise self._final(RetriesExhausted, failure, tried[0]) from None
            raise self._final(RetriesExhausted, failure, tried[0],
                              f"the server asks to wait {failure.retry_after:.0f} s, more than "
                              f"max_retry_after={policy.max_retry_after:g} s") from None

    def _attempt_once(self, attempt: Callable[[], T], tried: list[int]) -> T:
        """`attempt()`, counted; a network failure leaves as a `Failure`, anything else (a bug) untouched."""
        with self._lock:
            self.attempts += 1
        tried[0] += 1
        try:
            return attempt()
        except Exception as error:  # sorted out just below: unknown errors are re-raised untouched
            failure = self.classify(error)
            if failure is None:
                raise
        with self._lock:
            self.failed_attempts[failure.label] += 1
        raise failure from None

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        """Count the retry tenacity is about to wait for, and say so on ``dsp.retry``."""
        failure = _failure_of(state)
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        with self._lock:
            self.retries += 1
        asked = f" (Retry-After {failure.retry_after:.3g} s)" if failure.retry_after is not None else ""
        log.warning("%s: %s%s; retry %d of %d in %.3f s", self.service, redact(failure.describe(), self._secrets),
                    asked, state.attempt_number, self.policy.max_retries, wait)

    def _final(self, cls: type[ServiceError], failure: Failure, attempts: int,
               why: str | None = None) -> ServiceError | ContextLengthExceeded:
        described = redact(failure.describe(), self._secrets)
        if cls is RetriesExhausted:
            with self._lock:
                self.exhausted += 1
            reason = why or f"gave up after {attempts} attempts (max_retries={self.policy.max_retries})"
            message = f"{self.service}: {reason}; last failure: {described}"
        else:
            with self._lock:
                self.rejected += 1
            advice = _ADVICE.get(failure.kind, _ADVICE["rejected"])
            message = f"{self.service}: {advice} ({described}; attempt {attempts}, not retried)"
            if failure.kind == "context_length":
                return ContextLengthExceeded(redact(message, self._secrets), service=self.service,
                                             status=failure.status, model=self.model, base_url=self.base_url,
                                             attempts=attempts)
        return cls(redact(message, self._secrets), service=self.service, kind=failure.kind, attempts=attempts,
                   status=failure.status, model=self.model, base_url=self.base_url)
