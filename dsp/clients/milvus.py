"""MilvusRM: passages in a Milvus collection, searched by Milvus's own BM25, by dense vectors, or by both fused.

The same `pymilvus` client talks to Milvus Lite (a local database: a path ending in ``.db``, served inside
this process) and to a Milvus Standalone or Distributed server (``http://host:19530``, its token from
$MILVUS_TOKEN, never from a spec or a file), so what is tested on a laptop is what a cluster runs.

>>> import tempfile
>>> from dsp.clients.vectorizers import HashingVectorizer
>>> passages = [{"id": "h", "title": "Hamlet", "text": "A tragedy by William Shakespeare."},
...             {"id": "p", "title": "Paris", "text": "The capital and largest city of France."}]
>>> with tempfile.TemporaryDirectory() as tmp:
...     rm = MilvusRM.build(passages, f"{tmp}/wiki.db", mode="hybrid", vectorizer=HashingVectorizer(dim=64))
...     print([(p.id, p.title) for p in rm("who wrote hamlet", k=1, cache=False)],
...           [p.id for p in MilvusRM(f"{tmp}/wiki.db", mode="bm25")("capital of France", k=2, cache=False)])
...     rm.close()
[('h', 'Hamlet')] ['p', 'h']

A collection holds every passage once, keyed by its corpus position (`pos`): title, text, id and other
fields (JSON), and what its mode searches: `terms` with `sparse` (Milvus's BM25 function over `terms`),
`dense` (the vectorizer's vectors, inner product), or both. Its property ``dsp.index`` records the corpus
fingerprint and size, the analysis, the vectorizer and whether the ingest finished: another corpus is
refused, an unfinished ingest resumes (`MilvusRM.build`, `dsp index --backend milvus`).

`terms` holds the words of "title text" as dsp.BM25 counts them (bm25s's tokens, Lucene's English stop
words dropped, Snowball stems), space-separated, and a query is cut the same way: Milvus's BM25 (k1 1.5,
b 0.75, as dsp.BM25) ranks dsp.BM25's words, alike on Milvus Lite (no stemmer) and on a server (other
analyzers). Milvus Lite serves one process at a time; for several (Ray workers), use a server.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from ..datasets.corpus import CorpusError, corpus_fingerprint, iter_passages, normalize_passages
from ..settings import settings
from ..utils import check_positive_int, is_number
from .rm import RM, Passage, check_queries, source_name
from .vectorizers import E5Vectorizer, Vectorizer, vectorizer_from_description

__all__ = ["MilvusRM", "MilvusUnavailable", "check_uri", "check_collection", "check_weight", "is_server_uri", "MODES", "FUSIONS",
           "DEFAULT_COLLECTION", "TOKEN_ENV"]

INDEX_FORMAT = "dsp.milvus/1"
MODES = ("bm25", "dense", "hybrid")
FUSIONS = ("rrf", "weighted")  # Milvus's own rankers: RRFRanker(60), WeightedRanker(w, 1 - w)
DEFAULT_COLLECTION = "passages"
TOKEN_ENV = "MILVUS_TOKEN"
RRF_K = 60
_FIELDS = {"bm25": {"sparse"}, "dense": {"dense"}, "hybrid": {"sparse", "dense"}}
_PROPERTY = "dsp.index"   # the collection property holding the index's description (JSON)
_MAX_BYTES = 65_535       # the largest Milvus VARCHAR
_WINDOW = 8_192           # largest batch: a resume reads the keys of two batches in one query (Milvus: 16,384 rows)
_OUTPUT = ["pos", "title", "text", "meta"]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_BM25 = {"k1": 1.5, "b": 0.75}  # dsp.BM25's defaults
# How `terms` is made (dsp.BM25's defaults), and how Milvus splits it: at spaces, nothing more.
_ANALYZER = {"terms": "bm25s", "stemmer": "english", "stopwords": "en",
             "milvus": {"tokenizer": "standard", "filter": ["lowercase"]}}


def _terms(texts: list[str]) -> list[str]:
    """Each text's BM25 terms, space-separated, as dsp.BM25 cuts them (a stemmer per call: PyStemmer's are
    not thread-safe, and one costs microseconds)."""
    import bm25s
    import Stemmer

    tokens = bm25s.tokenize(texts, stopwords=_ANALYZER["stopwords"], stemmer=Stemmer.Stemmer(_ANALYZER["stemmer"]),
                            return_ids=False, show_progress=False)
    return [" ".join(words) for words in tokens]


class MilvusUnavailable(ConnectionError):
    """Milvus cannot be reached (a server) or opened (a Milvus Lite database); the message names the URI."""


def _pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError:
        raise ImportError('dsp.MilvusRM needs pymilvus and milvus-lite: pip install -e ".[milvus]"') from None
    return pymilvus


def is_server_uri(uri: str) -> bool:
    """True for a server address (http:// or https://), False for a Milvus Lite database path."""
    return uri.startswith(("http://", "https://"))


def check_uri(uri: Any, *, exists: bool = True) -> str:
    """`uri` if it names Milvus: a server (``http(s)://host[:port]``, no credentials in it: they come from
    $MILVUS_TOKEN) or a Milvus Lite database (a path ending in ``.db``; it must exist unless `exists=False`).

    >>> check_uri("http://root:secret@milvus.internal:19530")
    Traceback (most recent call last):
    ValueError: a Milvus URI carries no credentials (http://***@milvus.internal:19530): give the token in $MILVUS_TOKEN
    """
    from .retry import redact_urls

    if not isinstance(uri, str) or not uri.strip():
        raise ValueError(f"a Milvus URI must be a database path or a server address, got {uri!r}")
    if "://" in uri:
        parts = urlsplit(uri)
        if parts.username is not None or parts.password is not None or parts.query:
            raise ValueError(f"a Milvus URI carries no credentials ({redact_urls(uri)}): give the token in ${TOKEN_ENV}")
        try:
            parts.port
        except ValueError:
            raise ValueError(f"{uri}: the port is not a number") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{uri} is not a Milvus server address (http://host:19530)")
        return uri
    if not uri.endswith(".db"):
        raise ValueError(f"{uri} is neither a Milvus Lite database (a path ending in .db) nor a server address "
                         "(http://host:19530)")
    if exists and not Path(uri).expanduser().exists():
        raise ValueError(f"{uri}: no Milvus Lite database there (build one: dsp index --backend milvus --out {uri})")
    return uri


def check_collection(collection: Any) -> str:
    """`collection` if it is a Milvus collection name (a letter or _, then letters, digits or _).

    >>> check_collection("wiki_2018")
    'wiki_2018'
    """
    if not isinstance(collection, str) or not _NAME.fullmatch(collection):
        raise ValueError(f"collection must be a Milvus collection name (a letter or _, then letters, digits or _), "
                         f"got {collection!r}")
    return collection


def _check_choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be {' or '.join(allowed)}, got {value!r}")


def check_weight(weight: Any) -> float:
    """`weight` (the BM25 list's share in a weighted hybrid search) if it is a number from 0 to 1."""
    if not is_number(weight) or not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be a number from 0 to 1, got {weight!r}")
    return float(weight)


def _connect(uri: str, timeout: float) -> Any:
    """A MilvusClient for `uri`: Milvus Lite for a .db path (absolute, so every client of it shares one
    server), else the server with the token of $MILVUS_TOKEN."""
    pymilvus = _pymilvus()
    if is_server_uri(uri):
        target, kwargs = uri, {"token": os.environ.get(TOKEN_ENV, ""), "timeout": timeout}
    else:
        target, kwargs = str(Path(uri).expanduser().resolve()), {}
    try:
        return pymilvus.MilvusClient(uri=target, **kwargs)
    except pymilvus.MilvusException as error:
        hint = "" if is_server_uri(uri) else (" (Milvus Lite serves one process at a time: another process may "
                                              "hold it; for several processes, run a Milvus server)")
        raise MilvusUnavailable(f"cannot reach Milvus at {uri}: {error.message}{hint}") from None


def _read_meta(client: Any, collection: str, uri: str) -> dict[str, Any]:
    if not client.has_collection(collection):
        raise ValueError(f"{uri} has no collection {collection!r}; build it: dsp index --backend milvus "
                         f"--passages FILE --out {uri},collection={collection}")
    text = (client.describe_collection(collection).get("properties") or {}).get(_PROPERTY) or "null"
    try:
        meta = json.loads(text)
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != INDEX_FORMAT:
        raise ValueError(f"collection {collection!r} at {uri} is not a {INDEX_FORMAT} passage index "
                         f"(its {_PROPERTY} property is missing or unreadable)")
    return meta


def _load(client: Any, collection: str) -> None:
    """Load the collection for search unless it is loaded: one an operator loaded with replicas is left as it
    is (a server refuses to load it again with another replica number)."""
    from pymilvus.client.types import LoadState

    if client.get_load_state(collection)["state"] != LoadState.Loaded:
        client.load_collection(collection)


def _check_vectorizer(vectorizer: Vectorizer | None, meta: Mapping[str, Any], where: str) -> Vectorizer:
    if vectorizer is None:
        return vectorizer_from_description(meta["vectorizer"])
    if vectorizer.describe() != meta["vectorizer"]:
        raise ValueError(f"{where} was built with {meta['vectorizer']}, not {vectorizer.describe()}: "
                         "its vectors would not be comparable")
    return vectorizer


def _count(client: Any, collection: str) -> int:
    rows = client.query(collection, filter="", output_fields=["count(*)"], consistency_level="Strong")
    return int(rows[0]["count(*)"])


class MilvusRM(RM):
    """Search the passages of `collection` at `uri` (a Milvus Lite ``.db`` path or ``http://host:19530``).

    `mode`: "bm25" (Milvus's BM25 over "title text"), "dense" (the collection's vectorizer, inner product
    of unit vectors) or "hybrid" (both lists of `depth` passages, default 3k, fused by Milvus's
    `hybrid_search`: `fuse` "rrf" or "weighted", `weight` the BM25 list's share); default: what the
    collection was built for. `vectorizer` must describe the one the collection was built with (default:
    rebuilt from its description). Returns passages with id, title, text, the corpus's other fields and
    score; in bm25 mode, a query sharing words with fewer than k passages gets the rest in corpus order
    with score 0, as from dsp.BM25. Build a collection with `MilvusRM.build`.
    """

    provider = "milvus"

    def __init__(self, uri: str, collection: str = DEFAULT_COLLECTION, mode: str | None = None, *,
                 fuse: str = "rrf", weight: float = 0.5, depth: int | None = None,
                 vectorizer: Vectorizer | None = None, timeout: float = 10.0) -> None:
        super().__init__()
        self.uri, self.collection = check_uri(uri), check_collection(collection)
        _check_choice("mode", mode or "bm25", MODES)
        _check_choice("fuse", fuse, FUSIONS)
        check_positive_int(depth, "depth", optional=True)
        self.fuse, self.weight, self.depth = fuse, check_weight(weight), depth
        self._client = _connect(uri, timeout)
        meta = _read_meta(self._client, collection, uri)
        where = f"collection {collection!r} at {uri}"
        if meta.get("state") != "complete":
            raise ValueError(f"{where} is unfinished ({_count(self._client, collection):,} of {meta['count']:,} "
                             "passages): run its dsp index command again to finish it")
        self.mode = mode or meta["mode"]
        if not _FIELDS[self.mode] <= _FIELDS[meta["mode"]]:
            raise ValueError(f"{where} was built for {meta['mode']} search; mode {self.mode} needs a collection "
                             f"built with mode={self.mode} or hybrid")
        self.meta, self.fingerprint, self.count = meta, meta["fingerprint"], int(meta["count"])
        self.vectorizer = None if self.mode == "bm25" else _check_vectorizer(vectorizer, meta, where)
        if meta["analyzer"] != _ANALYZER:
            raise ValueError(f"{where} was built with the analyzer {meta['analyzer']}; this dsp cuts queries with "
                             f"{_ANALYZER}: rebuild it")
        _load(self._client, collection)

    # -- search -------------------------------------------------------------------------------------

    def cache_identity(self) -> dict[str, Any]:
        identity = {"provider": self.provider, "corpus": self.fingerprint, "mode": self.mode,
                    # Lite and a server are two implementations of BM25 and of the indexes: kept apart.
                    "engine": "server" if is_server_uri(self.uri) else "lite", "format": INDEX_FORMAT}
        if self.mode != "dense":
            identity.update(analyzer=self.meta["analyzer"], bm25=self.meta["bm25"])
        if self.vectorizer is not None:
            identity.update(vectorizer=self.vectorizer.cache_identity(), dense_index=self.meta["dense_index"])
        if self.mode == "hybrid":
            identity.update(fuse=self.fuse, weight=self.weight if self.fuse == "weighted" else None, depth=self.depth)
        return identity

    def __len__(self) -> int:
        return self.count

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "index": self.collection, "passages": self.count}

    def _passages(self, hits: Sequence[Any], bm25: bool = False) -> list[dict[str, Any]]:
        out = []
        for hit in hits:
            entity, fields = hit["entity"], dict(hit["entity"]["meta"])
            # Milvus Lite reports BM25 negated (a distance), a server as a score: BM25 is never negative.
            out.append({"id": fields.pop("id"), "title": entity["title"], "text": entity["text"], **fields,
                        "score": abs(float(hit["distance"])) if bm25 else float(hit["distance"])})
        return out

    def _bm25_passages(self, hits: Sequence[Any], k: int) -> list[dict[str, Any]]:
        """The hits, then passages sharing no word with the query, in corpus order with score 0, up to k (as
        dsp.BM25 ranks them)."""
        passages = self._passages(hits, bm25=True)
        want = min(k, self.count) - len(passages)
        if want > 0:
            found = {hit["entity"]["pos"] for hit in hits}
            rows = self._client.query(self.collection, filter=f"pos < {want + len(found)}", output_fields=_OUTPUT,
                                      limit=want + len(found), consistency_level="Strong")
            rest = [row for row in sorted(rows, key=lambda r: r["pos"]) if row["pos"] not in found][:want]
            passages += self._passages([{"entity": row, "distance": 0.0} for row in rest])
        return passages

    def _hits(self, queries: list[str], k: int) -> list[list[dict[str, Any]]]:
        words = _terms(queries) if self.mode != "dense" else queries
        if self.mode == "bm25":
            asked = [w for w in words if w]  # a query of stop words only has no term to score
            found = iter(self._search_field("sparse", asked, k, "BM25") if asked else [])
            return [self._bm25_passages(next(found) if w else [], k) for w in words]
        vectors = self.vectorizer.embed_queries(queries).tolist()
        if self.mode == "dense":
            return [self._passages(hits) for hits in self._search_field("dense", vectors, k, "IP")]
        # A query without BM25 terms is searched by its vector alone.
        return [self._hybrid(w, v, k) if w else self._passages(self._search_field("dense", [v], k, "IP")[0])
                for w, v in zip(words, vectors)]

    def _search_field(self, field: str, data: list[Any], k: int, metric: str) -> Any:
        return self._client.search(self.collection, data=data, anns_field=field, limit=k, output_fields=_OUTPUT,
                                   search_params={"metric_type": metric})

    def _hybrid(self, words: str, vector: list[float], k: int) -> list[dict[str, Any]]:
        pymilvus = _pymilvus()
        depth = max(self.depth or 3 * k, k)
        requests = [pymilvus.AnnSearchRequest(data=[words], anns_field="sparse", param={"metric_type": "BM25"},
                                              limit=depth),
                    pymilvus.AnnSearchRequest(data=[vector], anns_field="dense", param={"metric_type": "IP"},
                                              limit=depth)]
        ranker = (pymilvus.RRFRanker(RRF_K) if self.fuse == "rrf"
                  else pymilvus.WeightedRanker(self.weight, 1.0 - self.weight))
        results = self._client.hybrid_search(self.collection, reqs=requests, ranker=ranker, limit=k,
                                             output_fields=_OUTPUT)
        return self._passages(results[0])

    def _search(self, query: str, k: int, **params: Any) -> list[dict[str, Any]]:
        if params:
            raise TypeError(f"MilvusRM search takes no extra parameters, got {sorted(params)}")
        return self._hits([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Passage]]:
        """The top-`k` passages for each query, sent to Milvus together (for evaluations); no disk cache and no
        history. The same results as `rm(query, k)`."""
        queries = check_queries(queries, k)
        if not queries:
            return []
        with self._lock:
            self.num_requests += len(queries)
        return [self._complete(hits) for hits in self._hits(queries, k)]

    def close(self) -> None:
        """Close the connection; for Milvus Lite, also stop this process's server of the database (and so
        every client of it here), which frees it for another process."""
        self._client.close()
        if not is_server_uri(self.uri):
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(str(Path(self.uri).expanduser().resolve()))

    def __repr__(self) -> str:
        return f"MilvusRM({self.uri!r}, collection={self.collection!r}, mode={self.mode!r}, n={self.count})"

    # -- building -----------------------------------------------------------------------------------

    @classmethod
    def build(cls, passages: str | os.PathLike | Sequence[Any], uri: str, collection: str = DEFAULT_COLLECTION,
              mode: str = "bm25", *, vectorizer: Vectorizer | None = None, batch_size: int = 1000,
              progress: bool = False, dense_index: str = "AUTOINDEX", shards: int = 1) -> "MilvusRM":
        """Put `passages` (a JSONL(.gz) file, streamed, or a list) into `collection` at `uri` for `mode` search
        and return the RM over it. Batches of `batch_size` passages go in as they are read (and embedded by
        `vectorizer`, default settings.vectorizer or E5, for dense and hybrid, into a `dense_index` Milvus
        index; `shards` spread a server's writes). Rerun after an interruption, it adds only the passages
        missing; a collection of another corpus or other settings is refused, naming the difference."""
        _check_choice("mode", mode, MODES)
        if not isinstance(batch_size, int) or not 1 <= batch_size <= _WINDOW:
            raise ValueError(f"batch_size must be an integer from 1 to {_WINDOW}, got {batch_size!r}")
        check_uri(uri, exists=False)
        check_collection(collection)
        check_positive_int(shards, "shards")
        source = source_name(passages)
        read = _reader(passages, source)
        fingerprint, count = _survey(read, source)
        meta = {"format": INDEX_FORMAT, "fingerprint": fingerprint, "count": count, "mode": mode,
                "analyzer": _ANALYZER, "bm25": _BM25, "vectorizer": None, "vectorizer_identity": None,
                "dim": None, "dense_index": None}
        if mode != "bm25":
            if vectorizer is None:  # the packaged offline model, as DenseRM's default
                vectorizer = settings.vectorizer if settings.vectorizer is not None else E5Vectorizer()
            meta.update(vectorizer=vectorizer.describe(), vectorizer_identity=vectorizer.cache_identity(),
                        dim=vectorizer.dim or int(vectorizer.embed_passages(["dimension"]).shape[1]),
                        dense_index=dense_index)
        if not is_server_uri(uri):
            Path(uri).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        client = _connect(uri, 10.0)
        try:
            if _prepare(client, collection, meta, uri, shards):
                _ingest(client, collection, read, meta, vectorizer if mode != "bm25" else None, batch_size, progress)
        finally:
            client.close()
        return cls(uri, collection, mode, vectorizer=vectorizer if mode != "bm25" else None)


# -- ingest -------------------------------------------------------------------------------------------

def _reader(passages: str | os.PathLike | Sequence[Any], source: str) -> Callable[[], Iterator[dict[str, Any]]]:
    """A function that reads the passages afresh on each call: a file is streamed, never held in memory."""
    if isinstance(passages, (str, os.PathLike)):
        return lambda: iter_passages(Path(passages))
    corpus = normalize_passages(passages, source=source)
    return lambda: iter(corpus)


def _row(passage: Mapping[str, Any], pos: int, source: str) -> dict[str, Any]:
    """The collection row of the passage at corpus position `pos`; a passage Milvus cannot hold is an error."""
    title, text = passage["title"], passage["text"]
    # The terms of "title text" are never longer than it: bounding it bounds every text field.
    size = len(title.encode("utf-8")) + 1 + len(text.encode("utf-8"))
    if size > _MAX_BYTES:
        raise CorpusError(f"{source}, passage {pos} (id {passage['id']!r}): {size:,} bytes of title and text, over "
                          f"Milvus's limit of {_MAX_BYTES:,} for a text field; cut it into smaller passages")
    fields = {key: value for key, value in passage.items() if key not in ("title", "text")}
    return {"pos": pos, "title": title, "text": text, "meta": fields}


def _survey(read: Callable[[], Iterator[dict[str, Any]]], source: str) -> tuple[str, int]:
    """(fingerprint, count) of the corpus, read once; every passage checked to fit before anything is written."""
    positions = itertools.count()
    fingerprint = corpus_fingerprint(p for p in read() if _row(p, next(positions), source))  # a row is never empty
    count = next(positions)  # how many were drawn
    if not count:
        raise CorpusError(f"{source}: the corpus has no passages")
    return fingerprint, count


def _prepare(client: Any, collection: str, meta: dict[str, Any], uri: str, shards: int) -> bool:
    """Create the collection, or check that the existing one is this corpus with these settings; False when
    it is already complete."""
    if not client.has_collection(collection):
        _create(client, collection, {**meta, "state": "building"}, shards)
        return True
    found = _read_meta(client, collection, uri)
    where = f"collection {collection!r} at {uri}"
    if found["fingerprint"] != meta["fingerprint"]:
        raise ValueError(f"{where} holds another corpus ({found['count']:,} passages, fingerprint "
                         f"{found['fingerprint'][:12]}; this one: {meta['count']:,}, {meta['fingerprint'][:12]}): "
                         "name another collection= or drop it")
    differ = sorted(key for key in meta if key != "vectorizer_identity" and found.get(key) != meta[key])
    if differ:
        was = ", ".join(f"{key}={found.get(key)!r}" for key in differ)
        raise ValueError(f"{where} was built with other settings ({was}): name another collection= or drop it")
    return found.get("state") != "complete"


def _create(client: Any, collection: str, meta: dict[str, Any], shards: int) -> None:
    pymilvus = _pymilvus()
    types = pymilvus.DataType
    schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pos", types.INT64, is_primary=True)
    schema.add_field("title", types.VARCHAR, max_length=_MAX_BYTES)
    schema.add_field("text", types.VARCHAR, max_length=_MAX_BYTES)
    schema.add_field("meta", types.JSON)
    index = client.prepare_index_params()
    if meta["mode"] != "dense":
        schema.add_field("terms", types.VARCHAR, max_length=_MAX_BYTES, enable_analyzer=True,
                         analyzer_params=meta["analyzer"]["milvus"])
        schema.add_field("sparse", types.SPARSE_FLOAT_VECTOR)
        schema.add_function(pymilvus.Function(name="bm25", function_type=pymilvus.FunctionType.BM25,
                                              input_field_names=["terms"], output_field_names=["sparse"]))
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                        params={"bm25_k1": meta["bm25"]["k1"], "bm25_b": meta["bm25"]["b"]})
    if meta["mode"] != "bm25":
        schema.add_field("dense", types.FLOAT_VECTOR, dim=meta["dim"])
        index.add_index(field_name="dense", index_type=meta["dense_index"], metric_type="IP")
    client.create_collection(collection, schema=schema, consistency_level="Strong", num_shards=shards,
                             properties={_PROPERTY: json.dumps(meta)})
    # Not waited for (sync=False): the wait asks for a timestamp Milvus Lite does not serve, which it logs as
    # an error; the indexes of an empty collection are there at once, and load_collection waits on a server.
    client.create_index(collection, index, sync=False)


