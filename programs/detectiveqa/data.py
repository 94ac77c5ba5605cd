"""Load DetectiveQA (Xu et al., 2024, arXiv 2409.02465) from its own file layout.

    <data_dir>/novel_data_<lang>/<novel_id>-<title>.txt       one paragraph a line, "[N] text", N from 1
    <data_dir>/anno_data_<lang>/<anno_part>/<novel_id>.json    anno_part: human_anno | AIsup_anno

An annotation file is a JSON list holding one object ``{novel_id, num_paragraphs, time_cost, questions}``;
each question is ``{question, options: {A, B, C, D}, answer: "A".."D", distraction: {A..D},
reasoning: [str], clue_position: [int], answer_position: int}``.

Bad input never stops a load: a missing novel, a file that is not JSON, a question without four options or
with an answer outside A-D each become a `DetectiveQAError` naming the file and the question (1-based), kept
in `DetectiveQASet.errors`, while every other question still loads. Tolerated variations, recorded in
`warnings`: a single object instead of a one-element list, options given as a list of four strings
("A. text" prefixes removed), answers written "b", "(B)" or "B. text", numbers given as strings, a
`novel_id` field disagreeing with the file name (the file name wins), lines of a novel without a "[N]"
prefix (joined to the paragraph before), and `data_dir` being the parent of the dataset's folder.

>>> fixture = Path(__file__).parents[2] / "tests" / "fixtures" / "detectiveqa"  # the repository's fixture
>>> ds = load_detectiveqa(fixture, lang="en", anno_part="human_anno")
>>> len(ds.questions), ds.errors
(12, [])
>>> q = ds.questions[0]
>>> q.qid, q.answer, q.clue_position[:3], q.answer_position
('en/human_anno/901#1', 'C', (8, 12, 15), 60)
>>> ds.novels["901"].title, len(ds.novels["901"])
('The Salt Ledger', 66)
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from dsp import Example

__all__ = [
    "LETTERS", "ANNO_PARTS", "DetectiveQAError", "Novel", "Question", "DetectiveQASet",
    "read_novel", "read_annotation", "find_novels", "load_detectiveqa", "dataset_root", "annotation_ids",
]

LETTERS = ("A", "B", "C", "D")
ANNO_PARTS = ("human_anno", "AIsup_anno")

_PARAGRAPH = re.compile(r"^\s*\[(\d+)\]\s?(.*)$")
_OPTION_PREFIX = re.compile(r"^\s*\(?([A-Da-d])\s*[).:：、．.]\s*")
_ANSWER = re.compile(r"^\s*[(（]?\s*([A-Da-d])\s*(?:$|[)）.:：、．\s])")


class DetectiveQAError(ValueError):
    """Bad input: names the file and, when one is to blame, the question (1-based index in its file).

    >>> str(DetectiveQAError("anno/901.json", "has 3 options", question=4, qid="en/human_anno/901#4"))
    'anno/901.json: question 4: has 3 options'
    """

    def __init__(self, file: str | Path, message: str, question: int | None = None, qid: str | None = None) -> None:
        self.file = str(file)
        self.question = question
        self.qid = qid
        self.message = message
        where = f"{self.file}: question {question}" if question is not None else self.file
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Novel:
    """A novel as numbered paragraphs (numbers as in the file, normally 1..n).

    >>> novel = Novel("7", "Tiny", "en", "7-Tiny.txt", ((1, "It rained."), (2, "The cat left.")))
    >>> print(novel.render())
    [1] It rained.
    [2] The cat left.
    >>> novel.render(novel.numbers_before(2))
    '[1] It rained.'
    """

    novel_id: str
    title: str
    lang: str
    path: str
    paragraphs: tuple[tuple[int, str], ...]

    def __len__(self) -> int:
        return len(self.paragraphs)

    @property
    def numbers(self) -> list[int]:
        return [n for n, _ in self.paragraphs]

    def paragraph(self, number: int) -> str:
        """The text of paragraph `number` (KeyError if the novel has none)."""
        for n, text in self.paragraphs:
            if n == number:
                return text
        raise KeyError(f"{self.path} has no paragraph [{number}]")

    def numbers_before(self, position: int) -> list[int]:
        """Paragraph numbers strictly before `position`: what a reader knows before the answer is revealed."""
        return [n for n, _ in self.paragraphs if n < position]

    def render(self, numbers: Iterable[int] | None = None) -> str:
        """The paragraphs as the file writes them ("[N] text" lines), all or just `numbers` (in novel order)."""
        wanted = None if numbers is None else set(numbers)
        return "\n".join(f"[{n}] {text}" for n, text in self.paragraphs if wanted is None or n in wanted)

    @property
    def fingerprint(self) -> str:
        """A short hash of the content: a resumed run reuses rows only for the same text."""
        return hashlib.sha256(self.render().encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Question:
    """One multiple-choice question; `index` is 1-based within its annotation file."""

    qid: str
    lang: str
    anno_part: str
    novel_id: str
    index: int
    question: str
    options: Mapping[str, str]
    answer: str
    reasoning: tuple[str, ...] = ()
    clue_position: tuple[int, ...] = ()
    answer_position: int | None = None
    distraction: Mapping[str, str] = field(default_factory=dict)
    source: str = ""

    def to_example(self, novel: Novel | None = None) -> Example:
        """The question as a dsp.Example for `dsp.evaluate` (the novel's fingerprint, not its text)."""
        return Example(
            id=self.qid, qid=self.qid, lang=self.lang, anno_part=self.anno_part, novel_id=self.novel_id,
            index=self.index, question=self.question, options=dict(self.options), answer=self.answer,
            reasoning=list(self.reasoning), clue_position=list(self.clue_position),
            answer_position=self.answer_position, distraction=dict(self.distraction), source=self.source,
            novel_fingerprint=novel.fingerprint if novel is not None else None,
        )


@dataclass
class DetectiveQASet:
    """What a load produced: novels by id, the questions that parsed, and every error and warning."""

    lang: str
    anno_part: str
    novels: dict[str, Novel]
    questions: list[Question]
    errors: list[DetectiveQAError]
    warnings: list[str]

    def __len__(self) -> int:
        return len(self.questions)


# -- novels -------------------------------------------------------------------------------------------

def read_novel(path: str | Path, lang: str = "en", warnings: list[str] | None = None) -> Novel:
    """Read one novel file; raises DetectiveQAError (naming the file) if it holds no numbered paragraph.

    Blank lines are skipped; a line without a "[N]" prefix continues the paragraph before it (a wrapped
    paragraph); text before the first "[N]" (a title line) is dropped with a warning.

    >>> novel = read_novel(Path(__file__).parents[2] / "tests/fixtures/detectiveqa/novel_data_zh/902-听雨茶楼.txt", lang="zh")
    >>> novel.novel_id, novel.title, len(novel), novel.paragraph(1)[:9]
    ('902', '听雨茶楼', 15, '腊月初八，清河镇下')
    """
    path = Path(path)
    warnings = warnings if warnings is not None else []
    match = re.match(r"^([^-]+)-(.*)\.txt$", path.name)
    novel_id, title = (match.group(1), match.group(2)) if match else (path.stem, "")
    try:
        raw = path.read_text(encoding="utf-8-sig")  # -sig: a BOM is not part of paragraph 1
    except UnicodeDecodeError as error:
        raise DetectiveQAError(path, f"is not UTF-8 text ({error.reason} at byte {error.start})") from None
    paragraphs: dict[int, list[str]] = {}
    last: int | None = None
    loose = 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        found = _PARAGRAPH.match(line)
        if found:
            number = int(found.group(1))
            if number in paragraphs:
                warnings.append(f"{path}: paragraph [{number}] appears twice; the texts are joined")
                paragraphs[number].append(found.group(2).strip())
            else:
                paragraphs[number] = [found.group(2).strip()]
            last = number
        elif last is None:
            warnings.append(f"{path}: text before paragraph [1] is ignored: {line.strip()[:60]!r}")
        else:
            paragraphs[last].append(line.strip())
            loose += 1
    if loose:
        warnings.append(f"{path}: {loose} line(s) without a [N] prefix joined to the paragraph before")
    if not paragraphs:
        raise DetectiveQAError(path, 'has no "[N] text" paragraph lines')
    numbers = sorted(paragraphs)
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        warnings.append(f"{path}: paragraph numbers are not consecutive ({numbers[0]}..{numbers[-1]}, "
                        f"{len(numbers)} paragraphs)")
    return Novel(novel_id, title, lang, str(path), tuple((n, "\n".join(paragraphs[n])) for n in numbers))


def find_novels(novel_dir: str | Path) -> dict[str, list[Path]]:
    """Novel files by id ("<id>-<title>.txt"; the id is the text before the first hyphen).

    >>> sorted(find_novels(Path(__file__).parents[2] / "tests/fixtures/detectiveqa/novel_data_en"))
    ['901']
    """
    found: dict[str, list[Path]] = {}
    for path in sorted(Path(novel_dir).glob("*.txt")):
        novel_id = path.name.split("-", 1)[0] if "-" in path.name else path.stem
        found.setdefault(novel_id.strip(), []).append(path)
    return found


# -- annotations --------------------------------------------------------------------------------------

def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("[").rstrip("]").strip().isdigit():
        return int(value.strip().lstrip("[").rstrip("]"))
    return None


def _options(raw: Any) -> tuple[dict[str, str] | None, str]:
    """(options A-D, "") or (None, why not)."""
    if isinstance(raw, Mapping):
        options: dict[str, str] = {}
        for key, value in raw.items():
            letter = re.sub(r"[\s.:：()（）]", "", str(key)).upper()  # "A", "a.", "(A)" all name option A
            if letter not in LETTERS:
                return None, f"has an option named {key!r}; options must be A, B, C and D"
            if not isinstance(value, str) or not value.strip():
                return None, f"option {letter} is empty or not text: {value!r:.60}"
            options[letter] = value.strip()
    elif isinstance(raw, (list, tuple)):
        if len(raw) != 4 or not all(isinstance(v, str) and v.strip() for v in raw):
            return None, f"has {len(raw)} options; needs four (A, B, C and D)"
        options = {}
        for letter, value in zip(LETTERS, raw, strict=True):
            prefix = _OPTION_PREFIX.match(value)
            if prefix and prefix.group(1).upper() != letter:
                return None, f"option {len(options) + 1} is labelled {prefix.group(1)!r}, expected {letter}"
            options[letter] = value[prefix.end():].strip() if prefix else value.strip()
    else:
        return None, f"has no options (got {type(raw).__name__}); needs four, A to D"
    missing = [letter for letter in LETTERS if letter not in options]
    if missing:
        have = ", ".join(sorted(options)) or "none"
        return None, f"has {len(options)} options ({have}); needs A, B, C and D (missing {', '.join(missing)})"
    return {letter: options[letter] for letter in LETTERS}, ""


def _question(raw: Any, where: Path, index: int, lang: str, anno_part: str, novel_id: str,
              warnings: list[str]) -> Question:
    qid = f"{lang}/{anno_part}/{novel_id}#{index}"

    def bad(message: str) -> DetectiveQAError:
        return DetectiveQAError(where, message, question=index, qid=qid)

    if not isinstance(raw, Mapping):
        raise bad(f"is not an object but {type(raw).__name__}")
    text = raw.get("question")
    if not isinstance(text, str) or not text.strip():
        raise bad("has no question text")
    options, why = _options(raw.get("options"))
    if options is None:
        raise bad(why)
    answer_raw = raw.get("answer")
    found = _ANSWER.match(answer_raw) if isinstance(answer_raw, str) else None
    if not found:
        raise bad(f"answer {answer_raw!r} is not one of A, B, C, D")
    clues_raw = raw.get("clue_position", [])
    if clues_raw is None:
        clues_raw = []
    if not isinstance(clues_raw, (list, tuple)):
        clues_raw = [clues_raw]
    clues = [_as_int(c) for c in clues_raw]
    if any(c is None for c in clues):
        raise bad(f"clue_position {clues_raw!r} is not a list of paragraph numbers")
    answer_position = raw.get("answer_position")
    if isinstance(answer_position, (list, tuple)):  # a list of positions: the first is where it is revealed
        answer_position = answer_position[0] if answer_position else None
    position = _as_int(answer_position) if answer_position is not None else None
    if answer_position is not None and position is None:
        raise bad(f"answer_position {answer_position!r} is not a paragraph number")
    reasoning = raw.get("reasoning") or []
    if isinstance(reasoning, str):
        reasoning = [reasoning]
    if not isinstance(reasoning, (list, tuple)) or not all(isinstance(r, str) for r in reasoning):
        raise bad("reasoning is not a list of texts")
    distraction = raw.get("distraction") or {}
    if not isinstance(distraction, Mapping):
        warnings.append(f"{where}: question {index}: distraction is not an object; ignored")
        distraction = {}
    return Question(
        qid=qid, lang=lang, anno_part=anno_part, novel_id=novel_id, index=index, question=text.strip(),
        options=MappingProxyType(options), answer=found.group(1).upper(),
        reasoning=tuple(r.strip() for r in reasoning if r.strip()),
        clue_position=tuple(sorted({c for c in clues if c is not None})), answer_position=position,
        distraction=MappingProxyType({str(k).strip().upper(): str(v) for k, v in distraction.items()}),
        source=str(where),
    )


def read_annotation(path: str | Path, lang: str = "en", anno_part: str = "human_anno",
                    warnings: list[str] | None = None) -> tuple[dict[str, Any], list[Question], list[DetectiveQAError]]:
    """(metadata, questions, errors) of one annotation file; a bad question costs only itself.

    A file that cannot be read as an annotation at all raises DetectiveQAError naming it.

    >>> meta, questions, errors = read_annotation(Path(__file__).parents[2] / "tests/fixtures/detectiveqa/anno_data_en/AIsup_anno/901.json",
    ...                                           anno_part="AIsup_anno")
    >>> meta["num_paragraphs"], len(questions), errors
    (66, 3, [])
    """
    path = Path(path)
    warnings = warnings if warnings is not None else []
    novel_id = path.stem
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as error:
        raise DetectiveQAError(path, f"is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise DetectiveQAError(path, f"is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    if isinstance(data, Mapping):
        warnings.append(f"{path}: an object instead of a one-element list; read as one")
        data = [data]
    if not isinstance(data, list) or not data or not all(isinstance(d, Mapping) for d in data):
        raise DetectiveQAError(path, "must be a JSON list holding one object {novel_id, num_paragraphs, time_cost, "
                                     f"questions}}, got {type(data).__name__}")
    if len(data) > 1:
        warnings.append(f"{path}: {len(data)} objects in the list; their questions are read in order")
    meta = {k: v for k, v in data[0].items() if k != "questions"}
    stated = meta.get("novel_id")
    if stated is not None and str(stated).strip() != novel_id:
        warnings.append(f"{path}: novel_id {stated!r} differs from the file name; using {novel_id!r}")
    raw_questions: list[Any] = []
    for part in data:
        questions = part.get("questions")
        if not isinstance(questions, list):
            raise DetectiveQAError(path, f"has no 'questions' list (keys: {', '.join(map(str, part))})")
        raw_questions.extend(questions)
    parsed: list[Question] = []
    errors: list[DetectiveQAError] = []
    for index, raw in enumerate(raw_questions, start=1):
        try:
            parsed.append(_question(raw, path, index, lang, anno_part, novel_id, warnings))
        except DetectiveQAError as error:
            errors.append(error)
    return meta, parsed, errors


# -- the dataset --------------------------------------------------------------------------------------

def dataset_root(data_dir: str | Path, lang: str) -> Path:
    """The folder holding novel_data_<lang>: `data_dir` itself or one of its direct subfolders."""
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"DetectiveQA data directory {root} does not exist")
    if (root / f"novel_data_{lang}").is_dir():
        return root
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        if (child / f"novel_data_{lang}").is_dir():
            return child
    present = ", ".join(sorted(p.name for p in root.iterdir())[:12]) or "nothing"
    raise FileNotFoundError(f"{root} has no novel_data_{lang}/ folder (nor does any folder in it); it holds: {present}")


def _anno_dir(root: Path, lang: str, anno_part: str) -> Path:
    base = root / f"anno_data_{lang}"
    exact = base / anno_part
    if exact.is_dir():
        return exact
    if base.is_dir():
        for child in base.iterdir():  # tolerate "aisup_anno" and friends
            if child.is_dir() and child.name.lower() == anno_part.lower():
                return child
        parts = ", ".join(sorted(p.name for p in base.iterdir() if p.is_dir())) or "none"
        raise FileNotFoundError(f"{base} has no {anno_part}/ folder; annotation parts there: {parts}")
    raise FileNotFoundError(f"{root} has no anno_data_{lang}/ folder")


def annotation_ids(data_dir: str | Path, lang: str = "en", anno_part: str = "human_anno") -> list[str]:
    """The novel ids with an annotation file in one language and part, in load order (no file is read).

    >>> annotation_ids(Path(__file__).parents[2] / "tests/fixtures/detectiveqa", lang="zh")
    ['902']
    """
    anno_dir = _anno_dir(dataset_root(data_dir, lang), lang, anno_part)
    return [p.stem for p in sorted(anno_dir.glob("*.json"), key=lambda p: (len(p.stem), p.stem))]


def load_detectiveqa(data_dir: str | Path, lang: str = "en", anno_part: str = "human_anno",
                     novel_ids: Sequence[str] | None = None, strict: bool = False) -> DetectiveQASet:
    """Load one language and annotation part. Per-file and per-question problems are collected in
    `errors` (the rest loads); `strict=True` raises the first one instead. A missing folder raises.

    >>> ds = load_detectiveqa(Path(__file__).parents[2] / "tests/fixtures/detectiveqa", lang="zh")
    >>> [q.qid for q in ds.questions]
    ['zh/human_anno/902#1', 'zh/human_anno/902#2']
    """
    root = dataset_root(data_dir, lang)
    anno_dir = _anno_dir(root, lang, anno_part)
    novel_files = find_novels(root / f"novel_data_{lang}")
    wanted = {str(n) for n in novel_ids} if novel_ids is not None else None
    novels: dict[str, Novel] = {}
    questions: list[Question] = []
    errors: list[DetectiveQAError] = []
    warnings: list[str] = []
    files = sorted(anno_dir.glob("*.json"), key=lambda p: (len(p.stem), p.stem))  # 2 before 10
    if not files:
        warnings.append(f"{anno_dir}: no annotation files")
    for path in files:
        novel_id = path.stem
        if wanted is not None and novel_id not in wanted:
            continue
        try:
            _, parsed, bad = read_annotation(path, lang, anno_part, warnings)
        except DetectiveQAError as error:
            errors.append(error)
            continue
        errors.extend(bad)
        if not parsed:
            continue
        candidates = novel_files.get(novel_id, [])
        problem = None
        if not candidates:
            problem = f"no novel file {root / f'novel_data_{lang}'}/{novel_id}-<title>.txt for this annotation"
        elif len(candidates) > 1:
            problem = f"several novel files for id {novel_id}: {', '.join(p.name for p in candidates)}"
        else:
            try:
                if novel_id not in novels:
                    novels[novel_id] = read_novel(candidates[0], lang, warnings)
            except DetectiveQAError as error:
                problem = str(error)
        if problem is not None:
            # Each question is reported (and later recorded in the run) on its own line.
            errors.extend(DetectiveQAError(path, problem, question=q.index, qid=q.qid) for q in parsed)
            continue
        numbers = set(novels[novel_id].numbers)
        for q in parsed:
            outside = [c for c in q.clue_position if c not in numbers]
            if outside:
                warnings.append(f"{path}: question {q.index}: clue paragraph(s) {outside} not in "
                                f"{Path(novels[novel_id].path).name}")
            if q.answer_position is not None and q.answer_position not in numbers:
                warnings.append(f"{path}: question {q.index}: answer_position {q.answer_position} not in the novel")
        questions.extend(parsed)
    if strict and errors:
        raise errors[0]
    return DetectiveQASet(lang, anno_part, novels, questions, errors, warnings)
