"""The bundled tasks: which dataset, which family of programs, which metric, fields and default RM.

Plain data, read by the `dsp` command and usable from Python; a task refers to its family of programs
(`programs.family.Family`), which says everything else the command needs:

>>> TASKS["nq"].family.name, list(TASKS["nq"].family.programs), TASKS["qrecc"].fields.inputs
('open_qa', ['vanilla', 'retrieve_then_read', 'self_ask', 'dsp'], ('Conversation_no', 'Turn_no', 'question'))
>>> TASKS["squad"].family is FAMILIES["open_qa"], list(FAMILIES)
(True, ['open_qa', 'multihop', 'conversational'])
>>> [name for name, task in TASKS.items() if "test" in task.splits]
['nq', 'squad']

Loading reads the shared data (DSP_DATA_DIR), so it is shown, not run as a doctest::

    pool, dev = TASKS["nq"].load(n=30)
    pool, test = TASKS["nq"].load(split="test")

- `nq`: the Lost-in-the-Middle NQ-open oracle questions: dev is lines 0-999 (the first n, so results
  compare line for line with the anchor figures), test is lines 1000-1999, the training pool lines
  2000+; BM25 over the Wikipedia-2018 sample.
- `nq-open`, `squad`: the NQ-open and SQuAD dev sets, split into a 500 / 1,000-example training pool
  and a dev set downsampled with `--dev-seed`; Open-SQuAD retrieves from SQuAD's own paragraphs.
  SQuAD's test split is 1,000 questions outside the pool and outside the 1,000 `--dev-seed 0` draws,
  evaluated in a fixed draw's order (any --n is a prefix of a larger one).
- `hotpotqa`: the dev sample (downsampled), retrieving from the pooled distractor contexts (the
  abstracts sample alone holds none of these questions' supporting pages).
- `qrecc`: conversations 1 and 18 (turn order kept; every other conversation is the pool), evaluated
  autoregressively with nF1 against the history, retrieving from the passages cut into 200-word pieces.

A test split (`Holdout`) is declared data, used once: nothing is designed, tuned or chosen on it.
`nq-open`, `hotpotqa` and `qrecc` declare none (`Task.no_test` says why).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import dsp
from dsp import datasets
from dsp.utils import check_positive_int
from programs import conversational, multihop, open_qa
from programs.family import Family

__all__ = ["Task", "Holdout", "TASKS", "FAMILIES", "SPLITS", "conversation_nF1"]

# The program families by name, each declared by its module under programs/ (its FAMILY).
FAMILIES: dict[str, Family] = {family.name: family
                               for family in (open_qa.FAMILY, multihop.FAMILY, conversational.FAMILY)}
# The splits a task can be evaluated on: its dev split (every task) and its declared test split (some).
SPLITS = ("dev", "test")


def conversation_nF1(prediction: str, gold: Any, example: Any) -> float:
    """QReCC's metric: nF1 of the answer against the gold, ignoring words the conversation already said."""
    return dsp.nF1(" ".join([*example.get("history", []), example.question]), prediction, gold)


conversation_nF1.__name__ = "nF1"


def _nq() -> tuple[list, list]:
    questions = datasets.load_litm_oracle()
    return questions[2000:], questions[:2000]


