"""A compiled program: the program with what the search chose bound to it, saved as plain JSON.

`Compiled` is called like the program (``compiled(question)``, or ``compiled(question, history)``): it
passes the chosen options, the training set and the demonstrations (fixed, or the k nearest to the
question from a bootstrapped pool) to the program, under the retriever the search chose if it chose
one. `save` writes JSON (the demos as plain records, the options, the retriever's spec, the search
table, the program's name, the LM/RM specs with any credentials blanked, the seed; never pickle).

A compiled file is data, never code: `load_compiled` checks every field's type before it uses any, and
resolves the program the file names only among the programs this process registered
(`dsp.register_program`; `dsp.compile` registers the program it compiles, the bundled families theirs)
or the one the caller passes (``load_compiled(path, program=fn)``). It never imports a module a file
names, so loading a file from elsewhere runs nothing; options the program does not take are refused.

>>> def shout(question, train, demos=None, loud=False):   # a compiled program usually comes from dsp.compile
...     return Example(answer=question.upper() if loud else question)
>>> compiled = Compiled(shout, {"loud": True}, [Example(question="q", answer="a")])
>>> path = compiled.save(Path(tempfile.mkdtemp()) / "shout.json")
>>> load_compiled(path)("Who wrote Hamlet?").answer, load_compiled(path, program=shout).options
('WHO WROTE HAMLET?', {'loud': True})
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..clients.retry import redact_urls
from ..evaluation.rows import jsonable
from ..example import Example
from ..utils import is_int
from .bootstrap import question_of
from .config import VECTORIZERS
from .registry import program_name, register_program, registered_program

__all__ = ["Compiled", "load_compiled", "program_name", "FORMAT", "VECTORIZERS"]

FORMAT = 1
# Bound by `Compiled.__call__` itself: a file's options may not set them.
_BOUND = ("train", "demos")
_FIELDS = ("format", "program", "options", "candidate", "demos", "knn", "train", "rm", "table", "meta")


class _Nearest:
    """The k demonstrations nearest to a question, by a vectorizer over the demos' questions."""

    def __init__(self, pool: list[Example], k: int, vectorizer: str) -> None:
        self.pool, self.k, self.vectorizer = pool, k, vectorizer
        self._index: Callable[[Example, int], list[Example]] | None = None

    def __call__(self, value: Any) -> list[Example]:
        if self._index is None:
            from ..clients.vectorizers import E5Vectorizer, HashingVectorizer
            from ..primitives.demonstrate import knn
            from ..settings import settings

            vectorizer = HashingVectorizer() if self.vectorizer == "hashing" else E5Vectorizer()
            with settings.context(vectorizer=vectorizer):
                self._index = knn(self.pool)
        return self._index(Example(question=question_of(value)), self.k)


