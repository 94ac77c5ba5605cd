"""`dsp run` (evaluate a bundled program on a task) and `dsp ask` (one question, with its trace).

    dsp run dsp --dataset nq --n 300 --seed 0,1,2,3,4 --threads 2 [--preset small] [--set k=5 n=10]
    dsp run dsp --dataset nq --compiled nq-dsp.json --split test      # the declared test split, used once
    dsp ask "who got the first nobel prize in physics" --program retrieve_then_read

A run's results go to ``<out>/<task>[-test]-<program>[-<preset>][-<options>][-shots<K>]-seed<S>.jsonl``
(``-test`` for the test split, so test rows never share a file with dev rows), whose header records
everything that decides its rows (task, split, program, options, preset, shots, seed, LM, RM): the same
command resumes it, a command with other settings is refused with a line naming what changed. An option
set to the value it has anyway (``--set k=1`` where k is 1 by default, or by the preset) is the same run
as leaving it out: the same file, which it resumes. Options are checked (names, types and the ranges the
program's family declares, `Family.bounds`) before any model loads. Two different option sets never share
a name: a value whose text could be read otherwise is named by a digest after a "~" (``k_1~6fe2249cdf``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import inspect
import json
import re
import sys
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import dsp
from dsp.clients.retry import REDACTED, redact_urls
from dsp.clients.specs import check_rm_spec
from dsp.evaluation import Ray, Runner, Threads
from programs.family import Family
from programs.tasks import SPLITS, TASKS, Task

from .options import (
    UsageError, add_lm, add_n, add_out, add_rm, add_seed, add_threads, existing_path, lm_spec, nonnegative_int,
    parse_set, positive_int, program_options, rm_spec,
)

__all__ = ["add_parser", "cmd_run", "cmd_ask", "resolve_program", "build_rm", "results_name", "run_entries",
           "program_help", "preset_help", "run_examples", "split_stem"]

PAPER_SHOTS = 16
# Parameters a task supplies to every program: never settable with --set.
FIXED = ("question", "history", "train")


def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="evaluate a program on a dataset",
                         description="Evaluate a bundled program on a task's dev set: one JSONL row per example, "
                                     "resumable, with a 95% interval per seed and the mean over seeds.")
    run.add_argument("program", help=f"the program, by dataset: {program_help()}")
    run.add_argument("--dataset", default="nq", choices=list(TASKS), help="the task")
    add_lm(run)
    add_rm(run)
    add_n(run, "examples of the split (the first N, or N drawn with --dev-seed)")
    add_threads(run)
    add_out(run, "runs", "directory for the per-example JSONL files")
    add_seed(run, many=True, help="training-set seed(s), one 16-shot draw each")
    run.add_argument("--shots", type=nonnegative_int, default=PAPER_SHOTS, help="training examples per seed")
    run.add_argument("--preset", help=f"a named set of the program's options, by dataset: {preset_help()}")
    run.add_argument("--set", nargs="*", metavar="KEY=VALUE", help="program options, e.g. k=5 n=10")
    run.add_argument("--split", choices=SPLITS, default="dev",
                     help="the task's dev split, or its declared test split: used once, never to design, tune or "
                          f"choose (declared by {', '.join(t for t in TASKS if 'test' in TASKS[t].splits)})")
    run.add_argument("--dev-seed", type=nonnegative_int, default=None,
                     help="seed of the dev downsampling (default: 0; the test split is fixed)")
    run.add_argument("--compiled", type=existing_path, metavar="FILE.json",
                     help="run the program as `dsp compile` tuned it: its demonstrations and options "
                          "(--set KEY=VALUE changes one, for an ablation; the results file's name says so)")
    ray = run.add_argument_group("Ray (a cluster)")
    ray.add_argument("--backend", choices=("threads", "ray"), default="threads",
                     help="threads in this process, or batches as Ray tasks on a cluster")
    ray.add_argument("--ray-address", help="the cluster (auto, host:6379, ray://host:10001); default $RAY_ADDRESS, "
                                           "else a local one")
    ray.add_argument("--batch-size", type=positive_int, help="examples per Ray task (default: --threads)")
    ray.add_argument("--global-concurrency", type=positive_int,
                     help="LM requests in flight across all Ray workers (default: no limit)")
    run.set_defaults(handler=cmd_run)

    ask = sub.add_parser("ask", help="answer one question with a program, printing each stage's prompt and "
                                     "the model's raw text")
    ask.add_argument("question")
    alone = {name: task for name, task in TASKS.items() if task.family.standalone}  # one question, no history
    main = sorted({task.family.main_program for task in alone.values()})
    ask.add_argument("--program", help=f"the program, by dataset: {program_help(alone)} (default: the dataset's "
                                       f"own, {' or '.join(main)})")
    ask.add_argument("--dataset", default="nq", choices=list(alone), help="whose training pool and default RM to use")
    add_lm(ask)
    add_rm(ask)
    add_seed(ask, help="training-set seed")
    ask.add_argument("--shots", type=nonnegative_int, default=PAPER_SHOTS, help="training examples")
    ask.add_argument("--preset", help=f"a named set of the program's options, by dataset: {preset_help(alone)} "
                                      "(default: the small-model one when the LM declares itself small, as the "
                                      "embedded ones do; else the program's own options)")
    ask.add_argument("--set", nargs="*", metavar="KEY=VALUE", help="program options")
    ask.add_argument("--full", action="store_true", help="print whole prompts (default: their last 1,500 characters)")
    ask.set_defaults(handler=cmd_ask)


# -- resolving names and options ------------------------------------------------------------------------

def _by_dataset(tasks: Mapping[str, Task], names: Callable[[Family], Iterable[str]], joiner: str) -> str:
    """`names` of each family, after the datasets of `tasks` it serves, in one line (for help texts)."""
    datasets: dict[Family, list[str]] = {}
    for name, task in tasks.items():
        datasets.setdefault(task.family, []).append(name)
    return "; ".join(f"{', '.join(served)}: {joiner.join(names(family))}" for family, served in datasets.items())


def program_help(tasks: Mapping[str, Task] = TASKS) -> str:
    """The programs each dataset of `tasks` offers, from the families' declarations (for help texts).

    >>> program_help({"squad": TASKS["squad"], "qrecc": TASKS["qrecc"]})
    'squad: vanilla | retrieve_then_read | self_ask | dsp; qrecc: vanilla | retrieve_then_read | dsp'
    """
    return _by_dataset(tasks, lambda family: family.programs, " | ")


def preset_help(tasks: Mapping[str, Task] = TASKS) -> str:
    """The presets each dataset of `tasks` offers and the program they set (for help texts).

    >>> preset_help({"nq": TASKS["nq"], "qrecc": TASKS["qrecc"]})
    'nq: paper, small (of dsp); qrecc: paper (of dsp)'
    """
    return _by_dataset(tasks, lambda family: [f"{', '.join(family.presets)} (of {family.main_program})"], "")


def resolve_program(task: Task, name: str, preset: str | None, settings: dict[str, str]) -> tuple[Callable, dict]:
    """(program function, its checked options: preset, then --set on top)."""
    family = task.family
    if name not in family.programs:
        raise UsageError(f"dataset {task.name} has no program {name!r}; choose one of: {', '.join(family.programs)}")
    program = family.programs[name]
    options: dict[str, Any] = {}
    if preset is not None:
        if preset not in family.presets:
            raise UsageError(f"no preset {preset!r} for {task.name}; presets: {', '.join(family.presets)}")
        options = program_options(program, family.presets[preset], FIXED, bounds=family.bounds,
                                  where=f"preset {preset!r} is for the {family.main_program} program; program {name!r}")
    options.update(program_options(program, settings, FIXED, where=f"program {name!r}", bounds=family.bounds))
    return program, options


def effective_options(program: Callable, options: dict[str, Any]) -> dict[str, Any]:
    """Every option of `program` with the value it will run with (its defaults, then `options`)."""
    defaults = {n: p.default for n, p in inspect.signature(program).parameters.items()
                if n not in FIXED and p.default is not inspect.Parameter.empty}
    return {**defaults, **options}


_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._]+")  # what a value's text may not hold to be shown as it is
_SLUG_LONG = 60  # characters; a longer option set is named by its digest (the header holds it in full)
_SLUG_DIGEST = re.compile(r"opts[0-9a-f]{10}")  # how a long option set is named


def _slug(changed: dict[str, Any], program: Callable) -> str:
    """The part of a results file's name that says which options differ: ``key value`` pairs, sorted,
    joined by "_" (``k3_n5``), as ever. Two different option sets never get one slug: it is shown so only
    when it reads back, as `--set` types values, as these options and no others (one way to split it into
    this program's option names and values); else its text is made file-safe and a digest of the exact
    values follows a "~", which a plain slug never holds.

    >>> def rtr(question, train, k: int = 1, order: str = "relevance", temperature: float = 0.0): ...
    >>> _slug({"k": 3, "order": "lost_in_the_middle"}, rtr)
    'k3_orderlost_in_the_middle'
    >>> _slug({"k": -1}, rtr), _slug({"temperature": -0.5}, rtr), _slug({"temperature": 0.5}, rtr)
    ('k_1~6fe2249cdf', 'temperature_0.5~20ace7ec54', 'temperature0.5')
    >>> _slug({"order": "a b"}, rtr), _slug({"order": "a/b"}, rtr)
    ('ordera_b~2f1cdb854f', 'ordera_b~1b76c231bf')
    """
    pairs = sorted(changed.items())
    shown = [f"{key}{value}" for key, value in pairs]
    text = "_".join(shown)
    if all(_reads_as(program, key, value) for key, value in pairs) and text and \
            not _SLUG_DIGEST.fullmatch(text) and _readings(text, program, 2) == 1:
        # Faithful: only these options read so. A long one is named by a digest of that text, as ever.
        return text if len(text) <= _SLUG_LONG else "opts" + hashlib.sha256(text.encode()).hexdigest()[:10]
    digest = hashlib.sha256(json.dumps(pairs, sort_keys=True, default=repr).encode()).hexdigest()[:10]
    return f"{_SLUG_UNSAFE.sub('_', '-'.join(shown)).strip('_')[:_SLUG_LONG - 11]}~{digest}"


_UNREADABLE = object()


@functools.lru_cache(maxsize=4096)
def _read(program: Callable, key: str, text: str) -> Any:
    """`text` as `--set key=text` types it for `program` (`_UNREADABLE` if it is refused); cached, as a
    slug's readings try many splits of one name."""
    try:
        return program_options(program, {key: text}, FIXED)[key]
    except UsageError:
        return _UNREADABLE


def _reads_as(program: Callable, key: str, value: Any) -> bool:
    """Whether `value`'s text is file-safe and reads back (as `--set` types it) as this very value: not a
    string "3" where the text "3" reads as the number 3."""
    shown = f"{value}"
    if _SLUG_UNSAFE.search(shown):
        return False
    back = _read(program, key, shown)
    return back is not _UNREADABLE and back == value and type(back) is type(value)


def _readings(text: str, program: Callable, enough: int) -> int:
    """How many option sets of `program` (counted up to `enough`) a slug `text` could be: splits of it
    into ``key value`` pairs joined by "_", keys in sorted order, each value read as `--set` reads it and
    shown back as the very same text."""
    names = sorted(n for n, p in inspect.signature(program).parameters.items()
                   if n not in FIXED and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))

    def reads(key: str, shown: str) -> bool:
        back = _read(program, key, shown)
        return back is not _UNREADABLE and f"{back}" == shown

    def count(start: int, after: int) -> int:  # readings of text[start:] with keys from names[after:]
        found = 0
        for i in range(after, len(names)):
            key = names[i]
            if not text.startswith(key, start):
                continue
            begin = start + len(key)
            ends = [j for j in range(begin + 1, len(text)) if text[j] == "_"] + [len(text)]
            for end in ends:
                if reads(key, text[begin:end]):
                    found += 1 if end == len(text) else count(end + 1, i + 1)
                    if found >= enough:
                        return found
        return found

    return count(0, 0)


