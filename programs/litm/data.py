"""Lost in the Middle data: multi-document QA examples and key-value retrieval examples.

Multi-document QA (the paper's ``make_qa_data_from_retrieval_results``, reproduced): each NQ question
of the oracle file gets its gold passage (the NQ-annotated paragraph chunk) plus N-1 distractors,
the highest-ranked passages of a retriever that do *not* contain an answer (DPR's answer matching,
`dsp.has_answer`), kept in retrieval order; the gold passage is inserted at index i.

On the shared data (DSP_DATA_DIR), so shown as code rather than run as a doctest (the functions'
own examples run on a few records in memory)::

    import dsp
    oracle = read_qa_records(data_path("litm/nq-open-oracle.jsonl.gz"))[:200]
    rm = dsp.BM25(data_path("wiki2018/passages.jsonl.gz"))
    retrieved = retrieve_candidates(oracle, rm, depth=100)
    examples = [make_qa_example(r, total_docs=20, gold_index=9) for r in retrieved]
    write_records("nq-open-20_total_documents_gold_at_9.jsonl.gz", examples)

Records keep the paper's formats, so the paper's own files load with the same readers:

- QA: ``{"question", "answers", "ctxs": [{"id", "title", "text", "score", "hasanswer", "isgold",
  "original_retrieval_index"}, ...], "nq_annotated_gold"}``; the gold ctx is ``{"title", "text",
  "hasanswer": true, "isgold": true}``. Generated records add ``gold_original_retrieval_index``: where
  the retriever ranked the gold passage itself (null when not in the top `depth`), which the
  reordering experiment uses as the gold passage's relevance rank.
- KV: ``{"ordered_kv_records": [[key, value], ...], "key", "value"}`` with uuid4 strings.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import random
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import dsp
from dsp import has_answer
from dsp.datasets import DataFileError, read_jsonl
from dsp.litm import Document
from dsp.utils import check_nonnegative_int, check_positive_int, is_int

__all__ = [
    "QA_FILE_PATTERN", "KV_FILE_PATTERN", "read_qa_records", "read_kv_records", "write_records",
    "gold_chunk", "retrieve_candidates", "make_qa_example", "make_qa_data", "randomize_distractors",
    "relevance_ranked", "make_kv_records", "kv_records_with_gold_at", "evenly_spaced_positions",
]

# The paper's file names, so generated files sit beside (or stand in for) its own.
QA_FILE_PATTERN = "nq-open-{total_docs}_total_documents_gold_at_{gold_index}.jsonl.gz"
KV_FILE_PATTERN = "kv-retrieval-{num_keys}_keys.jsonl.gz"


# -- reading and writing --------------------------------------------------------------------------

def _answers(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise DataFileError(f"{where}: 'answers' must be a non-empty list of strings, got {value!r:.80}")
    return value


def _records(path: str | os.PathLike, limit: int | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """The first `limit` records of a JSONL file, each with "<path>, line N" for error messages."""
    _check_limit(limit)
    for count, (number, record) in enumerate(read_jsonl(path)):
        if limit is not None and count >= limit:
            return
        yield f"{path}, line {number}", record


def read_qa_records(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """The QA records of a Lost in the Middle file (the oracle file, the paper's N-document files or
    ours), validated: question, answers and ctxs that are valid `Document`s. Errors name file and line.

    >>> import tempfile
    >>> record = {"question": "q", "answers": ["a"], "ctxs": [{"title": "T", "text": "a", "isgold": True}]}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     records = read_qa_records(write_records(Path(tmp) / "qa.jsonl.gz", [record, record]), limit=1)
    >>> records == [record]
    True

    On the shared data, ``read_qa_records(data_path("litm/nq-open-oracle.jsonl.gz"))[0]["question"]`` is
    ``'who got the first nobel prize in physics'``.
    """
    out = []
    for where, record in _records(path, limit):
        question = record.get("question")
        if not isinstance(question, str) or not question.strip():
            raise DataFileError(f"{where}: 'question' must be non-empty text, got {question!r:.80}")
        _answers(record.get("answers"), where)
        ctxs = record.get("ctxs")
        if not isinstance(ctxs, list) or not ctxs:
            raise DataFileError(f"{where}: 'ctxs' must be a non-empty list of documents")
        for i, ctx in enumerate(ctxs):
            try:
                Document.from_dict(ctx)
            except (TypeError, ValueError) as error:
                raise DataFileError(f"{where}: ctxs[{i}] is not a document: {error}") from None
        out.append(record)
    return out


def read_kv_records(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """The key-value records of a Lost in the Middle KV file, validated (errors name file and line).

    >>> import tempfile
    >>> record = {"ordered_kv_records": [["k1", "v1"], ["k2", "v2"]], "key": "k2", "value": "v2"}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = write_records(Path(tmp) / "kv.jsonl", [record, {**record, "value": "v1"}])
    ...     first = read_kv_records(path, limit=1)
    ...     try:
    ...         read_kv_records(path)
    ...     except DataFileError as error:
    ...         message = str(error)
    >>> first == [record], message.split("kv.jsonl, ")[1]
    (True, 'line 2: the pair [key, value] is not among its ordered_kv_records')
    """
    out = []
    for where, record in _records(path, limit):
        pairs = record.get("ordered_kv_records")
        if (not isinstance(pairs, list) or len(pairs) < 2
                or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs)):
            raise DataFileError(f"{where}: 'ordered_kv_records' must be a list of at least 2 [key, value] string pairs")
        key, value = record.get("key"), record.get("value")
        if not isinstance(key, str) or not isinstance(value, str):
            raise DataFileError(f"{where}: 'key' and 'value' must be strings, got {key!r:.60} and {value!r:.60}")
        if [key, value] not in pairs:
            raise DataFileError(f"{where}: the pair [key, value] is not among its ordered_kv_records")
        if len({k for k, _ in pairs}) != len(pairs):
            raise DataFileError(f"{where}: ordered_kv_records has duplicate keys")
        out.append(record)
    return out


def write_records(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> Path:
    """Write `records` as JSON Lines (gzip when the name ends in .gz), atomically: a reader never sees
    half a file. JSON is written as the paper's scripts wrote it (``json.dumps`` defaults, ASCII).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     first = write_records(Path(tmp) / "x.jsonl.gz", [{"question": "q"}]).read_bytes()
    ...     again = write_records(Path(tmp) / "y.jsonl.gz", [{"question": "q"}]).read_bytes()
    ...     plain = write_records(Path(tmp) / "x.jsonl", [{"question": "q\\u00e9"}]).read_text()
    >>> first == again, plain
    (True, '{"question": "q\\\\u00e9"}\\n')
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(dict(record)) + "\n" for record in records)
    data = text.encode("utf-8")
    if path.name.endswith(".gz"):
        buffer = io.BytesIO()
        # mtime=0 and no file name: the same records always give the same bytes.
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as gz:
            gz.write(data)
        data = buffer.getvalue()
    # A unique sibling, created with open() so it gets the usual permissions (mkstemp's are 0600).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _check_limit(limit: int | None) -> None:
    check_nonnegative_int(limit, "limit", optional=True)