def _nq_open() -> tuple[list, list]:
    # NQ's test split is NQ-open dev questions: none of them may be trained, tuned or evaluated on here.
    _, test = TASKS["nq"].load(split="test")
    held = {dsp.normalize_text(q.question) for q in test}
    kept = [q for q in datasets.load_nq_open() if dsp.normalize_text(q.question) not in held]
    return datasets.split_pool(kept, 500, seed=0)


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
class Holdout:
    """A task's test split: `size` questions of its dev list set aside once and for all, beside the `dev`
    questions that stay its dev split (the training pool is apart from both).

    For a "head" task the dev split is the first `dev` questions of the list and the test split the
    `size` after them. For a "sample" task the questions kept out of the test are the `dev` that
    `--dev-seed 0` draws (those of the published runs); the test is `size` questions drawn from the
    rest with `random.Random(f"test-{seed}")`, evaluated in a fixed draw's order (`Task.load`).

    >>> Holdout(size=2, dev=3).indices(10, "head")
    ([0, 1, 2], [3, 4])
    >>> kept, test = Holdout(size=4, dev=3).indices(10, "sample")
    >>> kept == datasets.sample_indices(10, 3, 0), len(test), set(kept) & set(test)
    (True, 4, set())
    """

    size: int
    dev: int
    seed: int = 0

    def indices(self, total: int, order: str) -> tuple[list[int], list[int]]:
        """(positions kept out of the test: the dev questions, positions of the test questions) in a dev
        list of `total` questions, for a task whose dev order is `order`."""
        if self.dev + self.size > total:
            raise ValueError(f"a test split of {self.size} beside {self.dev} dev questions does not fit a "
                             f"dev list of {total}")
        if order == "head":
            return list(range(self.dev)), list(range(self.dev, self.dev + self.size))
        kept = datasets.sample_indices(total, self.dev, 0)
        taken = set(kept)
        rest = [i for i in range(total) if i not in taken]
        return kept, sorted(random.Random(f"test-{self.seed}").sample(rest, self.size))

    def describe(self, order: str) -> dict[str, Any]:
        """The definition, for a results file's identity: a changed definition is another run.

        >>> Holdout(size=1000, dev=1000).describe("head")
        {'order': 'head', 'dev': 1000, 'size': 1000}
        >>> Holdout(size=1000, dev=1000).describe("sample")["evaluated_in"]
        'draw order'
        """
        described = {"order": order, "dev": self.dev, "size": self.size}
        # "draw order": a results file made in list order (before 2026-12-04) is another run's, never resumed
        return described if order == "head" else {**described, "seed": self.seed, "evaluated_in": "draw order"}


