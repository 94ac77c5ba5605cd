"""A compiled program: the program with what the search chose bound to it, saved as plain JSON.

`Compiled` is called like the program (``compiled(question)``, or ``compiled(question, history)``): it
passes the chosen options, the training set and the demonstrations (fixed, or the k nearest to the
question from a bootstrapped pool) to the program, under the retriever the search chose if it chose
one. `save` writes JSON (the demos as plain records, the options, the retriever's spec, the search
table, the program's importable name, the LM/RM specs, the seed; never pickle); `load_compiled` reads
it back and imports the program by name.

>>> compiled = dsp.compile(program, train, dsp.EM)              # doctest: +SKIP
>>> compiled.save("runs/compiled/rtr.json")                     # doctest: +SKIP
>>> dsp.load_compiled("runs/compiled/rtr.json")("Who wrote Hamlet?").answer   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..evaluation.rows import jsonable
from ..example import Example
from .bootstrap import question_of

__all__ = ["Compiled", "load_compiled", "program_name", "import_program", "FORMAT"]

FORMAT = 1


def program_name(program: Callable[..., Any]) -> str:
    """The importable name of a program function ("package.module.function"); partials name their function.

    >>> program_name(json.dumps)
    'json.dumps'
    """
    while isinstance(program, functools.partial):
        program = program.func
    module, qualname = getattr(program, "__module__", None), getattr(program, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise TypeError(f"a compiled program must be an importable function (module.function), got {program!r}; "
                        f"lambdas and nested functions cannot be loaded again")
    return f"{module}.{qualname}"


def import_program(name: str) -> Callable[..., Any]:
    """The function named "package.module.function" (the inverse of `program_name`)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute, None)
        if callable(target):
            return target
        break
    raise ImportError(f"cannot import the compiled program {name!r}: is its package installed and on the path?")


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

    def retriever(self) -> Any:
        """The RM the search chose (built once from `rm_spec`), or None: the current `dsp.settings.rm`."""
        if self.rm is None and self.rm_spec:
            with self._rm_lock:
                if self.rm is None:
                    from ..clients.specs import rm_from_spec

                    self.rm = rm_from_spec(self.rm_spec)
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
        return {
            "format": FORMAT, "program": program_name(self.program), "options": jsonable(self.options),
            "candidate": jsonable(self.candidate), "demos": jsonable(self.demos),
            "knn": {"pool": jsonable(self.knn_pool), "k": self.knn_k, "vectorizer": self.vectorizer}
            if self.knn_pool else None,
            "train": jsonable(self.train), "rm": self.rm_spec, "table": jsonable(self.table),
            "meta": jsonable(self.meta),
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
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(partial, path)
        return path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Compiled":
        if not isinstance(data, Mapping) or data.get("format") != FORMAT or "program" not in data:
            raise ValueError(f"not a compiled program of format {FORMAT} (keys: {', '.join(data) if isinstance(data, Mapping) else type(data).__name__})")
        knn = data.get("knn") or {}
        examples = lambda records: None if records is None else [Example(r) for r in records]  # noqa: E731
        return cls(import_program(data["program"]), dict(data.get("options") or {}), examples(data.get("train")) or [],
                   examples(data.get("demos")), examples(knn.get("pool")), int(knn.get("k") or 0),
                   str(knn.get("vectorizer") or "hashing"), dict(data.get("candidate") or {}),
                   list(data.get("table") or []), dict(data.get("meta") or {}), data.get("rm"))


def load_compiled(path: str | os.PathLike) -> Compiled:
    """The compiled program saved at `path` (see `Compiled.save`).

    >>> dsp.load_compiled("runs/compiled/nq-dsp.json")          # doctest: +SKIP
    Compiled(programs.open_qa.dsp_program, augmented5-knn-k1, options={'k': 1})
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no compiled program there (dsp compile ... --out {path} writes one)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{path} is not JSON ({error})") from None
    try:
        return Compiled.from_dict(data)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None