# -- multi-document QA ----------------------------------------------------------------------------

def gold_chunk(record: Mapping[str, Any]) -> dict[str, Any]:
    """The gold passage as the paper builds it: the NQ-annotated title and chunked long answer, marked
    hasanswer and isgold; a record without `nq_annotated_gold` uses its isgold ctx.

    >>> gold_chunk({"nq_annotated_gold": {"title": "T", "chunked_long_answer": "x"}})
    {'title': 'T', 'text': 'x', 'hasanswer': True, 'isgold': True}
    """
    annotated = record.get("nq_annotated_gold")
    if isinstance(annotated, Mapping) and isinstance(annotated.get("chunked_long_answer"), str):
        return {"title": annotated.get("title", ""), "text": annotated["chunked_long_answer"],
                "hasanswer": True, "isgold": True}
    for ctx in record.get("ctxs") or []:
        if isinstance(ctx, Mapping) and ctx.get("isgold") is True:
            return {"title": ctx.get("title", ""), "text": ctx["text"], "hasanswer": True, "isgold": True}
    raise ValueError(f"the record of {record.get('question')!r:.80} has neither nq_annotated_gold nor an isgold ctx")


def _search(rm: Any, questions: list[str], depth: int) -> list[list[Any]]:
    # BM25 and DenseRM answer a batch without the per-query disk cache; any other dsp RM is asked one
    # by one (checked by class, not by probing attributes; both are core dependencies, cheap to import).
    if isinstance(rm, (dsp.BM25, dsp.DenseRM)):
        return rm.search_batch(questions, k=depth)
    return [rm(question, k=depth) for question in questions]


