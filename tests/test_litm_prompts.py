"""dsp.litm prompts: byte-identical to the paper's templates and documented format, and its validation."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dsp.litm import (
    PROMPTS_DIR, TEMPLATE_NAMES, Document, format_kv_records, get_closedbook_qa_prompt, get_kv_retrieval_prompt,
    get_qa_prompt, load_template,
)
from programs.litm import read_qa_records  # the data readers moved with the study; the prompts stayed in dsp

INSTRUCTION = ("Write a high-quality answer for the given question using only the provided search results "
               "(some of which might be irrelevant).")
DOCS = [Document(id="1", title="first doc", text="first doc text", score=0.95, hasanswer=False, original_retrieval_index=0),
        Document(id="2", title="second doc", text="second doc text", score=0.90, hasanswer=True, original_retrieval_index=1)]
KV = [("test key1", "test value1"), ("test key2", "test value2"), ("test key3", "test value3")]


# -- the shipped templates are the paper's --------------------------------------------------------------

def test_shipped_templates_are_byte_identical_to_the_papers(data_dir):
    shared = data_dir / "litm" / "prompts"
    assert sorted(p.stem for p in shared.glob("*.prompt")) == sorted(TEMPLATE_NAMES)
    for name in TEMPLATE_NAMES:
        ours, theirs = (PROMPTS_DIR / f"{name}.prompt").read_bytes(), (shared / f"{name}.prompt").read_bytes()
        assert hashlib.sha256(ours).hexdigest() == hashlib.sha256(theirs).hexdigest(), name


def test_templates_are_read_with_trailing_newlines_stripped():
    for name in TEMPLATE_NAMES:
        raw = (PROMPTS_DIR / f"{name}.prompt").read_text(encoding="utf-8")
        assert load_template(name) == raw.rstrip("\n")
        assert not load_template(name).endswith("\n")
    # Two of the files end with a newline and two others do not: both render the same way.
    assert (PROMPTS_DIR / "closedbook_qa.prompt").read_text().endswith("\n")
    assert not (PROMPTS_DIR / "qa.prompt").read_text().endswith("\n")
    with pytest.raises(ValueError, match="unknown Lost in the Middle template"):
        load_template("qa_fancy")


def _paper_render(data_dir: Path, name: str, **values: str) -> str:
    """The paper's procedure, from the shared copy of its template: strip trailing newlines, str.format."""
    return (data_dir / "litm" / "prompts" / f"{name}.prompt").read_text(encoding="utf-8").rstrip("\n").format(**values)


def test_prompts_on_a_real_oracle_record_match_the_shared_templates(data_dir):
    record = read_qa_records(data_dir / "litm/nq-open-oracle.jsonl.gz", limit=1)[0]
    gold = record["ctxs"][0]
    docs = [Document.from_dict(gold), Document(title="Other", text="Unrelated text.")]
    results = f"Document [1](Title: {gold['title']}) {gold['text']}\nDocument [2](Title: Other) Unrelated text."
    q = record["question"]
    assert get_qa_prompt(q, docs) == _paper_render(data_dir, "qa", question=q, search_results=results)
    assert get_qa_prompt(q, docs, mention_random_ordering=True) == _paper_render(
        data_dir, "qa_ordered_randomly", question=q, search_results=results)
    assert get_qa_prompt(q, docs, query_aware_contextualization=True) == _paper_render(
        data_dir, "qa_with_query_aware_contextualization", question=q, search_results=results)
    assert get_closedbook_qa_prompt(q) == _paper_render(data_dir, "closedbook_qa", question=q)
    records = '{"k1": "v1",\n "k2": "v2"}'
    assert get_kv_retrieval_prompt([("k1", "v1"), ("k2", "v2")], "k2") == _paper_render(
        data_dir, "kv_retrieval", formatted_kv_records=records, key="k2")
    assert get_kv_retrieval_prompt([("k1", "v1"), ("k2", "v2")], "k2", query_aware_contextualization=True) == \
        _paper_render(data_dir, "kv_retrieval_with_query_aware_contextualization", formatted_kv_records=records, key="k2")


# -- the documented format, checked by hand ---------------------------------------------------------------

def test_qa_prompt_hand_checked():
    expected = (f"{INSTRUCTION}\n\nDocument [1](Title: first doc) first doc text\n"
                "Document [2](Title: second doc) second doc text\n\nQuestion: test question\nAnswer:")
    assert get_qa_prompt("test question", DOCS) == expected
    # dicts in the paper's ctxs format render the same way
    assert get_qa_prompt("test question", [d.to_dict() for d in DOCS]) == expected


def test_qa_prompt_mentioning_random_order_hand_checked():
    expected = (f"{INSTRUCTION} The search results are ordered randomly.\n\n"
                "Document [1](Title: first doc) first doc text\nDocument [2](Title: second doc) second doc text\n\n"
                "Question: test question\nAnswer:")
    assert get_qa_prompt("test question", DOCS, mention_random_ordering=True) == expected


