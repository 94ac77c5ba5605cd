"""Loaders for the open-domain, multi-hop and conversational QA datasets, as lists of dsp.Example.

Every loader takes a path (default: the dataset's place in DSP_DATA_DIR) and returns Examples with
`question` and `answer` (a list of gold answers; prompts show the first) plus the dataset's own
fields. Gold-only fields are named so that `dsp.evaluate` never shows them to a program.

>>> import json, tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = Path(tmp) / "NQ-open.dev.jsonl"
...     _ = path.write_text(json.dumps({"question": "when was the last time anyone was on the moon",
...                                     "answer": ["14 December 1972 UTC", "December 1972"]}) + "\\n")
...     dev = load_nq_open(path)
>>> dev[0].id, dev[0].question, dev[0].answer
('NQ-open.dev-0', 'when was the last time anyone was on the moon', ['14 December 1972 UTC', 'December 1972'])

Without a path, `load_nq_open()` reads that file from DSP_DATA_DIR (or downloads it), and the question
above is its first.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..example import Example
from ..utils import check_positive_int
from .jsonl import DataFileError, read_csv, read_json, read_jsonl
from .paths import data_path, local_path

__all__ = [
    "load_nq_open", "load_squad", "squad_corpus", "load_hotpotqa", "hotpotqa_corpus",
    "load_hotpotqa_simplified", "load_hotpotqa_csv", "load_qrecc", "qrecc_corpus", "load_litm_oracle",
]

PathLike = str | os.PathLike


def _need(record: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = record.get(key)
    if not isinstance(value, kind):
        raise DataFileError(f"{where}: field {key!r} is missing or not {getattr(kind, '__name__', kind)}: {value!r:.80}")
    return value


def _answers(value: Any, where: str) -> list[str]:
    answers = [value] if isinstance(value, str) else value
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise DataFileError(f"{where}: 'answer' must be a non-empty list of texts, got {value!r:.80}")
    return answers


def load_nq_open(path: PathLike | None = None) -> list[Example]:
    """NQ-open (`{question, answer: [...]}` per line), e.g. `nq_open/NQ-open.dev.jsonl`."""
    path = Path(path) if path is not None else data_path("nq_open/NQ-open.dev.jsonl")
    out = []
    for number, record in read_jsonl(path):
        where = f"{path}, line {number}"
        out.append(Example(id=f"{path.stem}-{number - 1}", question=_need(record, "question", str, where),
                           answer=_answers(record.get("answer"), where)))
    return out


def _squad_articles(path: Path) -> list[dict[str, Any]]:
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataFileError(f"{path}: expected the SQuAD layout {{'version', 'data': [...]}}")
    return data["data"]


def _first_local(*names: str) -> Path:
    """The first of `names` present locally, else the first one fetched (downloaded) by name."""
    for name in names:
        found = local_path(name)
        if found is not None:
            return found
    return data_path(names[0])


def _squad_default() -> Path:
    return _first_local("squad/dev-v1.1.json", "squad/squad_v1.1_dev_rebuilt.json.gz")


def load_squad(path: PathLike | None = None) -> list[Example]:
    """SQuAD v1.1 questions for Open-SQuAD: `question`, `answer` (distinct gold texts in order), `title`,
    and `gold_passage_id` (the paragraph it was asked on, an id of `squad_corpus`)."""
    path = Path(path) if path is not None else _squad_default()
    out = []
    for a, article in enumerate(_squad_articles(path)):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            for q, qa in enumerate(paragraph.get("qas", [])):
                where = f"{path}: article {a}, paragraph {p}, question {q}"
                texts = [ans.get("text") for ans in qa.get("answers", [])]
                answers = list(dict.fromkeys(t for t in texts if isinstance(t, str)))
                out.append(Example(id=qa.get("id"), question=_need(qa, "question", str, where),
                                   answer=_answers(answers, where), title=article.get("title", "").replace("_", " "),
                                   gold_passage_id=f"squad-{a}-{p}"))
    return out


def squad_corpus(path: PathLike | None = None) -> list[dict[str, Any]]:
    """The SQuAD paragraphs as a passage corpus `{id, title, text}` (Open-SQuAD's retrieval pool here)."""
    path = Path(path) if path is not None else _squad_default()
    return [{"id": f"squad-{a}-{p}", "title": article.get("title", "").replace("_", " "), "text": paragraph["context"]}
            for a, article in enumerate(_squad_articles(path))
            for p, paragraph in enumerate(article.get("paragraphs", []))]


def _hotpot_context(record: dict[str, Any], where: str) -> tuple[list[str], list[str]]:
    """(paragraphs as 'Title | text', supporting titles) from either HotPotQA layout."""
    context, facts = record.get("context"), record.get("supporting_facts")
    if isinstance(context, dict):  # Hugging Face layout: {"title": [...], "sentences": [[...], ...]}
        pairs = list(zip(context.get("title", []), context.get("sentences", [])))
        titles = list(facts.get("title", [])) if isinstance(facts, dict) else []
    elif isinstance(context, list):  # original layout: [[title, [sentences]], ...]
        pairs = [(c[0], c[1]) for c in context]
        titles = [f[0] for f in facts or []]
    else:
        raise DataFileError(f"{where}: 'context' is neither HotPotQA layout: {context!r:.80}")
    return [f"{title} | {''.join(sentences).strip()}" for title, sentences in pairs], list(dict.fromkeys(titles))


def load_hotpotqa(path: PathLike | None = None) -> list[Example]:
    """HotPotQA with its distractor context: the official dev JSON (`hotpot_dev_distractor_v1.json`)
    or the JSONL sample in Hugging Face layout. Fields: id, question, answer, type, level,
    `paragraphs` (the 10 given paragraphs as 'Title | text') and `gold_titles` (supporting pages)."""
    path = Path(path) if path is not None else _first_local("hotpotqa/hotpot_dev_distractor_v1.json",
                                                             "hotpotqa/hotpot_dev_distractor_sample100.jsonl")
    if ".jsonl" in path.name:
        records = [(f"{path}, line {n}", r) for n, r in read_jsonl(path)]
    else:
        data = read_json(path)
        if not isinstance(data, list):
            raise DataFileError(f"{path}: expected a JSON list of HotPotQA questions")
        records = [(f"{path}: item {i}", r) for i, r in enumerate(data)]
    out = []
    for where, record in records:
        paragraphs, gold_titles = _hotpot_context(record, where)
        out.append(Example(id=record.get("id", record.get("_id")), question=_need(record, "question", str, where),
                           answer=_answers(record.get("answer"), where), type=record.get("type"),
                           level=record.get("level"), paragraphs=paragraphs, gold_titles=gold_titles))
    return out


def hotpotqa_corpus(path: PathLike | None = None, abstracts: PathLike | None = None) -> list[dict[str, Any]]:
    """HotPotQA's retrieval pool here: the distinct paragraphs of every question's distractor context
    (its two supporting pages and eight distractors that HotPotQA chose by bigram TF-IDF against the
    question), then the Wikipedia-2017 abstracts sample's passages on other pages, as `{id, title, text}`.

    The full Wikipedia-2017 abstracts (5M pages) are not in the mirror, and the abstracts sample holds
    no supporting page of the dev sample's questions; pooling the contexts gives every question its
    gold pages among hard distractors (those of its own and of all other questions), so multi-hop
    retrieval is real. `path` is the HotPotQA file (as `load_hotpotqa`), `abstracts` the sample
    (default: DSP_DATA_DIR/hotpotqa/wiki17_abstracts_sample.jsonl.gz when present).

    On the shared data (so not run as a doctest), ``hotpotqa_corpus()`` holds 1,780 passages, the first
    titled ``'Constantin Medien'``.
    """
    passages: dict[str, dict[str, Any]] = {}
    for example in load_hotpotqa(path):
        for paragraph in example.paragraphs:
            title, _, text = paragraph.partition(" | ")
            if title not in passages:  # a page appears in several questions' contexts with one text
                passages[title] = {"id": f"hotpot-{len(passages)}", "title": title, "text": text}
    extra = Path(abstracts) if abstracts is not None else local_path("hotpotqa/wiki17_abstracts_sample.jsonl.gz")
    if extra is not None:
        for n, record in read_jsonl(extra):
            title = _need(record, "title", str, f"{extra}, line {n}")
            if title not in passages:
                passages[title] = {"id": _need(record, "id", str, f"{extra}, line {n}"), "title": title,
                                   "text": _need(record, "text", str, f"{extra}, line {n}")}
    return list(passages.values())


def qrecc_corpus(path: PathLike | None = None, words: int = 200) -> list[dict[str, Any]]:
    """The QReCC passages cut into pieces of at most `words` words, as `{id, title, text}`.

    The mirror's passages are raw web-page text of up to 6,500 words (median 241; seven exceed 2,800
    words, a 4k-token context on their own), and retrieve-then-read over whole pages built prompts of
    9,400 tokens. Pieces keep their page's id with `#<n>` added when a passage is cut (the usual
    retrieval unit: DPR cut Wikipedia into 100-word pieces).

    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "passages.jsonl"
    ...     _ = path.write_text(json.dumps({"id": "page_p0", "text": "one two three four five"}) + "\\n"
    ...                         + json.dumps({"id": "page_p1", "text": "six seven"}) + "\\n")
    ...     [(p["id"], p["text"]) for p in qrecc_corpus(path, words=3)]
    [('page_p0#0', 'one two three'), ('page_p0#1', 'four five'), ('page_p1', 'six seven')]

    On the shared data, ``qrecc_corpus(words=200)`` gives 846 pieces.
    """
    check_positive_int(words, "words")
    path = Path(path) if path is not None else data_path("qrecc/passages.jsonl.gz")
    out = []
    for n, record in read_jsonl(path):
        where = f"{path}, line {n}"
        pid, tokens = _need(record, "id", str, where), _need(record, "text", str, where).split()
        pieces = [" ".join(tokens[i:i + words]) for i in range(0, len(tokens), words)] or [""]
        for i, piece in enumerate(pieces):
            out.append({"id": pid if len(pieces) == 1 else f"{pid}#{i}", "title": record.get("title") or "",
                        "text": piece})
    return out


def load_hotpotqa_simplified(path: PathLike | None = None) -> list[Example]:
    """The 7,405 HotPotQA dev questions without context (`hotpot_dev_v1_simplified.json`)."""
    path = Path(path) if path is not None else data_path("hotpotqa/hotpot_dev_v1_simplified.json")
    data = read_json(path)
    if not isinstance(data, list):
        raise DataFileError(f"{path}: expected a JSON list")
    return [Example(id=f"hotpot-dev-{i}", question=_need(r, "question", str, f"{path}: item {i}"),
                    answer=_answers(r.get("answer"), f"{path}: item {i}"), type=r.get("type"))
            for i, r in enumerate(data)]


def load_hotpotqa_csv(split: str = "dev", path: PathLike | None = None) -> list[Example]:
    """The small HotPotQA csv subsets (`hotpot_{train,dev,test}.csv`); extra columns become snake_case fields."""
    path = Path(path) if path is not None else data_path(f"hotpotqa/hotpot_{split}.csv")
    out = []
    for number, row in read_csv(path):
        where = f"{path}, line {number}"
        fields = {k.strip().replace(" ", "_"): v for k, v in row.items() if k not in ("question", "answer")}
        out.append(Example(id=f"hotpot-{split}-csv-{len(out)}", question=_need(row, "question", str, where),
                           answer=_answers(row.get("answer"), where), **fields))
    return out


def load_qrecc(path: PathLike | None = None) -> list[Example]:
    """QReCC turns with their original fields (Conversation_no, Turn_no, Question, Rewrite, Answer,
    Context), plus `question` (the Question, or the Rewrite where the Question is unknown),
    `answer` ([Answer]), `history` (the Context turns) and `id` "<conversation>_<turn>".
    Turns are in conversation and turn order."""
    path = Path(path) if path is not None else data_path("qrecc/qrecc_test_sample.json")
    data = read_json(path)
    if not isinstance(data, list):
        raise DataFileError(f"{path}: expected a JSON list of QReCC turns")
    out = []
    for i, r in enumerate(data):
        where = f"{path}: turn {i}"
        question = r.get("Question") or r.get("Rewrite")
        if not isinstance(question, str):
            raise DataFileError(f"{where}: neither 'Question' nor 'Rewrite' is text")
        context = r.get("Context") or []
        if not isinstance(context, list):
            raise DataFileError(f"{where}: 'Context' must be a list of turns")
        out.append(Example(r, id=f"{r.get('Conversation_no')}_{r.get('Turn_no')}", question=question,
                           answer=_answers(r.get("Answer"), where), history=list(context)))
    out.sort(key=lambda e: (e.Conversation_no, e.Turn_no))
    return out


def load_litm_oracle(path: PathLike | None = None) -> list[Example]:
    """Lost in the Middle's NQ oracle file: question, answer (= its `answers`), `ctxs` (the gold
    passage), `gold_passage` ({title, text}) and `nq_annotated_gold`."""
    path = Path(path) if path is not None else data_path("litm/nq-open-oracle.jsonl.gz")
    out = []
    for number, r in read_jsonl(path):
        where = f"{path}, line {number}"
        ctxs = _need(r, "ctxs", list, where)
        gold = next((c for c in ctxs if isinstance(c, dict) and c.get("isgold")), ctxs[0] if ctxs else None)
        if not isinstance(gold, dict):
            raise DataFileError(f"{where}: no gold passage in 'ctxs'")
        out.append(Example(id=f"litm-oracle-{number - 1}", question=_need(r, "question", str, where),
                           answer=_answers(r.get("answers"), where), ctxs=ctxs,
                           gold_passage={"title": gold.get("title", ""), "text": gold.get("text", "")},
                           nq_annotated_gold=r.get("nq_annotated_gold")))
    return out