def retrieve_candidates(records: Sequence[Mapping[str, Any]], rm: Any, depth: int = 100) -> list[dict[str, Any]]:
    """Retrieval results in the format the paper's generator reads: each record with `ctxs` replaced by
    the top-`depth` passages of `rm` for its question (id, title, text, score as text, hasanswer by
    DPR's matching on the passage text, isgold when it is the record's gold passage itself), plus
    `gold_original_retrieval_index`. `rm` is any dsp RM (BM25 is searched in one batch).

    >>> passages = [{"id": 1, "title": "Paris", "text": "Paris is the capital of France.", "score": 2.5},
    ...             {"id": 2, "title": "Lyon", "text": "Lyon lies on the Rhone.", "score": 1.0}]
    >>> rm = lambda question, k: passages[:k]
    >>> record = {"question": "capital of france", "answers": ["Paris"],
    ...           "nq_annotated_gold": {"title": "France", "chunked_long_answer": "Its capital is Paris."}}
    >>> [retrieved] = retrieve_candidates([record], rm, depth=2)
    >>> [(c["id"], c["score"], c["hasanswer"], c["isgold"]) for c in retrieved["ctxs"]]
    [('1', '2.5', True, False), ('2', '1.0', False, False)]
    >>> print(retrieved["gold_original_retrieval_index"])
    None
    """
    check_positive_int(depth, "depth")
    records = list(records)
    questions = []
    for i, record in enumerate(records):
        question = record.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"record {i} has no question: {dict(record)!r:.120}")
        questions.append(question)
    out = []
    for record, passages in zip(records, _search(rm, questions, depth)):
        gold = gold_chunk(record)
        answers = record["answers"]
        ctxs, gold_index = [], None
        for i, passage in enumerate(passages):
            title, text = passage.get("title") or "", passage["text"]
            # The gold passage may itself be in the corpus: it is the gold, never a distractor, even
            # when DPR's matching misses its answer (17 oracle golds do not contain their answer string).
            is_gold = title == gold["title"] and text == gold["text"]
            if is_gold and gold_index is None:
                gold_index = i
            ctxs.append({"id": None if passage.get("id") is None else str(passage["id"]), "title": title,
                         "text": text, "score": str(float(passage.get("score", 0.0))),
                         "hasanswer": has_answer(text, answers), "isgold": is_gold})
        result = {key: ctxs if key == "ctxs" else copy.deepcopy(value) for key, value in record.items()}
        result.setdefault("ctxs", ctxs)
        result["gold_original_retrieval_index"] = gold_index
        out.append(result)
    return out


def _check_placement(total_docs: Any, gold_index: Any) -> None:
    if not is_int(total_docs) or total_docs < 2:
        raise ValueError(f"total_docs must be an integer >= 2, got {total_docs!r}")
    if not is_int(gold_index) or not 0 <= gold_index < total_docs:
        raise ValueError(f"gold_index must be an integer in 0..{total_docs - 1} (total_docs={total_docs}), got {gold_index!r}")


