"""Which fields of a dataset's examples a program sees, which one is the gold label, and which field of
the program's output is its prediction: declared by the dataset, so no gold label reaches a prompt.

>>> qa = Fields()                                  # DSP v1's convention: program(example.question)
>>> qa.program_input(Example(question="q", answer="a"))
'q'
>>> turns = Fields(inputs=("Conversation_no", "Turn_no", "question"))
>>> turns.program_input(Example(Conversation_no=1, Turn_no=2, question="q", answer="a", Rewrite="r"))
{'Conversation_no': 1, 'Turn_no': 2, 'question': 'q'}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..example import Example

__all__ = ["Fields", "QA_FIELDS"]


@dataclass(frozen=True)
class Fields:
    """`inputs`: one field name (the program is called with that value, as DSP v1's evaluate called
    ``program(example.question)``) or a tuple of names (the program gets an Example holding only those:
    an allow-list, so a dataset's gold fields, whatever they are called, never reach it). `gold`: the
    label the metric compares with. `prediction`: the field of the program's output (an Example or
    mapping) holding the prediction; an output that is not a mapping is the prediction itself.
    """

    inputs: str | tuple[str, ...] = "question"
    gold: str = "answer"
    prediction: str = "answer"

    def __post_init__(self) -> None:
        names = (self.inputs,) if isinstance(self.inputs, str) else self.inputs
        if not isinstance(names, tuple) or not names or not all(isinstance(n, str) and n for n in names):
            raise TypeError(f"Fields.inputs must be a field name or a non-empty tuple of them, got {self.inputs!r}")
        for name in ("gold", "prediction"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TypeError(f"Fields.{name} must be a field name, got {value!r}")
        if self.gold in names:
            raise ValueError(f"the gold field {self.gold!r} cannot also be an input")

    @property
    def input_names(self) -> tuple[str, ...]:
        return (self.inputs,) if isinstance(self.inputs, str) else self.inputs

    def check(self, example: Mapping[str, Any], index: int) -> None:
        """A clear error when dev example `index` lacks a declared field."""
        for role, name in [*(("input", n) for n in self.input_names), ("gold", self.gold)]:
            if name not in example:
                raise ValueError(f"dev example {index} has no {role} field {name!r} "
                                 f"(its fields: {', '.join(map(str, example))})")

    def program_input(self, example: Mapping[str, Any]) -> Any:
        """What the program is called with: the one input's value, or an Example of the inputs only."""
        if isinstance(self.inputs, str):
            return example[self.inputs]
        return Example({name: example[name] for name in self.inputs})

    def prediction_of(self, output: Any) -> Any:
        return output.get(self.prediction) if isinstance(output, Mapping) else output

    def as_dict(self) -> dict[str, Any]:
        return {"inputs": list(self.input_names) if not isinstance(self.inputs, str) else self.inputs,
                "gold": self.gold, "prediction": self.prediction}


QA_FIELDS = Fields()
