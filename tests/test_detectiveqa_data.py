"""programs.detectiveqa.data: the loader on the fixture (the benchmark's real layout) and on bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from programs.detectiveqa import DetectiveQAError, load_detectiveqa, read_novel
from programs.detectiveqa.data import find_novels

FIXTURE = Path(__file__).parent / "fixtures" / "detectiveqa"


@pytest.fixture
def data(tmp_path) -> Path:
    """A writable copy of the fixture."""
    target = tmp_path / "detectiveqa"
    shutil.copytree(FIXTURE, target)
    return target


def annotation(path: Path) -> list:
    return json.loads(path.read_text(encoding="utf-8"))


def write(path: Path, value) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")


# -- the fixture --------------------------------------------------------------------------------------

def test_fixture_loads_in_both_languages_and_parts():
    en = load_detectiveqa(FIXTURE, "en", "human_anno")
    assert (len(en.questions), en.errors, en.warnings) == (12, [], [])
    novel = en.novels["901"]
    assert novel.title == "The Salt Ledger" and len(novel) == 66 and novel.numbers == list(range(1, 67))
    assert novel.paragraph(8).startswith("Agnes, waiting for the dinner gong")
    assert sorted({q.answer for q in en.questions}) == ["A", "B", "C", "D"]
    for q in en.questions:
        assert len(q.options) == 4 and q.reasoning and q.clue_position
        # Clues come before the reveal, which the "answer" cut relies on.
        assert max(q.clue_position) < q.answer_position <= 66, q.qid
    aisup = load_detectiveqa(FIXTURE, "en", "AIsup_anno")
    assert [q.qid for q in aisup.questions] == [f"en/AIsup_anno/901#{i}" for i in (1, 2, 3)]
    zh = load_detectiveqa(FIXTURE, "zh", "human_anno")
    assert zh.novels["902"].title == "听雨茶楼" and len(zh.novels["902"]) == 15
    assert zh.questions[0].options["C"] == "账房先生陈默" and zh.errors == []


def test_each_question_names_its_clues_truthfully():
    """Spot checks that clue_position points at the paragraphs that hold the clue."""
    ds = load_detectiveqa(FIXTURE)
    novel = ds.novels["901"]
    by_text = {q.question: q for q in ds.questions}
    tide = by_text["Why was Ashby's story of walking across the causeway at nine o'clock impossible?"]
    assert "twenty minutes to nine" in novel.paragraph(tide.clue_position[0])
    assert "walk across the causeway at nine" in novel.paragraph(tide.clue_position[1])
    tons = by_text["How many tons of salt had been diverted since August?"]
    assert "fifty-two" in novel.paragraph(tons.clue_position[0]) and "twenty-three" in novel.paragraph(tons.answer_position)


def test_novel_ids_filter_and_parent_folder(tmp_path):
    (tmp_path / "release").mkdir()
    shutil.copytree(FIXTURE, tmp_path / "release" / "data")
    ds = load_detectiveqa(tmp_path / "release", "en", novel_ids=["901"])  # data_dir one level up is found
    assert len(ds.questions) == 12 and ds.novels["901"].path.startswith(str(tmp_path / "release" / "data"))
    assert load_detectiveqa(tmp_path / "release", "en", novel_ids=["999"]).questions == []


# -- bad input: an error naming the file and question, the rest still loads ----------------------------

def test_question_with_three_options_and_bad_letter(data):
    path = data / "anno_data_en" / "human_anno" / "901.json"
    anno = annotation(path)
    del anno[0]["questions"][2]["options"]["D"]
    anno[0]["questions"][4]["answer"] = "E"
    write(path, anno)
    ds = load_detectiveqa(data)
    assert len(ds.questions) == 10
    messages = [str(e) for e in ds.errors]
    assert messages == [
        f"{path}: question 3: has 3 options (A, B, C); needs A, B, C and D (missing D)",
        f"{path}: question 5: answer 'E' is not one of A, B, C, D",
    ]
    assert [e.qid for e in ds.errors] == ["en/human_anno/901#3", "en/human_anno/901#5"]
    assert [q.index for q in ds.questions] == [1, 2, 4, 6, 7, 8, 9, 10, 11, 12]
    with pytest.raises(DetectiveQAError, match="question 3: has 3 options"):
        load_detectiveqa(data, strict=True)


def test_missing_novel_names_every_question_and_keeps_other_novels(data):
    anno = annotation(data / "anno_data_en" / "human_anno" / "901.json")
    missing = data / "anno_data_en" / "human_anno" / "903.json"
    write(missing, [{**anno[0], "novel_id": 903, "questions": anno[0]["questions"][:2]}])
    ds = load_detectiveqa(data)
    assert len(ds.questions) == 12 and set(ds.novels) == {"901"}
    assert [(e.file, e.question) for e in ds.errors] == [(str(missing), 1), (str(missing), 2)]
    assert "no novel file" in str(ds.errors[0]) and "903-<title>.txt" in str(ds.errors[0])


def test_malformed_annotations(data):
    part = data / "anno_data_en" / "human_anno"
    (part / "904.json").write_text('[{"novel_id": 904, "questions": [', encoding="utf-8")
    write(part / "905.json", {"novel_id": 905})
    write(part / "906.json", [{"questions": [{"question": "Who?", "options": ["a", "b", "c"], "answer": "A"},
                                             "not an object", {"options": {}, "answer": "A"}]}])
    ds = load_detectiveqa(data)
    assert len(ds.questions) == 12
    found = {(Path(e.file).name, e.question): e.message for e in ds.errors}
    assert found[("904.json", None)].startswith("is not valid JSON")
    assert found[("905.json", None)].startswith("has no 'questions' list")
    assert found[("906.json", 1)] == "has 3 options; needs four (A, B, C and D)"
    assert found[("906.json", 2)] == "is not an object but str"
    assert found[("906.json", 3)] == "has no question text"
    assert len(found) == 5


def test_real_layout_variations_are_tolerated(data):
    """Lists of options with "A." prefixes, letters as "(b)", numbers as strings, one object instead of a
    list, a BOM, a wrapped paragraph and a title line in the novel: loaded, with warnings."""
    novel = data / "novel_data_en" / "907-A Short Case.txt"
    novel.write_text("\ufeffA SHORT CASE\n[1] The lamp was lit.\n\n[2] The door was\nbolted.\n[3] Ann did it.\n",
                     encoding="utf-8")
    write(data / "anno_data_en" / "human_anno" / "907.json", {
        "novel_id": "907", "num_paragraphs": 3, "time_cost": 1,
        "questions": [{"question": "Who did it?", "options": ["A. Ann", "B. Bob", "C. Cy", "D. Di"], "answer": "(a)",
                       "clue_position": ["1", 2], "answer_position": "3", "reasoning": "Only Ann had a lamp."}]})
    ds = load_detectiveqa(data, novel_ids=["907"])
    assert ds.errors == []
    (q,) = ds.questions
    assert (dict(q.options), q.answer, q.clue_position, q.answer_position, q.reasoning) == (
        {"A": "Ann", "B": "Bob", "C": "Cy", "D": "Di"}, "A", (1, 2), 3, ("Only Ann had a lamp.",))
    assert ds.novels["907"].paragraph(2) == "The door was\nbolted."
    assert ds.novels["907"].paragraph(1) == "The lamp was lit."
    assert any("instead of a one-element list" in w for w in ds.warnings)
    assert any("text before paragraph [1]" in w for w in ds.warnings)


def test_unusable_novel_file_and_missing_folders(data, tmp_path):
    empty = data / "novel_data_en" / "908-Empty.txt"
    empty.write_text("no numbered lines here\n", encoding="utf-8")
    with pytest.raises(DetectiveQAError, match=r"908-Empty.txt: has no \"\[N\] text\" paragraph lines"):
        read_novel(empty)
    anno = annotation(data / "anno_data_en" / "human_anno" / "901.json")
    write(data / "anno_data_en" / "human_anno" / "908.json", [{**anno[0], "questions": anno[0]["questions"][:1]}])
    ds = load_detectiveqa(data)
    assert len(ds.questions) == 12 and [(Path(e.file).name, e.question) for e in ds.errors] == [("908.json", 1)]
    assert "908-Empty.txt" in str(ds.errors[0])
    with pytest.raises(FileNotFoundError, match="no novel_data_fr"):
        load_detectiveqa(data, "fr")
    with pytest.raises(FileNotFoundError, match="no AIsup_anno/ folder; annotation parts there: human_anno"):
        load_detectiveqa(data, "zh", "AIsup_anno")
    assert sorted(find_novels(data / "novel_data_en")) == ["901", "908"]
