"""One dev example run and recorded: the JSONL row every runner (threads, Ray) builds the same way.

A row holds the example's index, id, fingerprint, question and gold label, the prediction and its
score (or the error and its traceback), the stage traces, token usage and seconds. An example whose
program raises is recorded with its error and scores 0; a rerun retries it.

>>> from dsp.metrics import EM
>>> row = run_example(str.upper, Example(question="q", answer="Q"), 0, metric_caller(EM))
>>> row["prediction"], row["score"], row["error"]
('Q', 1.0, None)
"""

from __future__ import annotations

import inspect
import json
import time
import traceback
from hashlib import sha256
from typing import Any, Callable, Mapping

from ..clients.lm import Usage
from ..example import Example
from ..settings import settings
from .fields import QA_FIELDS, Fields

__all__ = ["run_example", "failed_row", "example_fingerprint", "metric_caller", "jsonable", "canonical"]


def canonical(value: Any) -> Any:
    """`value` with every mapping key as text, so it serialises and sorts whatever its keys are.

    >>> canonical({1: "x", "a": [{2: None}]})
    {'1': 'x', 'a': [{'2': None}]}
    """
    if isinstance(value, Mapping):
        return {str(key): canonical(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    return value


def jsonable(value: Any) -> Any:
    """The JSON-safe form of a prediction, trace or example (Examples are dicts; anything else becomes text)."""
    try:
        return json.loads(json.dumps(canonical(value), ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return str(value)


def example_fingerprint(example: Mapping[str, Any]) -> str:
    """A short stable hash of an example's content: a resumed run only reuses rows of the same example.

    >>> example_fingerprint({"question": "q", 1: "x"}) == example_fingerprint({1: "x", "question": "q"})
    True
    """
    text = json.dumps(canonical(example), sort_keys=True, ensure_ascii=False, default=str)
    return sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


def metric_caller(metric: Callable[..., Any]) -> Callable[[Any, Any, Example], float]:
    """`metric` as f(prediction, gold, example): the example is passed only to a metric that asks for it.

    >>> metric_caller(lambda p, g: p == g)("a", "a", None)
    1.0
    """
    try:
        params = inspect.signature(metric).parameters
    except (TypeError, ValueError):
        params = {}
    takes_example = "example" in params

    def call(prediction: Any, gold: Any, example: Example) -> float:
        value = metric(prediction, gold, example=example) if takes_example else metric(prediction, gold)
        return float(value)

    return call


def _row_head(example: Mapping[str, Any], index: int, seed: int | None, fields: Fields) -> dict[str, Any]:
    return {
        "index": index, "id": jsonable(example.get("id")), "seed": seed, "fingerprint": example_fingerprint(example),
        "question": jsonable(example.get("question")), "gold": jsonable(example.get(fields.gold)),
    }


def failed_row(example: Mapping[str, Any], index: int, error: str, *, seed: int | None = None,
               fields: Fields = QA_FIELDS) -> dict[str, Any]:
    """The row of an example that never ran to the end (e.g. its Ray worker died for good): it scores 0,
    carries `error`, and a rerun retries it, as it does an example whose program raised.

    >>> failed_row({"question": "q", "answer": "a"}, 3, "WorkerCrashedError: gone")["error"]
    'WorkerCrashedError: gone'
    """
    return {**_row_head(example, index, seed, fields), "prediction": None, "score": 0.0, "error": error,
            "trace": [], "usage": Usage().as_dict(), "seconds": 0.0}


def run_example(program: Callable[..., Any], example: Example, index: int,
                score_of: Callable[[Any, Any, Example], float], *, seed: int | None = None,
                fields: Fields = QA_FIELDS) -> dict[str, Any]:
    """Run `program` on one dev example in its own settings context and return its JSONL row.

    The program sees only the declared input fields (`fields.program_input`). With a `seed`, it runs with
    ``settings.branch_idx = seed``, so `dsp.sample` draws that seed's demonstrations.
    """
    trace: list[dict[str, Any]] = []
    usage = Usage()
    started = time.perf_counter()
    row = _row_head(example, index, seed, fields)
    overrides: dict[str, Any] = {"trace": trace, "usage": usage}
    if seed is not None:
        overrides["branch_idx"] = seed
    try:
        with settings.context(**overrides):
            output = program(fields.program_input(example))
        prediction = fields.prediction_of(output)
        row.update(prediction=jsonable(prediction), score=score_of(prediction, example[fields.gold], example),
                   error=None)
        if isinstance(output, Mapping) and output.get("context") is not None:
            row["context"] = jsonable(output["context"])  # what the program read: for retrieval recall
    except Exception as error:  # one failing example must not lose the others; it is recorded
        row.update(prediction=None, score=0.0,
                   error=f"{type(error).__name__}: {error}",
                   traceback="".join(traceback.format_exception(error))[-4000:])
    row.update(trace=jsonable(trace), usage=usage.as_dict(), seconds=round(time.perf_counter() - started, 3))
    return row
