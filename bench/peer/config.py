"""The peer harness's settings, in one place: models and their servers, the generation policy both systems
run under, the DSPy pin, and what each side runs per dataset.

Standard library only: the project's side (`peer.py`, project venv), the DSPy side (`dspy_side.py`, DSPy's
own venv) and `run.sh` (through `python3 config.py KEY`) all read this file, so a setting cannot differ
between the two systems by accident.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "Model", "MODELS", "DSPY_VERSION", "DSPY_EXTRAS", "GENERATION", "DSPY_K", "MULTIHOP", "KNN_K", "DSPY_TRAIN", "DSPY_VAL",
    "COMPILE_ARGS", "DSP_SEEDS", "SMALL_SEEDS", "COMPILE_SEEDS", "DSPY_SEEDS", "DSPY_PROGRAMS", "OPTIMIZERS",
    "ADAPTERS", "PORT_BASE", "DATASETS", "column_port", "dsp_lm_spec", "dspy_model", "split_of", "units", "selected",
]

# DSPy, pinned: the newest 3.x on PyPI when the harness was written (`pip index versions dspy`).
DSPY_VERSION = "3.4.1"
# DSPy 3.4.1's optional dependencies the harness needs, pinned: optuna (MIPROv2's search) and numpy
# (KNNFewShot's KNN and the harness's vectorizer); DSPy's own extras of those names.
DSPY_EXTRAS = ("optuna==5.1.0", "numpy==2.4.6")


@dataclass(frozen=True)
class Model:
    """One LM, served by `python -m dsp.serve_lm` (llama-cpp-python's OpenAI-compatible server).

    `serve_args`: what selects the model on `dsp.serve_lm`'s command line (nothing: its default, Gemma);
    `alias`: the model name the server answers to (llama_cpp.server's --model_alias), the name both
    systems send; `dsp_type`: the endpoint dsp's OpenAI client uses ("text": /v1/completions, the raw
    DSP prompt as the embedded client sends it; "chat": the prompt as one user message);
    `merge_system`: the gate moves a chat request's system message to the start of the first user
    message, as the model's own chat template does, where the server's chat format would drop it;
    `dspy`: whether DSPy's units belong to this column (DSPy always calls the chat endpoint, so a
    column that differs from another only in `dsp_type` leaves them to that one); `servers`: how many
    servers of the model the gate routes generations over, each by the longest shared prompt prefix
    (gate.PrefixRouter: two keep DSPy's two adapters' prompts apart, bench/bench_serve_cache.py).
    """

    key: str
    label: str
    alias: str
    serve_args: tuple[str, ...] = ()
    dsp_type: str = "text"
    server: tuple[str, ...] = field(default=("--n_ctx", "8192"))
    merge_system: bool = False
    dspy: bool = True
    servers: int = 2


# The ONE model -> server mapping. Correct it here if `dsp.serve_lm` names SmolLM2 otherwise.
MODELS: dict[str, Model] = {
    # Gemma's GGUF carries no chat template, so dsp.serve_lm serves it with llama-cpp-python's "gemma"
    # chat format, which drops system messages (DSPy's adapters put their whole field format there);
    # Gemma 3's own template puts the system text, then a blank line, at the start of the first user turn.
    "gemma": Model("gemma", "Gemma 3 270M (Q4_K_M, the embedded default)", "gemma-3-270m", merge_system=True),
    "smollm2": Model("smollm2", "SmolLM2-135M-Instruct (Q4_1)", "smollm2-135m-instruct",
                     serve_args=("--model", "smollm2"), dsp_type="chat"),
    # The same served model, dsp's prompt continued as text (/v1/completions, no chat template): on 60 NQ
    # dev questions (2026-12-05, retrieve-then-read seed 0) 23.3 EM against the chat path's 3.3 (13/1,
    # p = 0.002), where the chat turn mostly answers "The answer to the question is:" and stops. DSPy's
    # units stay in the smollm2 column: they call the chat endpoint either way.
    "smollm2-text": Model("smollm2-text", "SmolLM2-135M-Instruct (Q4_1), dsp through /v1/completions",
                          "smollm2-135m-instruct", serve_args=("--model", "smollm2"), dsp_type="text", dspy=False),
}

# Generation policy, the same on both sides. DSPy sends these on every call (dspy.LM(temperature=,
# max_tokens=)); dsp's programs send a temperature only where they sample (self-consistency) and no
# max_tokens, and llama.cpp's server would then use its own defaults (temperature 0.8, 16 tokens for
# /v1/completions), so the harness's gate fills in exactly these values for any request that lacks
# them -- the embedded client's own defaults (dsp.LlamaCpp: temperature 0, max_tokens 150).
# Seeds: neither system sends one on a greedy call (where it does not matter); a sampled call without
# a seed (dsp --preset small's 5 draws at 0.3) draws from the server's random state, and each system's
# disk cache makes a rerun reproduce it.
GENERATION: dict[str, Any] = {"temperature": 0.0, "max_tokens": 150}

# DSPy's programs as its documentation writes them: dspy.Retrieve's default k (3) for retrieve-then-read,
# and the multi-hop tutorial's module (2 hops, 3 passages per hop) for HotPotQA.
DSPY_K = 3
MULTIHOP: dict[str, int] = {"max_hops": 2, "passages_per_hop": 3}
KNN_K = 3  # KNNFewShot's k in DSPy's documentation example
# The training data DSPy's optimizers see: a seeded draw from the task's training pool (the pool dsp
# compile searches), DSPy-tutorial sized: `DSPY_TRAIN` for demos/bootstrapping, `DSPY_VAL` to score
# candidates (as dsp compile's --val).
DSPY_TRAIN = 200
DSPY_VAL: dict[str, int] = {"nq": 80, "squad": 80, "hotpotqa": 40}

# dsp compile of the DSP program (--preset small) with the race (issue 32): the validation part at its
# default (half the pool, up to 400), 8 candidates, a budget of 800 evaluations (100 a candidate; the
# default is 200), so that a compile of the DSP program (5 LM requests a question) fits well under an hour
# on the embedded model, as issue 32 asks: ~40 min on Gemma through the server.
COMPILE_ARGS: dict[str, tuple[str, ...]] = {
    "nq": ("--candidates", "8", "--bootstrap", "40", "--budget", "800"),
    "squad": ("--candidates", "8", "--bootstrap", "40", "--budget", "800"),
    "hotpotqa": ("--candidates", "8", "--bootstrap", "20", "--budget", "800"),
}
DSP_SEEDS = (0, 1, 2, 3, 4)     # retrieve-then-read's training draws
SMALL_SEEDS = (0,)              # DSP --preset small (5 LM calls a question: one seed by default)
COMPILE_SEEDS = (0, 1, 2)       # dsp compile's seeds
DSPY_SEEDS = (0,)               # DSPy's train/val draws from the pool (and MIPROv2's seed)

# What the DSPy side runs: program -> the datasets it runs on; optimizers; adapters.
DSPY_PROGRAMS: dict[str, tuple[str, ...]] = {
    "rtr_predict": ("nq", "squad", "hotpotqa"),
    "rtr_cot": ("nq", "squad", "hotpotqa"),
    "multihop": ("hotpotqa",),
}
OPTIMIZERS = ("none", "labeled", "bootstrap", "rs", "rsmatched", "mipro", "knn")
ADAPTERS = ("chat", "json")

DATASETS = ("nq", "squad", "hotpotqa")
# Each column (LM x dataset) gets one fixed loopback port for its gate: the URLs dsp's results files and
# caches record must not change from one invocation to the next, or a rerun would not resume.
PORT_BASE = 18800


def column_port(lm: str, dataset: str, base: int = PORT_BASE) -> int:
    """The gate's port of a column: fixed per (LM, dataset), so reruns see the same URLs.

    >>> column_port("gemma", "nq"), column_port("smollm2", "hotpotqa")
    (18800, 18814)
    """
    return base + 10 * list(MODELS).index(lm) + 2 * DATASETS.index(dataset)


def split_of(dataset: str) -> str:
    """The split a column is evaluated on: the declared test split; HotPotQA declares none (its 100
    questions are its dev split), so there it is dev."""
    return "dev" if dataset == "hotpotqa" else "test"


def dsp_lm_spec(lm: str, gate: str) -> str:
    """dsp's `--lm` spec for model `lm` behind the gate at `gate` (http://127.0.0.1:PORT)."""
    model = MODELS[lm]
    return f"openai-compatible:{gate}/lm/v1,model={model.alias},type={model.dsp_type}"


