"""`plan`: what a compile would cost, projected without calling the LM (`dsp compile --dry-run`).

The plan takes the compile's own first phase (`prepare`: the checks, the split, the candidates, the
program's contract), then probes: each candidate's program runs, exactly as the compile would run it,
on its first few validation examples (and the bootstrap on its first few pool examples) against a
stand-in LM. The stand-in records every request; it answers one the disk cache holds with the cached
response (a request that costs nothing), and any other with a placeholder that fills the fields the
prompt asks for (so `dsp.generate` needs no continuation). The real LM is never called: the stand-in
reads only its identity, its request format and, when it declares `CountsTokens`, its tokenizer. The
requests and prompt tokens per example are then scaled to the planned evaluations: the race's rungs
within its budget (or, without racing, every candidate on the whole validation part) and the bootstrap.

It is a projection: a placeholder answer may take a program down another path than a real one (a
multi-hop program's next query), bootstrapped candidates are probed with raw demos (the bootstrap has
not run), and the race may drop candidates early or spend the budget on the contenders.

>>> import dsp
>>> class Refuses(dsp.LM):  # any real call would fail the example
...     def _request(self, request):
...         raise AssertionError("the LM was called")
>>> def two_calls(question, train, demos=None):  # two LM requests an example
...     dsp.settings.lm("Question: " + question)
...     return dsp.Example(answer=dsp.settings.lm("Again: " + question)[0])
>>> train = [dsp.Example(question=f"q{i}", answer="a") for i in range(30)]
>>> with dsp.settings.context(lm=Refuses("refuses"), cache=False):
...     projected = plan(two_calls, train, config=dsp.CompileConfig(candidates=2, val=10, space=dsp.Space(
...         demos=dsp.DemoSpace(kinds=("raw",), ks=(1,), selects=("random",), seeds=1))))
>>> [(row.key, row.examples, row.per_example()) for row in projected.rows], projected.new_requests()
([('baseline', 10, 2.0), ('raw1-random0', 10, 2.0)], 40)
"""

from __future__ import annotations

import re
import threading
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any, Callable, Mapping, Sequence

from ..cache import cached_call
from ..clients.lm import LM, CountsTokens
from ..evaluation import QA_FIELDS, Fields
from ..metrics import EM
from ..settings import settings
from ..utils import is_int
from .bootstrap import Wrap, bootstrap_runs
from .config import CompileConfig
from .racing import doubling_sizes
from .search import BOOTSTRAPPED_KINDS, Search, evaluate_candidate, prepare

__all__ = ["plan", "Plan", "Projection", "race_schedule", "placeholder"]

PLACEHOLDER = "dry run"
CHARS_PER_TOKEN = 4  # a rough figure for English prompts, when the LM cannot count its own tokens
# A field of a dsp.Template's format guide: its name, then the description as "${...}" (same line or next).
_GUIDE_FIELD = re.compile(r"^(\S[^\n]*?)[ \n]\$\{", re.MULTILINE)


def placeholder(prompt: str) -> str:
    """The stand-in completion for a request the cache lacks: one that fills every field the prompt still
    asks for, by the format guide a `dsp.Template` prompt carries (a line "Name: ${description}" a field),
    so `dsp.generate` needs no continuation; a prompt without such a guide gets the placeholder alone.

    >>> placeholder("Follow the following format.\\n\\nQuestion: ${q}\\n\\nRationale: ${r}\\n\\nAnswer: ${a}"
    ...             "\\n\\n---\\n\\nQuestion: who?\\n\\nRationale:")
    ' dry run\\n\\nAnswer: dry run'
    """
    names = _GUIDE_FIELD.findall(prompt)
    tail = prompt.rstrip()
    later = next((names[i + 1:] for i in range(len(names) - 1, -1, -1) if tail.endswith(names[i])), [])
    return " " + PLACEHOLDER + "".join(f"\n\n{name} {PLACEHOLDER}" for name in later)


