"""Template rendering and extraction: the DSP v1 format and its edge cases."""

from __future__ import annotations

import pytest

import dsp
from templates.intro import (
    Answer, Question, hop_template, qa_template, qa_template_with_CoT, qa_template_with_passages,
    rewrite_template,
)

DEMOS = [dsp.Example(question="Q1?", answer=["A1", "alias"]), dsp.Example(question="Q2?", answer="A2")]


def test_short_template_puts_raw_demos_after_the_guidelines_with_the_query():
    prompt = qa_template(dsp.Example(question="Who?", demos=DEMOS))
    assert prompt == (
        "Answer questions with short factoid answers.\n\n---\n\n"
        "Follow the following format.\n\n"
        "Question: ${the question to be answered}\n"
        "Answer: ${a short factoid answer, often between 1 and 5 words}\n\n---\n\n"
        "Question: Q1?\nAnswer: A1\n\nQuestion: Q2?\nAnswer: A2\n\nQuestion: Who?\nAnswer:"
    )


def test_long_template_puts_compact_raw_demos_before_the_guidelines():
    prompt = qa_template_with_passages(dsp.Example(question="Who?", context=["T | one"], demos=DEMOS))
    assert prompt == (
        "Answer questions with short factoid answers.\n\n---\n\n"
        "Question: Q1?\nAnswer: A1\n\nQuestion: Q2?\nAnswer: A2\n\n---\n\n"
        "Follow the following format.\n\n"
        "Context:\n${sources that may contain relevant content}\n\n"
        "Question: ${the question to be answered}\n\n"
        "Answer: ${a short factoid answer, often between 1 and 5 words}\n\n---\n\n"
        "Context:\n«T | one»\n\nQuestion: Who?\n\nAnswer:"
    )


def test_augmented_demos_are_separate_parts_and_short_ones_stay_compact():
    aug = dsp.Example(question="Q?", rationale="it is", query="find it", augmented=True)
    prompt = rewrite_template(dsp.Example(question="Who?", demos=[aug, *DEMOS]))
    parts = prompt.split("\n\n---\n\n")
    # raw demos lack `query` (the last field) so they are dropped; the augmented one is its own part
    assert parts[2] == ("Question: Q?\nRationale: Let's think step by step. To answer this question, we first "
                        "need to find out it is\nSearch Query: find it")
    assert parts[3].endswith("we first need to find out") and len(parts) == 4
    assert "Q1?" not in prompt


def test_passages_keep_guillemets_and_newlines_and_questions_are_collapsed():
    passages = ["A | has «quotes» inside", "B | two\nlines"]
    prompt = qa_template_with_passages(dsp.Example(question="  multi\n line\tquestion ?  ", context=passages))
    assert "Context:\n[1] «A | has «quotes» inside»\n[2] «B | two\nlines»" in prompt
    assert "Question: multi line question ?" in prompt
    assert not prompt.endswith(" ")


def test_a_missing_middle_field_is_left_out_of_the_query():
    prompt = qa_template_with_passages(dsp.Example(question="Who?"))
    assert prompt.endswith("---\n\nQuestion: Who?\n\nAnswer:")


def test_the_query_ends_with_the_first_empty_field_after_the_inputs():
    prompt = qa_template_with_CoT(dsp.Example(question="Who?", context="a context", answer="gold"))
    assert prompt.endswith("Question: Who?\n\nRationale: Let's think step by step.")
    assert "gold" not in prompt  # the last field is never shown for the example being asked


def test_show_guidelines_false_leaves_the_block_out():
    prompt = qa_template(dsp.Example(question="Who?", demos=[]), show_guidelines=False)
    assert prompt == "Answer questions with short factoid answers.\n\n---\n\nQuestion: Who?\nAnswer:"


def test_extract_reads_each_field_up_to_the_next_name_and_the_last_takes_the_rest():
    x = dsp.Example(question="Q")
    out = rewrite_template.extract(x, " the singer\n\nSearch Query:\n\nWho sings it?\nSearch Query: again")
    assert out.rationale == "the singer"
    assert out.query == "Who sings it?\nSearch Query: again"
    assert out.question == "Q"


def test_extract_of_garbage_fills_only_the_current_field_and_empty_fills_nothing():
    x = dsp.Example(question="Q", context="c")
    garbage = qa_template_with_CoT.extract(x, " ¯\\_(ツ)_/¯ no fields here\n\nat all ")
    assert garbage.rationale == "¯\\_(ツ)_/¯ no fields here\n\nat all" and "answer" not in garbage
    empty = qa_template_with_CoT.extract(x, "   \n ")
    assert "rationale" not in empty and "answer" not in empty