def dspy_model(lm: str) -> str:
    """The model string of `dspy.LM` (LiteLLM-style provider/model)."""
    return f"openai/{MODELS[lm].alias}"


def units(dataset: str, dspy_seeds: tuple[int, ...] = DSPY_SEEDS, lm: str = "gemma") -> list[str]:
    """Every configuration of the column (`lm`, `dataset`), in the order run.sh runs them: dsp's (the
    compiles before DSPy's matched random search, which reads their cost), then DSPy's, program by program
    (none in a column whose model leaves them to another, `Model.dspy`).

    >>> u = units("nq"); u[:3], len(u)
    (['dsp:vanilla-seed0', 'dsp:rtr-seed0', 'dsp:rtr-seed1'], 38)
    >>> u[10], u[-1]
    ('dspy:rtr_predict-none-chat-seed0', 'dspy:rtr_cot-knn-json-seed0')
    >>> units("nq", lm="smollm2-text")[-1]
    'dsp:compiled-seed2'
    """
    out = ["dsp:vanilla-seed0", *(f"dsp:rtr-seed{s}" for s in DSP_SEEDS), *(f"dsp:small-seed{s}" for s in SMALL_SEEDS),
           *(f"dsp:compiled-seed{s}" for s in COMPILE_SEEDS)]
    for program, datasets in DSPY_PROGRAMS.items():
        if MODELS[lm].dspy and dataset in datasets:
            out += [f"dspy:{program}-{optimizer}-{adapter}-seed{seed}"
                    for optimizer in OPTIMIZERS for adapter in ADAPTERS for seed in dspy_seeds]
    return out