def results_name(task: Task, name: str, preset: str | None, program: Callable, options: dict[str, Any],
                 shots: int, seed: int, split: str = "dev") -> str:
    """The results file of a run: settings that differ from the program's (preset's) defaults are in the
    name, so sweeps sit side by side (a setting equal to its default is no change: the same file); a test
    run's name says so after the task's. Different settings never get one name (see `_slug`).

    >>> results_name(TASKS["nq"], "retrieve_then_read", None, lambda q, train, k=1: q, {"k": 3}, 16, 0)
    'nq-retrieve_then_read-k3-seed0.jsonl'
    >>> results_name(TASKS["nq"], "retrieve_then_read", None, lambda q, train, k=1: q, {}, 16, 0, split="test")
    'nq-test-retrieve_then_read-seed0.jsonl'
    """
    base = effective_options(program, {})
    if preset is not None:
        base.update(task.family.presets[preset])
    changed = {k: v for k, v in options.items() if k not in base or _differs(base[k], v)}
    parts = [split_stem(task, split), name] + ([preset] if preset else [])
    parts += [_slug(changed, program)] if changed else []
    parts += [f"shots{shots}"] if shots != PAPER_SHOTS else []
    return "-".join(parts + [f"seed{seed}"]) + ".jsonl"


def _differs(default: Any, value: Any) -> bool:
    """Whether an option's `value` is a change from its `default` (True is not 1, 1.0 is not 1).

    >>> _differs(1, 1), _differs(0.7, 0.7), _differs(1, 3), _differs(1, True)
    (False, False, True, True)
    """
    return default != value or type(default) is not type(value)


