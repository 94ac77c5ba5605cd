"""The LM-contract side of batched sampling (`dsp.clients.lm.SamplesInBatch`), with scripted backends.

An LM that declares `SamplesInBatch` gets the draws of an n>1 call that the cache lacks in one
`_request_batch` call; each draw is still cached on its own under {..., "n": 1, "seed": seed+i}, so
reruns, larger n and the one-at-a-time path share entries. An LM that merely has a method of that
name is not batched: capabilities are declared, never probed.
"""

from __future__ import annotations

import pytest

import dsp
from dsp.clients.lm import LM, SamplesInBatch


class Draws(LM):
    """A backend that answers each draw with its seed, recording how it was asked."""

    native_n = False

    def __init__(self) -> None:
        super().__init__("draws")
        self.batches: list[list[int]] = []
        self.singles: list[int] = []

    def build_request(self, prompt, **params):
        return {"model": self.model, "n": 1, "seed": 0, "temperature": 0.7, **params, "prompt": prompt}

    @staticmethod
    def answer(request) -> dict:
        return {"choices": [{"text": f" draw {request['seed']}", "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2}}

    def _request(self, request):
        self.singles.append(request["seed"])
        return self.answer(request)


class Batched(Draws, SamplesInBatch):
    def _request_batch(self, requests):
        self.batches.append([r["seed"] for r in requests])
        return [self.answer(r) for r in requests]


class Undeclared(Draws):
    def _request_batch(self, requests):  # same method, no declaration: must not be used
        raise AssertionError("an undeclared capability was probed")


def test_missing_draws_come_in_one_batch_each_cached_alone(tmp_path):
    lm = Batched()
    with dsp.settings.context(cache_dir=str(tmp_path), cache=True):
        assert lm("Q:", n=5, seed=10) == [f" draw {s}" for s in range(10, 15)]
        assert lm.batches == [[10, 11, 12, 13, 14]] and lm.singles == []
        assert (lm.usage.requests, lm.usage.completion_tokens) == (5, 10)  # accounted per draw, as before
        assert lm.history[-1]["response"]["usage"] == {"prompt_tokens": 15, "completion_tokens": 10}
        assert lm("Q:", n=5, seed=10) == [f" draw {s}" for s in range(10, 15)]  # a rerun: no call
        assert lm.batches == [[10, 11, 12, 13, 14]] and lm.usage.cached_requests == 5
        assert lm("Q:", n=8, seed=10)[5:] == [" draw 15", " draw 16", " draw 17"]
        assert lm.batches[-1] == [15, 16, 17]  # only the missing draws, together
        assert lm("Q:", n=10, seed=10)[-1] == " draw 19"
        assert lm.batches[-1] == [18, 19]
        assert lm("Q:", n=12, seed=10)[-1] == " draw 21"
        assert lm.batches[-1] == [20, 21]
        # One missing draw goes through the single-request path; n=1 always does.
        lm("Q:", n=13, seed=10)
        lm("Q: other", seed=3)
        assert lm.singles == [22, 3]
        # The entries are the ones a one-at-a-time backend writes and reads.
        plain = Draws()
        assert plain("Q:", n=13, seed=10) == lm("Q:", n=13, seed=10)
        assert plain.usage.requests == 0 and plain.singles == []


def test_cache_off_asks_for_every_draw_in_one_batch():
    lm = Batched()
    assert lm("Q:", n=3, seed=0, cache=False) == [" draw 0", " draw 1", " draw 2"]
    assert lm("Q:", n=3, seed=0, cache=False) == [" draw 0", " draw 1", " draw 2"]
    assert lm.batches == [[0, 1, 2], [0, 1, 2]]


def test_capabilities_are_declared_not_probed():
    lm = Undeclared()
    assert not isinstance(lm, SamplesInBatch)
    assert lm("Q:", n=3, seed=0, cache=False) == [" draw 0", " draw 1", " draw 2"]
    assert lm.singles == [0, 1, 2]


def test_a_bad_response_in_a_batch_is_never_cached(tmp_path):
    class Broken(Batched):
        def _request_batch(self, requests):
            self.batches.append([r["seed"] for r in requests])
            return [self.answer(r) if r["seed"] != 1 else {"choices": []} for r in requests]

    lm = Broken()
    with dsp.settings.context(cache_dir=str(tmp_path), cache=True):
        with pytest.raises(ValueError, match="no completions"):
            lm("Q:", n=3, seed=0)
        assert lm.usage.requests == 3  # the backend computed all three
        fixed = Batched()
        assert fixed("Q:", n=3, seed=0) == [" draw 0", " draw 1", " draw 2"]
        assert fixed.batches == [[1, 2]]  # draw 0 was cached; draws 1 (an error) and 2 (after it) were not

    class Short(Batched):
        def _request_batch(self, requests):
            return [self.answer(requests[0])]

    with pytest.raises(ValueError, match="not a list of 3 responses"):
        Short()("Q:", n=3, seed=0, cache=False)
