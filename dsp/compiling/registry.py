"""The programs a compiled file may name: `load_compiled` resolves a file's "program" here, never by import.

A compiled file is data. Its "program" entry is a name ("package.module.function") looked up among the
functions this process registered, so loading a file (from a colleague, a download, a shared folder)
runs no code it names: a name nobody registered is refused, whatever module of that name exists.

Programs are registered by the code that defines them: with the `register_program` decorator, with
`register_programs(PROGRAMS)` for a module's table (the bundled families under `programs/` do so when
imported), and by `dsp.compile` for the program it compiles (any `Compiled` built in this process
registers its program). A caller may also pass the program to `load_compiled` itself.

>>> @register_program
... def reader(question, train):
...     return question
>>> registered_program(f"{__name__}.reader") is reader
True
>>> registered_program("os.system") is None
True
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Iterable, Mapping, TypeVar

__all__ = ["register_program", "register_programs", "registered_program", "program_name"]

P = TypeVar("P", bound=Callable[..., Any])

_PROGRAMS: dict[str, Callable[..., Any]] = {}
_LOCK = threading.Lock()  # modules may be imported from several threads at once (Ray workers, runners)


def program_name(program: Callable[..., Any]) -> str:
    """The importable name of a program function ("package.module.function"); partials name their function.

    >>> import json
    >>> program_name(functools.partial(json.dumps, indent=1))
    'json.dumps'
    """
    while isinstance(program, functools.partial):
        program = program.func
    module, qualname = getattr(program, "__module__", None), getattr(program, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise TypeError(f"a compiled program must be an importable function (module.function), got {program!r}; "
                        f"lambdas and nested functions cannot be loaded again")
    return f"{module}.{qualname}"


def register_program(program: P) -> P:
    """Let compiled files name `program` (by `program_name`); returns it, so it works as a decorator.

    A partial registers its function. Registering another function under a name already taken replaces
    it (a module reloaded in a notebook registers its new functions).

    >>> import json
    >>> register_program(json.dumps) is json.dumps
    True
    """
    if not callable(program):
        raise TypeError(f"register_program needs a function, got {type(program).__name__}: {program!r:.80}")
    name = program_name(program)
    function = program
    while isinstance(function, functools.partial):
        function = function.func
    with _LOCK:
        _PROGRAMS[name] = function
    return program


def register_programs(programs: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]]) -> None:
    """`register_program` for each program of a table ({name: function}, as the bundled families' PROGRAMS)
    or of a list.

    >>> import json
    >>> register_programs({"dump": json.dumps, "load": json.loads})
    >>> registered_program("json.loads") is json.loads
    True
    """
    for program in (programs.values() if isinstance(programs, Mapping) else programs):
        register_program(program)


def registered_program(name: str) -> Callable[..., Any] | None:
    """The program registered under `name` ("package.module.function"), or None."""
    with _LOCK:
        return _PROGRAMS.get(name)
