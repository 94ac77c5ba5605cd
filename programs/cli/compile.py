"""`dsp compile`: tune a bundled program by search on its task's training pool (see `dsp.compile`).

    dsp compile dsp --dataset nq --candidates 8 --out runs/compiled/nq-dsp.json [--preset small]
    dsp compile dsp --dataset nq --candidates 8 --dry-run      # the projected LM requests and tokens, no LM call
    dsp run dsp --dataset nq --n 1000 --compiled runs/compiled/nq-dsp.json

The compile sees only the task's training pool (a validation part is held out of it); the dev set never
reaches the LM. Each candidate's rows go to ``<out without .json>.runs/``, so a killed compile resumes.
The JSON holds the chosen demonstrations and options, the table of every candidate with its score and
interval, the program's name, the LM/RM specs and the seed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable

import dsp
from dsp.clients.specs import parse_spec
from dsp.compiling import DEMO_KINDS, DemoSpace, Space, plan, report
from programs.tasks import TASKS, Task

from .options import (
    Bounds, UsageError, add_lm, add_out, add_rm, add_seed, add_threads, lm_spec, nonnegative_int, parse_search,
    parse_set, positive_int, program_options, rm_spec,
)
from .run import FIXED, _rm_choice, build_rm, program_help, resolve_program

__all__ = ["add_parser", "cmd_compile", "wrap_for"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compile", help="tune a program by search on the training data (dsp.compile)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("program", help=f"the program, by dataset: {program_help()}")
    p.add_argument("--dataset", default="nq", choices=list(TASKS), help="the task whose training pool is searched")
    add_lm(p)
    add_rm(p)
    add_threads(p)
    add_out(p, "", "the compiled program's JSON file (required)")
    add_seed(p, many=True, help="seed of the validation split, the demo draws and the candidate sample; several "
                                "(--seeds 0,1,2) compile once each, into FILE-seedS.json, and say which choices agree")
    p.add_argument("--candidates", type=positive_int, default=8, help="candidates to try (the program as written first)")
    p.add_argument("--val", type=positive_int, default=None,
                   help="validation examples held out of the pool (default: half of it, 10 to 400; the race "
                        "uses as many as its budget allows)")
    p.add_argument("--bootstrap", type=nonnegative_int, default=40,
                   help="pool examples the program is run on to bootstrap augmented demos (0: raw demos only)")
    p.add_argument("--passing", type=_fraction, default=1.0,
                   help="the score a bootstrapped trace needs to become a demo (1: right; e.g. 0.5 for nF1 on qrecc)")
    p.add_argument("--preset", help="options fixed for every candidate, e.g. small (a fixed option is not searched)")
    p.add_argument("--set", nargs="*", metavar="KEY=VALUE", help="options fixed for every candidate (not searched)")
    p.add_argument("--search", nargs="+", metavar="KEY=V1,V2", default=None,
                   help="the options to search, each with its values, in place of the program's own SEARCH "
                        "(e.g. k=1,2 n=1,5); searched even if --preset sets it (the program as written keeps "
                        "the preset's value)")
    p.add_argument("--rms", nargs="+", metavar="SPEC", default=[],
                   help="other retrievers a candidate may use instead of the default (--rm, else the task's corpus), "
                        "e.g. hybrid:$DSP_DATA_DIR/wiki2018/passages.jsonl.gz; the compiled program keeps the one chosen")
    p.add_argument("--budget", type=positive_int, default=None, metavar="EVALS",
                   help="candidate-example evaluations the race may spend (default: 200 per candidate)")
    p.add_argument("--alpha", type=_level, default=0.05,
                   help="the chance that a leader ever drops a candidate as good as itself (default 0.05)")
    p.add_argument("--no-racing", action="store_true",
                   help="score every candidate on the whole validation part, then drop and choose as the race does")
    p.add_argument("--dry-run", action="store_true",
                   help="call no LM: print the candidates and the LM requests and prompt tokens the compile would "
                        "spend, projected from a few examples a candidate and the cache (dsp.compiling.plan)")
    # Accepted only to be refused in one line saying why (argparse alone would say "unrecognized").
    p.add_argument("--split", help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_compile)


def _fraction(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"takes a number in (0, 1], got {text!r}")
    return value


def _level(text: str) -> float:
    """argparse type: a probability strictly between 0 and 1."""
    value = _fraction(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"takes a number in (0, 1), got {text!r}")
    return value


def wrap_for(task: Task) -> Callable[[Callable[..., Any], list], Callable[..., Any]] | None:
    """How a candidate is evaluated: as its family declares (`Family.wrap`; None: each example alone)."""
    return task.family.wrap


def _searched(program: Callable[..., Any], name: str, search: dict[str, list[str]], given: dict[str, str],
              bounds: Bounds) -> dict[str, list[Any]]:
    """--search as {option: typed values}, checked against the program's options, the ranges its family
    declares (`bounds`) and --set."""
    both = sorted(search.keys() & given.keys())
    if both:
        raise UsageError(f"--set and --search both name {', '.join(both)}: fix an option or search it, not both")
    return {key: [program_options(program, {key: text}, FIXED, where=f"--search: program {name!r}",
                                  flag="--search", bounds=bounds)[key] for text in texts]
            for key, texts in search.items()}


def _named_rms(specs: list[str]) -> dict[str, str]:
    """--rms specs by a short name for candidate keys: the spec's kind ("hybrid"), numbered if repeated."""
    named: dict[str, str] = {}
    for spec in specs:
        checked = rm_spec(spec, "--rms")
        kind = parse_spec(checked)[0]
        count = sum(1 for n in named if n == kind or n.startswith(f"{kind}_"))
        name = f"{kind}_{count + 1}" if count else kind
        named[name] = checked
    return named


