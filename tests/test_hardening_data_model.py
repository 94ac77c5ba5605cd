"""Field names that would hide an attribute (issue 29, item 18): one rule for Example, Completions and
Template fields -- a field may not take the name of an attribute of the class that holds it; it is
refused, in one line naming the field and what it would hide, wherever it would be set."""

from __future__ import annotations

import copy
import pickle
import re

import pytest

import dsp

QUESTION = dsp.Type(prefix="Question:", desc="${the question}")
ANSWER = dsp.Type(prefix="Answer:", desc="${the answer}")


@pytest.mark.parametrize("name", ["copy", "items", "keys", "values", "get", "update", "pop", "without", "demos_at"])
def test_an_example_field_named_after_a_method_is_refused_at_construction(name):
    with pytest.raises(ValueError, match=rf"^Example field '{name}' would hide Example\.{name}\(\); rename the field$"):
        dsp.Example(**{name: "x"})
    with pytest.raises(ValueError, match=rf"Example field '{name}'"):
        dsp.Example({"question": "q", name: "x"})  # from a dict (a data set's row)


def test_an_example_field_named_after_a_method_is_refused_however_it_is_set():
    x = dsp.Example(question="q")
    setters = {
        "attribute": lambda: setattr(x, "copy", "v"),
        "item": lambda: x.__setitem__("items", "v"),
        "update (keywords)": lambda: x.update(keys="v"),
        "update (dict)": lambda: x.update({"get": "v"}),
        "update (pairs)": lambda: x.update([("pop", "v")]),
        "setdefault": lambda: x.setdefault("values", "v"),
        "copy": lambda: x.copy(without="v"),
        "|=": lambda: x.__ior__({"demos_at": "v"}),
    }
    for how, set_it in setters.items():
        with pytest.raises(ValueError, match="would hide Example"):
            set_it()
        assert x == {"question": "q"}, how  # nothing was set
    assert callable(x.copy) and x.copy(answer="a") == {"question": "q", "answer": "a"}
    x.update({"answer": "a"}, context=["p"])  # ordinary names still go in every way
    x |= {"rationale": "r"}
    x.setdefault("demos", [])
    assert x == {"question": "q", "answer": "a", "context": ["p"], "rationale": "r", "demos": []}


def test_base_is_positional_only_so_it_is_free_as_a_field_name():
    assert dsp.Example(question="q", base="b") == {"question": "q", "base": "b"}
    assert dsp.Example({"question": "q"}, base="b").base == "b"
    assert dsp.Example(dsp.Example(question="q"), answer="a") == {"question": "q", "answer": "a"}


def test_completions_internals_are_private_and_their_own_name_is_refused():
    template = dsp.Template("Answer.", question=QUESTION, answer=ANSWER)
    one = dsp.Completions([dsp.Example(answer="a", data="d")], template=template)
    assert (one.answer, one.data, one.template) == ("a", "d", template)
    many = dsp.Completions([{"data": "d1"}, {"data": "d2"}])
    assert many.data == ["d1", "d2"] and many.template is None
    with pytest.raises(ValueError, match=r"^Completions field 'template' would hide Completions\.template; rename"):
        dsp.Completions([dsp.Example(template="t")])
    with pytest.raises(ValueError, match=r"^Example field 'items' would hide Example\.items\(\)"):
        dsp.Completions([{"items": ["i"]}])
    for name in ("items", "keys", "copy"):  # a completion's methods are not its fields
        with pytest.raises(AttributeError, match=rf"Example has no field '{name}'"):
            getattr(one, name)
    again = pickle.loads(pickle.dumps(one))
    assert (again.answer, again.data, list(again)) == ("a", "d", list(one))
    assert copy.deepcopy(one).data == "d" and len(copy.copy(many)) == 2


def test_a_template_field_may_be_named_instructions_and_v1_templates_still_build():
    instructions = dsp.Type(prefix="Instructions:", desc="${what to do}")
    template = dsp.Template("Follow the instructions.", instructions=instructions, answer=ANSWER)
    assert template.instructions == "Follow the instructions." and template.keys == ["instructions", "answer"]
    prompt = template(dsp.Example(instructions="Say hi.", demos=[]))
    assert prompt.startswith("Follow the instructions.") and prompt.endswith("Instructions: Say hi.\nAnswer:")
    v1 = dsp.Template(instructions="Answer questions.", question=QUESTION, answer=ANSWER)  # DSP v1's keyword form
    assert v1.instructions == "Answer questions." and v1.keys == ["question", "answer"]
    with pytest.raises(TypeError, match="needs its instructions"):
        dsp.Template(question=QUESTION, answer=ANSWER)


@pytest.mark.parametrize("name, hidden", [("copy", "Example.copy()"), ("keys", "Example.keys()"),
                                          ("template", "Completions.template")])
def test_a_template_field_that_would_hide_an_attribute_is_refused_when_the_template_is_built(name, hidden):
    message = rf"^template field '{name}' would hide {re.escape(hidden)}; rename the field$"
    with pytest.raises(ValueError, match=message):
        dsp.Template("Answer.", question=QUESTION, **{name: ANSWER})


def test_no_bundled_template_or_program_uses_a_refused_name():
    import importlib
    import pkgutil

    import programs
    import templates
    from dsp.example import RESERVED_FIELDS

    found = []
    for package in (programs, templates):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)  # a refused template field would raise here
            for value in vars(module).values():
                if isinstance(value, dsp.Template):
                    found += [key for key in value.keys if key in RESERVED_FIELDS]
    assert found == []


# -- item 15: an empty question -------------------------------------------------------------------------

@pytest.mark.parametrize("question", ["", "   ", "\n\t "])
def test_ask_with_an_empty_question_is_one_line_and_exit_2_before_any_model_loads(question, monkeypatch, capsys):
    from programs.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError("a model, an index or a data set was loaded before the question was checked")

    monkeypatch.setattr(dsp, "lm_from_spec", refuse)
    monkeypatch.setattr(dsp, "rm_from_spec", refuse)
    monkeypatch.setattr(dsp.datasets, "few_shot_train", refuse)
    assert main(["ask", question]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err == f"dsp ask: error: the question is empty ({question!r}): ask one, e.g. dsp ask \"Who wrote Hamlet?\""
    assert "Traceback" not in captured.err + captured.out