def test_extract_survives_an_echoed_or_skipped_field():
    x = dsp.Example(question="Q", context="c")
    echoed = qa_template_with_CoT.extract(x, " Rationale: Let's think step by step. It is X.\nAnswer: X")
    assert echoed.rationale == "It is X." and echoed.answer == "X"
    skipped = qa_template_with_CoT.extract(x, " Answer: Paris")
    assert skipped.answer == "Paris" and skipped.get("rationale") is None
    echoed_answer = qa_template.extract(dsp.Example(question="Q"), "Answer: Rome")
    assert echoed_answer.answer == "Rome"


def test_extract_jumps_over_a_skipped_middle_field():
    five = dsp.Template("i", question=Question, a=dsp.Type("A:", "d"), b=dsp.Type("B:", "d"), answer=Answer)
    out = five.extract(dsp.Example(question="Q"), " first\nAnswer: final")
    assert out.a == "first" and out.get("b") is None and out.answer == "final"


def test_format_answers_and_passages2text():
    assert dsp.format_answers([" x ", "y"]) == "x"
    assert dsp.format_answers("as is ") == "as is "
    assert dsp.passages2text("plain") == "plain"
    assert dsp.passages2text(["one"]) == "«one»"
    assert dsp.passages2text([{"long_text": "T | t", "text": "t"}, "u"]) == "[1] «T | t»\n[2] «u»"


def test_type_call_returns_a_modified_copy():
    short = Answer(desc="${one word}")
    assert short.desc == "${one word}" and Answer.desc != short.desc and short.format is Answer.format


# -- bad input -------------------------------------------------------------------------------------


def test_a_field_that_is_not_a_type_is_named():
    with pytest.raises(TypeError, match="template field 'answer' must be a dsp.Type"):
        dsp.Template("i", question=Question, answer="Answer:")
    with pytest.raises(ValueError, match="prefix"):
        dsp.Type(prefix="  ", desc="d")
    with pytest.raises(ValueError, match="share the prefix"):
        dsp.Template("i", question=Question, other=Question)


def test_non_text_where_text_is_needed_names_the_field():
    with pytest.raises(TypeError, match="the example, field 'question': needs text, got int"):
        qa_template(dsp.Example(question=42))
    with pytest.raises(TypeError, match="demo 1, field 'question'"):
        qa_template(dsp.Example(question="Q", demos=[DEMOS[0], dsp.Example(question=["x"], answer="a")]))
    with pytest.raises(TypeError, match="passage 2"):
        qa_template_with_passages(dsp.Example(question="Q", context=["ok", 3]))
    with pytest.raises(TypeError, match="completion must be text"):
        qa_template.extract(dsp.Example(question="Q"), None)


def test_a_demo_lacking_the_templates_fields_is_named():
    with pytest.raises(ValueError, match=r"demo 0 has none of the template's fields \(question, answer\); its fields are: q, a"):
        qa_template(dsp.Example(question="Q", demos=[{"q": "x", "a": "y"}]))
    with pytest.raises(ValueError, match="demo 0 has 'answer' but none of the inputs question"):
        qa_template(dsp.Example(question="Q", demos=[dsp.Example(answer="y")]))
    with pytest.raises(TypeError, match="demo 0 is a str"):
        qa_template(dsp.Example(question="Q", demos=["Q: x A: y"]))
    with pytest.raises(ValueError, match="empty list of answers"):
        qa_template(dsp.Example(question="Q", demos=[dsp.Example(question="x", answer=[])]))


def test_an_example_without_any_input_field_is_named():
    with pytest.raises(ValueError, match=r"none of the template's input fields \(context, question\)"):
        qa_template_with_passages(dsp.Example(query="q"))
    with pytest.raises(TypeError, match="renders an Example or dict"):
        hop_template("just a string")


def test_a_copied_guidelines_placeholder_fills_nothing():
    x = dsp.Example(question="Q", context="c")
    out = qa_template_with_CoT.extract(x, " ${a step-by-step deduction that identifies the correct response, which will be "
                                 "provided below}\n\nAnswer: ${a short factoid answer, often between 1 and 5 words}")
    assert "rationale" not in out and "answer" not in out
    kept = qa_template_with_CoT.extract(x, " real reasoning\n\nAnswer: ${a short factoid answer, often between 1 and 5 words}")
    assert kept.rationale == "real reasoning" and "answer" not in kept
    # A continuation that restates the format line by line (seen from Gemma 3 270M on the multi-hop
    # rewrite template, after the rationale came back empty) fills nothing either.
    partial = dsp.Example(question="Q", context="c", rationale="")
    restated = qa_template_with_CoT.extract(partial, " ${a step-by-step deduction that identifies the correct response, "
                                            "which will be provided below}\nAnswer: ${a short factoid answer, often "
                                            "between 1 and 5 words}")
    assert "answer" not in restated
    mixed = qa_template_with_CoT.extract(partial, "Paris\nAnswer: ${a short factoid answer, often between 1 and 5 words}")
    assert mixed.answer == "Paris"
