"""The model interface as DetectiveQA defines it, and its adapter over any dsp LM.

A DetectiveQA model has two methods: ``answer(question_list) -> {"answer", "reasoning"}`` and
``get_name() -> str``. Here `question_list` is the list of prompt parts built by
`programs.detectiveqa.prompt.question_list` (the novel content, then the question block); a model joins them
as it likes. `LMModel` adapts any dsp LM: it renders the parts as one completion prompt, asks the LM,
and aligns the reply (`programs.detectiveqa.align`), adding "path", "raw" and "scores" to the two keys the
benchmark reads.

>>> from dsp import LM
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
A model that answers with a dsp LM declares it by inheriting `HasLM` (as `LMModel` does): the programs
then count the novel's token budget with that LM's tokenizer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Mapping, Protocol, runtime_checkable

from dsp import LM, settings
from dsp.evaluation import describe
from dsp.utils import check_positive_int
from .align import Alignment, align_reply, parse_json_reply
from .prompt import render_prompt

__all__ = ["DetectiveQAModel", "HasLM", "LMModel", "ask_model", "DEFAULT_MAX_TOKENS"]

DEFAULT_MAX_TOKENS = 200  # room for {"answer":"x","reasoning":"..."} with a few sentences of reasoning


@runtime_checkable
class DetectiveQAModel(Protocol):
    """The benchmark's model interface."""

    def answer(self, question_list: list[str]) -> dict[str, Any]: ...

    def get_name(self) -> str: ...


class HasLM(ABC):
    """Capability: a DetectiveQA model that answers with a dsp LM (`lm`), whose tokenizer then counts the
    novel's token budget. A model declares it by inheriting it; callers check ``isinstance(model, HasLM)``.

    >>> isinstance(LMModel(), HasLM), isinstance(object(), HasLM)
    (True, False)
    """

    @property
    @abstractmethod
    def lm(self) -> LM:
        """The dsp LM the model asks."""


class LMModel(HasLM):
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
        check_positive_int(max_tokens, "max_tokens")
        self._lm = lm
        self.max_tokens = max_tokens
        self.temperature = float(temperature)
        self.name = name
        self.align = align
        self.params = dict(params)  # more generation parameters (stop, top_p, ...) for every request

    @property
    def lm(self) -> LM:
        lm = self._lm if self._lm is not None else settings.lm
        if lm is None:
            raise RuntimeError("LMModel has no LM: pass one, or dsp.settings.configure(lm=...)")
        return lm

    def get_name(self) -> str:
        return self.name or self.lm.name

    def config(self) -> dict[str, Any]:
        """Everything about the model that decides its replies (the LM's identity and the generation
        settings): part of a run's identity, so a results file is never resumed with other settings.

        >>> config = LMModel(LM("fixed"), max_tokens=50).config()
        >>> config["name"], config["max_tokens"], config["lm"]["lm"]
        ('lm:fixed', 50, {'provider': 'lm', 'model': 'fixed'})
        """
        return {"name": self.get_name(), "lm": describe(self.lm), "max_tokens": self.max_tokens,
                "temperature": self.temperature, "align": self.align, "params": describe(self.params)}

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

