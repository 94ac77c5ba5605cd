"""The Lost in the Middle prompts (Liu et al., 2023), byte-identical to the paper's.

The six templates ship with this package (``dsp/litm/prompts/*.prompt``, copies of the paper's files,
MIT) and are read with their trailing newlines stripped, as the paper's code does. Documents render as
``Document [i](Title: <title>) <text>``, numbered from 1, one per line; key-value records render as one
JSON object with one pair per line; query-aware contextualization puts the question (or key) both
before and after the context.

>>> docs = [Document(title="Paris", text="Paris is the capital of France."),
...         Document(title="Rome", text="Rome is the capital of Italy.")]
>>> print(get_qa_prompt("what is the capital of italy", docs))
Write a high-quality answer for the given question using only the provided search results (some of which might be irrelevant).
<BLANKLINE>
Document [1](Title: Paris) Paris is the capital of France.
Document [2](Title: Rome) Rome is the capital of Italy.
<BLANKLINE>
Question: what is the capital of italy
Answer:
>>> print(get_kv_retrieval_prompt([("a", "1"), ("b", "2")], "b"))
Extract the value corresponding to the specified key in the JSON object below.
<BLANKLINE>
JSON data:
{"a": "1",
 "b": "2"}
<BLANKLINE>
Key: "b"
Corresponding value:
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..utils import is_int

__all__ = [
    "Document", "get_qa_prompt", "get_closedbook_qa_prompt", "get_kv_retrieval_prompt",
    "format_documents", "format_kv_records", "load_template", "PROMPTS_DIR", "TEMPLATE_NAMES",
]

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
TEMPLATE_NAMES = (
    "closedbook_qa", "qa", "qa_ordered_randomly", "qa_with_query_aware_contextualization",
    "kv_retrieval", "kv_retrieval_with_query_aware_contextualization",
)


@lru_cache(maxsize=None)
def load_template(name: str) -> str:
    """The template `name` (one of TEMPLATE_NAMES), trailing newlines stripped as the paper does.

    >>> load_template("closedbook_qa")
    'Question: {question}\\nAnswer:'
    """
    if name not in TEMPLATE_NAMES:
        raise ValueError(f"unknown Lost in the Middle template {name!r}; the templates are {', '.join(TEMPLATE_NAMES)}")
    path = PROMPTS_DIR / f"{name}.prompt"
    if not path.is_file():
        raise FileNotFoundError(f"the template file {path} is missing: the dsp package was installed without "
                                f"its package data (dsp/litm/prompts/*.prompt)")
    return path.read_text(encoding="utf-8").rstrip("\n")


@dataclass(frozen=True)
class Document:
    """One search result as the paper represents it: title and text, plus optional retrieval metadata.

    >>> Document.from_dict({"id": "71445", "title": "T", "text": "x", "score": "1.0510446"}).score
    1.0510446
    """

    title: str
    text: str
    id: str | None = None
    score: float | None = None
    hasanswer: bool | None = None
    isgold: bool | None = None
    original_retrieval_index: int | None = None

    def __post_init__(self) -> None:
        for name in ("title", "text"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"Document.{name} must be text, got {type(value).__name__}: {value!r:.80}")
        if self.id is not None and not isinstance(self.id, str):
            # The paper's ids are strings; an integer id (a line number) is read as its decimal text.
            if is_int(self.id):
                object.__setattr__(self, "id", str(self.id))
            else:
                raise TypeError(f"Document.id must be text or None, got {type(self.id).__name__}: {self.id!r:.80}")
        if self.score is not None:
            object.__setattr__(self, "score", _as_score(self.score))
        for name in ("hasanswer", "isgold"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"Document.{name} must be true, false or None, got {value!r}")
        index = self.original_retrieval_index
        if index is not None and (not is_int(index) or index < 0):
            raise TypeError(f"Document.original_retrieval_index must be an integer >= 0 or None, got {index!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Document":
        """A Document from one `ctxs` entry of the paper's data files; a string score becomes a float.

        >>> Document.from_dict({"title": "T", "text": "x", "hasanswer": True, "isgold": True}).isgold
        True
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"Document.from_dict needs a dict, got {type(data).__name__}: {data!r:.80}")
        if not data:
            raise ValueError("Document.from_dict needs a non-empty dict (at least 'title' and 'text')")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"Document.from_dict: unknown field(s) {', '.join(unknown)}; a document has "
                             f"{', '.join(f.name for f in dataclasses.fields(cls))}")
        missing = [name for name in ("title", "text") if name not in data]
        if missing:
            raise ValueError(f"Document.from_dict: missing field(s) {', '.join(missing)} in {dict(data)!r:.120}")
        return cls(**copy.deepcopy(dict(data)))

    def to_dict(self) -> dict[str, Any]:
        """All fields as a dict (the paper's `model_documents` entries)."""
        return dataclasses.asdict(self)


def _as_score(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(f"Document.score must be a number or numeric text, got {value!r}")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"Document.score must be a number or numeric text, got {value!r:.80}") from None
    if math.isnan(score):
        raise ValueError("Document.score is NaN")
    return score