def selected(unit: str, only: list[str], skip: list[str]) -> bool:
    """Whether `unit` runs under --only / --skip patterns: a pattern names a unit, a prefix of it ending
    at a "-" (dspy:rtr_predict-labeled: both adapters, every seed), or a shell-style glob.

    >>> selected("dspy:rtr_predict-rs-chat-seed0", ["dspy:rtr_predict-rs"], [])
    True
    >>> selected("dspy:rtr_predict-rsmatched-chat-seed0", ["dspy:rtr_predict-rs"], [])
    False
    >>> selected("dsp:rtr-seed3", ["dsp:*"], ["dsp:rtr-seed3"])
    False
    """
    def hit(pattern: str) -> bool:
        return unit == pattern or unit.startswith(pattern + "-") or fnmatch.fnmatchcase(unit, pattern)

    return (not only or any(hit(p) for p in only)) and not any(hit(p) for p in skip)


def _main(argv: list[str]) -> int:
    """`python3 config.py KEY [ARGS]`: one setting for run.sh, printed as text (lists one per line)."""
    if not argv:
        print("config.py: usage: config.py KEY [ARGS] (KEY: serve-args, units, models, json, ...)", file=sys.stderr)
        return 2
    try:
        return _setting(argv[0], argv[1:])
    except (IndexError, KeyError, ValueError) as exc:  # a missing or unknown model, dataset or number
        print(f"config.py: {' '.join(argv)!r}: bad or missing argument ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 2


def _setting(key: str, args: list[str]) -> int:
    if key == "serve-args":
        model = MODELS[args[0]]
        threads = str(len(os.sched_getaffinity(0)))  # llama_cpp.server's default is half the cores
        print("\n".join([*model.serve_args, "--model_alias", model.alias, *model.server, "--n_threads", threads]))
    elif key == "lm-servers":
        print(MODELS[args[0]].servers)
    elif key == "gate-args":
        print("--merge-system" if MODELS[args[0]].merge_system else "")
    elif key == "port":
        print(column_port(args[0], args[1], int(args[2]) if len(args) > 2 else PORT_BASE))
    elif key == "split":
        print(split_of(args[0]))
    elif key == "dsp-lm":
        print(dsp_lm_spec(args[0], args[1]))
    elif key == "compile-args":
        print("\n".join(COMPILE_ARGS[args[0]]))
    elif key == "units":  # units LM DATASET DSPY_SEEDS(comma list) ONLY(comma list) SKIP(comma list)
        lm, dataset, rest = args[0], args[1], args[2:]
        seeds = tuple(int(x) for x in rest[0].split(",")) if rest and rest[0] else DSPY_SEEDS
        only = [p for p in (rest[1].split(",") if len(rest) > 1 else []) if p]
        skip = [p for p in (rest[2].split(",") if len(rest) > 2 else []) if p]
        print("\n".join(u for u in units(dataset, seeds, lm) if selected(u, only, skip)))
    elif key == "dspy-version":
        print(DSPY_VERSION)
    elif key == "dspy-requirements":
        print("\n".join([f"dspy[optuna,numpy]=={DSPY_VERSION}", *DSPY_EXTRAS]))
    elif key == "models":
        print("\n".join(MODELS))
    elif key == "json":
        print(json.dumps({"models": {k: asdict(m) for k, m in MODELS.items()}, "generation": GENERATION,
                          "dspy_version": DSPY_VERSION, "dspy_k": DSPY_K, "multihop": MULTIHOP, "knn_k": KNN_K},
                         indent=1))
    else:
        print(f"config.py: unknown key {key!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
