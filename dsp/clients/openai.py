"""OpenAI and OpenAI-compatible servers (vLLM, llama.cpp's server, TGI, Ollama, ...) as DSP LMs.

`OpenAI` sends the DSP prompt to a chat model as one user message (after an optional system message)
or to a text model's completions endpoint, and returns completions in the LM base's format, so the
cache, history and usage work as for every client. `GPT3` is DSP v1's name for completion models: it
builds exactly the requests DSP v1 sent (`V1_COMPLETION_DEFAULTS`, logprobs=5 when n>1).

Reliability: the openai package's own retries are off; `dsp.clients.retry` retries instead, visibly
(warnings on the ``dsp.retry`` logger, counters in `lm.retry_stats`). n>1 is asked natively; when a
server quietly returns fewer choices (llama.cpp's does), further requests top the answer up to n.

The API key lives only inside the openai client object: it is never in a cache key, a log message,
`history`, an error message or a repr. Credentials in the base URL (``http://user:password@host/v1``) are
sent as HTTP Basic auth, as the HTTP layer would, but taken out of the URL first: the URL the openai
client holds (and httpx logs with every request) has no userinfo, and messages show it as ``***@``.

>>> lm = OpenAI("gpt-4o-mini", api_key="sk-...")                                     # doctest: +SKIP
>>> lm("Question: Who wrote Hamlet?\\nAnswer:", max_tokens=10)                       # doctest: +SKIP
['William Shakespeare']
>>> local = OpenAI("gemma", base_url="http://127.0.0.1:8000/v1", model_type="text")  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import json
import os
from typing import Any, Mapping
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import openai as _openai

from .lm import LM
from .retry import Failure, Retrier, RetryPolicy
from .v1 import V1_COMPLETION_DEFAULTS, shape_v1_completion

__all__ = ["OpenAI", "GPT3", "DEFAULT_BASE_URL", "LOCAL_PLACEHOLDER_KEY", "normalize_base_url"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Sent to a loopback/private server when no key is configured: such servers usually ignore the header,
# and the openai client refuses to start without some key.
LOCAL_PLACEHOLDER_KEY = "sk-no-key-required"
MODEL_TYPES = ("chat", "text")
_SECRET_QUERY_NAMES = frozenset({"key", "api_key", "api-key", "apikey", "token", "access_token", "sig", "signature",
                                 "code", "password", "secret"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _redact_url(url: str) -> str:
    """`url` fit for a message: userinfo shown as ``***`` and secret-looking query values blanked.

    >>> _redact_url("http://me:pw@host/v1?api_key=abc&v=2")
    'http://***@host/v1?api_key=***&v=2'
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = urlencode([(k, "***" if k.lower() in _SECRET_QUERY_NAMES else v)
                       for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _split_userinfo(url: str) -> tuple[str, str | None]:
    """`url` without its ``user:password@``, and the Basic Authorization header those make (None if none).

    httpx turns a URL's userinfo into Basic auth, but also logs the URL whole with every request; the
    header carries the same credentials without putting them into the URL.

    >>> _split_userinfo("http://me:p%40ss@host:8000/v1")
    ('http://host:8000/v1', 'Basic bWU6cEBzcw==')
    """
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    # Percent-decoded and UTF-8 encoded, as httpx builds it from the URL.
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode("utf-8")).decode("ascii")
    return urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


def normalize_base_url(base_url: str) -> str:
    """The base URL as it identifies a server: lowercase scheme and host, no default port, no trailing
    slash, no user:password@ and no secret-looking query parameters (those never go into a cache key).

    >>> normalize_base_url("HTTP://User:pw@LocalHost:80/v1/")
    'http://localhost/v1'
    """
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
    parts = urlsplit(base_url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"base_url must be an http(s) URL such as {DEFAULT_BASE_URL!r}, "
                         f"got {_redact_url(base_url)!r}")
    host = parts.hostname.lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"base_url has an invalid port: {_redact_url(base_url)!r}") from None
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k.lower() not in _SECRET_QUERY_NAMES])
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), query, ""))


