"""Build an LM or RM from a short text spec, as the CLI and the environment name them.

    llamacpp                         the embedded Gemma 3 270M (default)
    llamacpp:/models/x.gguf          another local GGUF model
    llamacpp:,n_threads=1            options: n_ctx, n_threads, flash_attn=1
    openai:gpt-4o-mini               OpenAI (key from OPENAI_API_KEY)
    openai-compatible:http://127.0.0.1:8765/v1[,model=NAME][,type=text|chat]
                                     any OpenAI-compatible server (vLLM, llama.cpp, Ollama)
    gpt3:text-davinci-002            DSP v1's completion client
    replay:lm.jsonl                  a recorded run

    bm25:passages.jsonl.gz | bm25:index_dir       BM25 over a passage file or a saved index
    dense:passages.jsonl.gz | dense:index_dir     faiss over E5 embeddings
    colbertv2:http://host:port/api/search         a ColBERTv2 server (or `dsp serve`)
    replay:rm.jsonl                               a recorded run

A spec is plain text with no credential in it, so it can travel to worker processes, which rebuild
the client there (keys come from their own environment). The client remembers it as `client.spec`.

>>> parse_spec("openai-compatible:http://127.0.0.1:8765/v1,model=gemma,type=text")
('openai-compatible', 'http://127.0.0.1:8765/v1', {'model': 'gemma', 'type': 'text'})
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

__all__ = ["parse_spec", "llamacpp_options", "lm_from_spec", "rm_from_spec", "LM_KINDS", "RM_KINDS", "DEFAULT_LM",
           "SpecError"]

DEFAULT_LM = "llamacpp"


class SpecError(ValueError):
    """A spec naming an unknown kind or missing its argument; the message lists the valid kinds."""


def parse_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """(kind, argument, options) of "kind:argument,key=value,...". Options never contain the argument's commas
    unless written key=value."""
    if not isinstance(spec, str) or not spec.strip():
        raise SpecError(f"an empty client spec {spec!r}")
    kind, _, rest = spec.strip().partition(":")
    parts = rest.split(",") if rest else []
    argument_parts, options = [], {}
    for part in parts:
        key, eq, value = part.partition("=")
        if eq and key and "/" not in key and ":" not in key:
            options[key.strip()] = value.strip()
        else:
            argument_parts.append(part)
    return kind.strip().lower(), ",".join(argument_parts).strip(), options


def _need(kind: str, argument: str, what: str) -> str:
    if not argument:
        raise SpecError(f"'{kind}:' needs {what}, e.g. {kind}:{'<' + what.replace(' ', '-') + '>'}")
    return argument


def _first_model(base_url: str) -> str:
    """The first model an OpenAI-compatible server lists (llama.cpp and vLLM serve one)."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=10) as response:
            models = json.load(response).get("data") or []
    except (OSError, ValueError) as error:
        raise SpecError(f"cannot list the models of {base_url} ({error}); name one with ,model=NAME") from None
    if not models:
        raise SpecError(f"{base_url} lists no models; name one with ,model=NAME")
    return models[0]["id"]


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def llamacpp_options(options: dict[str, str]) -> dict[str, Any]:
    """`LlamaCpp` keyword arguments from a llamacpp spec's options, checked.

    >>> llamacpp_options({"n_ctx": "8192", "flash_attn": "1"})
    {'n_ctx': 8192, 'flash_attn': True}
    """
    unknown = sorted(set(options) - {"n_ctx", "n_threads", "flash_attn"})
    if unknown:
        raise SpecError(f"llamacpp spec: unknown option(s) {', '.join(unknown)}; it takes n_ctx, n_threads, flash_attn")
    kwargs: dict[str, Any] = {}
    # n_threads matters on shared machines (a Ray node runs one model per CPU-slot; see dsp.backends.ray).
    for key in ("n_ctx", "n_threads"):
        if key in options:
            try:
                kwargs[key] = int(options[key])
            except ValueError:
                raise SpecError(f"llamacpp spec: {key} must be an integer, got {options[key]!r}") from None
    if "flash_attn" in options:
        value = options["flash_attn"].lower()
        if value not in _TRUE | _FALSE:
            raise SpecError(f"llamacpp spec: flash_attn must be 1 or 0, got {options['flash_attn']!r}")
        kwargs["flash_attn"] = value in _TRUE
    return kwargs


