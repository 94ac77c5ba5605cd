"""Type and Template: render an Example (with its demos) into a DSP v1 prompt, and parse completions back.

The format is DSP v1's, byte for byte (see docs: dsp-v1-prompt-format.md). A template is an instruction
plus ordered fields; each field is rendered as ``name + separator + value``:

>>> Question = Type(prefix="Question:", desc="${the question to be answered}")
>>> Answer = Type(prefix="Answer:", desc="${a short factoid answer}", format=format_answers)
>>> qa = Template("Answer questions with short factoid answers.", question=Question, answer=Answer)
>>> print(qa(Example(question="Who wrote Hamlet?", demos=[])))
Answer questions with short factoid answers.
<BLANKLINE>
---
<BLANKLINE>
Follow the following format.
<BLANKLINE>
Question: ${the question to be answered}
Answer: ${a short factoid answer}
<BLANKLINE>
---
<BLANKLINE>
Question: Who wrote Hamlet?
Answer:
>>> qa.extract(Example(question="Who wrote Hamlet?"), " Shakespeare").answer
'Shakespeare'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence  # the abc classes: isinstance is several times faster than typing's
from dataclasses import dataclass
from typing import Any, Callable

from .example import RESERVED_FIELDS, Example, field_name_error

__all__ = ["Type", "Template", "Field", "passages2text", "format_answers"]

PART_SEPARATOR = "\n\n---\n\n"
GUIDELINES_HEADER = "Follow the following format.\n\n"
# Rendered demos kept per template (a program reuses the same demos for every question); the memo is
# emptied when it reaches this size, so an evaluation with ever-new demos cannot grow it without bound.
DEMO_MEMO_SIZE = 4096


def _passage_text(passage: Any, where: str) -> str:
    if isinstance(passage, str):
        return passage
    if isinstance(passage, Mapping):  # a passage record from an RM: show it as DSP showed ColBERT's
        for key in ("long_text", "text"):
            if isinstance(passage.get(key), str):
                return passage[key]
    raise TypeError(f"{where}: a passage must be text, got {type(passage).__name__}: {passage!r:.80}")


def passages2text(passages: str | Sequence[str]) -> str:
    """Format a context: a string as is, one passage as «p», several as numbered «p» lines.

    >>> print(passages2text(["A | a", "B | b"]))
    [1] «A | a»
    [2] «B | b»
    """
    if isinstance(passages, str):
        return passages
    if not isinstance(passages, (list, tuple)):
        raise TypeError(f"a context must be text or a list of passages, got {type(passages).__name__}")
    texts = [_passage_text(p, f"passage {i + 1}") for i, p in enumerate(passages)]
    if len(texts) == 1:
        return f"«{texts[0]}»"
    return "\n".join(f"[{i}] «{t}»" for i, t in enumerate(texts, start=1))


def format_answers(answers: str | Sequence[str]) -> str:
    """Show one answer: the first of a list of gold answers (stripped), or a string as is.

    >>> format_answers(["Paris ", "paris, France"])
    'Paris'
    """
    if isinstance(answers, str):
        return answers
    if isinstance(answers, (list, tuple)):
        if not answers:
            raise ValueError("an empty list of answers cannot be shown")
        return str(answers[0]).strip()
    raise TypeError(f"answers must be text or a list of texts, got {type(answers).__name__}")


def _collapse(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"needs text, got {type(value).__name__}: {value!r:.80}")
    return " ".join(value.split())


class Type:
    """One field's look: its prefix in the prompt, its description in the guidelines, an optional formatter.

    >>> Answer = Type(prefix="Answer:", desc="${a short answer}")
    >>> Answer(desc="${one word}").desc
    '${one word}'
    """

    def __init__(self, prefix: str, desc: str, format: Callable[[Any], str] | None = None) -> None:
        if not isinstance(prefix, str) or not prefix.strip():
            raise ValueError(f"Type prefix must be non-empty text, got {prefix!r}")
        if not isinstance(desc, str):
            raise TypeError(f"Type desc must be text, got {type(desc).__name__}: {desc!r:.80}")
        if format is not None and not callable(format):
            raise TypeError(f"Type format must be callable, got {type(format).__name__}")
        self.prefix = prefix
        self.desc = desc
        self.format = format

    def __call__(self, **changes: Any) -> "Type":
        return Type(**{"prefix": self.prefix, "desc": self.desc, "format": self.format, **changes})

    def __repr__(self) -> str:
        return f"Type(prefix={self.prefix!r}, desc={self.desc!r})"


@dataclass(frozen=True)
class Field:
    """A template field: `name` is the stripped prefix, `separator` its trailing whitespace (or a space)."""

    name: str
    separator: str
    input_variable: str
    output_variable: str
    description: str


class Template:
    """An instruction and ordered fields; `template(example)` is the prompt, `template.extract` parses.

    `Template(instructions, **fields)`: the instructions come first, positionally or, as in DSP v1, as
    `instructions=`; given positionally, every keyword is a field, "instructions" included. A field
    may not be named after an attribute of the Example or Completions that will hold it (`copy`,
    `items`, `template`, ...: `dsp.example.RESERVED_FIELDS`), which is refused here with a ValueError.
    See the module docstring for a whole prompt.

    >>> Template("Follow the instructions.", instructions=Type("Instructions:", "${what to do}"),
    ...          answer=Type("Answer:", "${the answer}")).keys
    ['instructions', 'answer']
    """

    def __init__(self, *instructions_text: str, **fields: Type) -> None:
        # DSP v1 programs pass `instructions=` by keyword; given positionally, every keyword is a field,
        # so a field may be named "instructions" (a field is never a Template attribute).
        if len(instructions_text) > 1:
            raise TypeError(f"Template takes one positional argument, the instructions; got {len(instructions_text)}")
        if instructions_text:
            instructions = instructions_text[0]
        elif "instructions" in fields:
            instructions = fields.pop("instructions")
        else:
            raise TypeError('Template needs its instructions: Template("Answer questions ...", question=dsp.Type(...))')
        if not isinstance(instructions, str):
            raise TypeError(f"Template instructions must be text, got {type(instructions).__name__}")
        if not fields:
            raise ValueError("a Template needs at least one field, e.g. question=dsp.Type(...)")
        if not RESERVED_FIELDS.isdisjoint(fields):  # its fields become Example and Completions fields
            raise field_name_error(next(key for key in fields if key in RESERVED_FIELDS), "template field")
        self.instructions = instructions
        self.kwargs = fields
        self.fields: list[Field] = []
        self.format_handlers: dict[str, Callable[[Any], str]] = {"context": passages2text, "answers": format_answers}
        for key, kind in fields.items():
            if not isinstance(kind, Type):
                raise TypeError(f"template field {key!r} must be a dsp.Type, got {type(kind).__name__}: {kind!r:.80}")
            stripped = kind.prefix.rstrip()
            separator = kind.prefix[len(stripped):] or " "
            self.fields.append(Field(kind.prefix.strip(), separator, key, key, kind.desc))
            if kind.format is not None:
                self.format_handlers[key] = kind.format
        names = [f.name for f in self.fields]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"two template fields share the prefix {name!r}: completions could not be parsed")
        self.keys = [f.input_variable for f in self.fields]
        # DSP v1's "long" format: blank lines between fields of augmented records.
        self.is_long = len(self.fields) > 3 or any(f.separator == "\n" for f in self.fields)
        # Rendered guidelines and demos, valid while fields, handlers and is_long are what they were
        # when the memo was filled (see _memo).
        self._memo_state: tuple[Any, ...] | None = None
        self._memo_table: dict[Any, str] = {}

    def __repr__(self) -> str:
        return f"Template({self.instructions!r}, fields={self.keys})"

    def stops_for(self, example: Mapping[str, Any]) -> list[str]:
        """Stop sequences for a model that would otherwise go on to write the next record.

        DSP v1 sent none (GPT-3 stopped by itself); a base model continues with a part separator or
        with one of the input fields (a new question), which never belong in a completion.
        `dsp.generate(template, stop="auto")` uses these.

        >>> t = Template("i", question=Type("Question:", "q"), answer=Type("Answer:", "a"))
        >>> t.stops_for({"question": "Who?"})
        ['\\n\\n---', '\\nQuestion:']
        """
        inputs = [f"\n{f.name}" for f in self.fields[:-1] if _has_value(example, f.input_variable)]
        return ["\n\n---", *inputs]

    # -- rendering -------------------------------------------------------------------------------

    def _memo(self) -> dict[Any, str] | None:
        """The memo of rendered text, or None when a field has a custom formatter.

        Rendering a demo or the guidelines is a pure function of the template and the demo's field
        values only when the formatters are pure; the built-in ones are, a user's may not be (so no
        memo then). The memo is dropped if `fields`, `format_handlers` or `is_long` were changed.
        """
        state = self._memo_state
        handlers = self.format_handlers
        if state is None or state[0] is not self.fields or state[1] != len(self.fields) \
                or state[2] != handlers or state[3] != self.is_long:
            pure = all(handlers.get(f.input_variable, _collapse) in _PURE_FORMATTERS for f in self.fields)
            state = (self.fields, len(self.fields), dict(handlers), self.is_long, pure)
            self._memo_state, self._memo_table = state, {}
        return self._memo_table if state[4] else None

    def _render_demo(self, demo: Mapping[str, Any], memo: dict[Any, str] | None, i: int) -> str:
        """`self.query(demo, is_demo=True)`, from the memo when the same field values were rendered before."""
        key = self._demo_key(demo) if memo is not None else None
        if key is not None:
            text = memo.get(key)
            if text is not None:
                return text
        text = self.query(demo, is_demo=True, where=f"demo {i}")
        if key is not None:
            if len(memo) >= DEMO_MEMO_SIZE:
                memo.clear()
            memo[key] = text
        return text

    def _demo_key(self, demo: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """What a demo's rendering depends on (its fields' values, its augmented flag), or None if a
        value is not of a plain type that can stand for itself in a key."""
        key: list[Any] = [bool(self.is_long and demo.get("augmented"))]
        for name in self.keys:
            value = demo.get(name)
            if value is not None and type(value) is not str:
                value = _frozen(value)
                if value is _UNKEYABLE:
                    return None
            key.append(value)
        return tuple(key)

    def _format(self, field: Field, value: Any, where: str) -> str:
        handler = self.format_handlers.get(field.input_variable, _collapse)
        try:
            return handler(value)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{where}, field {field.input_variable!r}: {error}") from None

    def query(self, example: Mapping[str, Any], is_demo: bool = False, where: str = "the example") -> str:
        """Render one record: each present, non-None field in template order.

        Unless `is_demo`, the first field after the last filled one is set to "" so the prompt ends
        with that field's name for the LM to continue.
        """
        record = example
        if not is_demo:
            record = dict(example)  # a copy: the field to be filled is set to "" below
            filled = [_has_value(record, key) for key in self.keys]
            for i in range(1, len(filled)):
                if filled[i - 1] and not any(filled[i:]):
                    record[self.keys[i]] = ""
                    break
        parts = []
        for field in self.fields:
            value = record.get(field.input_variable)
            if value is not None:
                parts.append(field.name + field.separator + self._format(field, value, where))
        joiner = "\n\n" if self.is_long and record.get("augmented") else "\n"
        return joiner.join(parts)

    def guidelines(self, show_guidelines: bool = True) -> str:
        """The "Follow the following format." block: every field holding its own description."""
        if not show_guidelines:
            return ""
        memo = self._memo()
        text = memo.get(_GUIDELINES_KEY) if memo is not None else None
        if text is None:
            record = {f.input_variable: f.description for f in self.fields}
            record["augmented"] = self.is_long
            text = GUIDELINES_HEADER + self.query(record, is_demo=True, where="the guidelines")
            if memo is not None:
                memo[_GUIDELINES_KEY] = text
        return text

    def _check_demo(self, i: int, demo: Any) -> None:
        if not isinstance(demo, dict) and not isinstance(demo, Mapping):  # dict first: the common, fast case
            raise TypeError(f"demo {i} is a {type(demo).__name__}, not an Example or dict: {demo!r:.80}")
        for key in self.keys:  # a loop, not any(generator): this runs for every demo of every call
            if key in demo:
                return
        raise ValueError(
            f"demo {i} has none of the template's fields ({', '.join(self.keys)}); "
            f"its fields are: {', '.join(map(str, demo)) or 'none'}"
        )

    def __call__(self, example: Mapping[str, Any], show_guidelines: bool = True) -> str:
        """The full prompt for `example`, its `demos` included."""
        if not isinstance(example, dict) and not isinstance(example, Mapping):
            raise TypeError(f"a template renders an Example or dict, not {type(example).__name__}")
        query = Example(example)
        last = self.keys[-1]
        query.pop(last, None)
        if len(self.keys) > 1 and not any(_has_value(query, key) for key in self.keys[:-1]):
            raise ValueError(
                f"the example has none of the template's input fields ({', '.join(self.keys[:-1])}); "
                f"its fields are: {', '.join(k for k in query if k != 'demos') or 'none'}"
            )
        demos = query.get("demos") or []
        raw, augmented = [], []
        memo = self._memo() if demos else None
        inputs = self.keys[:-1]
        for i, demo in enumerate(demos):
            self._check_demo(i, demo)
            if demo.get("augmented"):
                augmented.append(self._render_demo(demo, memo, i))
            elif demo.get(last) is not None:
                for key in inputs:
                    if demo.get(key) is not None:
                        break
                else:
                    raise ValueError(f"demo {i} has {last!r} but none of the inputs {', '.join(inputs)}")
                raw.append(self._render_demo(demo, memo, i))
        if self.is_long:
            query["augmented"] = True
        rendered_query = self.query(query)
        guidelines = self.guidelines(show_guidelines)
        raw_block = "\n\n".join(raw)
        if raw_block and not augmented and not self.is_long:
            parts = [self.instructions, guidelines, raw_block + "\n\n" + rendered_query]
        elif not raw_block:
            parts = [self.instructions, guidelines, *augmented, rendered_query]
        else:
            parts = [self.instructions, raw_block, guidelines, *augmented, rendered_query]
        return PART_SEPARATOR.join(p.strip() for p in parts if p.strip()).strip()

    # -- parsing ---------------------------------------------------------------------------------

    def extract(self, example: Mapping[str, Any], raw_pred: str) -> Example:
        """Parse a completion into fields, starting at the first field `example` lacks.

        Each field runs up to the next field's name at a line start; the last field takes the rest.
        """
        if not isinstance(raw_pred, str):
            raise TypeError(f"a completion must be text, got {type(raw_pred).__name__}: {raw_pred!r:.80}")
        result = Example(example)
        idx = next((i for i, key in enumerate(self.keys) if result.get(key) is None), len(self.keys))
        idx = min(idx, len(self.keys) - 1)
        rest = raw_pred.strip()
        # A completion that opens by echoing the field being filled ("Answer: Paris"), or by jumping to
        # a later field (skipping this one), is read as that field rather than as literal text.
        for j in range(len(self.fields) - 1, idx - 1, -1):
            if rest.startswith(self.fields[j].name):
                idx, rest = j, rest[len(self.fields[j].name):].strip()
                break
        while rest:
            field = self.fields[idx]
            if idx == len(self.fields) - 1:
                result[field.output_variable] = rest
                break
            # The field ends where the next field's name starts a line; if the model skipped the next
            # field, a later field's name ends it instead (whichever comes first).
            found = [(rest.find("\n" + later.name), j) for j, later in enumerate(self.fields[idx + 1:], start=idx + 1)]
            found = [(pos, j) for pos, j in found if pos >= 0]
            if not found:
                result[field.output_variable] = rest
                break
            pos, j = min(found)
            result[field.output_variable] = rest[:pos].strip()
            rest = rest[pos + 1 + len(self.fields[j].name):].strip()
            idx = j
        # A small model may copy the guidelines' placeholders ("${a short factoid answer...}"), whole or
        # line by line with their field names (a continuation that restates the format): those lines
        # fill nothing, and a field left with nothing stays missing (the completion is less complete).
        names = tuple(f.name for f in self.fields)
        for field in self.fields:
            key = field.output_variable
            value = result.get(key)
            if _has_value(example, key) or not isinstance(value, str) or "${" not in value:
                continue
            kept = "\n".join(line for line in value.split("\n") if not _is_placeholder_line(line, names)).strip()
            if kept:
                result[key] = kept
            else:
                del result[key]
        return result


_PURE_FORMATTERS = (passages2text, format_answers, _collapse)
_GUIDELINES_KEY = ("guidelines",)  # no demo key is a 1-tuple: theirs hold the flag and every field
_UNKEYABLE = object()
_PLAIN_SCALARS = (int, float, bool)


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a demo field value, equal only for values that render the same;
    `_UNKEYABLE` for anything but str, int, float, bool, None and lists/tuples of them (exact types:
    a subclass may render differently)."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind in _PLAIN_SCALARS:
        return (kind, value)
    if kind is list or kind is tuple:
        items = tuple(value)
        for item in items:
            if type(item) is not str:  # the common case (passages, answers) is all text: no copy
                items = tuple(_frozen(item) for item in items)
                if _UNKEYABLE in items:
                    return _UNKEYABLE
                break
        return (kind, items)
    return _UNKEYABLE


def _is_placeholder_line(line: str, names: tuple[str, ...]) -> bool:
    """Whether `line` is only a "${...}" placeholder, maybe after a field name ("Answer: ${...}").

    >>> _is_placeholder_line("Answer: ${a short factoid answer}", ("Answer:",)), _is_placeholder_line("Paris", ())
    (True, False)
    """
    line = line.strip()
    for name in names:
        if line.startswith(name):
            line = line[len(name):].strip()
            break
    return line.startswith("${") and line.endswith("}") and line.count("${") == 1 and "}" not in line[:-1]


def _has_value(record: Mapping[str, Any], key: str) -> bool:
    value = record.get(key)
    return value is not None and not (isinstance(value, str) and value == "")
