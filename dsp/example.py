"""Example and Completions: the values a DSP program passes between its transformations.

An `Example` is a plain dict with attribute access, so it prints, compares and serialises to JSON
like a dict while reading like a record in a program:

>>> x = Example(question="Who wrote Hamlet?", answer=["Shakespeare"])
>>> x.question
'Who wrote Hamlet?'
>>> x.copy(answer="Marlowe").answer
'Marlowe'
"""

from __future__ import annotations

from collections.abc import Mapping  # the abc class: isinstance is several times faster than typing's
from typing import Any, Callable, Iterator

__all__ = ["Example", "Completions"]


class Example(dict):
    """A dict whose keys are also attributes; a missing attribute raises AttributeError.

    >>> d = Example({"question": "q"}, answer="a")
    >>> d.without("answer")
    {'question': 'q'}
    """

    def __init__(self, base: Mapping[str, Any] | None = None, **fields: Any) -> None:
        # One dict.__init__ call (base, then fields on top) rather than two updates: Examples are
        # copied on every generate call.
        if base is None:
            super().__init__(**fields)
        elif isinstance(base, dict) or isinstance(base, Mapping):
            super().__init__(base, **fields)
        else:
            raise TypeError(f"Example() takes a dict or Example, not {type(base).__name__}: {base!r:.80}")

    def __getattr__(self, key: str) -> Any:
        # Dunder lookups (copy, pickle, numpy protocols...) must not be answered from the dict.
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"Example has no field {key!r} (fields: {', '.join(map(str, self)) or 'none'})") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        try:
            del self[key]
        except KeyError:
            raise AttributeError(key) from None

    def copy(self, **fields: Any) -> "Example":
        """A shallow copy with `fields` set on it."""
        return Example(self, **fields)

    def without(self, *keys: str) -> "Example":
        """A shallow copy without `keys` (absent keys are ignored)."""
        return Example({k: v for k, v in self.items() if k not in keys})

    def demos_at(self, fn: Callable[["Example"], Any]) -> "Example":
        """A copy whose demos are each updated with `fn(demo)` (minus its `augmented` flag).

        This is how a stage's demonstrations are looked up: `x.demos_at(lambda d: d["qa"])` lays each
        demo's stage-`qa` record over the demo. A demo for which `fn` fails is left unchanged.
        """
        demos = []
        for demo in self.get("demos", []):
            try:
                record = fn(demo)
            except (KeyError, AttributeError, TypeError, IndexError):
                record = None
            overlay = {k: v for k, v in record.items() if k != "augmented"} if isinstance(record, Mapping) else {}
            demos.append(Example(demo, **overlay))
        return self.copy(demos=demos)


class Completions:
    """The completions of one `generate` call, each an Example holding the filled fields.

    With a single completion, fields read directly (`completions.answer`); with several, a field reads
    as the list of each completion's value. Indexing and iteration give the Examples.

    >>> c = Completions([Example(answer="Paris")])
    >>> c.answer
    'Paris'
    """

    def __init__(self, completions: list[Example], template: Any = None) -> None:
        self.data = [c if isinstance(c, Example) else Example(c) for c in completions]
        self.template = template

    def __iter__(self) -> Iterator[Example]:
        return iter(self.data)

    def __getitem__(self, index: int) -> Example:
        return self.data[index]

    def __len__(self) -> int:
        return len(self.data)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__") or name in ("data", "template"):
            raise AttributeError(name)
        if not self.data:
            raise AttributeError(f"no completions to read {name!r} from")
        if len(self.data) == 1:
            return getattr(self.data[0], name)
        return [c.get(name) for c in self.data]

    def __repr__(self) -> str:
        return f"Completions({self.data!r})"
