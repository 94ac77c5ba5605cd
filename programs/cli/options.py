"""The `dsp` command's shared option groups and checks: one name and one meaning per option everywhere.

    --lm SPEC         the LM (default $DSP_LM, else the embedded llamacpp model)
    --n-ctx N         the embedded model's context window        (llamacpp specs only)
    --lm-threads N    the embedded model's CPU threads           (llamacpp specs only)
    --rm SPEC         the RM (default $DSP_RM, else the task's own corpus)
    --n N             how many examples (questions, prompts per position)
    --threads N       examples run at a time
    --out PATH        where results go
    --seed S          the run's seed (`dsp run`: comma-separated, one training set each)

Every argument is checked before any model loads; a bad one is one line on stderr and exit status 2
(`UsageError`), never a traceback. Program options (`--set`, `--preset`, `--search`) are checked against
the program's parameters (names and types) and against the ranges its family declares
(`programs.family.Family.bounds`).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
import typing
from typing import Any, Callable, Mapping, NoReturn, Sequence

from dsp.clients.specs import SpecError, check_lm_spec, check_rm_spec, parse_spec, with_options
from dsp.utils import is_number
from programs.family import Bounds

__all__ = [
    "UsageError", "Parser", "positive_int", "nonnegative_int", "seed_list", "add_lm", "add_rm", "add_n", "add_threads",
    "add_out", "add_seed", "lm_spec", "rm_spec", "program_options", "parse_set", "parse_search", "existing_path",
    "Bounds", "check_bounds",
]


class UsageError(Exception):
    """A bad argument or input the user can fix: shown as one line, exit status 2."""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written, and every option's default in --help (unless its help already says it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or action.default is None or action.default is False or action.default == ""
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return text
        shown = ",".join(map(str, action.default)) if isinstance(action.default, list) else action.default
        return f"{text} (default: {str(shown).replace('%', '%%')})"  # argparse %-formats help strings


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (and exit 2) and whose help shows defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1.

    >>> positive_int("3")
    3
    >>> positive_int("-5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a positive integer, got '-5'
    """
    return _int_at_least(text, 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    """argparse type: an integer >= 0.

    >>> nonnegative_int("0")
    0
    """
    return _int_at_least(text, 0, "an integer >= 0")


def seed_list(text: str) -> list[int]:
    """argparse type: comma-separated integer seeds, no repeats.

    >>> seed_list("0,1,2")
    [0, 1, 2]
    >>> seed_list("a,b")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: takes comma-separated integers, got 'a,b'
    """
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"takes distinct comma-separated integers >= 0, got {text!r}")
    return seeds


def existing_path(text: str) -> str:
    """argparse type: a path that exists."""
    from pathlib import Path

    if not Path(text).expanduser().exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file or directory")
    return text


# -- option groups ------------------------------------------------------------------------------------

def add_lm(parser: argparse.ArgumentParser, n_ctx_help: str = "the model's own (4096)") -> None:
    group = parser.add_argument_group("language model")
    group.add_argument("--lm", metavar="SPEC", default=None,
                       help="the LM: llamacpp[:model.gguf][,n_ctx=N,flash_attn=1,n_seq=N], openai:MODEL, "
                            "openai-compatible:URL[,model=NAME], replay:FILE (default: $DSP_LM, else llamacpp)")
    group.add_argument("--n-ctx", type=positive_int, default=None,
                       help=f"context window of the embedded llamacpp model (default: {n_ctx_help})")
    group.add_argument("--lm-threads", type=positive_int, default=None,
                       help="CPU threads of the embedded llamacpp model (default: all cores; 1 is often faster "
                            "when the cores are busy)")


def add_rm(parser: argparse.ArgumentParser, default: str = "the task's own corpus") -> None:
    parser.add_argument("--rm", metavar="SPEC", default=None,
                        help=f"the RM: bm25:FILE|DIR, dense:FILE|DIR, hybrid:FILE, colbertv2:URL, "
                             f"milvus:FILE.db|URL[,collection=NAME], replay:FILE "
                             f"(default: $DSP_RM, else {default})")


def add_n(parser: argparse.ArgumentParser, what: str = "examples", default: int | None = None) -> None:
    parser.add_argument("--n", type=positive_int, default=default, help=f"how many {what} (default: all)"
                        if default is None else f"how many {what}")


def add_threads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=positive_int, default=1, help="examples run at a time")


def add_out(parser: argparse.ArgumentParser, default: str, what: str = "results directory") -> None:
    parser.add_argument("--out", default=default, help=what)


def add_seed(parser: argparse.ArgumentParser, many: bool = False, help: str = "the run's seed") -> None:
    if many:
        parser.add_argument("--seed", "--seeds", dest="seed", type=seed_list, default=[0],
                            help=f"{help}: comma-separated, e.g. 0,1,2,3,4 (the paper's five)")
    else:
        parser.add_argument("--seed", type=nonnegative_int, default=0, help=help)


# -- checks -------------------------------------------------------------------------------------------

def lm_spec(args: argparse.Namespace, n_ctx: int | None = None) -> str:
    """The checked LM spec of `--lm`, with `--n-ctx` / `--lm-threads` (or the command's `n_ctx`
    default, when the spec sets none) as options of a llamacpp spec. Nothing is loaded."""
    try:
        spec = check_lm_spec(args.lm)
        kind, _, options = parse_spec(spec)
        flags = {"n_ctx": args.n_ctx, "n_threads": args.lm_threads}
        given = [f"--{name.replace('_', '-').replace('n-threads', 'lm-threads')}" for name, v in flags.items()
                 if v is not None]
        if kind != "llamacpp":
            if given:
                raise UsageError(f"{' and '.join(given)} apply to the embedded llamacpp model, not to --lm {spec}")
            return spec
        if flags["n_ctx"] is None and "n_ctx" not in options and n_ctx is not None:
            flags["n_ctx"] = n_ctx
        return check_lm_spec(with_options(spec, **flags))
    except SpecError as error:
        raise UsageError(f"--lm: {error}") from None


