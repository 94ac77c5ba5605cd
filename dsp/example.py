"""Example and Completions: the values a DSP program passes between its transformations.

An `Example` is a plain dict with attribute access, so it prints, compares and serialises to JSON
like a dict while reading like a record in a program:

>>> x = Example(question="Who wrote Hamlet?", answer=["Shakespeare"])
>>> x.question
'Who wrote Hamlet?'
>>> x.copy(answer="Marlowe").answer
'Marlowe'

One rule for field names, in both classes: a field may not take the name of an attribute of the class
that holds it (a dict method such as `copy`, `items` or `keys`, Example's `without` and `demos_at`,
Completions' `template`), since `x.copy` could then mean either. Such a field is refused wherever it
would be set (construction, `x.name = v`, `x["name"] = v`, `update`, `setdefault`) with a ValueError:

>>> Example(copy="x")
Traceback (most recent call last):
ValueError: Example field 'copy' would hide Example.copy(); rename the field
"""

from __future__ import annotations

from collections.abc import Mapping  # the abc class: isinstance is several times faster than typing's
from typing import Any, Callable, Iterable, Iterator

__all__ = ["Example", "Completions", "RESERVED_FIELDS", "field_name_error"]


def _refuse(owner: type, names: Iterable[Any], reserved: frozenset[str]) -> None:
    """Raise the one-line ValueError for the first of `names` that is in `reserved` (called only once a
    fast isdisjoint check has found one)."""
    for name in names:
        if name in reserved:
            raise field_name_error(name, f"{owner.__name__} field")


def field_name_error(name: str, label: str = "field") -> ValueError:
    """The error for a field named after an attribute it would hide (`name` is in `RESERVED_FIELDS`).

    >>> print(field_name_error("items", "template field"))
    template field 'items' would hide Example.items(); rename the field
    """
    owner = Example if hasattr(Example, name) else Completions
    hidden = getattr(owner, name, None)
    call = "()" if callable(hidden) and not isinstance(hidden, type) else ""
    return ValueError(f"{label} {name!r} would hide {owner.__name__}.{name}{call}; rename the field")


