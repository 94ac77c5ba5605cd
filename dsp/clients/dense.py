"""DenseRM: nearest-neighbour passage retrieval over vectorizer embeddings, on faiss.

Passages ("Title | text") are embedded with `vectorizer.embed_passages`, queries with
`embed_queries`; both are L2-normalised, so the faiss inner product is cosine similarity. Below
50,000 passages the index is exact (IndexFlatIP); from there on it is an inverted file (IndexIVFFlat)
with nlist ≈ 4·sqrt(N) centroids trained on a fixed-seed sample and `nprobe` lists searched.

>>> from dsp.clients.vectorizers import HashingVectorizer
>>> rm = DenseRM(["Paris is in France.", "Rome is in Italy."], HashingVectorizer(dim=256))
>>> rm("Rome Italy", k=1, cache=False)[0].text
'Rome is in Italy.'

An index is saved as faiss's own file + the passages (JSONL) + meta.json describing the vectorizer:

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     loaded = DenseRM.load(rm.save(Path(tmp) / "wiki-hashing"))
...     loaded.vectorizer, loaded("Rome Italy", k=1, cache=False)[0].text
(HashingVectorizer(dim=256), 'Rome is in Italy.')
"""

from __future__ import annotations

import logging
import math
import os
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..datasets.corpus import (
    CorpusError, MappedPassages, corpus_fingerprint, normalize_passages, read_passages, write_passages,
)
from ..settings import settings
from ..utils import check_positive_int, is_int
from .index_meta import begin_index_write, read_index_meta, write_index_meta
from .rm import RM, Passage, check_queries, index_name, source_name
from .vectorizers import E5Vectorizer, Vectorizer, vectorizer_from_description

__all__ = ["DenseRM", "FLAT_LIMIT", "default_nlist", "default_nprobe"]

INDEX_FORMAT = "dsp.dense/1"
FLAT_LIMIT = 50_000  # below this, exact search is fast enough and needs no training
log = logging.getLogger("dsp.dense")


def default_nlist(n: int) -> int:
    """IVF lists for `n` vectors: about 4·sqrt(n), at least 1, at most n.

    >>> default_nlist(100_000)
    1265
    """
    return max(1, min(n, round(4 * math.sqrt(n))))


def default_nprobe(nlist: int) -> int:
    """Lists searched per query: about 2·sqrt(nlist) (at least 8), a few percent of the lists.

    >>> default_nprobe(1265)
    71
    """
    return max(1, min(nlist, max(8, round(2 * math.sqrt(nlist)))))


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise ImportError("DenseRM needs faiss: pip install faiss-cpu") from None
    return faiss


def _passage_text(passage: dict[str, Any]) -> str:
    title = passage.get("title")
    return f"{title} | {passage['text']}" if title else passage["text"]