@dataclass
class Compiled:
    """`program` with `options`, `train` and the chosen demonstrations bound; `table` is the search."""

    program: Callable[..., Any]
    options: dict[str, Any]
    train: list[Example]
    demos: list[Example] | None = None            # fixed demonstrations (None: the program draws its own)
    knn_pool: list[Example] | None = None         # or the pool the k nearest come from
    knn_k: int = 0
    vectorizer: str = "hashing"
    candidate: dict[str, Any] = field(default_factory=dict)
    table: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    rm_spec: str | None = None                    # the retriever the search chose, when not the current one
    rm: Any = None                                # ...built from rm_spec on first use (or given)

    def __post_init__(self) -> None:
        self._nearest = _Nearest(self.knn_pool, self.knn_k, self.vectorizer) if self.knn_pool else None
        self._rm_lock = threading.Lock()
        functools.update_wrapper(self, self.program, updated=())
        # The program of a Compiled built here (by dsp.compile, or by hand) is trusted code this process
        # already holds: a file saved from it may name it. A lambda has no name to save it by (save says so).
        try:
            register_program(self.program)
        except TypeError:
            pass

    def retriever(self) -> Any:
        """The RM the search chose (built once from `rm_spec`), or None: the current `dsp.settings.rm`.

        A spec saved with its credentials blanked cannot be rebuilt (`SpecError`): set ``compiled.rm`` to
        the retriever built with them (``dsp.rm_from_spec(full_spec)``, or ``dsp run --rm full_spec``).
        """
        if self.rm is None and self.rm_spec:
            with self._rm_lock:
                if self.rm is None:
                    self.rm = retriever_from_spec(self.rm_spec)
        return self.rm

    def demos_for(self, value: Any) -> list[Example] | None:
        """The demonstrations the program gets for this input."""
        if self._nearest is not None:
            return self._nearest(value)
        return None if self.demos is None else [Example(d) for d in self.demos]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound: dict[str, Any] = {"train": self.train, **self.options}
        demos = self.demos_for(args[0]) if args else None
        if demos is not None:
            bound["demos"] = demos
        rm = self.retriever()
        if rm is None:
            return self.program(*args, **{**bound, **kwargs})
        from ..settings import settings

        with settings.context(rm=rm):
            return self.program(*args, **{**bound, **kwargs})

    def __repr__(self) -> str:
        chosen = self.candidate.get("key", "?")
        return f"Compiled({program_name(self.program)}, {chosen}, options={self.options})"

    # -- plain JSON -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The compiled program as plain JSON data; specs (the retriever's, and the LM/RM ones in `meta`) with
        any credential blanked (``http://***@host``, ``?api_key=***``): a compiled file holds no secret.

        >>> Compiled(json.dumps, {}, [], rm_spec="colbertv2:http://me:pw@host/api/search").to_dict()["rm"]
        'colbertv2:http://***@host/api/search'
        """
        return {
            "format": FORMAT, "program": program_name(self.program), "options": jsonable(self.options),
            "candidate": jsonable(self.candidate), "demos": jsonable(self.demos),
            "knn": {"pool": jsonable(self.knn_pool), "k": self.knn_k, "vectorizer": self.vectorizer}
            if self.knn_pool else None,
            "train": jsonable(self.train), "rm": None if self.rm_spec is None else redact_urls(self.rm_spec),
            "table": jsonable(self.table), "meta": _redacted(jsonable(self.meta)),
        }

    def digest(self) -> str:
        """A short hash of what decides the program's answers (program, options, demos, knn pool, training
        set, the retriever chosen), not of the search table or the compile's timing: a results file of the compiled program
        keeps resuming after the same compile is rerun and saved again.

        >>> a = Compiled(json.dumps, {"k": 1}, [], table=[{"key": "x"}], meta={"seconds": 1.0})
        >>> b = Compiled(json.dumps, {"k": 1}, [], meta={"seconds": 2.5})
        >>> a.digest() == b.digest(), a.digest() == Compiled(json.dumps, {"k": 2}, []).digest()
        (True, False)
        """
        decisive = {key: value for key, value in self.to_dict().items() if key not in ("table", "meta", "candidate")}
        if decisive["rm"] is None:
            del decisive["rm"]  # a program compiled for the current RM hashes as before RMs were searched
        text = json.dumps(decisive, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]

    def save(self, path: str | os.PathLike) -> Path:
        """Write the compiled program as JSON (atomically: a crash never leaves half a file)."""
        if self.rm is not None and not self.rm_spec:
            raise ValueError(f"the search chose the retriever {self.rm!r}, which has no spec to save it by; "
                             "give dsp.compile retrievers built from specs (dsp.rm_from_spec)")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n"
        # A temporary name of its own in the same folder (so the rename is atomic), never a fixed one: two
        # saves at once each write their own file, and the last rename wins with a whole file.
        handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                             suffix=".partial", delete=False)
        try:
            with handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(handle.name, path)
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def from_dict(cls, data: Any, *, program: Callable[..., Any] | None = None,
                  programs: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]] | None = None
                  ) -> "Compiled":
        """The compiled program `data` describes (`to_dict`'s form), every field checked first; the program
        is `program`, else the one `data` names among `programs`, else among the registered ones.

        Raises `ValueError` naming the first ill-typed field, an unknown program, or options it does not take.

        >>> Compiled.from_dict({"format": 1, "program": "json.dumps", "options": [], "train": []})
        Traceback (most recent call last):
        ...
        ValueError: field 'options' must be an object of option values, got list
        """
        _check_fields(data)
        function = _resolve(data["program"], program, programs)
        options = dict(data.get("options") or {})
        _check_options(function, options)
        knn = data.get("knn") or {}
        examples = lambda records: None if records is None else [Example(r) for r in records]  # noqa: E731
        return cls(function, options, examples(data.get("train")) or [], examples(data.get("demos")),
                   examples(knn.get("pool")), int(knn.get("k") or 0), str(knn.get("vectorizer") or "hashing"),
                   dict(data.get("candidate") or {}), list(data.get("table") or []), dict(data.get("meta") or {}),
                   data.get("rm"))


def _redacted(value: Any) -> Any:
    """`value` (plain JSON data) with every string's URL credentials blanked (`redact_urls`)."""
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    return value


def _kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (a message says "got list", not "got <class 'list'>")."""
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _is_json(value: Any, depth: int = 0) -> bool:
    """Whether `value` is plain JSON data (null, booleans, numbers, strings, lists, objects with text keys)."""
    if depth > 100:  # deeper than any option value: refused rather than recursed into
        return False
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_json(item, depth + 1) for key, item in value.items())
    return False


def _records(name: str, value: Any) -> None:
    if not isinstance(value, list):
        raise ValueError(f"field {name!r} must be a list of example objects, got {_kind(value)}")
    for i, record in enumerate(value):
        if not isinstance(record, dict):
            raise ValueError(f"field {name!r}: item {i} must be an example object, got {_kind(record)}")


def _check_fields(data: Any) -> None:
    """Every field of a compiled file's data has the type `to_dict` writes; else one `ValueError` naming it."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or "program" not in data:
        keys = ", ".join(map(str, data)) if isinstance(data, dict) else _kind(data)
        raise ValueError(f"not a compiled program of format {FORMAT} (keys: {keys})")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))}; a compiled file has {', '.join(_FIELDS)}")
    if not isinstance(data["program"], str) or not data["program"].strip():
        raise ValueError(f"field 'program' must be a program's name (package.module.function), "
                         f"got {_kind(data['program'])}")
    options = data.get("options")
    if options is not None and not isinstance(options, dict):
        raise ValueError(f"field 'options' must be an object of option values, got {_kind(options)}")
    for key, value in (options or {}).items():
        if not _is_json(value):
            raise ValueError(f"field 'options': {key!r} must be a JSON value, got {type(value).__name__}")
    for name in ("demos", "train"):
        if data.get(name) is not None:
            _records(name, data[name])
    knn = data.get("knn")
    if knn is not None:
        if not isinstance(knn, dict):
            raise ValueError(f"field 'knn' must be null or an object {{pool, k, vectorizer}}, got {_kind(knn)}")
        if sorted(knn) != ["k", "pool", "vectorizer"]:
            raise ValueError(f"field 'knn' must have exactly pool, k and vectorizer, got {', '.join(map(str, knn))}")
        _records("knn.pool", knn["pool"])
        if not knn["pool"]:
            raise ValueError("field 'knn.pool' is empty: a knn program draws its demos from it")
        k = knn["k"]
        if not is_int(k) or k < 1:
            raise ValueError(f"field 'knn.k' must be a positive integer, got {k!r:.40}")
        if knn["vectorizer"] not in VECTORIZERS:
            raise ValueError(f"field 'knn.vectorizer' must be one of {', '.join(VECTORIZERS)}, "
                             f"got {knn['vectorizer']!r:.40}")
    rm = data.get("rm")
    if rm is not None:
        _check_rm(rm)
    if data.get("table") is not None:
        if not isinstance(data["table"], list):
            raise ValueError(f"field 'table' must be a list of candidate rows, got {_kind(data['table'])}")
        for i, row in enumerate(data["table"]):
            if not isinstance(row, dict):
                raise ValueError(f"field 'table': row {i} must be an object, got {_kind(row)}")
    for name in ("meta", "candidate"):
        if data.get(name) is not None and not isinstance(data[name], dict):
            raise ValueError(f"field {name!r} must be an object, got {_kind(data[name])}")