def rm_spec(spec: str | None, option: str = "--rm") -> str:
    """The checked RM spec of `--rm` (or $DSP_RM; `option` names where it came from in an error)."""
    try:
        return check_rm_spec(spec)
    except SpecError as error:
        raise UsageError(f"{option}: {error}") from None


def parse_set(items: Sequence[str] | None) -> dict[str, str]:
    """`--set key=value ...` as {key: text}; the values are typed by `program_options`."""
    out: dict[str, str] = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--set takes key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def parse_search(items: Sequence[str] | None) -> dict[str, list[str]]:
    """`--search key=value,value ...` as {key: [text, ...]}; the values are typed by `program_options`.

    >>> parse_search(["k=1,2", "order=relevance"])
    {'k': ['1', '2'], 'order': ['relevance']}
    """
    out: dict[str, list[str]] = {}
    for item in items or []:
        key, eq, values = item.partition("=")
        texts = [v.strip() for v in values.split(",")]
        if not eq or not key.strip() or not all(texts):
            raise UsageError(f"--search takes key=value,value,..., got {item!r}")
        if len(set(texts)) < len(texts):
            raise UsageError(f"--search {key.strip()}: a value is given twice in {values!r}")
        out[key.strip()] = texts
    return out


def _typed(name: str, text: Any, default: Any, hint: Any, flag: str = "--set") -> Any:
    """`text` as a value of the parameter's type (from its annotation, else its default's type)."""
    if not isinstance(text, str):
        return text  # a preset's value: already typed
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        choices = typing.get_args(hint)
        if text not in choices:
            raise UsageError(f"{flag} {name}: choose one of {', '.join(map(str, choices))}, got {text!r}")
        return text
    kind = type(default) if default is not inspect.Parameter.empty and default is not None else hint
    if kind is bool:
        lowered = text.lower()
        if lowered not in ("1", "0", "true", "false", "yes", "no"):
            raise UsageError(f"{flag} {name}: takes true or false, got {text!r}")
        return lowered in ("1", "true", "yes")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"{flag} {name}: takes an integer, got {text!r}") from None
    if kind is float:
        try:
            number = float(text)
        except ValueError:
            raise UsageError(f"{flag} {name}: takes a number, got {text!r}") from None
        if not math.isfinite(number):  # float() reads "nan" and "inf": no program option means either
            raise UsageError(f"{flag} {name}: takes a finite number, got {text!r}")
        return number
    if kind is str:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def check_bounds(name: str, value: Any, bounds: Bounds, flag: str = "--set") -> None:
    """Refuse a numeric option `value` outside the range `bounds` declares for `name` (a `UsageError`
    naming the option, its range and the value); an option without declared bounds, or a value that is
    no number, passes.

    >>> check_bounds("k", 3, {"k": (1, None)})
    >>> check_bounds("k", -1, {"k": (1, None)})
    Traceback (most recent call last):
    ...
    programs.cli.options.UsageError: --set k: must be at least 1, got -1
    >>> check_bounds("temperature", 2.5, {"temperature": (0.0, 2.0)}, flag="--search")
    Traceback (most recent call last):
    ...
    programs.cli.options.UsageError: --search temperature: must be between 0 and 2, got 2.5
    """
    if name not in bounds or not is_number(value):
        return
    least, greatest = bounds[name]
    if (least is None or value >= least) and (greatest is None or value <= greatest):
        return
    if least is not None and greatest is not None:
        wanted = f"between {least:g} and {greatest:g}"
    else:
        wanted = f"at least {least:g}" if least is not None else f"at most {greatest:g}"
    raise UsageError(f"{flag} {name}: must be {wanted}, got {value!r}")


def program_options(program: Callable[..., Any], given: Mapping[str, Any], fixed: Sequence[str] = (),
                    where: str = "the program", flag: str = "--set", bounds: Bounds | None = None) -> dict[str, Any]:
    """`given` options checked against `program`'s parameters and typed as they are: an unknown key, a
    value of the wrong type, or a number outside the range `bounds` declares for it (the family's
    `bounds`) is a `UsageError` naming the valid ones. `fixed` parameters (the question, the training set)
    cannot be set.

    >>> def rtr(question, train, k: int = 1, order: str = "relevance"): ...
    >>> program_options(rtr, {"k": "3"}, ("question", "train"), bounds={"k": (1, None)})
    {'k': 3}
    >>> program_options(rtr, {"k": "0"}, ("question", "train"), bounds={"k": (1, None)})
    Traceback (most recent call last):
    ...
    programs.cli.options.UsageError: --set k: must be at least 1, got 0
    """
    signature = inspect.signature(program)
    try:
        hints = typing.get_type_hints(program)
    except (NameError, TypeError):
        hints = {}
    settable = {name: p for name, p in signature.parameters.items()
                if name not in fixed and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in settable:
            raise UsageError(f"{where} has no option {key!r}; its options: {', '.join(settable) or 'none'}")
        out[key] = _typed(key, value, settable[key].default, hints.get(key), flag)
        check_bounds(key, out[key], bounds or {}, flag)
    return out
