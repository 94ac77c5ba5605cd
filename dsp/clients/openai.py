"""OpenAI and OpenAI-compatible servers (vLLM, llama.cpp's server, TGI, Ollama, ...) as DSP LMs.

`OpenAI` sends the DSP prompt to a chat model as one user message (after an optional system message)
or to a text model's completions endpoint, and returns completions in the LM base's format, so the
cache, history and usage work as for every client. `GPT3` is DSP v1's name for completion models: it
builds exactly the requests DSP v1 sent (`V1_COMPLETION_DEFAULTS`, logprobs=5 when n>1).

Reliability: the openai package's own retries are off; `dsp.clients.retry` retries instead, visibly
(warnings on the ``dsp.retry`` logger, counters in `lm.retry_stats`). n>1 is asked natively; when a
server quietly returns fewer choices (llama.cpp's does), further requests top the answer up to n.
Reproducibility: a request sampled at a temperature above 0 is sent with a seed (`OpenAI.default_seed`,
0, unless it names one; each top-up request the next), so a server answers it alike whatever it answered
before.

The API key lives only inside the openai client object: it is never in a cache key, a log message,
`history`, an error message or a repr. Credentials in the base URL (``http://user:password@host/v1``) are
sent as HTTP Basic auth, as the HTTP layer would, but taken out of the URL first: the URL the openai
client holds (and httpx logs with every request) has no userinfo, and messages show it as ``***@``
(`dsp.clients.retry.redact_urls`). `list_models` asks a server for its models the same way.

`timeout` bounds each attempt whole: connecting, sending, and reading the headers and the body. httpx's
own timeouts bound each wait for a chunk, so a server sending a byte a second would never time out; the
client's connections wait on sockets only until the attempt's deadline (`dsp.clients.deadline`).

Making a client asks no server:

>>> local = OpenAI("gemma", base_url="http://127.0.0.1:8000/v1", model_type="text")
>>> local
OpenAI(model='gemma', model_type='text', base_url='http://127.0.0.1:8000/v1')

A request does, so it is shown, not run::

    lm = OpenAI("gpt-4o-mini", api_key="sk-...")
    lm("Question: Who wrote Hamlet?\\nAnswer:", max_tokens=10)                       # ['William Shakespeare']
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import json
import os
from typing import Any, Callable, Mapping
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import httpx2
import openai as _openai

from ..utils import is_int, is_number
from .deadline import DeadlineTransport, deadline, environment_proxy
from .lm import LM
from .retry import SECRET_PARAMS, Failure, Retrier, RetryPolicy, redact_urls
from .v1 import V1_COMPLETION_DEFAULTS, shape_v1_completion

__all__ = ["OpenAI", "GPT3", "DEFAULT_BASE_URL", "LOCAL_PLACEHOLDER_KEY", "MODEL_TYPES", "normalize_base_url",
           "list_models"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Sent to a loopback/private server when no key is configured: such servers usually ignore the header,
# and the openai client refuses to start without some key.
LOCAL_PLACEHOLDER_KEY = "sk-no-key-required"
MODEL_TYPES = ("chat", "text")  # model_type: the chat or the completions endpoint (specs read it here)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)  # the openai package's own


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
                         f"got {redact_urls(base_url)!r}")
    host = parts.hostname.lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"base_url has an invalid port: {redact_urls(base_url)!r}") from None
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k.lower() not in SECRET_PARAMS])
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


def _api_key(api_key: str | None, raw_url: str, base_url: str) -> str:
    """The key to send: `api_key`, else $OPENAI_API_KEY, else a placeholder for a loopback/private server."""
    key = api_key or os.environ.get("OPENAI_API_KEY") or None
    if key is None:
        if not _is_local(raw_url):
            raise ValueError(f"no API key for {base_url}: pass api_key=... or set OPENAI_API_KEY "
                             f"(a server that needs none still wants a placeholder, e.g. api_key='none')")
        key = LOCAL_PLACEHOLDER_KEY
    return key


def _client_for(raw_url: str, key: str, timeout: float) -> tuple[_openai.OpenAI, list[str]]:
    """The openai client for the server at `raw_url`, and the secrets to blank from messages.

    Its retries are off (ours are visible and counted); its URL keeps any path the caller gave, but not the
    URL's credentials, which go as a Basic Authorization header; its connections keep to the attempt's deadline.
    """
    client_url, basic_auth = _split_userinfo(raw_url.strip())
    transport = DeadlineTransport(limits=_LIMITS, proxy=environment_proxy(client_url))
    client = _openai.OpenAI(api_key=key, base_url=client_url, timeout=timeout, max_retries=0,
                            default_headers={"Authorization": basic_auth} if basic_auth else None,
                            http_client=_openai.DefaultHttpxClient(transport=transport, timeout=timeout))
    hidden = [key]
    if basic_auth:  # in case a server echoes the credentials in an error message
        password = urlsplit(raw_url.strip()).netloc.rpartition("@")[0].partition(":")[2]
        hidden.append(basic_auth.split()[1])
        # Blanking a very short password would mangle every message it happens to occur in.
        hidden += [p for p in (password, unquote(password)) if len(p) >= 6]
    return client, hidden


def _attempt(send: Callable[[], str], timeout: float) -> str:
    """One request's text by `send()`, under a deadline `timeout` s away; every failure becomes a `Failure`."""
    try:
        with deadline(timeout):
            return send()
    except _openai.APITimeoutError:
        raise Failure("timeout", f"no complete response within {timeout:g} s") from None
    except _openai.APIConnectionError as error:
        cause = error.__cause__ or error
        raise Failure("connection", f"{type(cause).__name__}: {cause}".rstrip(": ")) from None
    except _openai.APIStatusError as error:
        raise Failure.from_status(error.status_code, _error_text(error), error.response.headers) from None


