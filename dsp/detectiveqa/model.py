"""The model interface as DetectiveQA defines it, and its adapter over any dsp LM.

A DetectiveQA model has two methods: ``answer(question_list) -> {"answer", "reasoning"}`` and
``get_name() -> str``. Here `question_list` is the list of prompt parts built by
`dsp.detectiveqa.prompt.question_list` (the novel content, then the question block); a model joins them
as it likes. `LMModel` adapts any dsp LM: it renders the parts as one completion prompt, asks the LM,
and aligns the reply (`dsp.detectiveqa.align`), adding "path", "raw" and "scores" to the two keys the
benchmark reads.

>>> from dsp.clients.lm import LM
>>> class Fixed(LM):
...     def _request(self, request):
...         return {"choices": [{"text": '{"answer":"B","reasoning":"the clay"}', "finish_reason": "stop"}]}
>>> model = LMModel(Fixed("fixed"))
>>> model.get_name()
'lm:fixed'
>>> reply = model.answer(["[1] Some novel.", "Please answer ..."])
>>> reply["answer"], reply["reasoning"], reply["path"]
('B', 'the clay', 'json')

A model written for the benchmark (a class with just `answer` and `get_name`) is run unchanged;
`ask_model` aligns whatever it returns the same way (without the logprob path, since it is not a dsp LM).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

from ..settings import settings
from .align import Alignment, align_reply, parse_json_reply
from .prompt import render_prompt

__all__ = ["DetectiveQAModel", "LMModel", "ask_model", "DEFAULT_MAX_TOKENS"]

DEFAULT_MAX_TOKENS = 200  # room for {"answer":"x","reasoning":"..."} with a few sentences of reasoning


@runtime_checkable
class DetectiveQAModel(Protocol):
    """The benchmark's model interface."""

    def answer(self, question_list: list[str]) -> dict[str, Any]: ...

    def get_name(self) -> str: ...


class LMModel:
    """A DetectiveQA model over a dsp LM (`lm`, else `dsp.settings.lm` at call time).

    Greedy decoding (temperature 0) by default, so a rerun reproduces, and every call goes through
    dsp's disk cache. `align=False` returns the reply's own JSON answer or None, with no fallback paths.

    >>> LMModel(max_tokens=0)
    Traceback (most recent call last):
    ...
    ValueError: max_tokens must be a positive integer, got 0
    """

    def __init__(self, lm: Any = None, max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = 0.0,
                 name: str | None = None, align: bool = True, **params: Any) -> None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        self._lm = lm
        self.max_tokens = max_tokens
        self.temperature = float(temperature)
        self.name = name
        self.align = align
        self.params = dict(params)  # more generation parameters (stop, top_p, ...) for every request

    @property
    def lm(self) -> Any:
        lm = self._lm if self._lm is not None else settings.lm
        if lm is None:
            raise RuntimeError("LMModel has no LM: pass one, or dsp.settings.configure(lm=...)")
        return lm

    def get_name(self) -> str:
        if self.name:
            return self.name
        lm = self.lm
        return f"{getattr(lm, 'provider', 'lm')}:{getattr(lm, 'model', '?')}"

    def answer(self, question_list: list[str], options: Mapping[str, str] | None = None) -> dict[str, Any]:
        """{"answer": letter or None, "reasoning", "path", "raw", "scores"} for one question list."""
        lm = self.lm
        prompt = render_prompt(question_list)
        raw = lm(prompt, max_tokens=self.max_tokens, temperature=self.temperature, **self.params)[0]
        if not self.align:
            parsed = parse_json_reply(raw)
            aligned = Alignment(parsed[0], parsed[1], "json") if parsed else Alignment(None, raw.strip(), "none")
        else:
            aligned = align_reply(raw, prompt=prompt, lm=lm, options=options)
        return {**aligned.as_dict(), "raw": raw}

    def __repr__(self) -> str:
        return f"LMModel({self._lm!r}, max_tokens={self.max_tokens})"


def ask_model(model: Any, question_list: list[str], options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Ask any DetectiveQA model and return the aligned reply: {"answer", "reasoning", "path", "raw", "scores"}.

    `LMModel` aligns on its own (with the logprob fallback); another model's reply is checked the same
    way: its "answer" if that is a letter ("json" path: the model returned the structured answer), else a
    lenient read of its answer and reasoning text, else "none".

    >>> class Mine:
    ...     def answer(self, question_list): return {"answer": "The answer is B.", "reasoning": "mud"}
    ...     def get_name(self): return "mine"
    >>> reply = ask_model(Mine(), ["[1] novel", "question"])
    >>> reply["answer"], reply["path"]
    ('B', 'lenient')
    """
    if isinstance(model, LMModel):
        return model.answer(question_list, options=options)
    if not isinstance(model, DetectiveQAModel):
        raise TypeError(f"a DetectiveQA model needs answer(question_list) and get_name(); got {type(model).__name__}")
    reply = model.answer(list(question_list))
    if isinstance(reply, str):
        aligned = align_reply(reply, options=options)
        return {**aligned.as_dict(), "raw": reply}
    if not isinstance(reply, Mapping):
        raise TypeError(f"{model.get_name()}.answer returned {type(reply).__name__}, not a dict with 'answer'")
    answer = reply.get("answer")
    reasoning = reply.get("reasoning") if isinstance(reply.get("reasoning"), str) else ""
    text = answer if isinstance(answer, str) else ""
    letter = text.strip().upper() if text.strip().upper() in ("A", "B", "C", "D") else None
    if letter is not None:
        return {"answer": letter, "reasoning": reasoning, "path": "json", "scores": None, "raw": dict(reply)}
    aligned = align_reply(f"{text}\n{reasoning}".strip(), options=options)
    return {"answer": aligned.answer, "reasoning": reasoning or aligned.reasoning, "path": aligned.path,
            "scores": None, "raw": dict(reply)}

