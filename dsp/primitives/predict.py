"""PREDICT: generate (prompt the LM with a template and parse), majority (self-consistency), branch.

>>> import dsp
>>> qa = dsp.Template("Answer questions.", question=dsp.Type(prefix="Question:", desc="${the question}"),
...                   answer=dsp.Type(prefix="Answer:", desc="${a short answer}"))
>>> class Voters(dsp.LM):  # a stand-in LM: of its n completions, two say Paris
...     def _request(self, request):
...         texts = [" Paris", " Lyon", " Paris"][: request["n"]]
...         return {"choices": [{"text": text, "finish_reason": "stop"} for text in texts]}
>>> x = dsp.Example(question="What is the capital of France?")
>>> with dsp.settings.context(lm=Voters("voters"), cache=False):
...     x, completions = dsp.generate(qa, n=3, temperature=0.7)(x)
>>> [c.answer for c in completions], dsp.majority(completions).answer
(['Paris', 'Lyon', 'Paris'], 'Paris')
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from ..clients.lm import LM
from ..example import Completions, Example
from ..metrics import normalize_text, passage_match
from ..settings import settings
from ..template import Template

__all__ = ["generate", "majority", "branch", "default_normalize"]

# Stage records are what demos reuse: they keep the fields, not the demos or the completions list.
_NOT_RECORDED = ("demos", "completions")


def _as_example(example: Any) -> Example:
    if isinstance(example, Example):
        return example
    if isinstance(example, Mapping):
        return Example(example)
    raise TypeError(f"a transformation takes an Example (or dict), not {type(example).__name__}: {example!r:.80}")


def _current_lm() -> Any:
    lm = settings.lm
    if lm is None:
        raise RuntimeError("no LM is configured: call dsp.settings.configure(lm=...) first")
    return lm


def generate(template: Template, **params: Any) -> Callable[..., tuple[Example, Completions]]:
    """A function `(example, stage=None) -> (example, completions)` that prompts the LM with `template`.

    Asks for `n` completions (`params` are generation parameters: n, temperature, max_tokens, stop...;
    `stop="auto"` stops where a base model would start the next record, see `Template.stops_for`),
    keeps those that filled the most fields, and, when none filled the last field, continues the first
    one greedily (n=1, temperature 0, half the max_tokens, at least 75) up to two times. With a
    `stage`, each demo is first overlaid with its record for that stage, and the single completion is
    recorded as `example[stage]` so that `annotate` can turn this run into a demonstration.
    """
    if not isinstance(template, Template):
        raise TypeError(f"generate needs a dsp.Template, got {type(template).__name__}")

    def do_generate(example: Any, stage: str | None = None, max_depth: int = 2) -> tuple[Example, Completions]:
        lm = _current_lm()
        example = _as_example(example)
        call_params = {**params, **(settings.lm_overrides or {})}
        written = tuple(k for k in template.keys if example.get(k) is None)
        return _generate(template, lm, example, stage, call_params, max_depth, written)

    return do_generate


def _generate(template: Template, lm: Any, example: Example, stage: str | None,
              call_params: dict[str, Any], max_depth: int, written: tuple[str, ...]) -> tuple[Example, Completions]:
    if stage is not None:
        example = example.demos_at(lambda demo: demo[stage])
    prompt = template(example)
    if call_params.get("stop") == "auto":
        call_params = {**call_params, "stop": template.stops_for(example)}
    texts = lm(prompt, **call_params)
    if not isinstance(texts, list) or not texts:
        raise ValueError(f"the LM {lm!r} returned no completions (got {texts!r:.80}) for a prompt ending {prompt[-80:]!r}")
    completions = [template.extract(example, text) for text in texts]

    # Keep the completions that got furthest: field by field, drop those missing a field another has.
    reached = 0
    for i, key in enumerate(template.keys):
        having = [c for c in completions if c.get(key) is not None]
        if having:
            completions, reached = having, i + 1

    if reached < len(template.keys) and max_depth > 0:
        # None finished: continue the first one greedily from its first missing field.
        partial = completions[0]
        partial[template.keys[reached]] = ""
        defaults = lm.kwargs if isinstance(lm, LM) else {}  # a plain callable LM (DSP v1 allowed one) has none
        max_tokens = call_params.get("max_tokens", defaults.get("max_tokens", 150))
        max_tokens = min(max(75, max_tokens // 2), max_tokens)
        continued = {**call_params, "max_tokens": max_tokens, "n": 1, "temperature": 0.0}
        return _generate(template, lm, partial, stage, continued, max_depth - 1, written)
    if reached < len(template.keys):
        # Still unfinished after the continuations: the missing fields read as "" rather than crash.
        completions = [c.copy(**{k: "" for k in template.keys[reached:] if c.get(k) is None}) for c in completions]

    result = Completions(completions, template=template)
    example = example.copy(completions=result)
    if stage is not None and len(result) == 1:
        example[stage] = Example({k: v for k, v in {**example, **result[0]}.items() if k not in _NOT_RECORDED})
    trace = settings.trace
    if trace is not None:
        outputs = [{k: c.get(k) for k in template.keys} for c in result]
        # "raw": the model's own text, before parsing (what `dsp ask` shows, what a parse failure explains);
        # "written": the fields the LM wrote rather than was given (a gold-labelled demo drops them).
        trace.append({"stage": stage, "template": template.instructions, "prompt": prompt, "completions": outputs,
                      "raw": list(texts), "written": list(written)})
    return example, result


def default_normalize(text: str | None) -> str | None:
    """DSP's vote normalisation; empty answers become None so they do not vote."""
    return normalize_text(text) or None if isinstance(text, str) else None