def make_qa_example(retrieved: Mapping[str, Any], total_docs: int, gold_index: int) -> dict[str, Any]:
    """One multi-document QA example: the top `total_docs - 1` retrieved passages without an answer
    (`hasanswer` false and not the gold itself), in retrieval order, each marked with its
    `original_retrieval_index` and isgold false, with the gold chunk inserted at `gold_index`.

    >>> r = {"question": "q", "answers": ["a"], "nq_annotated_gold": {"title": "G", "chunked_long_answer": "a"},
    ...      "ctxs": [{"id": str(i), "title": f"T{i}", "text": "x", "score": "1.0", "hasanswer": i == 1}
    ...               for i in range(4)]}
    >>> [(c["title"], c.get("original_retrieval_index")) for c in make_qa_example(r, 3, 1)["ctxs"]]
    [('T0', 0), ('G', None), ('T2', 2)]
    """
    _check_placement(total_docs, gold_index)
    ctxs = retrieved.get("ctxs")
    if not isinstance(ctxs, list):
        raise ValueError(f"the retrieval record of {retrieved.get('question')!r:.80} has no ctxs list")
    # The paper keeps `hasanswer is False` only: a passage of unknown status is not a safe distractor.
    candidates = [(i, ctx) for i, ctx in enumerate(ctxs) if ctx.get("hasanswer") is False and not ctx.get("isgold")]
    needed = total_docs - 1
    if len(candidates) < needed:
        raise ValueError(f"question {retrieved.get('question')!r:.80}: only {len(candidates)} of its {len(ctxs)} "
                         f"retrieved passages lack the answer, {needed} distractors are needed; retrieve deeper "
                         f"(a larger depth)")
    documents = []
    for index, ctx in candidates[:needed]:
        distractor = copy.deepcopy(dict(ctx))
        distractor.pop("isgold", None)
        distractor["original_retrieval_index"] = index
        distractor["isgold"] = False
        documents.append(distractor)
    documents.insert(gold_index, gold_chunk(retrieved))
    # The record as it came, ctxs replaced in place (key order kept, as the paper's files have it).
    example = {key: documents if key == "ctxs" else copy.deepcopy(value) for key, value in retrieved.items()}
    return example


def make_qa_data(records: Sequence[Mapping[str, Any]], rm: Any, total_docs: int, gold_indices: Sequence[int],
                 depth: int = 100) -> dict[int, list[dict[str, Any]]]:
    """{gold index: examples} for every index in `gold_indices`, all with the same distractors.

    >>> passages = [{"id": 1, "title": "Paris", "text": "Paris is the capital of France."},
    ...             {"id": 2, "title": "Lyon", "text": "Lyon lies on the Rhone."},
    ...             {"id": 3, "title": "Nice", "text": "Nice is on the coast."}]
    >>> rm = lambda question, k: passages[:k]
    >>> record = {"question": "capital of france", "answers": ["Paris"],
    ...           "nq_annotated_gold": {"title": "France", "chunked_long_answer": "Its capital is Paris."}}
    >>> data = make_qa_data([record], rm, total_docs=3, gold_indices=[0, 2], depth=3)
    >>> {g: [c["title"] for c in examples[0]["ctxs"]] for g, examples in data.items()}
    {0: ['France', 'Lyon', 'Nice'], 2: ['Lyon', 'Nice', 'France']}
    """
    for gold_index in gold_indices:
        _check_placement(total_docs, gold_index)
    retrieved = retrieve_candidates(records, rm, depth=depth)
    return {g: [make_qa_example(r, total_docs, g) for r in retrieved] for g in gold_indices}


def randomize_distractors(example: Mapping[str, Any], seed: int = 0) -> dict[str, Any]:
    """The example with its distractors shuffled and the gold passage kept at its index (the paper's
    random-ordering variant). The shuffle is seeded by `seed` and the question, so it reproduces for
    any subset or order of examples.

    >>> ex = {"question": "q", "ctxs": [{"title": str(i), "text": "", "isgold": i == 1} for i in range(5)]}
    >>> [c["title"] for c in randomize_distractors(ex, seed=0)["ctxs"]][1]
    '1'
    """
    ctxs = list(example.get("ctxs") or [])
    gold_positions = [i for i, ctx in enumerate(ctxs) if ctx.get("isgold") is True]
    if len(gold_positions) != 1:
        raise ValueError(f"question {example.get('question')!r:.80}: random ordering needs exactly one isgold "
                         f"document, found {len(gold_positions)}")
    (gold_index,) = gold_positions
    distractors = [ctx for ctx in ctxs if ctx.get("isgold") is not True]
    random.Random(f"litm-random-order/{seed}/{example.get('question')}").shuffle(distractors)
    distractors.insert(gold_index, ctxs[gold_index])
    shuffled = copy.deepcopy(dict(example))
    shuffled["ctxs"] = copy.deepcopy(distractors)
    return shuffled


