"""The Lost in the Middle settings as `Run`s: closed-book, oracle, multi-document QA at gold positions,
key-value retrieval at gold positions, and the passage-reordering experiment.

A setting becomes a `Run`: one dsp Example per (question, gold position) holding the rendered prompt,
its gold answers (or value), the curve it belongs to and the gold position, plus per item the
paper-format record it came from. Items are ordered question by question with the gold position
descending, so consecutive prompts share their longest common prefix and LlamaCpp reuses its
evaluated chunks.

>>> run = closedbook_run([{"question": "who wrote hamlet", "answers": ["Shakespeare"]}])
>>> run.setting, run.items[0].prompt
('closedbook', 'Question: who wrote hamlet\\nAnswer:')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from dsp import Example, order_passages
from dsp.litm import Document, get_closedbook_qa_prompt, get_kv_retrieval_prompt, get_qa_prompt

from .data import kv_records_with_gold_at, randomize_distractors, relevance_ranked

__all__ = ["Run", "closedbook_run", "oracle_run", "qa_setting_name", "qa_run", "kv_run", "reorder_run"]


@dataclass
class Run:
    """One setting ready to evaluate: `items` (dsp Examples: id, question, prompt, curve, position,
    gold `answers` or `value`) and, per item, `sources`: the paper-format record the prompt came from
    plus what the model saw (model_documents / model_ordered_kv_records).

    >>> run = closedbook_run([{"question": "q?", "answers": ["a"]}])
    >>> run.setting, run.items[0].id, run.items[0].answers
    ('closedbook', 'q0', ['a'])
    """

    setting: str
    task: str  # "qa" or "kv"
    kind: str  # "closedbook", "oracle", "positions", "kv" or "reorder"
    description: str
    items: list[Example] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)

    def add(self, item: Example, source: dict[str, Any]) -> None:
        self.items.append(item)
        self.sources.append(source)


def _documents(ctxs: Sequence[Mapping[str, Any]]) -> list[Document]:
    return [Document.from_dict({k: v for k, v in ctx.items() if k in _DOC_FIELDS}) for ctx in ctxs]


_DOC_FIELDS = ("title", "text", "id", "score", "hasanswer", "isgold", "original_retrieval_index")


def _qid(index: int) -> str:
    return f"q{index}"


def closedbook_run(records: Sequence[Mapping[str, Any]]) -> Run:
    """Closed-book QA: the question alone (the paper's closed-book setting over the oracle questions).

    >>> closedbook_run([{"question": "who wrote hamlet", "answers": ["Shakespeare"]}]).items[0].prompt
    'Question: who wrote hamlet\\nAnswer:'
    """
    run = Run("closedbook", "qa", "closedbook", "closed-book: the question alone")
    for i, record in enumerate(records):
        prompt = get_closedbook_qa_prompt(record["question"])
        run.add(Example(id=_qid(i), question=record["question"], prompt=prompt, curve="closed-book", position=None,
                        answers=list(record["answers"])),
                {"record": record, "model_documents": []})
    return run


def oracle_run(records: Sequence[Mapping[str, Any]], query_aware_contextualization: bool = False) -> Run:
    """The oracle setting: each question with its gold passage only (the records' own ctxs).

    >>> run = oracle_run([{"question": "q?", "answers": ["a"], "ctxs": [{"title": "T", "text": "a.", "isgold": True}]}])
    >>> run.items[0].prompt.splitlines()[2]
    'Document [1](Title: T) a.'
    """
    setting = "oracle-qac" if query_aware_contextualization else "oracle"
    run = Run(setting, "qa", "oracle", "oracle: the gold passage alone")
    for i, record in enumerate(records):
        documents = _documents(record["ctxs"])
        prompt = get_qa_prompt(record["question"], documents,
                               query_aware_contextualization=query_aware_contextualization)
        run.add(Example(id=_qid(i), question=record["question"], prompt=prompt, curve="oracle", position=None,
                        answers=list(record["answers"])),
                {"record": record, "model_documents": [d.to_dict() for d in documents]})
    return run


def qa_setting_name(total_docs: int, random_order: bool = False, mention_random_ordering: bool = False,
                    query_aware_contextualization: bool = False, order: str | None = None) -> str:
    """The file stem of a multi-document setting, e.g. ``qa-20docs``, ``qa-20docs-random``.

    >>> qa_setting_name(20, order="lost_in_the_middle")
    'qa-20docs-order_lost_in_the_middle'
    """
    name = f"qa-{total_docs}docs"
    if random_order:
        name += "-random"
    if mention_random_ordering:
        name += "-mention"
    if query_aware_contextualization:
        name += "-qac"
    if order:
        name += f"-order_{order}"
    return name


def _gold_index(ctxs: Sequence[Mapping[str, Any]], question: str) -> int:
    golds = [i for i, ctx in enumerate(ctxs) if ctx.get("isgold") is True]
    if len(golds) != 1:
        raise ValueError(f"question {question!r:.80}: expected exactly one isgold document, found {len(golds)}")
    return golds[0]


def qa_run(examples_by_position: Mapping[int, Sequence[Mapping[str, Any]]], total_docs: int,
           random_order: bool = False, seed: int = 0, mention_random_ordering: bool = False,
           query_aware_contextualization: bool = False, order: str | None = None) -> Run:
    """Multi-document QA at several gold positions ({gold index: paper-format examples}, the same
    questions in the same order at every position).

    `random_order` shuffles the distractors (gold kept in place, seeded); `order` rearranges the whole
    list with `dsp.order_passages` treating it as a relevance ranking, so the gold passage's position
    becomes its *rank* and the curve shows what reordering does to an answer retrieved at that rank.

    >>> from programs.litm.data import make_qa_data
    >>> passages = [{"id": i, "title": f"T{i}", "text": f"Passage {i}."} for i in range(4)]
    >>> record = {"question": "capital of france", "answers": ["Paris"],
    ...           "nq_annotated_gold": {"title": "France", "chunked_long_answer": "Its capital is Paris."}}
    >>> data = make_qa_data([record], lambda question, k: passages[:k], total_docs=3, gold_indices=[0, 2])
    >>> run = qa_run(data, total_docs=3)
    >>> run.setting, [item.id for item in run.items]
    ('qa-3docs', ['q0@2', 'q0@0'])
    >>> print(run.items[0].prompt.split("\\n\\n")[1])
    Document [1](Title: T0) Passage 0.
    Document [2](Title: T1) Passage 1.
    Document [3](Title: France) Its capital is Paris.
    """
    setting = qa_setting_name(total_docs, random_order, mention_random_ordering, query_aware_contextualization, order)
    curve = f"{total_docs} docs"
    if random_order:
        curve += ", random distractor order"
    if query_aware_contextualization:
        curve += ", query-aware"
    if order:
        curve += f", {order} order (x = rank)"
    run = Run(setting, "qa", "positions", f"{total_docs}-document QA" + (f", reordered with {order}" if order else ""))
    positions = sorted(examples_by_position, reverse=True)
    sizes = {len(examples_by_position[p]) for p in positions}
    if len(sizes) > 1:
        raise ValueError(f"every gold position needs the same questions; got {sorted(sizes)} examples per position")
    count = sizes.pop() if sizes else 0
    for i in range(count):
        for position in positions:
            example = examples_by_position[position][i]
            ctxs = example["ctxs"]
            if len(ctxs) != total_docs:
                raise ValueError(f"question {example['question']!r:.80} at gold position {position} has "
                                 f"{len(ctxs)} documents, expected {total_docs}")
            if _gold_index(ctxs, example["question"]) != position:
                raise ValueError(f"question {example['question']!r:.80}: its gold document is not at index {position}")
            if example["question"] != examples_by_position[positions[0]][i]["question"]:
                raise ValueError(f"example {i} is not the same question at every gold position")
            if random_order:
                ctxs = randomize_distractors(example, seed=seed)["ctxs"]
            if order:
                ctxs = order_passages(list(ctxs), strategy=order)
            documents = _documents(ctxs)
            prompt = get_qa_prompt(example["question"], documents, mention_random_ordering=mention_random_ordering,
                                   query_aware_contextualization=query_aware_contextualization)
            run.add(Example(id=f"{_qid(i)}@{position}", question=example["question"], prompt=prompt, curve=curve,
                            position=position, gold_at=_gold_index(ctxs, example["question"]),
                            answers=list(example["answers"])),
                    {"record": example, "model_documents": [d.to_dict() for d in documents],
                     "model_prompt_mention_random_ordering": mention_random_ordering,
                     "model_use_random_ordering": random_order})
    return run


def kv_run(records: Sequence[Mapping[str, Any]], positions: Sequence[int],
           query_aware_contextualization: bool = False) -> Run:
    """Key-value retrieval with the gold pair moved to each of `positions` (the paper's procedure).

    >>> run = kv_run([{"ordered_kv_records": [["a", "1"], ["b", "2"]], "key": "b", "value": "2"}], [0, 1])
    >>> run.setting, [item.id for item in run.items]
    ('kv-2keys', ['q0@1', 'q0@0'])
    """
    num_keys = {len(r["ordered_kv_records"]) for r in records}
    if len(num_keys) > 1:
        raise ValueError(f"the KV records have different sizes: {sorted(num_keys)}")
    keys = num_keys.pop() if num_keys else 0
    setting = f"kv-{keys}keys" + ("-qac" if query_aware_contextualization else "")
    run = Run(setting, "kv", "kv", f"KV retrieval, {keys} pairs")
    curve = f"{keys} key-value pairs" + (", query-aware" if query_aware_contextualization else "")
    for i, record in enumerate(records):
        for position in sorted(set(positions), reverse=True):
            pairs = kv_records_with_gold_at(record, position)
            prompt = get_kv_retrieval_prompt(pairs, record["key"], query_aware_contextualization)
            run.add(Example(id=f"{_qid(i)}@{position}", question=record["key"], prompt=prompt, curve=curve,
                            position=position, value=record["value"]),
                    {"record": record, "model_ordered_kv_records": pairs})
    return run


def reorder_run(examples: Sequence[Mapping[str, Any]], strategies: Sequence[str]) -> Run:
    """The passage-order experiment on retrieval-ranked contexts: each example's documents ranked by
    the retriever (the gold passage at the rank the retriever itself gave it), then arranged by each
    of `strategies` with `dsp.order_passages`. An item's position is the gold passage's relevance rank
    (0 = ranked first); `gold_at` is where the strategy put it.

    >>> from programs.litm.data import make_qa_data
    >>> passages = [{"id": i, "title": f"T{i}", "text": f"Passage {i}."} for i in range(4)]
    >>> record = {"question": "capital of france", "answers": ["Paris"],
    ...           "nq_annotated_gold": {"title": "France", "chunked_long_answer": "Its capital is Paris."}}
    >>> data = make_qa_data([record], lambda question, k: passages[:k], total_docs=3, gold_indices=[0])
    >>> run = reorder_run(data[0], ["relevance", "reverse"])   # the retriever did not return the gold: rank 2
    >>> [(item.id, item.position, item.gold_at) for item in run.items]
    [('q0/relevance', 2, 2), ('q0/reverse', 2, 0)]
    """
    if not examples:
        raise ValueError("reorder_run needs examples")
    total_docs = len(examples[0]["ctxs"])
    run = Run(f"reorder-{total_docs}docs", "qa", "reorder",
              f"{total_docs} retrieval-ranked documents arranged by " + ", ".join(strategies))
    for i, example in enumerate(examples):
        ranked = relevance_ranked(example)
        rank = _gold_index(ranked, example["question"])
        for strategy in strategies:
            ctxs = order_passages(ranked, strategy=strategy)
            documents = _documents(ctxs)
            prompt = get_qa_prompt(example["question"], documents)
            run.add(Example(id=f"{_qid(i)}/{strategy}", question=example["question"], prompt=prompt, curve=strategy,
                            position=rank, gold_at=_gold_index(ctxs, example["question"]),
                            answers=list(example["answers"])),
                    {"record": example, "model_documents": [d.to_dict() for d in documents],
                     "model_prompt_mention_random_ordering": False, "model_use_random_ordering": False})
    return run