def list_models(base_url: str, api_key: str | None = None, timeout: float = 10.0,
                retry_policy: RetryPolicy | None = None) -> list[str]:
    """The model ids an OpenAI-compatible server lists (GET /models), asked as `OpenAI` asks: credentials in
    the URL go as Basic auth, never in the request's URL or a message; the key as `OpenAI` finds it.

    For example (it asks a server, so it is not run as a doctest),
    ``list_models("http://user:pw@127.0.0.1:8080/v1")`` is ``['gemma-3-270m-it']``.
    """
    normalized = normalize_base_url(base_url)
    client, hidden = _client_for(base_url, _api_key(api_key, base_url, normalized), float(timeout))
    retrier = Retrier(retry_policy or RetryPolicy(max_retries=2), service=f"the models list of {normalized}",
                      base_url=normalized, secrets=hidden)

    def attempt() -> list[str]:
        text = _attempt(lambda: client.get("/models", cast_to=str), float(timeout))
        try:
            data = json.loads(text)
        except ValueError:
            raise Failure("bad_response", f"the body is not JSON: {text[:80]!r}") from None
        models = data.get("data") if isinstance(data, dict) else None
        if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                                   for m in models):
            raise Failure("bad_response", f"expected {{\"data\": [{{\"id\": ...}}, ...]}}, got {text[:80]!r}")
        return [m["id"] for m in models]

    try:
        return retrier.call(attempt)
    finally:
        client.close()


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


def _choice_problem(choice: Any, model_type: str) -> str | None:
    """What makes `choice` carry no completion for a `model_type` ("chat"/"text") model (None if it is usable).

    A chat choice needs a ``message`` object (its ``content`` may be null: a refusal or a tool call has
    none); a text choice needs a ``text`` string.

    >>> _choice_problem({"message": "hi"}, "chat")
    'has a "message" that is not an object: "hi"'
    >>> _choice_problem({"index": 0, "finish_reason": "stop"}, "text")
    'has no "text" string: {"index": 0, "finish_reason": "stop"}'
    >>> _choice_problem({"text": " Paris"}, "text") is None
    True
    """
    if not isinstance(choice, dict):
        return f"is not an object: {json.dumps(choice)[:80]}"
    if model_type == "chat":
        if not isinstance(choice.get("message"), dict):
            if "message" not in choice:
                return f'has no "message": {json.dumps(choice)[:80]}'
            return f'has a "message" that is not an object: {json.dumps(choice["message"])[:80]}'
    elif not isinstance(choice.get("text"), str):
        return f'has no "text" string: {json.dumps(choice)[:80]}'
    return None