def _llamacpp(argument: str, options: dict[str, str]) -> Any:
    from .llamacpp import LlamaCpp

    return LlamaCpp(argument or None, **llamacpp_options(options))


def _openai(argument: str, options: dict[str, str]) -> Any:
    from .openai import OpenAI

    return OpenAI(_need("openai", argument, "model name"), model_type=options.get("type", "chat"))


def _openai_compatible(argument: str, options: dict[str, str]) -> Any:
    from .openai import OpenAI

    base_url = _need("openai-compatible", argument, "base url")
    model = options.get("model") or _first_model(base_url)
    # DSP prompts are completion prompts: the text endpoint is the faithful default for a local server.
    return OpenAI(model, base_url=base_url, model_type=options.get("type", "text"))


def _gpt3(argument: str, options: dict[str, str]) -> Any:
    from .openai import GPT3

    return GPT3(argument or "text-davinci-002")


def _replay_lm(argument: str, options: dict[str, str]) -> Any:
    from .replay import ReplayLM

    return ReplayLM(_need("replay", argument, "recording path"))


def _is_index(path: Path) -> bool:
    return path.is_dir() and (path / "meta.json").is_file()


def _bm25(argument: str, options: dict[str, str]) -> Any:
    from .bm25 import BM25

    path = Path(_need("bm25", argument, "passages file or index dir")).expanduser()
    if _is_index(path):
        return BM25.load(path)
    if not path.is_file():
        raise SpecError(f"bm25: {path} is neither a passages file nor a saved index directory")
    return BM25(path)


def _dense(argument: str, options: dict[str, str]) -> Any:
    from .dense import DenseRM

    path = Path(_need("dense", argument, "passages file or index dir")).expanduser()
    if _is_index(path):
        return DenseRM.load(path)
    if not path.is_file():
        raise SpecError(f"dense: {path} is neither a passages file nor a saved index directory")
    return DenseRM(path)


def _colbertv2(argument: str, options: dict[str, str]) -> Any:
    from .colbertv2 import ColBERTv2

    return ColBERTv2(_need("colbertv2", argument, "server url"), post_requests=options.get("post") == "1")


def _replay_rm(argument: str, options: dict[str, str]) -> Any:
    from .replay import ReplayRM

    return ReplayRM(_need("replay", argument, "recording path"))


LM_KINDS: dict[str, Callable[[str, dict[str, str]], Any]] = {
    "llamacpp": _llamacpp, "openai": _openai, "openai-compatible": _openai_compatible, "gpt3": _gpt3,
    "replay": _replay_lm,
}
RM_KINDS: dict[str, Callable[[str, dict[str, str]], Any]] = {
    "bm25": _bm25, "dense": _dense, "colbertv2": _colbertv2, "replay": _replay_rm,
}


def _build(spec: str, kinds: dict[str, Callable[[str, dict[str, str]], Any]], what: str) -> Any:
    kind, argument, options = parse_spec(spec)
    if kind not in kinds:
        raise SpecError(f"unknown {what} {kind!r} in {spec!r}; valid {what}s: {', '.join(kinds)}")
    client = kinds[kind](argument, options)
    client.spec = spec.strip()
    return client


def lm_from_spec(spec: str | None = None) -> Any:
    """The LM named by `spec` (default: $DSP_LM, else the embedded llamacpp model)."""
    return _build(spec or os.environ.get("DSP_LM") or DEFAULT_LM, LM_KINDS, "LM")


def rm_from_spec(spec: str | None = None) -> Any:
    """The RM named by `spec` (default: $DSP_RM); an error when neither names one."""
    spec = spec or os.environ.get("DSP_RM")
    if not spec:
        raise SpecError(f"no RM given: pass --rm or set DSP_RM, e.g. bm25:passages.jsonl.gz; kinds: {', '.join(RM_KINDS)}")
    return _build(spec, RM_KINDS, "RM")