def test_query_aware_contextualization_puts_the_question_before_and_after():
    expected = (f"{INSTRUCTION}\n\nQuestion: test question\n\n"
                "Document [1](Title: first doc) first doc text\nDocument [2](Title: second doc) second doc text\n\n"
                "Question: test question\nAnswer:")
    assert get_qa_prompt("test question", DOCS, query_aware_contextualization=True) == expected


def test_documents_are_numbered_from_one_in_the_given_order():
    docs = [Document(title=f"T{i}", text=f"text {i}") for i in range(12)]
    lines = get_qa_prompt("q", docs[::-1]).split("\n")[2:14]
    assert lines[0] == "Document [1](Title: T11) text 11"
    assert lines[11] == "Document [12](Title: T0) text 0"


def test_closedbook_prompt_hand_checked():
    assert get_closedbook_qa_prompt("test question") == "Question: test question\nAnswer:"


def test_kv_prompt_hand_checked():
    expected = "\n".join([
        "Extract the value corresponding to the specified key in the JSON object below.", "",
        "JSON data:", '{"test key1": "test value1",', ' "test key2": "test value2",', ' "test key3": "test value3"}', "",
        'Key: "test key2"', "Corresponding value:"])
    assert get_kv_retrieval_prompt(KV, "test key2") == expected


def test_kv_prompt_with_query_aware_contextualization_hand_checked():
    expected = "\n".join([
        "Extract the value corresponding to the specified key in the JSON object below.", "",
        'Key: "test key2"', "",
        "JSON data:", '{"test key1": "test value1",', ' "test key2": "test value2",', ' "test key3": "test value3"}', "",
        'Key: "test key2"', "Corresponding value:"])
    assert get_kv_retrieval_prompt(KV, "test key2", query_aware_contextualization=True) == expected


def test_kv_records_render_one_pair_per_line_as_one_object():
    text = format_kv_records([["a", "1"], ["b", "2"]])
    assert text == '{"a": "1",\n "b": "2"}'


def test_braces_in_content_are_kept_literally():
    # str.format substitutes once: braces inside questions or documents are not placeholders.
    prompt = get_qa_prompt("what does {x} mean", [Document(title="{t}", text="{search_results}")])
    assert "Document [1](Title: {t}) {search_results}" in prompt
    assert "Question: what does {x} mean" in prompt


# -- validation -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("question", ["", None])
def test_empty_question_is_rejected(question):
    with pytest.raises(ValueError, match="question"):
        get_qa_prompt(question, DOCS)
    with pytest.raises(ValueError, match="question"):
        get_closedbook_qa_prompt(question)


def test_empty_documents_are_rejected():
    with pytest.raises(ValueError, match="documents"):
        get_qa_prompt("q", [])


def test_both_flags_at_once_are_rejected():
    with pytest.raises(ValueError, match="cannot be used together"):
        get_qa_prompt("q", DOCS, mention_random_ordering=True, query_aware_contextualization=True)


def test_kv_validation():
    with pytest.raises(ValueError, match="non-empty list"):
        get_kv_retrieval_prompt([], "a")
    with pytest.raises(ValueError, match="non-empty key"):
        get_kv_retrieval_prompt(KV, "")
    with pytest.raises(ValueError, match="not among"):
        get_kv_retrieval_prompt(KV, "missing key")
    with pytest.raises(ValueError, match="duplicate keys: 'a'"):
        get_kv_retrieval_prompt([("a", "1"), ("a", "2"), ("b", "3")], "b")
    with pytest.raises(ValueError, match="at least 2"):
        get_kv_retrieval_prompt([("a", "1")], "a")
    with pytest.raises(ValueError, match="record 1 must be a \\[key, value\\] pair"):
        get_kv_retrieval_prompt([("a", "1"), ("b", "2", "3")], "a")


def test_document_objects_are_checked():
    with pytest.raises(TypeError, match="documents\\[1\\]"):
        get_qa_prompt("q", [DOCS[0], "just text"])
    with pytest.raises(TypeError, match="Document.title must be text"):
        Document(title=None, text="x")


# -- Document.from_dict -----------------------------------------------------------------------------------

def test_document_from_dict_turns_a_string_score_into_a_float():
    data = {"id": "9459602", "title": "Science and technology in Germany", "text": "some text here",
            "score": "0.97236913", "hasanswer": True, "original_retrieval_index": 65}
    document = Document.from_dict(data)
    assert document.score == 0.97236913 and isinstance(document.score, float)
    assert (document.id, document.title, document.text) == ("9459602", data["title"], data["text"])
    assert document.hasanswer is True and document.isgold is None
    assert document.original_retrieval_index == 65
    assert data["score"] == "0.97236913"  # the input is not modified


def test_document_from_dict_errors():
    with pytest.raises(ValueError, match="non-empty"):
        Document.from_dict({})
    with pytest.raises(ValueError, match="unknown field\\(s\\) rank"):
        Document.from_dict({"title": "t", "text": "x", "rank": 1})
    with pytest.raises(ValueError, match="missing field\\(s\\) text"):
        Document.from_dict({"title": "t"})
    with pytest.raises(ValueError, match="score must be a number"):
        Document.from_dict({"title": "t", "text": "x", "score": "high"})
    assert Document.from_dict({"title": "t", "text": "x", "id": 7}).id == "7"
