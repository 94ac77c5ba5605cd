"""ReplayLM and ReplayRM: answer from recorded JSONL files, offline and exactly.

A recording holds one request per line with its response, in the format of the DSP v1 intro recording
(`dsp_v1_intro_lm.jsonl`: the request fields plus `choices`; `dsp_v1_intro_rm.jsonl`: `query`, `k`,
`passages`). A request that is not in the recording raises `UnrecordedRequest`, naming what differs
from the closest recorded request, so a replayed program either reproduces the run or says why not.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = Path(tmp) / "rm.jsonl"
...     _ = path.write_text(json.dumps({"query": "who wrote hamlet", "k": 1,
...                                     "passages": [{"text": "Hamlet | A play by Shakespeare."}]}) + "\\n")
...     rm = ReplayRM(path)
...     [p.text for p in rm("who wrote hamlet", k=1, cache=False)]
...     try:
...         rm("who wrote macbeth", k=1, cache=False)
...     except UnrecordedRequest as error:
...         print(str(error).split("\\n", 1)[1])
['Hamlet | A play by Shakespeare.']
The closest recorded query (line 1) first differs at character 10:
  recorded:  'who wrote hamlet'
  requested: 'who wrote macbeth'

An LM replays the same way (on the shared data, so shown, not run)::

    lm = ReplayLM(data_path("dsp_v1/dsp_v1_intro_lm.jsonl"))
    lm("Answer questions ...\\n\\nAnswer:")                  # [' E. L. Doctorow']
"""

from __future__ import annotations

import json
import threading
from hashlib import sha256
from pathlib import Path
from typing import Any

from ..datasets.jsonl import read_jsonl
from .lm import LM
from .rm import RM
from .v1 import V1_COMPLETION_DEFAULTS, shape_v1_completion

__all__ = ["ReplayLM", "ReplayRM", "UnrecordedRequest", "V1_COMPLETION_DEFAULTS"]


class UnrecordedRequest(LookupError):
    """A replay client was asked something its recording does not hold."""


def _canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


def _file_digest(path: Path) -> str:
    return sha256(path.read_bytes()).hexdigest()[:16]


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


class _Recording:
    """Recorded responses by canonical request; identical repeats are served in recorded order."""

    def __init__(self, path: str | Path, response_key: str) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"recording not found: {self.path}")
        self.response_key = response_key
        self.responses: dict[str, list[Any]] = {}
        self.lines: dict[str, int] = {}
        self.requests: list[tuple[int, dict[str, Any]]] = []
        self._cursor: dict[str, int] = {}
        self._lock = threading.Lock()  # the cursor of repeated requests is shared by evaluation threads
        for number, record in read_jsonl(self.path):
            if response_key not in record:
                raise ValueError(f"{self.path}:{number}: the record has no {response_key!r}")
            request = {k: v for k, v in record.items() if k != response_key}
            key = _canonical(request)
            self.responses.setdefault(key, []).append(record[response_key])
            self.lines.setdefault(key, number)
            self.requests.append((number, request))
        if not self.requests:
            raise ValueError(f"recording {self.path} is empty")
        self.digest = _file_digest(self.path)

    def answer(self, request: dict[str, Any], text_field: str) -> Any:
        key = _canonical(request)
        responses = self.responses.get(key)
        if responses is None:
            raise UnrecordedRequest(self._explain(request, text_field))
        with self._lock:
            i = self._cursor.get(key, 0)
            self._cursor[key] = min(i + 1, len(responses) - 1)
        return responses[i]

    def _explain(self, request: dict[str, Any], text_field: str) -> str:
        text = request.get(text_field, "")
        number, closest = max(
            self.requests, key=lambda item: _first_difference(str(item[1].get(text_field, "")), str(text))
        )
        recorded = str(closest.get(text_field, ""))
        where = _first_difference(recorded, str(text))
        lines = [f"no recorded response in {self.path} for this request ({text_field} of {len(str(text))} chars)."]
        if recorded == text:
            diffs = {k: (closest.get(k, "<absent>"), request.get(k, "<absent>"))
                     for k in sorted(set(closest) | set(request)) if closest.get(k, "<absent>") != request.get(k, "<absent>")
                     or type(closest.get(k)) is not type(request.get(k))}
            lines.append(f"Line {number} records the same {text_field} with other parameters "
                         f"(recorded vs requested): {diffs}")
        else:
            lines.append(f"The closest recorded {text_field} (line {number}) first differs at character {where}:")
            lines.append(f"  recorded:  {recorded[max(0, where - 40):where + 60]!r}")
            lines.append(f"  requested: {str(text)[max(0, where - 40):where + 60]!r}")
        return "\n".join(lines)


class ReplayLM(LM):
    """An LM that answers from a recorded JSONL file of requests and their `choices`.

    Requests are built as DSP v1's GPT-3 client built them (`V1_COMPLETION_DEFAULTS`, the recording's
    model, `logprobs=5` when n>1), so v1 programs replay request for request.
    """

    provider = "replay"

    def __init__(self, path: str | Path, model: str | None = None, **params: Any) -> None:
        self.recording = _Recording(path, "choices")
        if model is None:
            models = {request.get("model") for _, request in self.recording.requests}
            model = models.pop() if len(models) == 1 else "replay"
        super().__init__(model, **{**V1_COMPLETION_DEFAULTS, **params})

    def cache_identity(self) -> dict[str, Any]:
        return {**super().cache_identity(), "recording": self.recording.digest}

    def build_request(self, prompt: str, **params: Any) -> dict[str, Any]:
        return shape_v1_completion(super().build_request(prompt, **params))

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        choices = self.recording.answer(request, "prompt")
        return {"choices": [dict(c) for c in choices]}

    def __repr__(self) -> str:
        return f"ReplayLM({str(self.recording.path)!r})"


class ReplayRM(RM):
    """An RM that answers from a recorded JSONL file of `query`, `k` and `passages`."""

    provider = "replay"

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.recording = _Recording(path, "passages")

    def cache_identity(self) -> dict[str, Any]:
        return {**super().cache_identity(), "recording": self.recording.digest}

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        return [dict(p) for p in self.recording.answer({"query": query, "k": k, **params}, "query")]

    def __repr__(self) -> str:
        return f"ReplayRM({str(self.recording.path)!r})"
