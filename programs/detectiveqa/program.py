"""Two programs for DetectiveQA: the truncation baseline, and a DSP program that retrieves paragraphs.

`TruncateProgram` gives the model the novel cut to `q_len` tokens (`prompt.truncated_context`).

`RetrieveProgram` is a small Demonstrate-Search-Predict program (no demonstrations: the benchmark is
zero-shot). SEARCH: the novel is split into its numbered paragraphs and indexed (BM25 or dense); the
question alone and the question with each option are five queries, fused with `dsp.fused_retrieval`
(CombSUM of each query's softmax probabilities, DSP's default: a paragraph that one option's query
singles out keeps its weight, where reciprocal-rank fusion flattens it; on the fixture CombSUM finds
a clue for 12 of 12 questions at k=4, RRF for 9). By default (`scope="before_answer"`) only the
paragraphs before the answer position are searchable, the same text the "answer" cut reads, so
neither reader sees the solution chapter. PREDICT: the top-`k`
paragraphs that fit `q_len` tokens are shown in novel order, with their "[N]" numbers, in the same
prompt the baseline uses, and the reply is aligned the same way.

Both inherit `DetectiveQAProgram` (a name, a model and the `config()` that decides their answers) and
return an Example whose `prediction` holds the aligned answer, the reasoning, the alignment path and the
paragraphs the model was shown (for clue recall). They read only the fields in `INPUT_FIELDS`: the gold
answer, the reasoning and the clue positions are never given to them.

>>> from programs.detectiveqa import load_detectiveqa, RetrieveProgram
>>> from pathlib import Path
>>> fixture = Path(__file__).parents[2] / "tests" / "fixtures" / "detectiveqa"  # the repository's fixture
>>> ds = load_detectiveqa(fixture)
>>> program = RetrieveProgram(ds.novels, model=None, q_len=400, k=4)
>>> program.search(ds.questions[2].to_example())      # why the causeway story was impossible: clues 8, 15
[15, 36, 40, 8]
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from typing import Any, Mapping

from dsp import Example, fused_retrieval, settings
from dsp.utils import check_positive_int
from .data import DetectiveQAError, Novel, Question
from .model import DetectiveQAModel, HasLM, ask_model
from .prompt import Tokenizer, question_list, tokenizer_for, truncated_context

__all__ = ["SCOPES", "RETRIEVERS", "FUSIONS", "INPUT_FIELDS", "question_from_example", "DetectiveQAProgram",
           "TruncateProgram", "RetrieveProgram", "ParagraphIndex", "search_queries"]

SCOPES = ("before_answer", "all")
RETRIEVERS = ("bm25", "dense")
FUSIONS = ("combsum", "rrf")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
# What a program may read of a question (`question_from_example`): never its answer, reasoning or clues.
INPUT_FIELDS = ("qid", "lang", "anno_part", "novel_id", "index", "question", "options", "answer_position", "source")


def question_from_example(x: Mapping[str, Any]) -> Question:
    """The Question a program may see: the gold answer, reasoning and clues are not in `x` (and not here)."""
    try:
        return Question(
            qid=str(x["qid"]), lang=str(x.get("lang", "")), anno_part=str(x.get("anno_part", "")),
            novel_id=str(x["novel_id"]), index=int(x.get("index") or 0), question=str(x["question"]),
            options=dict(x["options"]), answer="", answer_position=x.get("answer_position"),
            source=str(x.get("source", "")),
        )
    except KeyError as missing:
        raise ValueError(f"a DetectiveQA example needs {missing} (it has: {', '.join(x)})") from None


def _novel_for(novels: Mapping[str, Novel], question: Question) -> Novel:
    novel = novels.get(question.novel_id)
    if novel is None:
        raise DetectiveQAError(question.source or question.qid, f"novel {question.novel_id} is not loaded",
                               question=question.index, qid=question.qid)
    return novel


def _default_tokenizer(model: Any) -> Tokenizer:
    # A model that declares its LM is counted with that LM's tokenizer; any other with the estimate.
    return tokenizer_for(model.lm if isinstance(model, HasLM) else None)


class DetectiveQAProgram(ABC):
    """What `run_program` reads of a DetectiveQA program besides calling it: its `name`, its `model` (a
    `DetectiveQAModel`; None for a search-only program) and `config()`, the settings that decide its
    answers (part of the run's identity). A program declares them by inheriting this class.

    >>> class Always(DetectiveQAProgram):
    ...     name = "always-a"
    ...     def __call__(self, x): return Example(x, prediction={"answer": "A"})
    >>> program = Always()
    >>> program.config(), program.model_name()
    ({'program': 'always-a'}, '?')
    """

    name: str = "program"
    model: Any = None

    def config(self) -> dict[str, Any]:
        """The settings that decide the program's answers (besides the model's)."""
        return {"program": self.name}

    def model_name(self) -> str:
        """The model's name, or "?" when there is no model or it cannot tell (an LMModel without an LM)."""
        if not isinstance(self.model, DetectiveQAModel):
            return "?"
        try:
            return str(self.model.get_name())
        except RuntimeError:
            return "?"

    @abstractmethod
    def __call__(self, x: Mapping[str, Any]) -> Example:
        """Answer the question in `x` (its `INPUT_FIELDS`): an Example whose `prediction` is a dict."""