def _is_local(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _resolve_prices(prices: Any, model: str) -> tuple[float, float] | None:
    """(prompt, completion) USD per 1M tokens from a pair or a {model: pair} table; None if unknown."""
    if prices is None:
        return None
    if isinstance(prices, Mapping):
        if model not in prices:
            return None
        prices = prices[model]
    try:
        prompt_price, completion_price = (float(p) for p in prices)
    except (TypeError, ValueError):
        raise ValueError(f"prices must be (prompt, completion) USD per 1M tokens, or a table "
                         f"{{model: (prompt, completion)}}, got {prices!r}") from None
    if prompt_price < 0 or completion_price < 0:
        raise ValueError(f"prices cannot be negative, got {prices!r}")
    return prompt_price, completion_price


def _error_text(error: Exception) -> str:
    """The server's own error message from an openai status error (OpenAI's and most servers' shape)."""
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
        if isinstance(body.get("detail"), str):  # FastAPI-style servers
            return body["detail"]
    if isinstance(body, str) and body.strip():
        return body
    return getattr(error, "message", "") or str(error)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers return content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


class OpenAI(LM):
    """An OpenAI(-compatible) chat or completion model.

    `model_type="chat"` sends the prompt as one user message (after `system_prompt`, if any) to
    /chat/completions; `"text"` sends it to /completions. `base_url`/`api_key` default to
    $OPENAI_BASE_URL/$OPENAI_API_KEY (and to OpenAI's URL; a loopback or private-network server needs no
    key). `timeout` is per attempt, in seconds; `max_retries` overrides `retry_policy.max_retries`.
    `prices` is (prompt, completion) USD per 1M tokens, or a {model: (prompt, completion)} table, and
    fills `usage.cost`. Other keyword arguments are default generation parameters (temperature, ...).

    >>> lm = OpenAI("gpt-4o-mini", api_key="sk-...", temperature=0.0, max_tokens=100)   # doctest: +SKIP
    >>> lm("Q: 2+2?\\nA:"), lm.usage.total_tokens, lm.retry_stats["retries"]           # doctest: +SKIP
    (['4'], 21, 0)
    """

    provider = "openai"
    native_n = True

    def __init__(
        self, model: str, base_url: str | None = None, api_key: str | None = None, model_type: str = "chat",
        system_prompt: str | None = None, timeout: float = 60.0, max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None, prices: Any = None, **defaults: Any,
    ) -> None:
        if "api_base" in defaults:  # DSP v1's name; as a generation default it would be sent to the server
            raise TypeError("OpenAI takes base_url=..., not api_base=... (GPT3 accepts DSP v1's api_base)")
        super().__init__(model, **defaults)
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be 'chat' or 'text', got {model_type!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be text or None, got {type(system_prompt).__name__}")
        if system_prompt is not None and model_type == "text":
            raise ValueError("system_prompt applies to chat models; a text model gets the prompt alone "
                             "(put the instructions into the prompt, or use model_type='chat')")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
            raise ValueError("api_key must be a non-empty string (or None to read OPENAI_API_KEY)")
        policy = retry_policy or RetryPolicy()
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"retry_policy must be a dsp RetryPolicy, got {type(policy).__name__}")
        if max_retries is not None:
            policy = dataclasses.replace(policy, max_retries=max_retries)  # validated by RetryPolicy

        raw_url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = normalize_base_url(raw_url)
        self.model_type = model_type
        self.system_prompt = system_prompt
        self.timeout = float(timeout)
        self.prices = _resolve_prices(prices, model)

        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if key is None:
            if not _is_local(raw_url):
                raise ValueError(f"no API key for {self.base_url}: pass api_key=... or set OPENAI_API_KEY "
                                 f"(a server that needs none still wants a placeholder, e.g. api_key='none')")
            key = LOCAL_PLACEHOLDER_KEY
        # The key goes to the openai client and nowhere else on this object. Its retries are off (ours are
        # visible and counted); its URL keeps any path the caller gave, but not the URL's credentials.
        client_url, basic_auth = _split_userinfo(raw_url.strip())
        self._client = _openai.OpenAI(api_key=key, base_url=client_url, timeout=self.timeout, max_retries=0,
                                      default_headers={"Authorization": basic_auth} if basic_auth else None)
        kind = "chat model" if model_type == "chat" else "completion model"
        hidden = [key]
        if basic_auth:  # in case a server echoes the credentials in an error message
            password = urlsplit(raw_url.strip()).netloc.rpartition("@")[0].partition(":")[2]
            hidden.append(basic_auth.split()[1])
            # Blanking a very short password would mangle every message it happens to occur in.
            hidden += [p for p in (password, unquote(password)) if len(p) >= 6]
        self._retrier = Retrier(policy, service=f"OpenAI {kind} {model!r} at {self.base_url}", model=model,
                                base_url=self.base_url, secrets=hidden)

    # -- identity and requests ---------------------------------------------------------------------

    def cache_identity(self) -> dict[str, Any]:
        """Provider, model, normalised base URL, model type and system prompt; never the API key."""
        return {"provider": self.provider, "model": self.model, "base_url": self.base_url,
                "model_type": self.model_type, "system_prompt": self.system_prompt}

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._retrier.policy

    @property
    def retries(self) -> int:
        """Retries made so far by this client (each one was logged on ``dsp.retry``)."""
        return self._retrier.retries

    @property
    def retry_stats(self) -> dict[str, Any]:
        """``{"attempts", "retries", "failed_attempts": {label: count}, "exhausted", "rejected"}``: HTTP
        requests sent, retries made, failed requests by kind, and calls that raised after retrying or at once."""
        return self._retrier.stats()

    def _body(self, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The endpoint path and JSON body for a built request."""
        if self.model_type == "text":
            return "/completions", dict(request)
        body = {k: v for k, v in request.items() if k != "prompt"}
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        body["messages"] = messages + [{"role": "user", "content": request["prompt"]}]
        # Chat endpoints take logprobs as a flag plus top_logprobs; DSP v1 passed the number as logprobs.
        logprobs = body.pop("logprobs", None)
        if logprobs is True or (isinstance(logprobs, int) and not isinstance(logprobs, bool)):
            body["logprobs"] = True
            if logprobs is not True:
                body.setdefault("top_logprobs", logprobs)
        return "/chat/completions", body

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One attempt: POST `body`, return the parsed JSON; every failure becomes a `Failure`."""
        try:
            text = self._client.post(path, body=body, cast_to=str)
        except _openai.APITimeoutError:
            raise Failure("timeout", f"no response within {self.timeout:g} s") from None
        except _openai.APIConnectionError as error:
            cause = error.__cause__ or error
            raise Failure("connection", f"{type(cause).__name__}: {cause}".rstrip(": ")) from None
        except _openai.APIStatusError as error:
            raise Failure.from_status(error.status_code, _error_text(error), error.response.headers) from None
        try:
            data = json.loads(text)
        except ValueError:
            raise Failure("bad_response", f"the body is not valid JSON (truncated?): {len(text)} characters "
                                          f"ending {text[-40:]!r}") from None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            raise Failure("bad_response", f"expected an object with a non-empty 'choices' list, got {text[:120]!r}")
        return data

    def _choices(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        normalised = []
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if self.model_type == "chat":
                text = _content_text((choice.get("message") or {}).get("content"))
            else:
                text = choice.get("text") or ""
            entry: dict[str, Any] = {"text": text, "finish_reason": choice.get("finish_reason")}
            if choice.get("logprobs") is not None:
                entry["logprobs"] = choice["logprobs"]
            normalised.append(entry)
        return normalised

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        path, body = self._body(request)
        n = request.get("n", 1) or 1
        seed = request.get("seed")
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        choices: list[dict[str, Any]] = []
        round_ = 0
        while len(choices) < n:
            if round_:
                # A short answer (llama.cpp's server ignores n): ask for the rest, with the next seed so
                # the extra samples differ from the first ones yet reproduce on a rerun.
                body = {**body, "n": n - len(choices)}
                if isinstance(seed, int) and not isinstance(seed, bool):
                    body["seed"] = seed + round_
            data = self._retrier.call(lambda payload=body: self._post(path, payload))
            choices.extend(self._choices(data))
            for key in usage:
                usage[key] += int((data.get("usage") or {}).get(key) or 0)
            round_ += 1
        return {"choices": choices[:n], "usage": usage}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, model_type={self.model_type!r}, base_url={self.base_url!r})"


class GPT3(OpenAI):
    """DSP v1's completion-model client: `OpenAI(model_type="text")` with DSP v1's request defaults.

    Requests start from `V1_COMPLETION_DEFAULTS` and ask for logprobs=5 when n>1, exactly as DSP v1's
    GPT3 did (and as `ReplayLM` replays them). `api_base` is accepted as v1's name for `base_url`.

    >>> lm = GPT3("gpt-3.5-turbo-instruct", api_key="sk-...")                     # doctest: +SKIP
    >>> dsp.settings.configure(lm=lm)                                             # doctest: +SKIP
    """

    def __init__(self, model: str = "text-davinci-002", api_key: str | None = None, base_url: str | None = None,
                 **params: Any) -> None:
        model_type = params.pop("model_type", "text")
        if model_type != "text":
            raise ValueError(f"GPT3 is a completion (model_type='text') client, got model_type={model_type!r}; "
                             f"use dsp.OpenAI(model, model_type='chat') for chat models")
        api_base = params.pop("api_base", None)
        if api_base is not None and base_url is not None:
            raise ValueError("give base_url or api_base (DSP v1's name for it), not both")
        super().__init__(model, base_url=base_url if base_url is not None else api_base, api_key=api_key,
                         model_type="text", **{**V1_COMPLETION_DEFAULTS, **params})

    def build_request(self, prompt: str, **params: Any) -> dict[str, Any]:
        """The v1 request: defaults, then `params`, then logprobs=5 if n>1 (see `shape_v1_completion`).

        >>> GPT3(api_key="sk-x").build_request("Q:", n=20, temperature=0.7)["logprobs"]
        5
        """
        return shape_v1_completion(super().build_request(prompt, **params))
