"""What a program must take to be compiled, read from its signature before any LM call: `train=`,
`demos=` when a candidate chooses demonstrations, every option a candidate sets or the compile fixes;
and the defaults of the options searched (where every candidate starts).

>>> def reader(question, train=None, demos=None, k=1): ...
>>> signature_defaults(reader, ["k", "n"])
{'k': 1}
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Sequence

from .space import Candidate

__all__ = ["check_contract", "signature_defaults"]


def check_contract(program: Callable[..., Any], chosen: Sequence[Candidate], options: Mapping[str, Any]) -> None:
    """Refuse, before any LM call, a search the program cannot take: it is called with ``train=``, with
    ``demos=`` by every candidate that chooses demonstrations, and with each option a candidate sets.

    >>> def reader(question, train=None, k=1): ...
    >>> check_contract(reader, [Candidate({"kind": "raw", "k": 3, "select": "knn"})], {})
    Traceback (most recent call last):
        ...
    ValueError: the program reader takes no demos= parameter, but the search tries candidates with chosen demonstrations (raw3-knn); give it one, or search DemoSpace kinds it can use
    """
    try:
        parameters = inspect.signature(program).parameters
    except (TypeError, ValueError):  # a callable Python cannot read: it is called and its errors counted
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    name = getattr(program, "__qualname__", None) or type(program).__name__
    needs = {"train": "every candidate passes the training pool"}
    with_demos = [c.key for c in chosen if c.demos.get("kind") != "none"]
    if with_demos:
        needs["demos"] = f"the search tries candidates with chosen demonstrations ({', '.join(with_demos[:3])})"
    for candidate in chosen:
        for option in candidate.options:
            needs.setdefault(option, f"the search tries {option}= values ({candidate.key})")
    for option in options:
        needs.setdefault(option, f"options= fixes {option}")
    for parameter, why in needs.items():
        if parameter not in parameters:
            hint = ("give it one, or search DemoSpace kinds it can use" if parameter == "demos"
                    else "give it one" if parameter == "train" else "search or fix only options it takes")
            raise ValueError(f"the program {name} takes no {parameter}= parameter, but {why}; {hint}")


def signature_defaults(program: Callable[..., Any], names: Sequence[str]) -> dict[str, Any]:
    """The program's default value of each of `names` that its signature gives one."""
    try:
        parameters = inspect.signature(program).parameters
    except (TypeError, ValueError):  # a callable whose signature Python cannot read: no defaults known
        return {}
    return {name: p.default for name, p in parameters.items()
            if name in names and p.default is not inspect.Parameter.empty}