def relevance_ranked(example: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The example's documents most relevant first by the retriever's own ranking: distractors by
    `original_retrieval_index`, the gold passage at the rank the retriever gave it
    (`gold_original_retrieval_index`; last when the retriever did not return it).

    >>> ex = {"gold_original_retrieval_index": 3, "ctxs": [
    ...     {"title": "a", "original_retrieval_index": 0}, {"title": "g", "isgold": True},
    ...     {"title": "b", "original_retrieval_index": 5}]}
    >>> [c["title"] for c in relevance_ranked(ex)]
    ['a', 'g', 'b']
    """
    ctxs = example.get("ctxs") or []
    golds = [ctx for ctx in ctxs if ctx.get("isgold") is True]
    if len(golds) != 1:
        raise ValueError(f"question {example.get('question')!r:.80}: expected one isgold document, found {len(golds)}")
    distractors = [ctx for ctx in ctxs if ctx.get("isgold") is not True]
    if any(not isinstance(ctx.get("original_retrieval_index"), int) for ctx in distractors):
        raise ValueError(f"question {example.get('question')!r:.80}: a distractor has no original_retrieval_index")
    distractors.sort(key=lambda ctx: ctx["original_retrieval_index"])
    gold_rank = example.get("gold_original_retrieval_index")
    before = len(distractors) if gold_rank is None else sum(
        1 for ctx in distractors if ctx["original_retrieval_index"] < gold_rank)
    return copy.deepcopy(distractors[:before] + golds + distractors[before:])


# -- key-value retrieval --------------------------------------------------------------------------

def _uuid4(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def make_kv_records(num_keys: int, num_examples: int, seed: int = 0, gold_index: int | None = None) -> list[dict[str, Any]]:
    """`num_examples` KV examples of `num_keys` uuid4 key-value pairs each; the gold pair is chosen at
    random (as the paper) and, when `gold_index` is given, moved to that index. Seeded: the same
    arguments give the same records.

    >>> records = make_kv_records(num_keys=3, num_examples=2, seed=0, gold_index=2)
    >>> [r["ordered_kv_records"][2] == [r["key"], r["value"]] for r in records]
    [True, True]
    """
    if not is_int(num_keys) or num_keys < 2:
        raise ValueError(f"num_keys must be an integer >= 2, got {num_keys!r}")
    check_positive_int(num_examples, "num_examples")
    rng = random.Random(seed)
    out = []
    for _ in range(num_examples):
        pairs: dict[str, str] = {}
        while len(pairs) < num_keys:
            pairs[_uuid4(rng)] = _uuid4(rng)
        ordered = [[key, value] for key, value in pairs.items()]
        key, value = rng.choice(ordered)
        record = {"ordered_kv_records": ordered, "key": key, "value": value}
        if gold_index is not None:
            record["ordered_kv_records"] = kv_records_with_gold_at(record, gold_index)
        out.append(record)
    return out


def kv_records_with_gold_at(record: Mapping[str, Any], gold_index: int) -> list[list[str]]:
    """The record's pairs with the gold [key, value] moved to `gold_index` (the others keep their order).

    >>> kv_records_with_gold_at({"ordered_kv_records": [["a", "1"], ["b", "2"], ["c", "3"]], "key": "c", "value": "3"}, 0)
    [['c', '3'], ['a', '1'], ['b', '2']]
    """
    pairs = [list(pair) for pair in record["ordered_kv_records"]]
    if not is_int(gold_index) or not 0 <= gold_index < len(pairs):
        raise ValueError(f"gold_index must be an integer in 0..{len(pairs) - 1}, got {gold_index!r}")
    gold = [record["key"], record["value"]]
    if gold not in pairs:
        raise ValueError(f"the gold pair {gold!r:.100} is not among the record's ordered_kv_records")
    pairs.pop(pairs.index(gold))
    pairs.insert(gold_index, gold)
    return pairs


def evenly_spaced_positions(n: int, count: int = 5) -> list[int]:
    """`count` gold positions spread over `n` slots the way the paper picked them: the first slot, then
    the last slot of each of `count - 1` equal parts (20 -> 0, 4, 9, 14, 19; 140 -> 0, 34, 69, 104, 139).

    >>> evenly_spaced_positions(10, 3), evenly_spaced_positions(75)
    ([0, 4, 9], [0, 17, 36, 55, 74])
    """
    check_positive_int(n, "n")
    check_positive_int(count, "count")
    if count == 1:
        return [0]
    return sorted({0, *(max(0, n * i // (count - 1) - 1) for i in range(1, count))})