def cmd_compile(args: argparse.Namespace) -> int:
    if args.split is not None:
        raise UsageError(f"--split {args.split}: dsp compile reads only the task's training pool, never a dev or test "
                         f"question; test a compiled program with dsp run PROGRAM --compiled FILE.json --split test")
    if not args.out and not args.dry_run:
        raise UsageError("--out FILE.json is required: where the compiled program goes")
    out = Path(args.out or "dry-run.json")  # a dry run writes nothing
    if out.suffix != ".json":
        raise UsageError(f"--out {args.out}: give a .json file")
    task = TASKS[args.dataset]
    given = parse_set(args.set)
    program, options = resolve_program(task, args.program, args.preset, given)
    family = task.family
    kinds = DEMO_KINDS if args.bootstrap else ("raw",)
    if args.search is not None:
        # Searched even when the preset sets it: the preset's value stays the baseline's.
        searched = _searched(program, args.program, parse_search(args.search), given, family.bounds)
    else:
        searched = {k: v for k, v in family.search.get(args.program, {}).items() if k not in options}
    lm_text = lm_spec(args)
    rm_text = _rm_choice(args)
    others = _named_rms(args.rms)
    space = Space(options=searched, moot=family.moot, rms=list(others), free=[o for o in family.free if o in searched],
                  demos=DemoSpace(kinds=kinds, ks=family.demo_ks))
    if args.search is not None:  # an option asked for but moot in every candidate (Space drops it) is refused
        grid = space.grid(fixed=options)
        read = [space.read(candidate, r, options) for candidate in grid for r in space.readings(options)[1:]]
        for key in searched:
            if not any(key in candidate.options for candidate in grid[1:] + read):
                under = ", ".join(f"{o}={options[o]}" for o in family.moot.get(key, {}) if o in options)
                raise UsageError(f"--search {key}: has no effect with {under} (fixed by --preset or --set); "
                                 f"search {under.split('=')[0]} too")
    pool, _ = task.load(1, 0, "dev")  # the training pool only: no dev or test question is kept
    if len(pool) < family.min_pool:
        raise UsageError(f"dataset {task.name}: its training pool has {len(pool)} examples; compile needs at least "
                         f"{family.min_pool}")
    lm = dsp.lm_from_spec(lm_text)
    rm = build_rm(task, rm_text)
    rms = {name: dsp.rm_from_spec(spec) for name, spec in others.items()}
    seeds = list(args.seed)
    chosen: dict[int, str] = {}
    for seed in seeds:
        # One seed: the file asked for; several: one file each, so every seed's program is kept.
        target = out if len(seeds) == 1 else out.with_name(f"{out.stem}-seed{seed}.json")
        config = _config(args, space, seed, family.group)
        if len(seeds) > 1:
            print(f"== seed {seed}" + ("" if args.dry_run else f" -> {target}"))
        if args.dry_run:
            with dsp.settings.context(lm=lm, rm=rm):
                print(plan(program, pool, task.metric, config, options=options, rms=rms, fields=task.fields,
                           wrap=wrap_for(task)))
            continue
        compiled = _compile_one(args, task, program, options, config, pool, lm, rm, rms, lm_text, rm_text, target)
        chosen[seed] = compiled.candidate["key"]
    if len(seeds) > 1 and not args.dry_run:
        keys = sorted(set(chosen.values()))
        said = "; ".join(f"seed {seed}: {key}" for seed, key in chosen.items())
        print(f"the {len(seeds)} seeds chose {'alike' if len(keys) == 1 else f'{len(keys)} different programs'}: {said}")
    return 0


