"""The bundled tasks: which dataset, which family of programs, which metric, fields and default RM.

Plain data, read by the `dsp` command and usable from Python:

>>> TASKS["nq"].family, TASKS["qrecc"].fields.inputs
('open_qa', ('Conversation_no', 'Turn_no', 'question'))
>>> pool, dev = TASKS["nq"].load(n=30)                                   # doctest: +SKIP

- `nq`: the Lost-in-the-Middle NQ-open oracle questions (the first n of the 2,000 dev lines, so results
  compare line for line with the anchor figures; lines 2000+ are the training pool), BM25 over the
  Wikipedia-2018 sample.
- `nq-open`, `squad`: the NQ-open and SQuAD dev sets, split into a 500 / 1,000-example training pool
  and a dev set downsampled with `--dev-seed`; Open-SQuAD retrieves from SQuAD's own paragraphs.
- `hotpotqa`: the dev sample (downsampled), retrieving from the pooled distractor contexts (the
  abstracts sample alone holds none of these questions' supporting pages).
- `qrecc`: conversations 1 and 18 (turn order kept; every other conversation is the pool), evaluated
  autoregressively with nF1 against the history, retrieving from the passages cut into 200-word pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import dsp
from dsp import datasets

__all__ = ["Task", "TASKS", "FAMILIES", "conversation_nF1"]

# The program families: dataset kind -> module under programs/ holding PROGRAMS (and PRESETS).
FAMILIES = ("open_qa", "multihop", "conversational")


def conversation_nF1(prediction: str, gold: Any, example: Any) -> float:
    """QReCC's metric: nF1 of the answer against the gold, ignoring words the conversation already said."""
    return dsp.nF1(" ".join([*example.get("history", []), example.question]), prediction, gold)


conversation_nF1.__name__ = "nF1"


def _nq() -> tuple[list, list]:
    questions = datasets.load_litm_oracle()
    return questions[2000:], questions[:2000]


def _nq_open() -> tuple[list, list]:
    return datasets.split_pool(datasets.load_nq_open(), 500, seed=0)


def _squad() -> tuple[list, list]:
    return datasets.split_pool(datasets.load_squad(), 1000, seed=0)


def _hotpotqa() -> tuple[list, list]:
    return datasets.load_hotpotqa_csv("train"), datasets.load_hotpotqa()


def _qrecc() -> tuple[list, list]:
    turns = datasets.load_qrecc()
    dev = [t for t in turns if t.Conversation_no in (1, 18)]
    return [t for t in turns if t.Conversation_no not in (1, 18)], dev


def _wiki2018_bm25() -> str | None:
    corpus = datasets.local_path("wiki2018/passages.jsonl.gz")
    return f"bm25:{corpus}" if corpus else None


def _qrecc_corpus() -> Any:
    return dsp.BM25(datasets.qrecc_corpus())


@dataclass(frozen=True)
class Task:
    """A dataset prepared for a family of programs.

    `source` loads (training pool, full dev list); `dev_order` is "head" (the first n, in file order)
    or "sample" (n drawn with the dev seed, kept in file order); `rm` is the default retriever: a
    function giving an RM spec (None when its corpus is not local) or an RM built from a corpus.
    """

    name: str
    family: str
    source: Callable[[], tuple[list, list]]
    metric: Callable[..., float]
    rm: Callable[[], Any]
    fields: dsp.Fields = dsp.Fields()
    dev_order: str = "sample"
    description: str = ""

    @property
    def conversational(self) -> bool:
        return self.family == "conversational"

    def load(self, n: int | None = None, dev_seed: int = 0) -> tuple[list, list]:
        """(training pool, the dev examples to evaluate: n of them, or all)."""
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"n (dev examples) must be a positive integer or None, got {n!r}")
        pool, dev = self.source()
        if self.dev_order == "head":
            return pool, dev if n is None else dev[:n]
        return pool, datasets.downsample(dev, n, dev_seed)


_QA = dsp.Fields(inputs="question", gold="answer", prediction="answer")
TASKS: dict[str, Task] = {
    "nq": Task("nq", "open_qa", _nq, dsp.EM, _wiki2018_bm25, _QA, "head",
               "NQ-open (Lost-in-the-Middle oracle questions), BM25 over the Wikipedia-2018 sample"),
    "nq-open": Task("nq-open", "open_qa", _nq_open, dsp.EM, _wiki2018_bm25, _QA, "sample",
                    "NQ-open dev, BM25 over the Wikipedia-2018 sample"),
    "squad": Task("squad", "open_qa", _squad, dsp.EM, lambda: dsp.BM25(datasets.squad_corpus()), _QA, "sample",
                  "Open-SQuAD: SQuAD dev questions, BM25 over its paragraphs"),
    "hotpotqa": Task("hotpotqa", "multihop", _hotpotqa, dsp.EM, lambda: dsp.BM25(datasets.hotpotqa_corpus()), _QA,
                     "sample", "HotPotQA dev sample, BM25 over the pooled distractor contexts and abstracts"),
    "qrecc": Task("qrecc", "conversational", _qrecc, conversation_nF1, _qrecc_corpus,
                  dsp.Fields(inputs=("Conversation_no", "Turn_no", "question"), gold="answer", prediction="answer"),
                  "head", "QReCC conversations 1 and 18, BM25 over 200-word passage pieces"),
}