def _ingest(client: Any, collection: str, read: Callable[[], Iterator[dict[str, Any]]], meta: dict[str, Any],
            vectorizer: Vectorizer | None, batch_size: int, progress: bool) -> None:
    """Insert the passages the collection lacks, batch by batch, then mark it complete."""
    from tqdm.auto import tqdm

    _load(client, collection)
    present = _count(client, collection)
    # Batches go in one after another, so only the last one can be partial: every key below `start` is in.
    start = max(0, present - _WINDOW)
    keys = {row["pos"] for row in client.query(collection, filter=f"pos >= {start}", output_fields=["pos"],
                                               limit=2 * _WINDOW, consistency_level="Strong")}
    bar = tqdm(total=meta["count"], initial=present, unit="passage", desc=f"milvus {collection}",
               disable=not progress)
    if present and progress:
        bar.write(f"resuming: {present:,} of {meta['count']:,} passages are already in {collection!r}")
    rows = (_row(passage, pos, "passages") for pos, passage in enumerate(read()) if pos >= start and pos not in keys)
    while batch := list(itertools.islice(rows, batch_size)):
        _insert(client, collection, batch, meta["mode"] != "dense", vectorizer)
        bar.update(len(batch))
    bar.close()
    # Sealed rows are searched through their index (Milvus Lite indexes unsealed ones anew for every search).
    client.flush(collection)
    stored = _count(client, collection)
    if stored != meta["count"]:
        raise RuntimeError(f"collection {collection!r} holds {stored:,} passages after the ingest, expected "
                           f"{meta['count']:,}")
    client.alter_collection_properties(collection, properties={_PROPERTY: json.dumps({**meta, "state": "complete"})})


def _insert(client: Any, collection: str, rows: list[dict[str, Any]], bm25: bool,
            vectorizer: Vectorizer | None) -> None:
    if bm25:  # "title text", as dsp.BM25 indexes a passage
        for row, words in zip(rows, _terms([f"{row['title']} {row['text']}" if row["title"] else row["text"]
                                           for row in rows])):
            row["terms"] = words
    if vectorizer is not None:  # "Title | text", as DenseRM embeds a passage: the embedding cache serves both
        texts = [f"{row['title']} | {row['text']}" if row["title"] else row["text"] for row in rows]
        for row, vector in zip(rows, vectorizer.embed_passages(texts).tolist()):
            row["dense"] = vector
    client.insert(collection, rows)