def _config(args: argparse.Namespace, space: Space, seed: int, group: str | None) -> dsp.CompileConfig:
    """The search and budget the arguments ask for, with `seed` (and the family's `group`)."""
    return dsp.CompileConfig(space=space, candidates=args.candidates, val=args.val,
                             bootstrap_limit=args.bootstrap or None, passing=args.passing, racing=not args.no_racing,
                             budget=args.budget, alpha=args.alpha, seed=seed, group=group)


def _compile_one(args: argparse.Namespace, task: Task, program: Callable[..., Any], options: dict[str, Any],
                 config: dsp.CompileConfig, pool: list, lm: Any, rm: Any, rms: dict[str, Any], lm_text: str,
                 rm_text: str | None, out: Path) -> dsp.Compiled:
    """One compile into `out` (its candidates' rows beside it, in OUT.runs/), reported."""
    started = time.perf_counter()
    with dsp.settings.context(lm=lm, rm=rm):
        compiled = dsp.compile(program, pool, task.metric, config, options=options, rms=rms, fields=task.fields,
                               wrap=wrap_for(task), out=out.with_suffix(".runs"), runner=args.threads)
    compiled.meta.update(task=task.name, program_name=args.program, preset=args.preset, lm_spec=lm_text,
                         rm_spec=rm_text or (rm.spec if isinstance(rm, dsp.RM) else None), rm_name=repr(rm))
    compiled.save(out)
    print(report(compiled.table, compiled.meta.get("race")))
    usage, rows = compiled.meta.get("lm_usage") or {}, compiled.meta.get("rows_usage") or {}
    readings = compiled.meta.get("readings") or []
    counted = (f"{compiled.meta.get('candidates')} candidates, each read {len(readings)} ways"
               if len(readings) > 1 else f"{len(compiled.table)} candidates")
    print(f"chose {compiled.candidate['key']} (options {compiled.options}); {counted}, "
          f"{time.perf_counter() - started:.0f} s, {int(usage.get('requests', 0))} LM requests, "
          f"{int(usage.get('prompt_tokens', 0))} prompt and {int(usage.get('completion_tokens', 0))} completion tokens")
    print(f"the search's rows, when they ran (a resumed compile reuses them): {rows.get('seconds', 0):.0f} s, "
          f"{int(rows.get('requests', 0))} LM requests (+{int(rows.get('cached_requests', 0))} from the cache), "
          f"{int(rows.get('prompt_tokens', 0))} prompt and {int(rows.get('completion_tokens', 0))} completion tokens"
          + (f"; of those from the cache, {int(read.get('cached_requests', 0))} were the readings"
             if (read := compiled.meta.get("readings_usage")) else ""))
    print(f"compiled program: {out}  (dsp run {args.program} --dataset {task.name} --compiled {out})")
    return compiled
