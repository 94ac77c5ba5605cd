"""ColBERTv2: the client of a ColBERTv2 search server, as DSP v1 used it (`dsp.ColBERTv2(url)`).

The server answers ``GET url?query=...&k=...`` (or a POST of the JSON ``{"query", "k"}``) with
``{"topk": [{"text", "pid", "rank", "score", "prob"}, ...]}``, where `text` already reads
``"Title | text"``. The client keeps ``topk[:k]`` and sets `long_text` to `text`, as DSP v1 did.
`python -m dsp.serve` runs such a server over any local RM.

HTTP goes through one pooled `requests.Session` (keep-alive across calls and threads). Rate limits
(429), server errors (5xx), timeouts and connection failures are retried by `dsp.clients.retry`
(exponential backoff with jitter, each retry a warning on the ``dsp.retry`` logger); other 4xx
answers raise `RequestRejected` at once and a body that is not the expected JSON raises
`ColBERTv2Error`, both naming the URL. Results go through the dsp disk cache, whose identity is the
provider and the normalised URL, with any credential in the URL (user:password@, ?api_key=...) left out.

>>> rm = ColBERTv2("http://user:pw@127.0.0.1:8893/api/search?api_key=secret")
>>> rm
ColBERTv2('http://***@127.0.0.1:8893/api/search?api_key=***')
>>> rm.cache_identity()
{'provider': 'colbertv2', 'url': 'http://127.0.0.1:8893/api/search'}

A search asks the server (`dsp.serve` runs one over loopback in its example), so it is shown, not run::

    [p.pid for p in rm("Who wrote Hamlet?", k=3)]                  # [4021, 77, 310]
    rm("Who wrote Hamlet?", k=1, simplify=True)                     # ['Hamlet | The Tragedy of Hamlet, ...']
"""

from __future__ import annotations

import threading
from typing import Any, Callable
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import requests
from requests.adapters import HTTPAdapter

from ..cache import SECRET_FIELDS
from ..utils import check_positive_int, is_number
from .retry import Failure, Retrier, RetryPolicy, ServiceError, redact, redact_urls
from .rm import RM, Passage

