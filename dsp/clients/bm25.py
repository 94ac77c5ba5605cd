"""BM25: a local lexical retriever over a passage corpus, on bm25s (numpy sparse scores, no server).

`BM25(passages)` tokenises "title text" of every passage (lower-cased words, stopwords removed,
PyStemmer stems), lets bm25s precompute each (term, passage) score into a sparse matrix, and answers
`rm(query, k)` with the top-k passages: id, title, text, score (the base adds long_text, rank and
prob = softmax of the returned scores). Results are deterministic: equal scores keep corpus order.

>>> rm = BM25([{"id": "a", "title": "Paris", "text": "Paris is the capital of France."},
...            {"id": "b", "title": "Rome", "text": "Rome is the capital of Italy."}])
>>> [p.id for p in rm("capital of Italy", k=2, cache=False)]
['b', 'a']

An index is saved as JSON + .npy files (bm25s's own arrays, written without pickle) plus the
passages, and loaded memory-mapped:

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     loaded = BM25.load(rm.save(Path(tmp) / "wiki-bm25"), mmap=True)
...     [p.id for p in loaded("capital of Italy", k=2, cache=False)]
['b', 'a']

The disk-cache identity is the corpus's content fingerprint plus the parameters (never the path),
computed once at build time and stored in the index, so a moved or reloaded index hits the cache.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..datasets.corpus import (
    CorpusError, MappedPassages, corpus_fingerprint, normalize_passages, read_passages, write_passages,
)
from ..utils import is_number
from .index_meta import begin_index_write, read_index_meta, write_index_meta
from .rm import RM, Passage, check_queries, index_name, source_name

__all__ = ["BM25", "top_k_indices"]

INDEX_FORMAT = "dsp.bm25/1"
_METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")


def _require_bm25s() -> Any:
    try:
        import bm25s
    except ImportError:
        raise ImportError("dsp.BM25 needs bm25s and PyStemmer: pip install bm25s PyStemmer") from None
    return bm25s


def top_k_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` highest scores, best first; equal scores keep index order (deterministic).

    >>> top_k_indices(np.array([0.5, 2.0, 0.5, 1.0]), 3).tolist()
    [1, 3, 0]
    """
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        kth = np.partition(scores, n - k)[n - k]  # the k-th largest value
        above = np.flatnonzero(scores > kth)
        # Ties at the boundary are taken in index order, so the cut never depends on the partition.
        tied = np.flatnonzero(scores == kth)[: k - len(above)]
        candidates = np.concatenate([above, tied])
    else:
        candidates = np.arange(n)
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order]