class TruncateProgram(DetectiveQAProgram):
    """The baseline: the novel cut to `q_len` tokens by `cut` ("start", "answer" or "both"), then the question.

    `tokenizer` defaults to the model's LM's (`prompt.tokenizer_for`).
    """

    name = "truncate"

    def __init__(self, novels: Mapping[str, Novel], model: Any, q_len: int, cut: str = "answer",
                 tokenizer: Tokenizer | None = None) -> None:
        self.novels, self.model, self.q_len, self.cut = novels, model, q_len, cut
        self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer or _default_tokenizer(self.model)

    def config(self) -> dict[str, Any]:
        return {"program": self.name, "q_len": self.q_len, "cut": self.cut, "tokenizer": self.tokenizer.name}

    def __call__(self, x: Mapping[str, Any]) -> Example:
        question = question_from_example(x)
        novel = _novel_for(self.novels, question)
        context = truncated_context(novel, question, self.q_len, self.tokenizer, self.cut)
        reply = ask_model(self.model, question_list(context.text, question), options=question.options)
        return Example(x, prediction={**reply, "paragraphs": list(context.paragraphs),
                                      "context_tokens": context.tokens, "truncated": context.truncated})


def _index_text(text: str) -> str:
    """Text as the lexical index sees it: Chinese runs become overlapping character bigrams, since BM25's
    tokenizer splits on spaces and keeps only words of two characters or more."""
    def bigrams(run: re.Match[str]) -> str:
        chars = run.group(0)
        return " " + " ".join(chars[i:i + 2] for i in range(max(1, len(chars) - 1))) + " "
    return _CJK.sub(bigrams, text)


class ParagraphIndex:
    """Per-novel paragraph indexes (BM25 or dense), built on first use and shared by threads."""

    def __init__(self, retriever: str = "bm25", vectorizer: Any = None) -> None:
        if retriever not in RETRIEVERS:
            raise ValueError(f"unknown retriever {retriever!r}; choose one of {', '.join(RETRIEVERS)}")
        self.retriever, self.vectorizer = retriever, vectorizer
        self._indexes: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def rm_for(self, novel: Novel) -> Any:
        key = (novel.novel_id, novel.fingerprint)
        with self._lock:
            rm = self._indexes.get(key)
            if rm is None:
                if self.retriever == "bm25":
                    from dsp import BM25

                    rm = BM25([{"id": str(n), "title": "", "text": _index_text(t)} for n, t in novel.paragraphs])
                else:
                    from dsp import DenseRM

                    rm = DenseRM([{"id": str(n), "title": "", "text": t} for n, t in novel.paragraphs],
                                 self.vectorizer or settings.vectorizer)
                self._indexes[key] = rm
            return rm