@dataclass(frozen=True)
class Task:
    """A dataset prepared for a family of programs: `family` is that family (`programs.family.Family`),
    the object itself.

    `source` loads (training pool, full dev list); `dev_order` is "head" (the first n, in file order)
    or "sample" (n drawn with the dev seed, kept in file order); `rm` is the default retriever: a
    function giving an RM spec (None when its corpus is not local) or an RM built from a corpus.
    `test` declares the test split carved out of the dev list (`Holdout`), or None with `no_test`
    saying why the task has none.
    """

    name: str
    family: Family
    source: Callable[[], tuple[list, list]]
    metric: Callable[..., float]
    rm: Callable[[], Any]
    fields: dsp.Fields = dsp.Fields()
    dev_order: str = "sample"
    description: str = ""
    test: Holdout | None = None
    no_test: str = ""

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits this task can be evaluated on."""
        return SPLITS if self.test is not None else ("dev",)

    def check_split(self, split: str) -> None:
        """Raise ValueError (one line, naming the task) unless this task declares `split`.

        >>> TASKS["qrecc"].check_split("test")
        Traceback (most recent call last):
        ...
        ValueError: dataset qrecc declares no test split: its 36 turns are its 16 dev turns and its training pool
        """
        if split not in SPLITS:
            raise ValueError(f"no split {split!r}; choose one of: {', '.join(SPLITS)}")
        if split not in self.splits:
            raise ValueError(f"dataset {self.name} declares no {split} split: {self.no_test}")

    def load(self, n: int | None = None, dev_seed: int = 0, split: str = "dev") -> tuple[list, list]:
        """(training pool, the examples of `split` to evaluate: n of them, or all).

        `split="test"`: the declared test split, its first n ("head" tasks) or, for a "sample" task, the
        first n in a fixed draw's order (`datasets.draw_order`, seed 0: `dev_seed` is for dev), so any n
        is a prefix of a larger one and a run extends by resuming; more than it holds is a ValueError.
        `split="dev"` of a task with a test split never meets a test question: a "head" task's dev is
        its first `test.dev` questions (asking for more is a ValueError); a "sample" task with
        `dev_seed` 0 and n <= `test.dev` draws exactly as before the test split existed (the published
        runs keep their questions; the test was drawn outside them), and with any other dev seed, or
        n above that or None, draws only from the dev list without the test questions.

        For example (on the shared data, so not run as a doctest)::

            pool, dev = TASKS["squad"].load(n=1000)
            pool, test = TASKS["squad"].load(split="test")
        """
        check_positive_int(n, "n (dev examples)", optional=True)
        self.check_split(split)
        pool, dev = self.source()
        if self.test is None:
            if self.dev_order == "head":
                return pool, dev if n is None else dev[:n]
            return pool, datasets.downsample(dev, n, dev_seed)
        kept, test = self.test.indices(len(dev), self.dev_order)
        if split == "test":
            if n is not None and n > len(test):
                raise ValueError(f"dataset {self.name}: its test split has {len(test)} questions, asked for {n}")
            if self.dev_order == "sample":  # a fixed draw (the list's first n come from a few articles), in
                test = [test[i] for i in datasets.draw_order(len(test), 0)]  # its order: --n 1000 extends --n 500
            return pool, [dev[i] for i in test[:n]]
        if self.dev_order == "head":
            if n is not None and n > len(kept):
                raise ValueError(f"dataset {self.name}: its dev split has {len(kept)} questions, asked for {n} "
                                 f"(the {len(test)} after them are its test split)")
            return pool, [dev[i] for i in kept[:n]]
        held = set(test)
        if dev_seed == 0 and n is not None and n <= len(kept):
            chosen = datasets.sample_indices(len(dev), n, 0)
            # random.sample's first n picks are the same for every sample size here, so a draw of n <= test.dev
            # lies in the ones kept out of the test; a Python whose sample drew otherwise must not hand those out.
            if held.intersection(chosen):
                raise RuntimeError(f"dataset {self.name}: the dev-seed 0 draw of {n} meets the test split; "
                                   "this Python's random.sample differs from the one the splits were made with")
            return pool, [dev[i] for i in chosen]
        rest = [example for i, example in enumerate(dev) if i not in held]
        return pool, datasets.downsample(rest, n, dev_seed)


_QA = dsp.Fields(inputs="question", gold="answer", prediction="answer")
TASKS: dict[str, Task] = {
    "nq": Task("nq", open_qa.FAMILY, _nq, dsp.EM, _wiki2018_bm25, _QA, "head",
               "NQ-open (Lost-in-the-Middle oracle questions), BM25 over the Wikipedia-2018 sample",
               test=Holdout(size=1000, dev=1000)),
    "nq-open": Task("nq-open", open_qa.FAMILY, _nq_open, dsp.EM, _wiki2018_bm25, _QA, "sample",
                    "NQ-open dev, BM25 over the Wikipedia-2018 sample",
                    no_test="its questions are NQ-open dev less nq's test questions (which are NQ-open dev "
                            "questions too): NQ's test split is --dataset nq's"),
    "squad": Task("squad", open_qa.FAMILY, _squad, dsp.EM, lambda: dsp.BM25(datasets.squad_corpus()), _QA, "sample",
                  "Open-SQuAD: SQuAD dev questions, BM25 over its paragraphs", test=Holdout(size=1000, dev=1000)),
    "hotpotqa": Task("hotpotqa", multihop.FAMILY, _hotpotqa, dsp.EM, lambda: dsp.BM25(datasets.hotpotqa_corpus()), _QA,
                     "sample", "HotPotQA dev sample, BM25 over the pooled distractor contexts and abstracts",
                     no_test="the mirror's 100 distractor-setting questions are all its dev split (no others "
                             "have the contexts its retriever pools)"),
    "qrecc": Task("qrecc", conversational.FAMILY, _qrecc, conversation_nF1, _qrecc_corpus,
                  dsp.Fields(inputs=("Conversation_no", "Turn_no", "question"), gold="answer", prediction="answer"),
                  "head", "QReCC conversations 1 and 18, BM25 over 200-word passage pieces",
                  no_test="its 36 turns are its 16 dev turns and its training pool"),
}