def _as_document(document: Any, index: int) -> Document:
    if isinstance(document, Document):
        return document
    if isinstance(document, Mapping):
        return Document.from_dict(document)
    raise TypeError(f"documents[{index}] must be a Document or a dict with title and text, "
                    f"got {type(document).__name__}: {document!r:.80}")


def format_documents(documents: Sequence[Document | Mapping[str, Any]]) -> str:
    """The search results block: ``Document [i](Title: <title>) <text>`` per line, numbered from 1.

    >>> format_documents([Document(title="A", text="a."), {"title": "B", "text": "b."}])
    'Document [1](Title: A) a.\\nDocument [2](Title: B) b.'
    """
    lines = []
    for i, document in enumerate(documents):
        doc = _as_document(document, i)
        lines.append(f"Document [{i + 1}](Title: {doc.title}) {doc.text}")
    return "\n".join(lines)


def get_qa_prompt(question: str, documents: Sequence[Document | Mapping[str, Any]],
                  mention_random_ordering: bool = False, query_aware_contextualization: bool = False) -> str:
    """The multi-document QA prompt for `question` over `documents` (in the given order).

    `mention_random_ordering` adds the paper's sentence saying the results are ordered randomly;
    `query_aware_contextualization` repeats the question before the documents. The two cannot be
    combined (the paper has no template for it).

    >>> get_qa_prompt("q", [Document(title="T", text="x")], query_aware_contextualization=True).count("Question: q")
    2
    """
    if not isinstance(question, str) or not question:
        raise ValueError(f"get_qa_prompt needs a non-empty question, got {question!r}")
    if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents, Sequence) or not documents:
        raise ValueError(f"get_qa_prompt needs a non-empty list of documents, got {documents!r:.80}")
    if mention_random_ordering and query_aware_contextualization:
        raise ValueError("mention_random_ordering and query_aware_contextualization cannot be used together "
                         "(the paper has no template combining them)")
    if mention_random_ordering:
        name = "qa_ordered_randomly"
    elif query_aware_contextualization:
        name = "qa_with_query_aware_contextualization"
    else:
        name = "qa"
    return load_template(name).format(question=question, search_results=format_documents(documents))


def get_closedbook_qa_prompt(question: str) -> str:
    """The closed-book prompt: the question alone.

    >>> get_closedbook_qa_prompt("who wrote hamlet")
    'Question: who wrote hamlet\\nAnswer:'
    """
    if not isinstance(question, str) or not question:
        raise ValueError(f"get_closedbook_qa_prompt needs a non-empty question, got {question!r}")
    return load_template("closedbook_qa").format(question=question)


def _kv_pairs(data: Any) -> list[tuple[str, str]]:
    if isinstance(data, (str, bytes, Mapping)) or not isinstance(data, Sequence) or not data:
        raise ValueError(f"get_kv_retrieval_prompt needs a non-empty list of (key, value) records, got {data!r:.80}")
    pairs = []
    for i, record in enumerate(data):
        if (isinstance(record, (str, bytes)) or not isinstance(record, Sequence) or len(record) != 2
                or not all(isinstance(part, str) for part in record)):
            raise ValueError(f"KV record {i} must be a [key, value] pair of strings, got {record!r:.80}")
        pairs.append((record[0], record[1]))
    return pairs


def format_kv_records(data: Sequence[Sequence[str]]) -> str:
    """The records as one JSON object, one ``"key": "value"`` pair per line (keys and values are
    written as they are, between double quotes, exactly as the paper's prompts show them).

    >>> print(format_kv_records([("k1", "v1"), ("k2", "v2"), ("k3", "v3")]))
    {"k1": "v1",
     "k2": "v2",
     "k3": "v3"}
    """
    pairs = _kv_pairs(data)
    return "{" + ",\n ".join(f'"{key}": "{value}"' for key, value in pairs) + "}"


def get_kv_retrieval_prompt(data: Sequence[Sequence[str]], key: str, query_aware_contextualization: bool = False) -> str:
    """The key-value retrieval prompt: find `key`'s value among the `data` records (in the given order).

    Needs at least two records with distinct keys, one of which is `key`.

    >>> get_kv_retrieval_prompt([("a", "1"), ("b", "2")], "a", query_aware_contextualization=True).count('Key: "a"')
    2
    """
    pairs = _kv_pairs(data)
    if not isinstance(key, str) or not key:
        raise ValueError(f"get_kv_retrieval_prompt needs a non-empty key, got {key!r}")
    keys = [k for k, _ in pairs]
    if key not in keys:
        raise ValueError(f"the key {key!r} is not among the {len(pairs)} KV records")
    if len(set(keys)) != len(keys):
        duplicates = sorted(k for k, count in Counter(keys).items() if count > 1)
        raise ValueError(f"the KV records have duplicate keys: {', '.join(map(repr, duplicates[:5]))}")
    if len(pairs) < 2:
        raise ValueError(f"get_kv_retrieval_prompt needs at least 2 KV records, got {len(pairs)}")
    name = "kv_retrieval_with_query_aware_contextualization" if query_aware_contextualization else "kv_retrieval"
    return load_template(name).format(formatted_kv_records=format_kv_records(pairs), key=key)