def majority(completions: Completions | list[Example], normalize: Callable[[Any], Any] | None = default_normalize,
             field: str | None = None, context: str | Sequence[Any] | None = None) -> Completions:
    """Self-consistency: the completion whose normalised `field` (default: the template's last) wins most votes.

    Empty answers do not vote unless all are empty; a tie goes to the value seen first; the result keeps
    the first winning completion's own wording. With `context` (the passages the LM read), the vote is
    extractive: only answers found in a passage (`passage_match`'s token match) vote, unless none is —
    for tasks whose answers are spans of the corpus (NQ, SQuAD), where a small model's samples that
    leave the passage are mostly wrong.

    >>> c = Completions([Example(answer="1828"), Example(answer="1970"), Example(answer="1828.")])
    >>> majority(c, field="answer").answer
    '1828'
    >>> majority(c, field="answer", context=["Elected in 1970."]).answer
    '1970'
    """
    items = list(completions)
    if not items:
        raise ValueError("majority needs at least one completion")
    template = completions.template if isinstance(completions, Completions) else None
    if field is None:
        if template is None:
            raise ValueError("majority: pass field=... (these completions have no template)")
        field = template.keys[-1]
    if context is not None:
        found = [c for c in items if isinstance(c.get(field), str) and passage_match(context, c.get(field))]
        items = found or items
    norm = normalize if normalize is not None else (lambda value: value)
    keys = [norm(c.get(field)) for c in items]
    voting = [k for k in keys if k is not None and k != ""] or keys
    winner = Counter(voting).most_common(1)[0][0]  # Counter keeps first-seen order among ties
    chosen = next(c for c, k in zip(items, keys) if k == winner)
    return Completions([chosen], template=template)


def branch(transformation: Callable[[Example], Any], n: int, temperature: float = 0.7) -> Callable[[Example], list[Any]]:
    """Run `transformation` n times with sampling at `temperature`, each path with its own seed.

    Path i runs inside `settings.context(branch_idx=i, lm_overrides={temperature, seed})`, so its LM
    samples differ from the other paths' but are reproducible (and cached) across reruns; `dsp.sample`
    inside a path also draws with seed i. Returns the n outputs, e.g. for `majority` over them.

    >>> import dsp
    >>> qa = dsp.Template("Answer.", question=dsp.Type(prefix="Question:", desc="${the question}"),
    ...                   answer=dsp.Type(prefix="Answer:", desc="${a short answer}"))
    >>> class BySeed(dsp.LM):  # a stand-in LM whose answer shows the seed it was asked with
    ...     def _request(self, request):
    ...         return {"choices": [{"text": f" seed {request['seed']}", "finish_reason": "stop"}]}
    >>> def program(x):
    ...     _, completions = dsp.generate(qa)(x)
    ...     return completions.answer
    >>> with dsp.settings.context(lm=BySeed("by-seed"), cache=False):
    ...     dsp.branch(program, n=3)(dsp.Example(question="q"))
    ['seed 1000003', 'seed 2000006', 'seed 3000009']
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"branch needs a positive number of paths, got n={n!r}")

    def run(example: Example, *args: Any, **kwargs: Any) -> list[Any]:
        outputs = []
        for i in range(n):
            overrides = {**(settings.lm_overrides or {}), "temperature": temperature, "seed": (i + 1) * 1_000_003}
            with settings.context(branch_idx=i, lm_overrides=overrides):
                outputs.append(transformation(_as_example(example).copy(), *args, **kwargs))
        return outputs

    return run