def split_stem(task: Task, split: str) -> str:
    """The start of a results file's name: the task's, and "-test" for its test split (dev names as ever)."""
    return task.name if split == "dev" else f"{task.name}-{split}"


def run_examples(task: Task, args: argparse.Namespace) -> tuple[list, list, dict[str, Any]]:
    """(training pool, the examples to run, what the results file's identity says of them). A dev run's
    identity is as it was before test splits existed, so its published files still resume."""
    try:
        task.check_split(args.split)
    except ValueError as error:
        raise UsageError(f"--split {args.split}: {error}") from None
    if args.split == "test" and args.dev_seed is not None:
        raise UsageError(f"--dev-seed draws dev questions; the test split of {task.name} is fixed: drop --dev-seed")
    dev_seed = 0 if args.dev_seed is None else args.dev_seed
    try:
        pool, examples = task.load(args.n, dev_seed, args.split)
    except ValueError as error:
        raise UsageError(f"--n {args.n}: {error}") from None
    if args.split == "dev":
        return pool, examples, {"dev": {"order": task.dev_order, "seed": dev_seed}}
    return pool, examples, {"split": args.split, args.split: task.test.describe(task.dev_order)}


def build_rm(task: Task, spec: str | None) -> Any:
    """`--rm` (or $DSP_RM) if given, else the task's own corpus."""
    if spec:
        return dsp.rm_from_spec(spec)
    rm = task.rm()
    if rm is None:
        raise UsageError(f"dataset {task.name}: its corpus is not in DSP_DATA_DIR; pass --rm")
    return dsp.rm_from_spec(rm) if isinstance(rm, str) else rm