def _check_rm(rm: Any) -> None:
    """The `rm` field: a retriever spec of a known kind (checked as text: nothing is opened or built here)."""
    from ..clients.specs import RM_KINDS, SpecError, parse_spec

    if not isinstance(rm, str):
        raise ValueError(f"field 'rm' must be null or a retriever spec such as 'bm25:passages.jsonl.gz', got {_kind(rm)}")
    try:
        kind = parse_spec(rm)[0]
    except SpecError as error:
        raise ValueError(f"field 'rm': {error}") from None
    if kind not in RM_KINDS:
        raise ValueError(f"field 'rm' names an unknown retriever kind {kind!r}; kinds: {', '.join(RM_KINDS)}")


def _resolve(name: str, program: Callable[..., Any] | None,
             programs: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]] | None) -> Callable[..., Any]:
    """The function a compiled file's "program" names: the caller's, or a registered one; never an import."""
    if program is not None:
        given = program_name(program)
        if given != name:
            raise ValueError(f"it holds {name}, not {given}")
        return program
    if programs is not None:
        candidates = programs.values() if isinstance(programs, Mapping) else programs
        found = {program_name(p): p for p in candidates}
        if name not in found:
            raise ValueError(f"it holds the program {name!r}, which is not among the {len(found)} given "
                             f"({', '.join(sorted(found)[:5])}{', ...' if len(found) > 5 else ''})")
        return found[name]
    function = registered_program(name)
    if function is None:
        # A compiled file is data: the name is looked up, never imported (a module of that name beside the
        # file, or anywhere on the path, would run on import).
        raise ValueError(f"it names the program {name!r}, which is not registered: import the module that defines "
                         f"it and register it (dsp.register_program), or pass it (load_compiled(path, program=...))")
    return function


