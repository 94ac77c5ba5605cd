"""How DSP v1's GPT-3 client shaped a completion request, shared by `ReplayLM` and `GPT3`.

DSP v1 started every request from fixed defaults, let each call override them, and asked for the top-5
logprobs whenever it sampled more than one completion. Replaying a v1 recording and calling a real
completion endpoint must build byte-identical requests, so both go through this one function.

>>> request = {"model": "text-davinci-002", **V1_COMPLETION_DEFAULTS, "n": 20, "temperature": 0.7, "prompt": "Q:"}
>>> shape_v1_completion(request)["logprobs"]
5
>>> shape_v1_completion({**V1_COMPLETION_DEFAULTS, "prompt": "Q:"})["logprobs"] is None
True
"""

from __future__ import annotations

from typing import Any

__all__ = ["V1_COMPLETION_DEFAULTS", "V1_SAMPLED_LOGPROBS", "shape_v1_completion"]

# The request DSP v1's GPT3 client sent: these defaults, overridden per call; logprobs=5 when n>1.
V1_COMPLETION_DEFAULTS: dict[str, Any] = {
    "temperature": 0.0, "max_tokens": 150, "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0,
    "n": 1, "stop": None, "logprobs": None,
}
V1_SAMPLED_LOGPROBS = 5


def shape_v1_completion(request: dict[str, Any]) -> dict[str, Any]:
    """Apply DSP v1's rule to a built request (in place, and returned): n>1 without logprobs asks for 5.

    An explicit `logprobs` from the caller is kept, as v1 kept it.
    """
    n = request.get("n", 1)
    if isinstance(n, int) and n > 1 and request.get("logprobs") is None:
        request["logprobs"] = V1_SAMPLED_LOGPROBS
    return request
