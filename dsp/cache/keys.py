"""The cache key of a request: the SHA-256 of its canonical JSON together with the cache-format version.

Canonical means sorted keys, compact separators, UTF-8 and no NaN, so two requests are one entry exactly
when their JSON is equal (key order aside): a changed parameter is a new entry, and 0 and 0.0 differ.
A request may not carry a credential: it would end up in every cache that holds its key.

>>> request_key({"kind": "lm", "model": "m", "prompt": "hi"}) == request_key({"prompt": "hi", "model": "m", "kind": "lm"})
True
"""

from __future__ import annotations

import json
from hashlib import sha256
from typing import Any, Mapping

from .codec import CACHE_FORMAT_VERSION

__all__ = ["SECRET_FIELDS", "request_key", "hash_request"]

# Never part of a key: a request that carries one of these is a bug in the client that built it.
SECRET_FIELDS = frozenset({"api_key", "apikey", "authorization", "password", "secret", "token", "access_token"})
# Built once: json.dumps with options builds a new encoder on every call, a good part of a small dump.
# (An encoder keeps no state between calls, so threads share it safely.)
_KEY_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _check_no_secrets(value: Any, path: str = "request") -> None:
    if isinstance(value, str):  # most leaves (the prompt, the model): nothing to look into
        return
    if isinstance(value, dict) or isinstance(value, Mapping):  # dict first: typing's isinstance is slow
        for key, item in value.items():
            if str(key).lower() in SECRET_FIELDS:
                raise ValueError(f"refusing to put a credential ({path}.{key}) into a cache key")
            _check_no_secrets(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_no_secrets(item, f"{path}[{i}]")


def request_key(request: Mapping[str, Any]) -> str:
    """The cache key of a request: SHA-256 of its canonical JSON (sorted keys; 0 and 0.0 differ).

    >>> request_key({"q": 0}) == request_key({"q": 0.0})
    False
    >>> request_key({"q": 1, "api_key": "sk-1"})
    Traceback (most recent call last):
    ValueError: refusing to put a credential (request.api_key) into a cache key
    """
    _check_no_secrets(request)
    return hash_request(request)


def hash_request(request: Mapping[str, Any]) -> str:
    """`request_key` for a request already known to hold no credential (the in-process layer checks that).

    >>> hash_request({"q": 1}) == request_key({"q": 1})
    True
    """
    canonical = _KEY_ENCODER.encode({"dsp_cache_format": CACHE_FORMAT_VERSION, "request": request})
    try:
        encoded = canonical.encode("utf-8")
    except UnicodeEncodeError as error:  # clients refuse such a prompt or query; this names any other field
        where = _surrogate_path(request, "request") or "the request"
        raise ValueError(f"{where} contains a lone surrogate (\\u{ord(canonical[error.start]):04x}): not valid text, "
                         "so the request cannot be cached") from None
    return sha256(encoded).hexdigest()


def _surrogate_path(value: Any, path: str) -> str:
    """Where in a request the first string that is not valid text (holds a lone surrogate) is, or ""."""
    if isinstance(value, str):
        return path if any("\ud800" <= char <= "\udfff" for char in value) else ""
    is_mapping = isinstance(value, Mapping)
    items = value.items() if is_mapping else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _surrogate_path(item, f"{path}.{key}" if is_mapping else f"{path}[{key}]")
        if found:
            return found
    return ""