def search_queries(question: Question) -> list[str]:
    """The question alone, then the question followed by each option's text."""
    return [question.question] + [f"{question.question} {question.options[letter]}" for letter in question.options]


class RetrieveProgram(DetectiveQAProgram):
    """Retrieve the paragraphs most relevant to the question and its options, answer from them.

    `k` paragraphs at most (fewer if `q_len` tokens cannot hold them); `retriever` "bm25" or "dense"
    (dense uses `vectorizer`, else `dsp.settings.vectorizer`, else the offline E5); `fuse` "combsum" or
    "rrf"; `scope` "before_answer" (default) or "all" paragraphs.
    """

    name = "retrieve"

    def __init__(self, novels: Mapping[str, Novel], model: Any, q_len: int, k: int = 8, retriever: str = "bm25",
                 fuse: str = "combsum", scope: str = "before_answer", tokenizer: Tokenizer | None = None,
                 vectorizer: Any = None, index: ParagraphIndex | None = None) -> None:
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}; choose one of {', '.join(SCOPES)}")
        if fuse not in FUSIONS:
            raise ValueError(f"unknown fusion {fuse!r}; choose one of {', '.join(FUSIONS)}")
        check_positive_int(k, "k")
        check_positive_int(q_len, "q_len")
        self.novels, self.model, self.q_len, self.k = novels, model, q_len, k
        self.fuse, self.scope = fuse, scope
        self.index = index or ParagraphIndex(retriever, vectorizer)
        self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer or _default_tokenizer(self.model)

    def config(self) -> dict[str, Any]:
        return {"program": self.name, "q_len": self.q_len, "k": self.k, "retriever": self.index.retriever,
                "fuse": self.fuse, "scope": self.scope, "tokenizer": self.tokenizer.name}

    def search(self, x: Mapping[str, Any]) -> list[int]:
        """The top-k paragraph numbers for the question in `x`, best first (no LM involved)."""
        question = question_from_example(x)
        novel = _novel_for(self.novels, question)
        return self._ranked(question, novel)[: self.k]

    def _ranked(self, question: Question, novel: Novel) -> list[int]:
        allowed = set(novel.numbers)
        if self.scope == "before_answer":
            if question.answer_position is None:
                raise DetectiveQAError(question.source or question.qid, "has no answer_position, which scope "
                                       "'before_answer' needs; use --scope all", question=question.index,
                                       qid=question.qid)
            allowed = set(novel.numbers_before(question.answer_position))
        rm = self.index.rm_for(novel)
        queries = search_queries(question)
        if self.index.retriever == "bm25":
            queries = [_index_text(q) for q in queries]
        depth = len(novel)  # the whole ranking: scope filtering comes after fusion
        # A local index ranks a novel in milliseconds; caching whole rankings on disk would only bloat the cache.
        with settings.context(rm=rm):
            fused = fused_retrieval(queries, k=depth, fuse=self.fuse, depth=depth, return_passages=True, cache=False)
        return [int(p["id"]) for p in fused if int(p["id"]) in allowed]

    def __call__(self, x: Mapping[str, Any]) -> Example:
        question = question_from_example(x)
        novel = _novel_for(self.novels, question)
        ranked = self._ranked(question, novel)
        tokenizer = self.tokenizer
        chosen: list[int] = []
        for number in ranked[: self.k]:
            # Whole paragraphs by rank while they fit; a paragraph too long to fit is skipped, not cut.
            if tokenizer.count(novel.render(chosen + [number])) <= self.q_len:
                chosen.append(number)
        if not chosen and ranked:  # even the best paragraph is over budget: give its opening
            chosen = [ranked[0]]
        content = novel.render(chosen)
        if tokenizer.count(content) > self.q_len:
            content = tokenizer.truncate(content, self.q_len, keep="start")
        reply = ask_model(self.model, question_list(content, question), options=question.options)
        return Example(x, prediction={**reply, "paragraphs": sorted(chosen), "retrieved": ranked[: self.k],
                                      "context_tokens": tokenizer.count(content),
                                      "truncated": len(chosen) < min(self.k, len(ranked))})
