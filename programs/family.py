"""A family of programs as declared data: everything the `dsp` command knows about a kind of task.

Each family module (programs/open_qa.py, multihop.py, conversational.py) exports one `FAMILY`, and each
task (`programs.tasks.Task`) refers to its family object. The command reads only this record: which
programs there are, their presets, what `dsp compile` searches and how, the options' valid ranges and
how a program is evaluated over examples. Nothing under programs/cli/ names a family or a program.

>>> def echo(question, train, k: int = 1, demos=None): ...
>>> family = Family("echo", programs={"echo": echo}, presets={"paper": {}, "small": {"k": 1}},
...                 search={"echo": {"k": [1, 2]}}, bounds={"k": (1, None)}, demo_ks=(2, 4), main_program="echo",
...                 small_preset="small")
>>> dsp.LlamaCpp.small, dsp.OpenAI.small                  # declared by each client (`dsp.LM.small`)
(True, False)
>>> family.default_preset("echo", small=dsp.LlamaCpp.small), family.default_preset("echo", small=False)
('small', None)
>>> Family("bad", programs={"echo": echo}, demo_ks=(0,), main_program="echo")
Traceback (most recent call last):
...
ValueError: family bad: demo_ks must be positive integers, got (0,)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import dsp
from dsp.utils import is_int

__all__ = ["Family", "Bounds", "Wrap"]

# The valid range of a numeric option: option -> (least, greatest), both inclusive, None for no bound.
Bounds = Mapping[str, tuple[float | None, float | None]]
# How a program is evaluated over examples that are not independent: wrap(program, examples) is the
# callable that answers each of them (e.g. turns of a conversation, each seeing the earlier answers), as
# `dsp.compile(wrap=...)` takes it.
Wrap = Callable[[Callable[..., Any], Sequence[dsp.Example]], Callable[..., Any]]


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, eq=False)
class Family:
    """The programs for one kind of task and what the `dsp` command needs to run, tune and check them.

    - `programs`: name -> program function (`fn(question, [history,] train, **options)`); `main_program`
      is the family's own (the DSP program): the one `dsp ask` runs unless told otherwise;
    - `presets`: name -> options of `main_program` (its own defaults are the paper's); `small_preset` is
      the one an LM declaring itself small (`dsp.LM.small`) gets when none is asked for;
    - `search`: program -> option -> values `dsp compile` may try; `moot`: option -> {other option: the
      values under which it has no effect} (never searched there); `free`: searched options that change no
      LM or RM call, only how completions are read (a compile scores every candidate under each of their
      values from the same cached calls: `dsp.Space.free`);
    - `bounds`: the valid range of every numeric option (checked before any model loads);
    - `demo_ks`: how many demonstrations a compile tries; `min_pool`: the least training pool it runs on;
    - `wrap`: None when a program answers each example alone, else how examples are evaluated together;
      `group`: the field whose examples a compile holds out together (a conversation), or None.

    A family is one object, compared by identity.
    """

    name: str
    programs: Mapping[str, Callable[..., Any]]
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: {"paper": {}})
    search: Mapping[str, Mapping[str, Sequence[Any]]] = field(default_factory=dict)
    moot: Mapping[str, Mapping[str, Sequence[Any]]] = field(default_factory=dict)
    bounds: Bounds = field(default_factory=dict)
    demo_ks: tuple[int, ...] = (2, 4)
    min_pool: int = 20
    main_program: str = field(kw_only=True)
    small_preset: str | None = None
    wrap: Wrap | None = None
    group: str | None = None
    free: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"family {self.name}"
        if not self.programs:
            raise ValueError(f"{where}: programs is empty")
        if self.main_program not in self.programs:
            raise ValueError(f"{where}: main_program {self.main_program!r} is not one of its programs")
        if self.small_preset is not None and self.small_preset not in self.presets:
            raise ValueError(f"{where}: small_preset {self.small_preset!r} is not one of its presets")
        unknown = sorted(set(self.search) - set(self.programs))
        if unknown:
            raise ValueError(f"{where}: search names programs it does not have: {', '.join(unknown)}")
        if not self.demo_ks or any(not is_int(k) or k < 1 for k in self.demo_ks):
            raise ValueError(f"{where}: demo_ks must be positive integers, got {self.demo_ks!r}")
        searched = {option for options in self.search.values() for option in options}
        if isinstance(self.free, str) or any(option not in searched for option in self.free):
            raise ValueError(f"{where}: free must list searched options, got {self.free!r}")
        if not is_int(self.min_pool) or self.min_pool < 1:
            raise ValueError(f"{where}: min_pool must be a positive integer, got {self.min_pool!r}")
        for name in ("programs", "presets", "search", "moot", "bounds"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))  # declared once: read-only after

    @property
    def standalone(self) -> bool:
        """Whether a program answers each example alone (one question: `dsp ask`; any batch: Ray)."""
        return self.wrap is None

    def default_preset(self, program: str, small: bool) -> str | None:
        """The preset `program` runs with when none is asked for, on an LM whose `dsp.LM.small` declaration
        is `small`: `small_preset` for the presets' program on a small LM, else None (the program's own
        defaults: the paper's settings). Never decided by the LM's provider or name."""
        return self.small_preset if small and program == self.main_program else None