def _rm_choice(args: argparse.Namespace) -> str | None:
    import os

    chosen = args.rm or os.environ.get("DSP_RM")
    return rm_spec(chosen) if chosen else None


def _train(pool: list, shots: int, seed: int) -> list:
    if shots > len(pool):
        raise UsageError(f"--shots {shots}: the training pool has only {len(pool)} examples")
    return dsp.datasets.few_shot_train(pool, k=shots, seeds=[seed])[seed]


def _runner(args: argparse.Namespace, task: Task) -> Runner:
    if args.backend != "ray":
        if args.ray_address or args.batch_size or args.global_concurrency:
            raise UsageError("--ray-address, --batch-size and --global-concurrency need --backend ray")
        return Threads(args.threads)
    if not task.family.standalone:
        # Its examples are evaluated together (turns see the program's own earlier answers), in one process.
        raise UsageError(f"dataset {task.name} ({task.family.name}) evaluates its examples together in one process; "
                         "use --backend threads")
    return Ray(address=args.ray_address, threads=args.threads, batch_size=args.batch_size,
               global_concurrency=args.global_concurrency)


def _bound(task: Task, program: Callable, train: list, options: dict[str, Any], dev: list) -> Callable:
    """`program` with its training set and the options that differ from its own defaults.

    One rule: an option set to the value the program would use anyway (``--set k=1`` when k defaults to
    1) is the same run as leaving it out: the same file name and the same identity, so it resumes that
    file. Binding it would put it in the identity's `program` and refuse the file's rows as another
    run's; the published results/ headers bind only options that differ.
    """
    defaults = effective_options(program, {})
    differing = {key: value for key, value in options.items() if key not in defaults or _differs(defaults[key], value)}
    bound = partial(program, train=train, **differing)
    return bound if task.family.wrap is None else task.family.wrap(bound, dev)