class Example(dict):
    """A dict whose keys are also attributes; a missing attribute raises AttributeError.

    A field may not be named after one of Example's own attributes (dict methods such as `copy`,
    `items`, `keys`, `get`, `update`, and `without`, `demos_at`; see `RESERVED_FIELDS`): such a field
    is refused with a ValueError when it is set, so `x.copy` always means the method. `base`, the
    positional dict to start from, is not a keyword: `Example(base="b")` is a field named "base".

    >>> d = Example({"question": "q"}, answer="a", base="b")
    >>> d.without("answer")
    {'question': 'q', 'base': 'b'}
    >>> d.items = ["x"]
    Traceback (most recent call last):
    ValueError: Example field 'items' would hide Example.items(); rename the field
    """

    def __init__(self, base: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        # One dict.__init__ call (base, then fields on top) rather than two updates: Examples are
        # copied on every generate call. An Example base was checked when it was made; the name check
        # is one frozenset.isdisjoint (a C loop) per other source.
        if fields and not _EXAMPLE_RESERVED.isdisjoint(fields):
            _refuse(Example, fields, _EXAMPLE_RESERVED)
        if base is None:
            super().__init__(**fields)
        elif isinstance(base, Example):
            super().__init__(base, **fields)
        elif isinstance(base, dict) or isinstance(base, Mapping):
            if not _EXAMPLE_RESERVED.isdisjoint(base):
                _refuse(Example, base, _EXAMPLE_RESERVED)
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

    def __setitem__(self, key: str, value: Any) -> None:
        if key in _EXAMPLE_RESERVED:
            _refuse(Example, (key,), _EXAMPLE_RESERVED)
        dict.__setitem__(self, key, value)

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        try:
            del self[key]
        except KeyError:
            raise AttributeError(key) from None

    def update(self, other: Any = (), /, **fields: Any) -> None:
        """dict.update, refusing a reserved field name as construction does."""
        # dict.update does not go through __setitem__: check the names it would set.
        if isinstance(other, Mapping):
            names: Iterable[Any] = other.keys()
        elif hasattr(other, "keys"):
            names = list(other.keys())
        else:
            other = [tuple(pair) for pair in other]
            names = [pair[0] for pair in other if pair]
        if not _EXAMPLE_RESERVED.isdisjoint(names):
            _refuse(Example, names, _EXAMPLE_RESERVED)
        if fields and not _EXAMPLE_RESERVED.isdisjoint(fields):
            _refuse(Example, fields, _EXAMPLE_RESERVED)
        dict.update(self, other, **fields)

    def __ior__(self, other: Any) -> "Example":
        self.update(other)
        return self

    def setdefault(self, key: str, default: Any = None, /) -> Any:
        """dict.setdefault, refusing a reserved field name as construction does."""
        if key in _EXAMPLE_RESERVED:
            _refuse(Example, (key,), _EXAMPLE_RESERVED)
        return dict.setdefault(self, key, default)

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


# Every attribute of the class (dict's methods, Example's own, the dunders): none may be a field name.
_EXAMPLE_RESERVED: frozenset[str] = frozenset(dir(Example))


class Completions:
    """The completions of one `generate` call, each an Example holding the filled fields.

    With a single completion, fields read directly (`completions.answer`); with several, a field reads
    as the list of each completion's value. Indexing and iteration give the Examples; `template` is the
    template that made them (None if none did). As for Example, a field may not be named after one of
    Completions' attributes (`template`, besides Example's): such a completion is refused with a
    ValueError.

    >>> c = Completions([Example(answer="Paris", data="d")])
    >>> c.answer, c.data
    ('Paris', 'd')
    >>> Completions([{"template": "t"}])
    Traceback (most recent call last):
    ValueError: Completions field 'template' would hide Completions.template; rename the field
    """

    __slots__ = ("_data", "_template")

    def __init__(self, completions: list[Example], template: Any = None) -> None:
        data = [c if isinstance(c, Example) else Example(c) for c in completions]
        for completion in data:  # Example's own names are refused by Example: only Completions' are left
            if not _COMPLETIONS_ONLY.isdisjoint(completion):
                _refuse(Completions, completion, _COMPLETIONS_ONLY)
        self._data = data
        self._template = template

    @property
    def template(self) -> Any:
        """The template whose completions these are (None if none made them)."""
        return self._template

    def __iter__(self) -> Iterator[Example]:
        return iter(self._data)

    def __getitem__(self, index: int) -> Example:
        return self._data[index]

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> Any:
        # Only names that are not Completions attributes get here: read them from the completions.
        if name.startswith("__") and name.endswith("__") or name in _COMPLETIONS_ONLY:
            raise AttributeError(name)  # _data/_template before __init__ set them (a copy, an unpickling)
        data = self._data
        if not data:
            raise AttributeError(f"no completions to read {name!r} from")
        if len(data) == 1:
            return Example.__getattr__(data[0], name)  # the field, never one of the Example's methods
        return [c.get(name) for c in data]

    def __getstate__(self) -> tuple[list[Example], Any]:
        return self._data, self._template

    def __setstate__(self, state: tuple[list[Example], Any]) -> None:
        self._data, self._template = state

    def __repr__(self) -> str:
        return f"Completions({self._data!r})"


# Completions' attributes that are not Example's (template, the slots): refused as completion fields.
_COMPLETIONS_ONLY: frozenset[str] = frozenset(dir(Completions)) - _EXAMPLE_RESERVED
# Every name no field may take, in an Example or a Completions (a Template refuses them for its fields).
RESERVED_FIELDS: frozenset[str] = _EXAMPLE_RESERVED | _COMPLETIONS_ONLY
