"""ColBERTLocal: search a ColBERT (PLAID) index in-process with colbert-ai, no server needed.

Needs the ``[colbert]`` extra (torch, colbert-ai, faiss-cpu; `transformers<5`). colbert-ai is
imported on first use, not with dsp: it is heavy, and importing it switches the process's
multiprocessing start method to "spawn". Its first search in a fresh environment compiles four small
C++ extensions (about a minute each time torch's extension cache is empty; a C++ compiler is needed).

Build an index from a passages file (``{id, title, text}`` JSONL, optionally gzipped) or a list, then
search it. Passages are indexed as ``"Title | text"``, as in ColBERTv2's Wikipedia collections (the
[colbert] extra and a checkpoint, so shown as code, not run as a doctest)::

    ColBERTLocal.build_index("passages.jsonl.gz", "index/wiki-colbert", "models/colbertv2.0")
    rm = ColBERTLocal("index/wiki-colbert", "models/colbertv2.0")
    rm("Who wrote Hamlet?", k=3)[0].long_text       # 'Hamlet | The Tragedy of Hamlet, Prince of Denmark, ...'

An index directory holds ``colbert/`` (colbert-ai's own files, written and read by colbert-ai), the
passages (``passages.jsonl`` + offsets) and ``meta.json`` (written last: without it a directory is
not a finished index). A ColBERT index built elsewhere (e.g. ColBERTv2's released wiki17 index)
works too: pass its directory and its `collection` (ColBERT's ``collection.tsv`` or a passages file).
colbert-ai stores its tensors with `torch.save`, which unpickles on load: open only indexes you trust.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import threading
import time
import uuid
from contextlib import contextmanager
from hashlib import sha256
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..datasets.corpus import (
    CorpusError, MappedPassages, corpus_fingerprint, normalize_passages, read_passages, write_passages,
)
from ..utils import check_positive_int, is_number
from .index_meta import META_NAME, begin_index_write, read_index_meta, write_index_meta
from .rm import RM, index_name

__all__ = ["ColBERTLocal", "INDEX_FORMAT", "COLBERT_INSTALL_HINT", "check_extension_locks"]

log = logging.getLogger("dsp.colbert")

INDEX_FORMAT = "dsp-colbert-index/1"
COLBERT_INSTALL_HINT = ("pip install torch==2.13.0 colbert-ai==0.2.22 'transformers<5' faiss-cpu "
                        "(install torch first, from a CPU wheel where there is no GPU), or pip install 'dsp[colbert]'")
_SEARCH_SETTINGS = ("ncells", "centroid_score_threshold", "ndocs")


def _colbert() -> Any:
    """The colbert package, or an ImportError saying how to install it."""
    try:
        import colbert  # noqa: F401  (heavy; see the module docstring)
        import colbert.data
        import colbert.infra
    except ImportError as error:
        raise ImportError(f"ColBERTLocal needs colbert-ai ({error}); {COLBERT_INSTALL_HINT}") from None
    return colbert


# colbert-ai's C++ extensions, which torch compiles on first use under a lock file in its build cache.
_EXTENSIONS = ("decompress_residuals_cpp", "filter_pids_cpp", "packbits_cpp", "segmented_lookup_cpp",
               "segmented_maxsim_cpp")
STALE_BUILD_SECONDS = 600  # a build here takes under a minute; a lock older than this with no activity is stale


def _extension_build_root() -> Path:
    """Where torch builds C++ extensions: TORCH_EXTENSIONS_DIR, else its default cache directory."""
    configured = os.environ.get("TORCH_EXTENSIONS_DIR")
    if configured:
        return Path(configured)
    from torch.utils.cpp_extension import get_default_build_root
    return Path(get_default_build_root())


def check_extension_locks(root: Path | None = None, *, now: float | None = None) -> None:
    """Refuse to wait on a build lock that a killed build left behind: torch would wait on it forever.

    A lock counts as stale when neither it nor anything else in its extension's build directory has
    changed for `STALE_BUILD_SECONDS`. The error names the file; deleting it is the fix.

    >>> check_extension_locks(Path("/nonexistent"))  # nothing built yet: nothing to refuse
    """
    root = _extension_build_root() if root is None else Path(root)
    now = time.time() if now is None else now
    for name in _EXTENSIONS:
        # TORCH_EXTENSIONS_DIR holds the extension folders directly; the default root adds a py311_cpu level.
        for lock in [root / name / "lock", *root.glob(f"*/{name}/lock")]:
            try:
                last_change = max([lock.stat().st_mtime, *(entry.stat().st_mtime for entry in lock.parent.iterdir())])
            except FileNotFoundError:
                continue  # no lock, or released while we looked
            if now - last_change > STALE_BUILD_SECONDS:
                minutes = (now - last_change) / 60
                raise RuntimeError(f"{lock}: torch's build lock for colbert-ai's {name} extension has not "
                                   f"changed for {minutes:.0f} minutes; a build that was killed left it, and "
                                   "torch would wait on it forever. Delete the file if no other process is "
                                   "building it.")


@contextmanager
def _run_context(index_root: Path) -> Iterator[None]:
    """colbert-ai's run context: one process, no fork, and any run files kept inside the index directory."""
    infra = _colbert().infra
    check_extension_locks()
    config = infra.RunConfig(nranks=1, avoid_fork_if_possible=True, index_root=str(index_root),
                             root=str(index_root / "colbert-run"), experiment="dsp")
    with infra.Run().context(config):
        yield