class BM25(RM):
    """Okapi BM25 over a passage corpus (a JSONL(.gz) path or a list of dicts/strings), on bm25s.

    `stemmer` is a PyStemmer language ("english") or None; `stopwords` a bm25s language code ("en"),
    a list of words, or None; `k1`, `b`, `method` ("lucene", "robertson", "atire", "bm25l", "bm25+")
    are bm25s's scoring parameters. The indexed text of a passage is its title and text.
    The ranking is total: a k beyond the corpus returns every passage, and passages sharing no word
    with the query fill the tail with score 0 (in corpus order). `source` names in-memory passages read
    from a file (e.g. shared by several indexes), for messages and `describe()`.

    >>> rm = BM25([{"title": "Nobel Prize in Physics", "text": "First awarded in 1901 to Wilhelm Roentgen."},
    ...            {"title": "Hamlet", "text": "A tragedy by William Shakespeare."}])
    >>> rm("who got the first nobel prize in physics", k=5, cache=False)[0].title
    'Nobel Prize in Physics'
    >>> [p.score for p in rm("the first prize", k=5, cache=False)][1]   # no shared word: score 0, in the tail
    0.0

    On the shared data, ``BM25(data_path("wiki2018/passages.jsonl.gz"))`` answers the same question
    with ``'List of Nobel laureates in Physics'`` first.
    """

    provider = "bm25s"

    def __init__(self, passages: str | os.PathLike | Sequence[Any], *, stemmer: str | None = "english",
                 stopwords: str | Sequence[str] | None = "en", k1: float = 1.5, b: float = 0.75,
                 method: str = "lucene", duplicates: str = "error", show_progress: bool = False,
                 source: str | None = None) -> None:
        super().__init__()
        self._set_params(stemmer=stemmer, stopwords=stopwords, k1=k1, b=b, method=method)
        self.source = source_name(passages, source)
        if isinstance(passages, (str, os.PathLike)):
            corpus = read_passages(passages, duplicates=duplicates)
        else:
            corpus = normalize_passages(passages, source=self.source, duplicates=duplicates)
        if not corpus:
            raise CorpusError(f"{self.source}: the corpus has no passages")
        self.passages: Sequence[dict[str, Any]] = corpus
        self.fingerprint = corpus_fingerprint(corpus)
        self._build(corpus, show_progress)

    # -- construction -------------------------------------------------------------------------------

    def _set_params(self, *, stemmer: Any, stopwords: Any, k1: Any, b: Any, method: Any) -> None:
        bm25s = _require_bm25s()
        if method not in _METHODS:
            raise ValueError(f"unknown BM25 method {method!r}; choose one of {', '.join(_METHODS)}")
        for name, value in (("k1", k1), ("b", b)):
            if not is_number(value) or not np.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        if not 0 <= b <= 1:
            raise ValueError(f"b must be between 0 and 1, got {b!r}")
        if stopwords is not None and not isinstance(stopwords, str):
            if not all(isinstance(w, str) for w in stopwords):
                raise TypeError("stopwords must be a language code, a list of words, or None")
            stopwords = sorted(set(stopwords))  # canonical, so the cache identity does not depend on order
        try:
            bm25s.tokenize(["probe"], stopwords=stopwords, show_progress=False, return_ids=False)
        except ValueError as error:
            raise ValueError(f"unusable stopwords {stopwords!r}: {error}") from None
        self._stemmer = self._make_stemmer(stemmer)
        self.stemmer_name, self.stopwords = stemmer, stopwords
        self.k1, self.b, self.method = float(k1), float(b), method
        # PyStemmer objects are not safe to share between threads.
        self._tokenize_lock = threading.Lock()

    @staticmethod
    def _make_stemmer(language: str | None) -> Any:
        if language is None:
            return None
        try:
            import Stemmer
        except ImportError:
            raise ImportError("stemming needs PyStemmer: pip install PyStemmer (or pass stemmer=None)") from None
        if language not in Stemmer.algorithms():
            raise ValueError(f"unknown stemmer language {language!r}; PyStemmer has: {', '.join(Stemmer.algorithms())}")
        return Stemmer.Stemmer(language)

    @staticmethod
    def _indexed_text(passage: dict[str, Any]) -> str:
        title = passage.get("title")
        return f"{title} {passage['text']}" if title else passage["text"]

    def _tokenize(self, texts: list[str], return_ids: bool) -> Any:
        bm25s = _require_bm25s()
        with self._tokenize_lock:
            return bm25s.tokenize(texts, stopwords=self.stopwords, stemmer=self._stemmer,
                                  return_ids=return_ids, show_progress=False)

    def _build(self, corpus: Sequence[dict[str, Any]], show_progress: bool) -> None:
        bm25s = _require_bm25s()
        tokens = self._tokenize([self._indexed_text(p) for p in corpus], return_ids=True)
        if not tokens.vocab:
            raise CorpusError(f"{self.source}: no passage has an indexable word (all empty or stopwords)")
        self._retriever = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        # No empty-token column: a query word the corpus lacks is simply dropped (see _term_ids).
        self._retriever.index(tokens, create_empty_token=False, show_progress=show_progress)

    # -- search -------------------------------------------------------------------------------------

    def cache_identity(self) -> dict[str, Any]:
        return {"provider": self.provider, "corpus": self.fingerprint, "k1": self.k1, "b": self.b,
                "method": self.method, "stemmer": self.stemmer_name, "stopwords": self.stopwords,
                "fields": "title+text", "format": INDEX_FORMAT}

    def __len__(self) -> int:
        return len(self.passages)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "index": index_name(self.source), "passages": len(self)}

    def _term_ids(self, tokens: list[str]) -> list[int]:
        vocab = self._retriever.vocab_dict
        return [vocab[t] for t in tokens if t in vocab]

    def _scores(self, term_ids: list[int]) -> np.ndarray:
        if not term_ids:
            # No query word is in the corpus: every passage scores 0 and the ranking is corpus order.
            return np.zeros(len(self.passages), dtype=np.float32)
        return self._retriever.get_scores_from_ids(term_ids)

    def _results(self, scores: np.ndarray, k: int) -> list[dict[str, Any]]:
        results = []
        for i in top_k_indices(scores, k).tolist():
            passage = dict(self.passages[i])
            passage["score"] = float(scores[i])
            results.append(passage)
        return results

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        if params:
            raise TypeError(f"BM25 search takes no extra parameters, got {sorted(params)}")
        tokens = self._tokenize([query], return_ids=False)[0]
        return self._results(self._scores(self._term_ids(tokens)), k)

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Passage]]:
        """The top-`k` passages for each query, tokenised together; no disk cache and no history.

        Meant for evaluation (recall over thousands of questions): same results as `rm(query, k)`.

        >>> rm = BM25([{"id": "h", "text": "Hamlet was written by Shakespeare."},
        ...            {"id": "l", "text": "Lima is the capital of Peru."}])
        >>> [[p.id for p in hits] for hits in rm.search_batch(["who wrote hamlet", "capital of peru"], k=1)]
        [['h'], ['l']]
        """
        queries = check_queries(queries, k)
        if not queries:
            return []
        token_lists = self._tokenize(list(queries), return_ids=False)
        with self._lock:
            self.num_requests += len(queries)
        return [self._complete(self._results(self._scores(self._term_ids(tokens)), k)) for tokens in token_lists]

    # -- persistence --------------------------------------------------------------------------------

    def save(self, index_dir: str | os.PathLike) -> Path:
        """Write the index to `index_dir`: bm25s arrays (.npy, no pickle) and vocab (JSON), the passages
        (JSONL + offsets), and meta.json (written last: a directory without it is not an index).

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     index_dir = BM25([{"text": "Lima is the capital of Peru."}]).save(Path(tmp) / "wiki-bm25")
        ...     sorted(p.name for p in index_dir.iterdir())
        ['bm25s', 'meta.json', 'passages.jsonl', 'passages.jsonl.offsets.npy']
        """
        index_dir = begin_index_write(index_dir)
        self._retriever.save(str(index_dir / "bm25s"), corpus=None, allow_pickle=False, show_progress=False)
        stored = write_passages(index_dir / "passages.jsonl", self.passages)
        if stored != self.fingerprint:
            raise RuntimeError(f"internal error: passages written to {index_dir} do not match the index")
        meta = {"format": INDEX_FORMAT, "fingerprint": self.fingerprint, "count": len(self.passages),
                "params": {"stemmer": self.stemmer_name, "stopwords": self.stopwords, "k1": self.k1,
                           "b": self.b, "method": self.method},
                "bm25s_version": getattr(_require_bm25s(), "__version__", "unknown")}
        write_index_meta(index_dir, meta)
        return index_dir

    @classmethod
    def load(cls, index_dir: str | os.PathLike, mmap: bool = True) -> "BM25":
        """Load an index written by `save`; with `mmap=True` the score arrays and passages stay on disk.

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     rm = BM25.load(BM25([{"id": "l", "text": "Lima is the capital of Peru."}]).save(Path(tmp) / "idx"))
        ...     len(rm), rm("capital of peru", k=1, cache=False)[0].id
        (1, 'l')
        """
        bm25s = _require_bm25s()
        index_dir = Path(index_dir)
        meta = read_index_meta(index_dir, INDEX_FORMAT, "BM25")
        self = cls.__new__(cls)
        RM.__init__(self)
        self._set_params(**meta["params"])
        self.source = str(index_dir)
        self.fingerprint = meta["fingerprint"]
        self.passages = MappedPassages(index_dir / "passages.jsonl", mmap_file=mmap)
        self._retriever = bm25s.BM25.load(str(index_dir / "bm25s"), mmap=mmap, load_corpus=False,
                                          allow_pickle=False, show_progress=False)
        n_docs = self._retriever.scores["num_docs"]
        if n_docs != meta["count"] or len(self.passages) != meta["count"]:
            raise ValueError(f"{index_dir}: the index has {n_docs} documents and {len(self.passages)} passages, "
                             f"but meta.json says {meta['count']}; the index is incomplete")
        return self

    def __repr__(self) -> str:
        return f"BM25({self.source!r}, n={len(self.passages)}, method={self.method!r}, k1={self.k1}, b={self.b})"
