"""dsp.clients.specs: the colbert-local kind, and option values read from the clients that own them.

Nothing here loads a model or colbert-ai: a stand-in takes ColBERTLocal's place where a spec is built.
"""

from __future__ import annotations

import pytest

from dsp.clients import colbert_local, fusion, openai
from dsp.clients.specs import (
    SpecError, check_lm_spec, check_rm_spec, colbert_local_options, format_spec, parse_spec, rm_from_spec,
)


@pytest.fixture
def index_dir(tmp_path):
    directory = tmp_path / "wiki-colbert"
    directory.mkdir()
    return directory


def test_a_colbert_local_spec_parses_renders_and_checks(index_dir, tmp_path):
    spec = f"colbert-local:{index_dir},checkpoint=colbert-ir/colbertv2.0,ndocs=256,centroid_score_threshold=0.4"
    kind, argument, options = parse_spec(spec)
    assert (kind, argument) == ("colbert-local", str(index_dir))
    assert options == {"checkpoint": "colbert-ir/colbertv2.0", "ndocs": "256", "centroid_score_threshold": "0.4"}
    assert format_spec(kind, argument, options) == spec
    assert check_rm_spec(spec) == spec
    assert colbert_local_options(options) == {"checkpoint": "colbert-ir/colbertv2.0", "ndocs": 256,
                                              "centroid_score_threshold": 0.4}
    with pytest.raises(SpecError, match="needs checkpoint=PATH"):
        check_rm_spec(f"colbert-local:{index_dir}")
    with pytest.raises(SpecError, match="is not a directory"):
        check_rm_spec(f"colbert-local:{tmp_path / 'none'},checkpoint=ck")
    with pytest.raises(SpecError, match="needs index dir"):
        check_rm_spec("colbert-local:,checkpoint=ck")
    with pytest.raises(SpecError, match="ndocs must be an integer >= 1, got '0'"):
        check_rm_spec(f"colbert-local:{index_dir},checkpoint=ck,ndocs=0")
    with pytest.raises(SpecError, match="centroid_score_threshold must be a number"):
        check_rm_spec(f"colbert-local:{index_dir},checkpoint=ck,centroid_score_threshold=high")
    with pytest.raises(SpecError, match="collection .* is not a file"):
        check_rm_spec(f"colbert-local:{index_dir},checkpoint=ck,collection={tmp_path / 'none.tsv'}")
    with pytest.raises(SpecError, match="unknown option"):
        check_rm_spec(f"colbert-local:{index_dir},checkpoint=ck,k=3")


def test_a_colbert_local_spec_builds_colbert_local_with_its_options(index_dir, tmp_path, monkeypatch):
    built = []

    class StandIn:  # ColBERTLocal's signature; loading a real index needs colbert-ai (tests/test_colbert_local.py)
        def __init__(self, index_dir, checkpoint, collection=None, *, ncells=None, centroid_score_threshold=None,
                     ndocs=None):
            built.append((index_dir, checkpoint, collection, ncells, centroid_score_threshold, ndocs))

    monkeypatch.setattr(colbert_local, "ColBERTLocal", StandIn)
    collection = tmp_path / "collection.tsv"
    collection.write_text("0\tsome text\n")
    spec = f"colbert-local:{index_dir},checkpoint=/models/colbertv2.0,collection={collection},ncells=2"
    rm = rm_from_spec(spec)
    assert built == [(str(index_dir), "/models/colbertv2.0", str(collection), 2, None, None)]
    assert rm.spec == spec  # what a Ray worker rebuilds it from


def test_option_values_come_from_the_clients_that_own_them(tmp_path, monkeypatch):
    passages = tmp_path / "p.jsonl"
    passages.write_text('{"id": "a", "title": "", "text": "x"}\n')
    with pytest.raises(SpecError, match="fuse must be combsum or rrf, got 'max'"):
        check_rm_spec(f"hybrid:{passages},fuse=max")
    monkeypatch.setitem(fusion.FUSIONS, "max", lambda passage, by_prob: passage["prob"])
    assert check_rm_spec(f"hybrid:{passages},fuse=max")  # a fusion fusion.py declares is a valid option
    with pytest.raises(SpecError, match="type must be chat or text, got 'voice'"):
        check_lm_spec("openai:gpt-4o-mini,type=voice")
    monkeypatch.setattr(openai, "MODEL_TYPES", ("chat",))
    with pytest.raises(SpecError, match="type must be chat, got 'text'"):
        check_lm_spec("openai-compatible:http://127.0.0.1:8765/v1,type=text")


def test_unknown_kinds_list_colbert_local_among_the_rms():
    with pytest.raises(SpecError, match="valid RMs: bm25, dense, colbertv2, hybrid, replay, colbert-local"):
        check_rm_spec("colbert:x")