def _passage_text(passage: dict[str, Any]) -> str:
    title = passage.get("title")
    return f"{title} | {passage['text']}" if title else passage["text"]


def _checkpoint_identity(checkpoint: str) -> dict[str, Any]:
    """What the cache needs to tell checkpoints apart: the name, and for a local folder its files' sizes."""
    path = Path(checkpoint)
    if not path.is_dir():
        return {"name": checkpoint}
    digest = sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path)}\0{file.stat().st_size}\n".encode())
    return {"name": path.name, "files": digest.hexdigest()[:16]}


def _resolve_checkpoint(checkpoint: str | os.PathLike) -> str:
    if not isinstance(checkpoint, (str, os.PathLike)) or not str(checkpoint).strip():
        raise ValueError(f"checkpoint must be the path of a ColBERTv2 checkpoint directory, got {checkpoint!r}")
    path = Path(checkpoint).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"checkpoint {path} has no config.json: not a ColBERT/BERT model directory")
        if not (path / "artifact.metadata").is_file():
            log.warning("%s is not a ColBERT checkpoint (no artifact.metadata): its projection layer is random "
                        "and drawn anew at every load, so an index and later searches will not agree; "
                        "pass a ColBERTv2 checkpoint such as a local copy of colbert-ir/colbertv2.0", path)
        return str(path.resolve())  # an absolute path is never mistaken for a hub name
    text = str(checkpoint)
    if path.exists() or text.startswith((".", "/", "~")) or text.count("/") != 1:
        raise FileNotFoundError(f"checkpoint {text!r} is not a model directory (pass a local copy of a "
                                "ColBERTv2 checkpoint, e.g. colbert-ir/colbertv2.0 downloaded beforehand)")
    return text  # a hub name such as "colbert-ir/colbertv2.0": colbert-ai resolves it (needs network)


def _read_tsv_collection(path: Path) -> list[dict[str, Any]]:
    """ColBERT's collection.tsv: `pid \\t text [\\t title]` per line, pids counting lines from 0."""
    passages = []
    with open(path, encoding="utf-8", newline="") as handle:
        for line_no, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if line_no == 1 and row and row[0] == "id":
                continue  # an optional header
            if len(row) < 2 or not row[0].strip().isdigit():
                raise CorpusError(f"{path}, line {line_no}: expected 'pid<TAB>text[<TAB>title]', got {row!r:.80}")
            if int(row[0]) != len(passages):
                raise CorpusError(f"{path}, line {line_no}: pid {row[0]} out of order (ColBERT pids count lines "
                                  f"from 0; expected {len(passages)})")
            passages.append({"id": int(row[0]), "title": row[2] if len(row) > 2 else "", "text": row[1]})
    return passages


def _load_collection(collection: str | os.PathLike | Sequence[Any]) -> Sequence[dict[str, Any]]:
    if isinstance(collection, (str, os.PathLike)):
        path = Path(collection).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"collection not found: {path}")
        return _read_tsv_collection(path) if path.suffix == ".tsv" else read_passages(path)
    return normalize_passages(collection, source="collection")