class OpenAI(LM):
    """An OpenAI(-compatible) chat or completion model.

    `model_type="chat"` sends the prompt as one user message (after `system_prompt`, if any) to
    /chat/completions; `"text"` sends it to /completions. `base_url`/`api_key` default to
    $OPENAI_BASE_URL/$OPENAI_API_KEY (and to OpenAI's URL; a loopback or private-network server needs no
    key). `timeout` bounds each attempt whole (connecting, sending, reading headers and body), in seconds;
    `max_retries` overrides `retry_policy.max_retries`.
    `prices` is (prompt, completion) USD per 1M tokens, or a {model: (prompt, completion)} table, and
    fills `usage.cost`. Other keyword arguments are default generation parameters (temperature, ...).

    >>> lm = OpenAI("gpt-4o-mini", api_key="sk-...", temperature=0.0, max_tokens=100)
    >>> lm.kwargs["max_tokens"], lm.usage.total_tokens
    (100, 0)

    A request asks the server, so it is shown, not run::

        lm("Q: 2+2?\\nA:"), lm.usage.total_tokens, lm.retry_stats["retries"]           # (['4'], 21, 0)
    """

    provider = "openai"
    native_n = True
    # The seed a request sampled at a temperature above 0 is sent with when it names none, so its answer
    # is a function of the request, as the cache assumes. llama.cpp's server seeds an unseeded request
    # from the one before it: the same prompt answered differently after a resume, in another order, or
    # behind a router (185 of 500 SQuAD test answers of one compiled program). None sends no seed (GPT3:
    # DSP v1's requests exactly).
    default_seed: int | None = 0

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
        if not is_number(timeout) or not timeout > 0:
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

        client, hidden = _client_for(raw_url, _api_key(api_key, raw_url, self.base_url), self.timeout)
        self._client = client  # the key goes to the openai client and nowhere else on this object
        kind = "chat model" if model_type == "chat" else "completion model"
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

    def build_request(self, prompt: str, **params: Any) -> dict[str, Any]:
        """Defaults, then `params`; a request with a temperature above 0 and no seed gets `default_seed`.

        >>> lm = OpenAI("m", base_url="http://127.0.0.1:8000/v1", temperature=0.0)
        >>> "seed" in lm.build_request("Q:"), lm.build_request("Q:", temperature=0.7, n=5)["seed"]
        (False, 0)
        >>> lm.build_request("Q:", temperature=0.7, seed=3)["seed"]
        3
        """
        request = super().build_request(prompt, **params)
        sampled = is_number(request.get("temperature")) and request["temperature"] > 0
        if self.default_seed is not None and request.get("seed") is None and sampled:
            request["seed"] = self.default_seed
        return request

    def _body(self, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The endpoint path and JSON body for a built request."""
        if self.model_type == "text":
            return "/completions", dict(request)
        body = {k: v for k, v in request.items() if k != "prompt"}
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        body["messages"] = messages + [{"role": "user", "content": request["prompt"]}]
        # Chat endpoints take logprobs as a flag plus top_logprobs; DSP v1 passed the number as logprobs.
        logprobs = body.pop("logprobs", None)
        if logprobs is True or is_int(logprobs):
            body["logprobs"] = True
            if logprobs is not True:
                body.setdefault("top_logprobs", logprobs)
        return "/chat/completions", body

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One attempt: POST `body`, return the parsed JSON; every failure becomes a `Failure`."""
        text = _attempt(lambda: self._client.post(path, body=body, cast_to=str), self.timeout)
        try:
            data = json.loads(text)
        except ValueError:
            raise Failure("bad_response", f"the body is not valid JSON (truncated?): {len(text)} characters "
                                          f"ending {text[-40:]!r}") from None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            raise Failure("bad_response", f"expected an object with a non-empty 'choices' list, got {text[:120]!r}")
        for i, choice in enumerate(data["choices"]):
            # A choice that carries no completion is an unusable answer, retried and then raised: skipping it
            # would leave the answer short and ask again for the rest, forever, of a server that always
            # answers so; reading it as '' would return and cache an empty completion the model never gave.
            problem = _choice_problem(choice, self.model_type)
            if problem is not None:
                raise Failure("bad_response", f"choice {i} {problem}")
        return data

    def _choices(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        # `_post` checked each choice: an object with a "message" object (chat) or a "text" string (text).
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        normalised = []
        for choice in choices:
            if self.model_type == "chat":
                text = _content_text(choice["message"].get("content"))
            else:
                text = choice["text"]
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
                if is_int(seed):
                    body["seed"] = seed + round_
            data = self._retrier.call(lambda payload=body: self._post(path, payload))
            choices.extend(self._choices(data))
            for key in usage:
                usage[key] += int((data.get("usage") or {}).get(key) or 0)
            round_ += 1
        # Each round is a request the server answered (and billed): counted as such, not as one call.
        return {"choices": choices[:n], "usage": {**usage, "requests": round_}}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, model_type={self.model_type!r}, base_url={self.base_url!r})"


class GPT3(OpenAI):
    """DSP v1's completion-model client: `OpenAI(model_type="text")` with DSP v1's request defaults.

    Requests start from `V1_COMPLETION_DEFAULTS` and ask for logprobs=5 when n>1, exactly as DSP v1's
    GPT3 did (and as `ReplayLM` replays them). `api_base` is accepted as v1's name for `base_url`.

    >>> lm = GPT3("gpt-3.5-turbo-instruct", api_key="sk-...")
    >>> lm.model_type, lm.kwargs["temperature"], lm.kwargs["max_tokens"]
    ('text', 0.0, 150)
    """

    default_seed = None  # v1 sent no seed; its recorded requests are replayed as sent

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