__all__ = ["ColBERTv2", "ColBERTv2Error", "normalize_url", "redact_url"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Query parameters that carry credentials: never in a cache key, a log line or an error message.
_SECRET_PARAMS = SECRET_FIELDS | {"key", "sig", "signature", "auth", "api-key", "x-api-key"}


class ColBERTv2Error(ServiceError):
    """A ColBERTv2 server answered, but not with ``{"topk": [passages...]}`` (wrong URL or server)."""


def _split_secrets(url: str) -> tuple[str, list[str]]:
    """`url` normalised without userinfo or secret query parameters, and the secret strings it held."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"a ColBERTv2 server URL must be non-empty text, got {url!r}")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as error:
        raise ValueError(f"not a valid ColBERTv2 server URL: {redact_url(url)!r} ({error})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http(s) URL of a ColBERTv2 server: {redact_url(url)!r} "
                         "(expected e.g. http://127.0.0.1:8893/api/search)")
    secrets = [s for s in (parts.username, parts.password) if s]
    kept = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower() in _SECRET_PARAMS:
            secrets.append(value)
        else:
            kept.append((name, value))
    host = parts.hostname.lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    clean = urlunsplit((scheme, netloc, parts.path or "/", urlencode(sorted(kept)), ""))
    return clean, [s for s in secrets if s]


def normalize_url(url: str) -> str:
    """The URL as the cache knows it: lower-case scheme and host, no default port, no fragment,
    sorted query, and no credentials (userinfo and key/token parameters are dropped).

    >>> normalize_url("HTTP://user:pw@Example.org:80/wiki17?b=2&api_key=s3cret&a=1#x")
    'http://example.org/wiki17?a=1&b=2'
    """
    return _split_secrets(url)[0]


def redact_url(url: str) -> str:
    """`url` fit for a log or an error message: userinfo and secret parameter values are masked (the
    project's one redaction, `dsp.clients.retry.redact_urls`).

    >>> redact_url("https://me:pw@host/search?token=abc&x=1")
    'https://***@host/search?token=***&x=1'
    """
    return redact_urls(str(url).strip())


def _error_detail(response: requests.Response) -> str:
    """The server's own explanation of an error: its JSON "error" field, else the start of the body."""
    try:
        payload = response.json()
    except ValueError:
        return response.text[:300].strip() or response.reason or ""
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return payload["error"]
    return str(payload)[:300]


def _network_detail(error: Exception) -> str:
    """The root cause of a requests network error (urllib3's own "Max retries exceeded" wrapper would
    mislead: this client makes one attempt per try and does its retrying itself)."""
    reason = getattr(error.args[0], "reason", None) if error.args else None
    cause = reason if isinstance(reason, BaseException) else error
    return f"{type(cause).__name__}: {cause}"


class ColBERTv2(RM):
    """A ColBERTv2 server's search API as an RM (DSP v1's `dsp.ColBERTv2`).

    `url` is the search endpoint (e.g. ``http://127.0.0.1:8893/api/search``); `post_requests` sends
    a JSON POST instead of a GET. `timeout` (seconds, default 10 as in DSP v1) bounds each attempt;
    `retry_policy` (default `RetryPolicy()`) or just `max_retries` says how often a retryable failure
    is tried again. Passages carry `text`, `long_text` (the same ``"Title | text"``), `pid`, `rank`,
    `score` and `prob` as the server sent them. `rm(query, k=10, simplify=True)` returns the texts only.

    For example (it asks a server, so it is not run as a doctest)::

        rm = ColBERTv2("http://127.0.0.1:8893/api/search", post_requests=True)
        rm("Hamlet author", k=2)[0].long_text    # 'Hamlet | The Tragedy of Hamlet, Prince of Denmark, ...'
    """

    provider = "colbertv2"

    def __init__(self, url: str, post_requests: bool = False, timeout: float = 10.0, *,
                 max_retries: int | None = None, retry_policy: RetryPolicy | None = None,
                 pool_size: int = 16) -> None:
        super().__init__()
        self.normalized_url, secrets = _split_secrets(url)
        # Requests get the URL as given: its userinfo, if any, is HTTP basic auth for the server.
        self.url = url.strip()
        if not is_number(timeout) or not timeout > 0:
            raise ValueError(f"ColBERTv2 timeout must be a positive number of seconds, got {timeout!r}")
        check_positive_int(pool_size, "ColBERTv2 pool_size")
        policy = retry_policy or RetryPolicy()
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"retry_policy must be a dsp RetryPolicy, got {type(policy).__name__}")
        if max_retries is not None:
            policy = RetryPolicy(max_retries=max_retries, base_delay=policy.base_delay,
                                 max_delay=policy.max_delay, max_retry_after=policy.max_retry_after)
        self.post_requests = bool(post_requests)
        self.timeout = float(timeout)
        self.shown_url = redact_url(self.url)
        # Secrets in percent-encoded form too: that is how they appear in a request line.
        self._secrets = tuple({form for s in secrets for form in (s, quote(s, safe=""))})
        method = "POST" if self.post_requests else "GET"
        self._retrier = Retrier(policy, service=f"ColBERTv2 server ({method} {self.shown_url})",
                                base_url=self.shown_url, secrets=self._secrets)
        self._pool_size = pool_size
        self._session: requests.Session | None = None
        self._session_lock = threading.Lock()

    def cache_identity(self) -> dict[str, Any]:
        """Provider and normalised URL (no credentials). GET and POST reach the same index: not part of it."""
        return {"provider": self.provider, "url": self.normalized_url}

    def __call__(self, query: str, k: int = 10, cache: bool | None = None, simplify: bool = False,
                 **params: Any) -> list[Passage] | list[str]:
        """The top-`k` passages for `query` (DSP v1's default k=10); only their texts when `simplify`."""
        passages = super().__call__(query, k=k, cache=cache, **params)
        return [p["long_text"] for p in passages] if simplify else passages

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._retrier.policy

    @property
    def retry_stats(self) -> dict[str, Any]:
        """``{"retries", "failed_attempts": {label: count}, "exhausted", "rejected"}``."""
        return self._retrier.stats()

    # -- HTTP ----------------------------------------------------------------------------------------

    def _get_session(self) -> requests.Session:
        # One session for all threads: urllib3's connection pool is thread-safe, and this client keeps
        # no per-request state (cookies, auth flows) on the session that threads could race on.
        with self._session_lock:
            if self._session is None:
                session = requests.Session()
                adapter = HTTPAdapter(pool_connections=2, pool_maxsize=self._pool_size, max_retries=0)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
                self._session = session
            return self._session

    def close(self) -> None:
        """Close the pooled connections (a later search opens new ones)."""
        with self._session_lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def __enter__(self) -> "ColBERTv2":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _attempt(self, send: Callable[[], requests.Response]) -> requests.Response:
        """One HTTP exchange; failures become `Failure`s that the retrier sorts into retry or raise."""
        try:
            response = send()
        except requests.Timeout as error:  # before ConnectionError: ConnectTimeout is both
            raise Failure("timeout", f"no answer within {self.timeout:g} s ({type(error).__name__})") from None
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as error:
            raise Failure("connection", _network_detail(error)) from None
        if response.status_code >= 400:
            detail = _error_detail(response)
            response.close()  # return the connection to the pool before any backoff sleep
            raise Failure.from_status(response.status_code, detail, response.headers)
        return response

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        if params:
            raise TypeError(f"ColBERTv2 takes only query and k; unexpected search parameter(s): "
                            f"{', '.join(sorted(params))}")
        session = self._get_session()
        if self.post_requests:
            def send() -> requests.Response:
                return session.post(self.url, json={"query": query, "k": k}, timeout=self.timeout)
        else:
            def send() -> requests.Response:
                return session.get(self.url, params={"query": query, "k": k}, timeout=self.timeout)
        response = self._retrier.call(lambda: self._attempt(send))
        with response:
            return self._parse(response, k)

    def _malformed(self, what: str, status: int) -> ColBERTv2Error:
        message = redact(f"{self._retrier.service} answered HTTP {status} with {what}; is this the URL of a "
                         "ColBERTv2 search endpoint?", self._secrets)
        return ColBERTv2Error(message, service=self._retrier.service, kind="bad_response", attempts=1,
                              status=status, base_url=self.shown_url)

    def _parse(self, response: requests.Response, k: int) -> list[dict[str, Any]]:
        # A complete 200 body that is not the expected JSON is a wrong URL or server, not a transient
        # fault, so it is reported at once rather than retried.
        status = response.status_code
        try:
            payload = response.json()
        except ValueError:
            raise self._malformed(f"a body that is not JSON: {response.text[:200]!r}", status) from None
        topk = payload.get("topk") if isinstance(payload, dict) else None
        if not isinstance(topk, list):
            raise self._malformed(f"JSON without a 'topk' list: {str(payload)[:200]}", status)
        results = []
        for i, item in enumerate(topk[:k]):
            if not isinstance(item, dict) or not isinstance(item.get("text"), str):
                raise self._malformed(f"topk[{i}] that is not a passage with a 'text' string: {str(item)[:200]}",
                                      status)
            for field in ("score", "prob"):
                value = item.get(field)
                if value is not None and not is_number(value):
                    raise self._malformed(f"topk[{i}].{field} that is not a number: {value!r:.80}", status)
            results.append({**item, "long_text": item["text"]})  # the server's text already reads "Title | text"
        return results

    def __repr__(self) -> str:
        post = ", post_requests=True" if self.post_requests else ""
        return f"ColBERTv2({self.shown_url!r}{post})"