class ColBERTLocal(RM):
    """Late-interaction retrieval over a local ColBERT index, with colbert-ai's `Searcher`.

    `index_dir` is a directory built by `ColBERTLocal.build_index` (or a bare colbert-ai index with
    its `collection`). `checkpoint` must be a real ColBERTv2 checkpoint: the path of a local copy of
    ``colbert-ir/colbertv2.0`` (or a checkpoint you trained), the one the index was built with. A
    plain BERT folder also loads, with a warning: colbert-ai gives it a random projection layer at
    each load, so its rankings are arbitrary and differ between the index and the searcher.
    `collection` (a passages file, ColBERT's
    ``collection.tsv``, or a list) overrides the passages stored in the index, in pid order.
    `ncells`, `centroid_score_threshold`, `ndocs` fix PLAID's search settings; by default colbert-ai
    picks them per call from k.

    Passages carry `id` (the passage's id from the file, or its line number), `title`, `text`, `score`
    (ColBERT's MaxSim score), and from the base class `long_text` ("Title | text"), `rank`, `prob`.

    For example (the [colbert] extra and a built index, so not run as a doctest)::

        rm = ColBERTLocal("index/wiki-colbert", "models/colbertv2.0")
        [p.id for p in rm("Hamlet author", k=2)]                          # ['wiki17-1178', 'wiki17-90544']
    """

    provider = "colbert-local"

    def __init__(self, index_dir: str | os.PathLike, checkpoint: str | os.PathLike,
                 collection: str | os.PathLike | Sequence[Any] | None = None, *, ncells: int | None = None,
                 centroid_score_threshold: float | None = None, ndocs: int | None = None) -> None:
        super().__init__()
        self.index_dir = Path(index_dir).expanduser()
        if not self.index_dir.is_dir():
            raise FileNotFoundError(f"ColBERT index directory not found: {self.index_dir}")
        self.checkpoint = _resolve_checkpoint(checkpoint)
        for name, value in (("ncells", ncells), ("ndocs", ndocs)):
            check_positive_int(value, name, optional=True)
        if centroid_score_threshold is not None and not is_number(centroid_score_threshold):
            raise ValueError(f"centroid_score_threshold must be a number or None, got {centroid_score_threshold!r}")
        self.search_settings = {"ncells": ncells, "centroid_score_threshold": centroid_score_threshold,
                                "ndocs": ndocs}

        if (self.index_dir / META_NAME).is_file():
            meta = read_index_meta(self.index_dir, INDEX_FORMAT, "ColBERTLocal")
            self.colbert_dir = self.index_dir / "colbert"
            index_id = meta["index_id"]
            if meta.get("checkpoint_name") not in (None, Path(self.checkpoint).name):
                log.warning("%s was built with checkpoint %r, searched with %r: scores will not be comparable",
                            self.index_dir, meta["checkpoint_name"], Path(self.checkpoint).name)
            if collection is None:
                self.passages: Sequence[dict[str, Any]] = MappedPassages(self.index_dir / "passages.jsonl")
                self.fingerprint = meta["fingerprint"]
            else:
                self.passages = _load_collection(collection)
                self.fingerprint = corpus_fingerprint(self.passages)
        else:
            # A bare colbert-ai index (its metadata.json and plan.json at the top) and its collection.
            self.colbert_dir = self.index_dir
            if not (self.index_dir / "metadata.json").is_file():
                raise FileNotFoundError(f"{self.index_dir} is not a ColBERT index: it has neither meta.json (built "
                                        "by ColBERTLocal.build_index) nor colbert-ai's metadata.json")
            if collection is None:
                raise ValueError(f"{self.index_dir} is a bare colbert-ai index: pass its collection "
                                 "(collection.tsv or a passages file) as collection=...")
            self.passages = _load_collection(collection)
            self.fingerprint = corpus_fingerprint(self.passages)
            digest = sha256()
            for name in ("metadata.json", "plan.json"):
                if (self.index_dir / name).is_file():
                    digest.update((self.index_dir / name).read_bytes())
            index_id = digest.hexdigest()[:32]
        self.index_id = index_id
        self._checkpoint_identity = _checkpoint_identity(self.checkpoint)  # once: it lists the model's files
        self._count_in_index = self._colbert_passage_count()
        if self._count_in_index is not None and self._count_in_index != len(self.passages):
            raise ValueError(f"{self.colbert_dir} indexes {self._count_in_index} passages but the collection has "
                             f"{len(self.passages)}: pass the collection the index was built from")
        self._search_lock = threading.Lock()
        self._searcher = self._load_searcher()

    def _colbert_passage_count(self) -> int | None:
        """How many passages colbert-ai indexed (sum of its per-chunk doclens files), if readable."""
        files = sorted(self.colbert_dir.glob("doclens.*.json"))
        if not files:
            return None
        try:
            return sum(len(json.loads(f.read_text(encoding="utf-8"))) for f in files)
        except (OSError, ValueError):
            return None

    def _load_searcher(self) -> Any:
        colbert = _colbert()
        config = colbert.infra.ColBERTConfig(**{k: v for k, v in self.search_settings.items() if v is not None})
        # colbert-ai never reads passage texts to search (dsp maps its pids to self.passages), but it
        # loads the collection named in the index metadata and deep-copies its config, collection included.
        # A one-item stand-in avoids reading (and copying) a possibly huge collection for nothing.
        stand_in = colbert.data.Collection(data=["(passages are held by dsp.ColBERTLocal)"])
        with _run_context(self.colbert_dir.parent):
            return colbert.Searcher(index=str(self.colbert_dir.resolve()), checkpoint=self.checkpoint,
                                    collection=stand_in, config=config, verbose=1)

    def cache_identity(self) -> dict[str, Any]:
        return {"provider": self.provider, "index": self.index_id, "corpus": self.fingerprint,
                "checkpoint": self._checkpoint_identity, "search": dict(self.search_settings)}

    def __len__(self) -> int:
        return len(self.passages)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "index": index_name(self.index_dir), "passages": len(self)}

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        if params:
            raise TypeError(f"ColBERTLocal search takes no extra parameters, got {sorted(params)}")
        k = min(k, len(self.passages))
        with self._search_lock:  # a Searcher keeps per-call settings on itself: one search at a time
            # colbert-ai fills unset PLAID settings from the first call's k and keeps them; unset them
            # again so that every call gets the settings for its own k, as a fresh Searcher would.
            self._searcher.configure(**self.search_settings)
            pids, _ranks, scores = self._searcher.search(query, k=k)
        results = []
        for pid, score in zip(list(pids)[:k], list(scores)[:k]):
            passage = dict(self.passages[int(pid)])
            passage["score"] = float(score)
            results.append(passage)
        return results

    # -- building -----------------------------------------------------------------------------------

    @classmethod
    def build_index(cls, passages: str | os.PathLike | Sequence[Any], index_dir: str | os.PathLike,
                    checkpoint: str | os.PathLike, *, nbits: int = 2, doc_maxlen: int = 220,
                    kmeans_niters: int = 4, overwrite: bool = False, duplicates: str = "error",
                    **colbert_config: Any) -> Path:
        """Encode `passages` (a JSONL(.gz) file of `{id, title, text}` or a list) with `checkpoint` into
        a new index at `index_dir`; returns `index_dir`. `nbits` (residual compression bits),
        `doc_maxlen` (tokens kept per passage), `kmeans_niters` and any other `colbert_config` go to
        colbert-ai's `ColBERTConfig`. An existing index is replaced only with `overwrite=True`.

        For example (the [colbert] extra and a checkpoint, so not run as a doctest),
        ``ColBERTLocal.build_index("passages.jsonl.gz", "index/wiki-colbert", "models/colbertv2.0")`` is
        ``PosixPath('index/wiki-colbert')``.
        """
        colbert = _colbert()
        checkpoint = _resolve_checkpoint(checkpoint)
        source = str(passages) if isinstance(passages, (str, os.PathLike)) else "passages"
        corpus = _load_collection(passages) if isinstance(passages, (str, os.PathLike)) else \
            normalize_passages(passages, duplicates=duplicates)
        if not corpus:
            raise CorpusError(f"{source}: the corpus has no passages")
        index_dir = Path(index_dir).expanduser()
        ours = [index_dir / META_NAME, index_dir / "colbert", index_dir / "passages.jsonl"]
        if any(p.exists() for p in ours) and not overwrite:
            raise FileExistsError(f"{index_dir} already holds an index; pass overwrite=True to replace it")
        begin_index_write(index_dir)

        config = colbert.infra.ColBERTConfig(nbits=nbits, doc_maxlen=doc_maxlen, kmeans_niters=kmeans_niters,
                                             **colbert_config)
        with _run_context(index_dir):
            indexer = colbert.Indexer(checkpoint=checkpoint, config=config, verbose=1)
            # "force_silent_overwrite" clears old files without colbert-ai's 20-second warning pause.
            indexer.index(name="colbert", collection=[_passage_text(p) for p in corpus],
                          overwrite="force_silent_overwrite")
        fingerprint = write_passages(index_dir / "passages.jsonl", corpus)
        meta = {"format": INDEX_FORMAT, "index_id": uuid.uuid4().hex, "fingerprint": fingerprint,
                "count": len(corpus), "checkpoint_name": Path(checkpoint).name,
                "params": {"nbits": nbits, "doc_maxlen": doc_maxlen, "kmeans_niters": kmeans_niters,
                           **{k: v for k, v in colbert_config.items() if isinstance(v, (int, float, str, bool))}},
                "colbert_ai_version": _version("colbert-ai")}
        write_index_meta(index_dir, meta)
        log.info("built a ColBERT index of %d passages at %s", len(corpus), index_dir)
        return index_dir

    def __repr__(self) -> str:
        return f"ColBERTLocal({str(self.index_dir)!r}, {Path(self.checkpoint).name!r}, n={len(self.passages)})"


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"