class _Absent(Exception):
    """Raised in place of computing a response: the cache is only asked whether it holds one."""


def _absent() -> Any:
    raise _Absent


class _StandIn:
    """The LM a dry run puts in place of the real one (`lm`, which it never calls): it records each
    request as (answered by the cache, prompt tokens), and answers from the cache or with `placeholder`."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self.kwargs = dict(lm.kwargs) if isinstance(lm, LM) else {}  # generate reads max_tokens there
        self.requests: list[tuple[bool, int]] = []
        self._lock = threading.Lock()

    def __call__(self, prompt: str, only_completed: bool = True, cache: bool | None = None, **params: Any) -> list[str]:
        texts: list[str] = []
        for request in self._draws(prompt, params):
            response = None if cache is False else self._cached(request)
            with self._lock:
                self.requests.append((response is not None, 0 if response is not None else self.count(prompt)))
            if response is None:
                texts += [placeholder(prompt)] * int(request.get("n") or 1)
                continue
            choices = response["choices"]
            if only_completed and any(c.get("finish_reason") != "length" for c in choices):
                choices = [c for c in choices if c.get("finish_reason") != "length"]
            texts += [str(c.get("text", "")) for c in choices]
        return texts

    def _draws(self, prompt: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The requests the real LM would send: one, or n seeded draws when its backend samples one at a time."""
        if not isinstance(self.lm, LM):
            return [{**params, "prompt": prompt}]
        request = self.lm.build_request(prompt, **params)
        n = request.get("n", 1)
        if isinstance(n, int) and n > 1 and not self.lm.native_n:
            seed = request.get("seed") or 0
            return [{**request, "n": 1, "seed": seed + i} for i in range(n)]
        return [request]

    def _cached(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The cached response to `request`, or None; never computed, never written."""
        if not isinstance(self.lm, LM):
            return None
        # The key the LM base class caches a request under: the client's identity and the whole request.
        key = {"kind": "lm", **self.lm.cache_identity(), "request": request}
        try:
            value, _ = cached_call(key, _absent)
        except _Absent:
            return None
        return value if isinstance(value, dict) and isinstance(value.get("choices"), list) and value["choices"] else None

    def count(self, prompt: str) -> int:
        if isinstance(self.lm, CountsTokens):
            return self.lm.count_tokens(prompt)
        return -(-len(prompt) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Projection:
    """One row of a plan: a candidate (or the bootstrap) to run on `examples` examples, probed on `probed`
    of them, where it sent `requests` LM requests, `cached` of them held by the cache, the others
    `prompt_tokens` prompt tokens; `errors` probed examples raised (their requests up to the error count)."""

    key: str
    examples: int
    probed: int
    requests: int
    cached: int
    prompt_tokens: int
    errors: int

    def per_example(self, what: str = "requests") -> float:
        """Requests (or "cached", "new", "prompt_tokens") per probed example."""
        value = {"requests": self.requests, "cached": self.cached, "new": self.requests - self.cached,
                 "prompt_tokens": self.prompt_tokens}[what]
        return value / self.probed if self.probed else 0.0

    def projected(self, what: str = "new", examples: int | None = None) -> int:
        """`per_example(what)` scaled to `examples` (default: the planned ones), rounded up."""
        return int(-(-self.per_example(what) * (self.examples if examples is None else examples) // 1))


@dataclass(frozen=True)
class Plan:
    """A compile's projected cost: `rows` (the bootstrap first, when a candidate draws on it); the race's
    `rungs` within `budget` evaluations, each candidate on at most `each` examples if none is dropped,
    `most` evaluations at most in all; how tokens were counted (`tokens`); `probe` examples probed;
    `readings`: the ways each candidate is also read from its own calls (free options), if any."""

    rows: list[Projection]
    rungs: list[int]
    budget: int
    each: int
    most: int
    racing: bool
    tokens: str
    probe: int
    readings: list[str] = field(default_factory=list)

    def new_requests(self) -> int:
        """LM requests the cache does not hold, if no candidate is dropped."""
        return sum(row.projected("new") for row in self.rows)

    def prompt_tokens(self) -> int:
        """Prompt tokens of those requests."""
        return sum(row.projected("prompt_tokens") for row in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "new_requests": self.new_requests(), "prompt_tokens_total": self.prompt_tokens()}

    def __str__(self) -> str:
        return _text(self)


def race_schedule(config: CompileConfig, candidates: int, val: int) -> tuple[list[int], int, int]:
    """(the rungs the race runs if no candidate is dropped, the examples each candidate then runs, the most
    evaluations the search can spend): the race's own rule, a rung run only while it fits the budget.

    >>> race_schedule(CompileConfig(), 8, 400)
    ([20, 40, 80, 160], 160, 1600)
    >>> race_schedule(CompileConfig(racing=False), 8, 400)
    ([400], 400, 3200)
    """
    sizes = doubling_sizes(val) if config.racing else [val]
    budget = config.budget_for(candidates, val)
    ran: list[int] = []
    done = spent = 0
    for n in sizes:
        new = (n - done) * candidates
        if ran and spent + new > budget:
            break
        spent, done = spent + new, n
        ran.append(n)
    # Drops move the budget to the contenders, up to the whole validation part; the first rung always runs.
    return ran, done, min(candidates * val, max(budget, candidates * sizes[0]))


def _probe(key: str, examples: int, stand_in: _StandIn, run: Callable[[], Sequence[Mapping[str, Any]]]) -> Projection:
    """`run()` (the probed examples' rows) under the stand-in, as a row of the plan."""
    before = len(stand_in.requests)
    rows = run()
    made = stand_in.requests[before:]
    return Projection(key, examples, len(rows), len(made), sum(1 for cached, _ in made if cached),
                      sum(tokens for _, tokens in made), sum(1 for row in rows if row.get("error") is not None))


def _probe_all(search: Search, stand_in: _StandIn, probe: int, each: int) -> list[Projection]:
    """The bootstrap (when a candidate draws on it) and every candidate, probed under the stand-in."""
    config, rows = search.config, []
    if any(c.demos.get("kind") in BOOTSTRAPPED_KINDS for c in search.chosen):
        limit = len(search.pool) if config.bootstrap_limit is None else min(config.bootstrap_limit, len(search.pool))
        probed = replace(config, bootstrap_limit=min(probe, limit), progress=False)
        rows.append(_probe("bootstrap", limit, stand_in, lambda: bootstrap_runs(
            partial(search.program, train=search.pool), search.pool, search.metric, probed, fields=search.fields,
            options=search.options, wrap=search.wrap)[1]))
    # Nothing is bootstrapped yet: a bootstrapped kind is probed with raw demos, as the compile falls back to.
    nothing = {kind: [] for kind in BOOTSTRAPPED_KINDS}
    for candidate in search.chosen:
        rows.append(_probe(candidate.key, each, stand_in, lambda candidate=candidate: evaluate_candidate(
            search, candidate, min(probe, each), nothing).rows))
    return rows


def plan(program: Callable[..., Any], trainset: Sequence[Mapping[str, Any]], metric: Callable[..., Any] = EM,
         config: CompileConfig | None = None, *, options: Mapping[str, Any] | None = None,
         rms: Mapping[str, Any] | None = None, fields: Fields = QA_FIELDS, wrap: Wrap | None = None,
         probe: int = 3) -> Plan:
    """The compile `dsp.compile(program, trainset, metric, config, ...)` would run, its LM requests and
    prompt tokens projected from `probe` examples a candidate, without calling the LM (module docstring);
    the arguments are `compile`'s, checked as it checks them. `print(plan(...))` shows the table."""
    if not is_int(probe) or probe < 1:
        raise ValueError(f"probe must be a positive number of examples, got {probe!r}")
    search = prepare(program, trainset, metric, config, options=options, rms=rms, fields=fields, wrap=wrap)
    rungs, each, most = race_schedule(search.config, len(search.chosen), len(search.heldout))
    stand_in = _StandIn(settings.lm)
    with settings.context(lm=stand_in):
        rows = _probe_all(search, stand_in, probe, each)
    tokens = ("counted by the LM's tokenizer" if isinstance(settings.lm, CountsTokens)
              else f"estimated at {CHARS_PER_TOKEN} characters a token")
    readings = [search.space.reading_name(r) for r in search.space.readings(search.start)] if search.space.free else []
    return Plan(rows, rungs, search.config.budget_for(len(search.chosen), len(search.heldout)), each, most,
                search.config.racing, tokens, probe, readings)


def _text(plan: Plan) -> str:
    """The plan as the text `dsp compile --dry-run` prints."""
    candidates = [row for row in plan.rows if row.key != "bootstrap"]
    schedule = (f"the race's rungs {', '.join(map(str, plan.rungs))} within a budget of {plan.budget} evaluations: "
                f"each candidate on at most {plan.each} validation examples if none is dropped (drops end it "
                f"sooner, or move the budget to the contenders: at most {plan.most} evaluations in all)"
                if plan.racing else f"every candidate on the whole validation part ({plan.each} examples)")
    lines = [f"A projection, not a count: nothing was sent to the LM. {len(candidates)} candidates, {schedule}.",
             f"How: each candidate's program ran on its first {plan.probe} validation examples (the bootstrap on "
             f"its first {plan.probe} pool examples) against a stand-in LM that answered a request from the disk "
             f"cache when it held it (free) and otherwise with a placeholder; the figures per example are "
             f"scaled to the planned examples. Prompt tokens of the requests the cache lacks: {plan.tokens}.", ""]
    header = ["", "examples", "probed", "requests/ex", "cached/ex", "new requests", "new prompt tokens", "errors"]
    body = [[row.key, str(row.examples), str(row.probed), f"{row.per_example():.2f}",
             f"{row.per_example('cached'):.2f}", str(row.projected("new")), str(row.projected("prompt_tokens")),
             str(row.errors)] for row in plan.rows]
    body.append(["total", "", "", "", "", str(plan.new_requests()), str(plan.prompt_tokens()), ""])
    if plan.racing and candidates and plan.most > plan.each * len(candidates):
        costliest = max(candidates, key=lambda row: row.per_example("new"))
        extra = [row.projected(what) for row in plan.rows if row.key == "bootstrap" for what in ("new", "prompt_tokens")]
        body.append([f"at most ({plan.most} evaluations at {costliest.key}'s rate)", "", "", "", "",
                     str(costliest.projected("new", plan.most) + (extra[0] if extra else 0)),
                     str(costliest.projected("prompt_tokens", plan.most) + (extra[1] if extra else 0)), ""])
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    lines += ["  ".join(cell.rjust(widths[c]) if c else cell.ljust(widths[c]) for c, cell in enumerate(r)).rstrip()
              for r in [header, *body]]
    if any(c.key.startswith(BOOTSTRAPPED_KINDS) for c in candidates):
        lines.append("Bootstrapped candidates were probed with raw demos (the bootstrap has not run): their prompts "
                     "will be longer; a kind the bootstrap finds nothing of is replaced by other candidates.")
    if len(plan.readings) > 1:
        lines.append(f"Each candidate is read {len(plan.readings)} ways ({', '.join(plan.readings)}) from the same calls: "
                     f"the readings after the first cost no LM request (with the cache off, the compile keeps its calls "
                     "in an in-process cache of its own until it ends).")
    if any(row.errors for row in plan.rows):
        lines.append("errors: probed examples that raised (under the stand-in too); their requests count up to the error.")
    return "\n".join(lines)