class DenseRM(RM):
    """Dense retrieval over `passages` (a JSONL(.gz) path or a list of dicts/strings) with `vectorizer`
    (default: `settings.vectorizer`, else the offline `E5Vectorizer()`).

    `index`: "auto" (flat below `FLAT_LIMIT` passages, IVF from there), "flat" or "ivf"; `nlist`
    (IVF lists, default `default_nlist(N)`), `nprobe` (lists searched, default `default_nprobe(nlist)`),
    `seed` (the IVF training sample); `source` names in-memory passages read from a file. Returns passages
    with id, title, text and score (cosine).

    >>> from dsp.clients.vectorizers import HashingVectorizer
    >>> DenseRM(["Paris is in France.", "Rome is in Italy.", "Lima is in Peru."], HashingVectorizer(dim=256))
    DenseRM('passages', n=3, index='flat', vectorizer=HashingVectorizer(dim=256))

    Over a corpus file with E5 (the [local] extra; a model, so not run as a doctest)::

        rm = DenseRM("wiki2018/passages.jsonl.gz", E5Vectorizer())
    """

    provider = "faiss"

    def __init__(self, passages: str | os.PathLike | Sequence[Any], vectorizer: Vectorizer | None = None,
                 index: str = "auto", nlist: int | None = None, nprobe: int | None = None, *,
                 seed: int = 0, duplicates: str = "error", source: str | None = None) -> None:
        super().__init__()
        self.vectorizer = self._check_vectorizer(vectorizer)
        if index not in ("auto", "flat", "ivf"):
            raise ValueError(f"index must be 'auto', 'flat' or 'ivf', got {index!r}")
        for name, value in (("nlist", nlist), ("nprobe", nprobe)):
            check_positive_int(value, name, optional=True)
        self.source = source_name(passages, source)
        if isinstance(passages, (str, os.PathLike)):
            corpus = read_passages(passages, duplicates=duplicates)
        else:
            corpus = normalize_passages(passages, source=self.source, duplicates=duplicates)
        if not corpus:
            raise CorpusError(f"{self.source}: the corpus has no passages")
        self.passages: Sequence[dict[str, Any]] = corpus
        self.fingerprint = corpus_fingerprint(corpus)
        n = len(corpus)
        self.index_kind = ("flat" if n < FLAT_LIMIT else "ivf") if index == "auto" else index
        self.seed = seed
        vectors = np.ascontiguousarray(self.vectorizer.embed_passages([_passage_text(p) for p in corpus]),
                                       dtype=np.float32)
        self.dim = int(vectors.shape[1])
        self._index_lock = threading.Lock()
        if self.index_kind == "flat":
            self.nlist, self._nprobe = None, None
            self._index = _faiss().IndexFlatIP(self.dim)
            self._index.add(vectors)
        else:
            self._build_ivf(vectors, nlist, nprobe)

    @staticmethod
    def _check_vectorizer(vectorizer: Vectorizer | None) -> Vectorizer:
        if vectorizer is None:
            # The packaged offline model is the default: it needs no server, key or download.
            vectorizer = settings.vectorizer if settings.vectorizer is not None else E5Vectorizer()
        if not isinstance(vectorizer, Vectorizer):
            raise TypeError(f"DenseRM needs a dsp Vectorizer (with embed_passages/embed_queries), "
                            f"got {type(vectorizer).__name__}")
        return vectorizer

    def _build_ivf(self, vectors: np.ndarray, nlist: int | None, nprobe: int | None) -> None:
        faiss = _faiss()
        n = len(vectors)
        self.nlist = min(nlist or default_nlist(n), n)
        self._nprobe = min(nprobe or default_nprobe(self.nlist), self.nlist)
        # faiss wants ~40-256 training points per centroid; more only slows k-means down.
        train_size = min(n, max(40 * self.nlist, 10_000))
        rng = np.random.default_rng(self.seed)
        sample = vectors if train_size == n else vectors[np.sort(rng.choice(n, train_size, replace=False))]
        quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFFlat(quantizer, self.dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = self.seed
        index.train(np.ascontiguousarray(sample))
        index.add(vectors)
        index.nprobe = self._nprobe
        self._quantizer = quantizer  # the IVF index borrows it: keep it alive as long as the index
        self._index = index

    @property
    def nprobe(self) -> int | None:
        """IVF lists searched per query (None for a flat index); settable."""
        return self._nprobe

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        if self.index_kind != "ivf":
            raise ValueError("nprobe applies to an IVF index only")
        if not is_int(value) or not 1 <= value <= self.nlist:
            raise ValueError(f"nprobe must be an integer from 1 to nlist={self.nlist}, got {value!r}")
        self._nprobe = value
        self._index.nprobe = value

    def cache_identity(self) -> dict[str, Any]:
        return {"provider": self.provider, "corpus": self.fingerprint, "vectorizer": self.vectorizer.cache_identity(),
                "index": self.index_kind, "nlist": self.nlist, "nprobe": self._nprobe,
                "seed": self.seed if self.index_kind == "ivf" else None, "fields": "title | text",
                "format": INDEX_FORMAT}

    def __len__(self) -> int:
        return len(self.passages)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "index": index_name(self.source), "passages": len(self)}

    def _hits(self, vectors: np.ndarray, k: int) -> list[list[dict[str, Any]]]:
        k = min(k, len(self.passages))
        with self._index_lock:
            scores, ids = self._index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        out = []
        for row_scores, row_ids in zip(scores.tolist(), ids.tolist()):
            # IVF returns -1 for slots it could not fill (fewer than k vectors in the probed lists).
            hits = sorted((( -s, i) for s, i in zip(row_scores, row_ids) if i >= 0))
            results = []
            for neg_score, i in hits:
                passage = dict(self.passages[i])
                passage["score"] = -neg_score
                results.append(passage)
            out.append(results)
        return out

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        if params:
            raise TypeError(f"DenseRM search takes no extra parameters, got {sorted(params)}")
        return self._hits(self.vectorizer.embed_queries([query]), k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Passage]]:
        """The top-`k` passages for each query, embedded and searched together; no disk cache, no history.

        >>> from dsp.clients.vectorizers import HashingVectorizer
        >>> rm = DenseRM(["Paris is in France.", "Rome is in Italy."], HashingVectorizer(dim=256))
        >>> [[p.text for p in hits] for hits in rm.search_batch(["Rome Italy", "Paris France"], k=1)]
        [['Rome is in Italy.'], ['Paris is in France.']]
        """
        queries = check_queries(queries, k)
        if not queries:
            return []
        with self._lock:
            self.num_requests += len(queries)
        return [self._complete(hits) for hits in self._hits(self.vectorizer.embed_queries(list(queries)), k)]

    # -- persistence --------------------------------------------------------------------------------

    def save(self, index_dir: str | os.PathLike) -> Path:
        """Write index.faiss (faiss.write_index), passages.jsonl (+ offsets) and meta.json (last).

        >>> import tempfile
        >>> from dsp.clients.vectorizers import HashingVectorizer
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     index_dir = DenseRM(["Lima is in Peru."], HashingVectorizer(dim=64)).save(Path(tmp) / "idx")
        ...     sorted(p.name for p in index_dir.iterdir())
        ['index.faiss', 'meta.json', 'passages.jsonl', 'passages.jsonl.offsets.npy']
        """
        faiss = _faiss()
        index_dir = begin_index_write(index_dir)
        faiss.write_index(self._index, str(index_dir / "index.faiss"))
        if write_passages(index_dir / "passages.jsonl", self.passages) != self.fingerprint:
            raise RuntimeError(f"internal error: passages written to {index_dir} do not match the index")
        meta = {"format": INDEX_FORMAT, "fingerprint": self.fingerprint, "count": len(self.passages),
                "dim": self.dim, "index": self.index_kind, "nlist": self.nlist, "nprobe": self._nprobe,
                "seed": self.seed, "vectorizer": self.vectorizer.describe(),
                "vectorizer_identity": self.vectorizer.cache_identity()}
        write_index_meta(index_dir, meta)
        return index_dir

    @classmethod
    def load(cls, index_dir: str | os.PathLike, vectorizer: Vectorizer | None = None, *, mmap: bool = True,
             nprobe: int | None = None) -> "DenseRM":
        """Load an index written by `save`. Without `vectorizer`, the saved description rebuilds it
        (an OpenAI key then comes from $OPENAI_API_KEY); a given one must describe the same model.

        >>> import tempfile
        >>> from dsp.clients.vectorizers import HashingVectorizer
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     rm = DenseRM.load(DenseRM(["Lima is in Peru."], HashingVectorizer(dim=64)).save(Path(tmp) / "idx"))
        ...     len(rm), rm.vectorizer
        (1, HashingVectorizer(dim=64))
        """
        faiss = _faiss()
        index_dir = Path(index_dir)
        meta = read_index_meta(index_dir, INDEX_FORMAT, "DenseRM")
        if vectorizer is None:
            vectorizer = vectorizer_from_description(meta["vectorizer"])
        elif vectorizer.describe() != meta["vectorizer"]:
            raise ValueError(f"{index_dir} was built with {meta['vectorizer']}, not {vectorizer.describe()}: "
                             "its vectors would not be comparable")
        if vectorizer.cache_identity() != meta["vectorizer_identity"]:
            log.warning("%s: the vectorizer's identity changed since the index was built (%s -> %s)",
                        index_dir, meta["vectorizer_identity"], vectorizer.cache_identity())
        self = cls.__new__(cls)
        RM.__init__(self)
        self.vectorizer = vectorizer
        self.source = str(index_dir)
        self.fingerprint, self.dim, self.seed = meta["fingerprint"], meta["dim"], meta["seed"]
        self.index_kind, self.nlist, self._nprobe = meta["index"], meta["nlist"], meta["nprobe"]
        self.passages = MappedPassages(index_dir / "passages.jsonl", mmap_file=mmap)
        flags = faiss.IO_FLAG_MMAP if mmap else 0
        self._index = faiss.read_index(str(index_dir / "index.faiss"), flags)
        self._index_lock = threading.Lock()
        if self._index.ntotal != meta["count"] or len(self.passages) != meta["count"] or self._index.d != self.dim:
            raise ValueError(f"{index_dir}: index ({self._index.ntotal} vectors of {self._index.d}-d) and passages "
                             f"({len(self.passages)}) do not match meta.json ({meta['count']} of {self.dim}-d)")
        if self.index_kind == "ivf":
            self._index.nprobe = self._nprobe
            if nprobe is not None:
                self.nprobe = nprobe
        return self

    def __repr__(self) -> str:
        extra = f", nlist={self.nlist}, nprobe={self._nprobe}" if self.index_kind == "ivf" else ""
        return f"DenseRM({self.source!r}, n={len(self.passages)}, index={self.index_kind!r}{extra}, vectorizer={self.vectorizer!r})"