def run_entries(task: Task, args: argparse.Namespace, program: Callable, options: dict[str, Any],
                examples: dict[str, Any]) -> dict[str, Any]:
    """What a run's identity says besides the program, metric, fields, seed, LM and RM (which
    `dsp.evaluation.run_identity` adds): task, which questions, program name, preset, every option's
    value (its defaults included, so a default set by name or left out reads alike) and shots."""
    return {"task": task.name, **examples, "program_name": args.program, "preset": args.preset,
            "options": dsp.evaluation.describe(effective_options(program, options)), "shots": args.shots}


# -- the commands ---------------------------------------------------------------------------------------

def _compiled(task: Task, args: argparse.Namespace, program: Callable,
              changes: dict[str, Any]) -> tuple[Any, str, dict[str, Any]]:
    """The compiled program of --compiled (checked against the program asked for) with the options --set
    changes (an ablation), its digest (of what decides its answers: a compile rerun and saved again with a
    new table is the same program) and the options that differ from the compiled ones."""
    if args.preset:
        raise UsageError("--compiled fixes the program's options: drop --preset (--set KEY=VALUE changes one)")
    try:
        # A compiled file is data: it must name the program asked for, which is passed (nothing it names is
        # imported), and it is checked whole, options included, before anything runs.
        compiled = dsp.load_compiled(args.compiled, program=program)
    except ValueError as error:
        raise UsageError(f"--compiled: {error}") from None
    current = effective_options(program, compiled.options)
    changed = {key: value for key, value in changes.items() if current.get(key, object()) != value}
    if changed:
        compiled = dataclasses.replace(compiled, options={**compiled.options, **changed})
    return compiled, compiled.digest(), changed


def cmd_run(args: argparse.Namespace) -> int:
    task = TASKS[args.dataset]
    program, options = resolve_program(task, args.program, args.preset, parse_set(args.set))
    compiled, digest, ablation = _compiled(task, args, program, options) if args.compiled else (None, None, {})
    runner = _runner(args, task)
    lm_text = lm_spec(args)
    rm_text = _rm_choice(args)
    if compiled is not None and compiled.rm_spec:
        # The retriever the search chose is part of the compiled program; --rm may only give it back the
        # credentials its saved spec was stripped of (`***`).
        if args.rm and (REDACTED not in compiled.rm_spec or redact_urls(rm_text or "") != compiled.rm_spec):
            raise UsageError(f"--compiled {args.compiled} chose its retriever ({compiled.rm_spec}): drop --rm")
        rm_text = rm_text if args.rm else check_rm_spec(compiled.rm_spec)
    pool, dev, examples = run_examples(task, args)
    for i, example in enumerate(dev):
        try:
            task.fields.check(example, i)
        except ValueError as error:
            raise UsageError(f"dataset {task.name}: {error}") from None
    trains = {seed: _train(pool, args.shots, seed) for seed in args.seed}
    lm = dsp.lm_from_spec(lm_text)       # the first thing that loads a model: every check is done
    if compiled is not None and compiled.rm_spec:
        # Built once, here: the run's identity names the RM the program uses. From the file's own spec it is
        # built by the compiled program, whose errors never quote the file the spec names.
        compiled.rm = dsp.rm_from_spec(rm_text) if args.rm else None
        rm = compiled.retriever()
    else:
        rm = build_rm(task, rm_text)
    out_dir = Path(args.out)
    results = []
    with dsp.settings.context(lm=lm, rm=rm):
        for seed in args.seed:
            identity = run_entries(task, args, program, options, examples)
            if compiled is not None:
                # an ablation's options, as results_name does
                changed = f"-{_slug(ablation, program)}" if ablation else ""
                stem = f"{split_stem(task, args.split)}-{args.program}-compiled_{Path(args.compiled).stem}{changed}"
                out = out_dir / f"{stem}-seed{seed}.jsonl"
                identity.update(compiled=digest, options=dsp.evaluation.describe(compiled.options), shots=None)
                bound = compiled if task.family.wrap is None else task.family.wrap(compiled, dev)
            else:
                out = out_dir / results_name(task, args.program, args.preset, program, options, args.shots, seed,
                                             args.split)
                bound = _bound(task, program, trains[seed], options, dev)
            print(f"== {args.program} on {split_stem(task, args.split)}: {len(dev)} examples, seed {seed}, {lm.name}, "
                  f"{rm!r} -> {out}")
            result = dsp.evaluate(bound, dev, metric=task.metric, fields=task.fields, runner=runner, out=out,
                                  run=identity, seed=seed)
            low, high = result.confidence_interval()
            print(f"{result.metric_name} {result.score:.1f} (95% CI {low:.1f} to {high:.1f}), n={len(result.rows)}")
            results.append(result)
    table = dsp.summarize_seeds(results)
    print(table.round({"score": 1}).to_string(index=False))  # one decimal, as every score line above
    print(f"{args.program} on {split_stem(task, args.split)}: {table.attrs['text']}; "
          f"per-example results in {out_dir}/")
    usage = dsp.Usage()
    if args.backend == "ray":  # the workers made the calls: their per-example counts are the totals
        for result in results:
            for key in ("requests", "cached_requests", "prompt_tokens", "completion_tokens", "cost"):
                setattr(usage, key, getattr(usage, key) + getattr(result.usage, key))
    else:
        usage = lm.usage
    print(f"LM usage: {usage.as_dict()}")
    return _report_failures(results)