def _check_options(program: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """Options the program takes: keyword parameters with a default (or any, when it takes **kwargs)."""
    try:
        parameters = inspect.signature(program).parameters
    except (TypeError, ValueError):  # a callable whose signature Python cannot read: nothing to check against
        return
    bound = sorted(key for key in options if key in _BOUND)
    if bound:
        raise ValueError(f"field 'options' sets {', '.join(bound)}, which the compiled program binds itself")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    takes = {name for name, p in parameters.items()
             if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    unknown = sorted(set(options) - takes)
    if unknown:
        raise ValueError(f"field 'options': {program_name(program)} takes no option(s) {', '.join(unknown)} "
                         f"(its options: {', '.join(sorted(takes)) or 'none'})")


def retriever_from_spec(spec: str) -> Any:
    """The RM a compiled file's `rm` spec names. A file may name any file on this machine (``bm25:/etc/passwd``):
    when that is no passages file, the error names it without quoting its lines, as a reader's error would."""
    from ..clients.specs import SpecError, parse_spec, rm_from_spec
    from ..datasets import DataFileError

    try:
        return rm_from_spec(spec)
    except DataFileError:
        argument = parse_spec(spec)[1]
        raise SpecError(f"the compiled retriever {spec!r}: {argument} is neither a passages file (JSONL, one "
                        f"{{\"text\": ...}} object a line) nor a saved index") from None


def load_compiled(path: str | os.PathLike, program: Callable[..., Any] | None = None, *,
                  programs: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]] | None = None) -> Compiled:
    """The compiled program saved at `path` (see `Compiled.save`), checked whole before anything is used.

    The file is data: its "program" is `program` when given (the names must match), else looked up among
    `programs` (a {name: function} table or a list), else among the registered programs
    (`dsp.register_program`); a name nowhere there is refused, never imported. Raises `ValueError` (one line
    naming the file and the field) for an ill-typed field, an unknown program or an option it does not take.

    >>> path = Compiled(json.dumps, {"indent": 1}, []).save(Path(tempfile.mkdtemp()) / "dumps.json")
    >>> load_compiled(path, program=json.dumps)
    Compiled(json.dumps, ?, options={'indent': 1})
    >>> load_compiled(path, program=json.loads)
    Traceback (most recent call last):
        ...
    ValueError: .../dumps.json: it holds json.dumps, not json.loads
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no compiled program there (dsp compile ... --out {path} writes one)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{path} is not JSON ({str(error)[:120]})") from None
    try:
        return Compiled.from_dict(data, program=program, programs=programs)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