def _report_failures(results: list) -> int:
    failed = [(result, row) for result in results for row in result.errors]
    if not failed:
        return 0
    result, row = failed[0]
    print(f"{len(failed)} example(s) failed; the first (example {row['index']} in {result.out}): {row['error']}. "
          f"Fix the cause and run the same command again: finished examples are kept.", file=sys.stderr)
    return 1


_SHOWN = 1500  # characters of each prompt shown by `dsp ask` (its end: the question and the fields)


def _tail(prompt: str, full: bool) -> str:
    """The end of a prompt, cut at a line start, with a marker saying how much was left out."""
    if full or len(prompt) <= _SHOWN:
        return prompt
    start = prompt.find("\n", len(prompt) - _SHOWN)
    start = len(prompt) - _SHOWN if start < 0 else start + 1
    return f"[... {start:,} earlier characters not shown; --full prints the whole prompt ...]\n{prompt[start:]}"


def cmd_ask(args: argparse.Namespace) -> int:
    if not args.question.strip():  # checked first: an empty prompt would load a model to answer nothing
        raise UsageError(f"the question is empty ({args.question!r}): ask one, e.g. dsp ask \"Who wrote Hamlet?\"")
    task = TASKS[args.dataset]
    name = args.program or task.family.main_program
    given = parse_set(args.set)
    program, options = resolve_program(task, name, args.preset, given)
    # With no --preset, a small LM gets its family's small-model preset: resolved (checked) before it loads.
    small = task.family.default_preset(name, small=True) if args.preset is None else None
    small_options = resolve_program(task, name, small, given)[1] if small is not None else None
    lm_text = lm_spec(args)
    rm_text = _rm_choice(args)
    pool, _ = task.load(1)
    train = _train(pool, args.shots, args.seed)
    lm = dsp.lm_from_spec(lm_text)
    if small_options is not None and lm.small:
        options = small_options
        print(f"preset {small}: {lm.name} declares itself a small model (--preset chooses another)")
    rm = build_rm(task, rm_text)
    trace: list = []
    with dsp.settings.context(lm=lm, rm=rm, trace=trace, branch_idx=args.seed):
        out = program(args.question, train=train, **options)
    for step in trace:
        raw = step.get("raw") or []
        print(f"--- stage {step['stage']}: prompt ({len(step['prompt']):,} characters), then the model's text "
              f"({len(raw)} completion{'s' if len(raw) != 1 else ''})")
        print(_tail(step["prompt"], args.full), end="")
        first = raw[0] if raw else ""
        print(f"\x1b[32m{first}\x1b[0m" if sys.stdout.isatty() else first)
        if len(raw) > 1:
            print(f"    (and {len(raw) - 1} other completion(s))")
    print(f"\nanswer: {out.answer}")
    return 0
