"""The DSPy side of the peer harness: one DSPy configuration (program x optimizer x adapter x seed) on a
column's test questions. Runs in DSPy's own venv (.venv-peer-dspy, made by run.sh), never in the
project's: it reads only the column's data.json and config.py, and writes raw rows that `peer.py
convert` (project venv) scores with the project's own metric into the project's results-file format.

    .venv-peer-dspy/bin/python bench/peer/dspy_side.py --data W/data.json --work W --gate http://127.0.0.1:18800 \\
        --lm gemma --config rtr_predict-bootstrap-chat --seed 0 [--threads 2] [--rs-candidates N]

What it writes under W/dspy/ (W: the column's work folder):

- ``<stem>.raw.jsonl``: a header naming the configuration, then one row per test question as it finishes
  (prediction, error, parse_failure, LM calls, seconds, the last raw completion); a killed run resumes
  without redoing finished questions (a parse failure is finished; a transport error is retried);
- ``<stem>.program.json``: the compiled program (DSPy's ``program.save``), reused by later runs;
- ``<stem>.cost.json``: what the compile cost (LM calls, as DSPy made them and as the gate's LM server
  counted them, with tokens; wall time), summed over the invocations of a compile stopped and resumed;
- ``<stem>.compile-ledger.json``: while a compile runs, what each invocation has spent (`CompileLedger`);
- ``<stem>.compile-failed.json``: a compile DSPy ended with a completion it could not parse, raised where
  the optimizer does not catch it (MIPROv2's instruction proposer, on a tiny model): no program; what the
  compile spent, the error and where in DSPy it was raised. The completion is the LM's at temperature 0,
  replayed from the log below, so a rerun fails the same way: the unit is not run again while it stands;
- ``<stem>.compile-replay.jsonl``: while a compile runs, the LM's answers to its requests, kept by the
  gate (gate.ReplayLog: the compile calls the LM at gate.replay_base); `peer.py convert` commits it
  with the ledger until the compile finishes, so a compile stopped on one machine goes on from there on
  another instead of starting again (DSPy's cache, below, is pickled and stays on the machine);
- ``dspy-cache/``: DSPy's own disk cache (DSPY_CACHEDIR), so reruns cost nothing.

The programs are written here after DSPy's documentation (no DSPy code is copied): retrieve-then-read as
a dspy.Module (the RM's top k passages, then dspy.Predict or dspy.ChainOfThought("context, question ->
answer")), and the multi-hop module of DSPy's HotPotQA tutorial (a ChainOfThought writing a search query
per hop, passages deduplicated, a ChainOfThought answering).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import sys
import threading
import time
import traceback
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate import replay_base  # noqa: E402  (this folder on the path: run as a script; stdlib only)
from config import (  # noqa: E402
    ADAPTERS, DSPY_K, DSPY_TRAIN, DSPY_VAL, DSPY_VERSION, GENERATION, KNN_K, MODELS, MULTIHOP, OPTIMIZERS, dspy_model,
)

__all__ = ["main", "parse_config", "draw", "unit_header", "HashingTfidf", "build_programs", "search", "CompileLedger",
           "COMPILE_LEDGER", "COMPILE_REPLAY", "COMPILE_FAILED", "compile_failure"]

# A tiny model fails to parse often; DSPy's optimizers halt after `max_errors` (10 by default) failed
# examples. Failures here are data (a failed bootstrap example, a 0 on validation), not a reason to halt.
MAX_ERRORS = 1_000_000
RAW_KEEP = 2000  # characters of the last raw completion kept per row (why a parse failed)
# A compile's files beside its program, ``<stem>`` + these (peer.py commits and restores them): an
# unfinished one's ledger and replay log (the gate names it ``<name>.jsonl``), a failed one's record.
COMPILE_LEDGER, COMPILE_REPLAY, COMPILE_FAILED = ".compile-ledger.json", ".compile-replay", ".compile-failed.json"


def parse_config(name: str) -> tuple[str, str, str]:
    """(program, optimizer, adapter) of a configuration name "program-optimizer-adapter".

    >>> parse_config("rtr_cot-mipro-json")
    ('rtr_cot', 'mipro', 'json')
    """
    parts = name.split("-")
    if len(parts) != 3 or parts[1] not in OPTIMIZERS or parts[2] not in ADAPTERS:
        raise ValueError(f"configuration {name!r}: expected PROGRAM-OPTIMIZER-ADAPTER with an optimizer of "
                         f"{', '.join(OPTIMIZERS)} and an adapter of {', '.join(ADAPTERS)}")
    return parts[0], parts[1], parts[2]


def _stable_hash(text: str) -> int:
    """A hash that is the same in every process (Python's hash() of text is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class HashingTfidf:
    """KNNFewShot's vectorizer, offline: words and word pairs hashed into `dims` buckets, weighted by
    1 + log(tf) times an IDF fitted on `corpus` (the training questions), L2-normalised. No model, no
    download: numpy only (DSPy's documentation example uses a sentence-transformers model, which would
    fetch weights from a hub)."""

    def __init__(self, corpus: list[str], dims: int = 1 << 14) -> None:
        import numpy as np

        self.dims = dims
        df = np.zeros(dims, dtype=np.float64)
        for text in corpus:
            for bucket in set(self._buckets(text)):
                df[bucket] += 1
        self.idf = np.log((1 + len(corpus)) / (1 + df)) + 1.0

    @staticmethod
    def _features(text: str) -> list[str]:
        # KNN prefixes each input with its field name ("question: ..."): drop the field names.
        words = re.findall(r"\w+", re.sub(r"(^|\|)\s*\w+:", " ", text.lower()))
        return words + [f"{a} {b}" for a, b in zip(words, words[1:])]

    def _buckets(self, text: str) -> list[int]:
        return [_stable_hash(feature) % self.dims for feature in self._features(text)]

    def __call__(self, texts: list[str]) -> Any:
        import numpy as np

        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            counts: dict[int, int] = {}
            for bucket in self._buckets(text):
                counts[bucket] = counts.get(bucket, 0) + 1
            for bucket, tf in counts.items():
                out[row, bucket] = (1.0 + math.log(tf)) * self.idf[bucket]
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out


def search(query: str, k: int) -> list[str]:
    """The top-k passages ("Title | text") from the configured RM (`dspy.ColBERTv2` at the gate), called
    as DSPy 3's tutorials call their retriever: a plain function. (`dspy.Retrieve` does the same call,
    but DSPy 3.4.1 cannot `save()` a module holding one: its dump_state lacks the json_mode argument.)"""
    import dspy

    return [passage["long_text"] for passage in dspy.settings.rm(query, k=k)]


def build_programs() -> dict[str, Callable[[], Any]]:
    """The programs by name, as constructors (their classes are defined here, once dspy is imported)."""
    import dspy

    class RetrieveThenRead(dspy.Module):
        """Retrieve k passages for the question, then answer from them (Predict or ChainOfThought)."""

        def __init__(self, k: int, chain_of_thought: bool) -> None:
            super().__init__()
            self.k = k
            module = dspy.ChainOfThought if chain_of_thought else dspy.Predict
            self.generate_answer = module("context, question -> answer")

        def forward(self, question: str) -> Any:
            context = search(question, self.k)
            prediction = self.generate_answer(context=context, question=question)
            return dspy.Prediction(context=context, answer=prediction.answer)

    class MultiHop(dspy.Module):
        """DSPy's multi-hop tutorial program: per hop a ChainOfThought writes a search query from the
        context so far, its passages join the context (duplicates dropped), then a ChainOfThought answers."""

        def __init__(self, passages_per_hop: int, max_hops: int) -> None:
            super().__init__()
            self.generate_query = [dspy.ChainOfThought("context, question -> search_query") for _ in range(max_hops)]
            self.passages_per_hop = passages_per_hop
            self.generate_answer = dspy.ChainOfThought("context, question -> answer")

        def forward(self, question: str) -> Any:
            context: list[str] = []
            for hop in self.generate_query:
                query = hop(context=context, question=question).search_query
                for passage in search(query, self.passages_per_hop):
                    if passage not in context:
                        context.append(passage)
            prediction = self.generate_answer(context=context, question=question)
            return dspy.Prediction(context=context, answer=prediction.answer)

    return {
        "rtr_predict": lambda: RetrieveThenRead(DSPY_K, chain_of_thought=False),
        "rtr_cot": lambda: RetrieveThenRead(DSPY_K, chain_of_thought=True),
        "multihop": lambda: MultiHop(MULTIHOP["passages_per_hop"], MULTIHOP["max_hops"]),
    }


def _counter_class() -> Any:
    from dspy.utils.callback import BaseCallback

    class Counter(BaseCallback):
        """Counts every LM call DSPy makes (cache hits included): in total, and per example (thread-local),
        keeping each example's last raw completion."""

        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.calls = 0
            self.local = threading.local()

        def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            with self.lock:
                self.calls += 1
            self.local.calls = getattr(self.local, "calls", 0) + 1

        def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
            if outputs:
                first = outputs[0] if isinstance(outputs, list) else outputs
                text = first.get("text") if isinstance(first, dict) else first
                self.local.raw = str(text)[:RAW_KEEP]

    return Counter


def _gate_stats(gate: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{gate}/gate/stats", timeout=30) as response:
        return json.load(response)


SERVER_KEYS = ("lm_requests", "prompt_tokens", "completion_tokens", "rm_requests", "lm_errors")


class CompileLedger:
    """What one compile spent over all its invocations, so a compile too long for one sitting (a random
    search: hours on a small CPU model) can be stopped and resumed with its cost whole.

    A resumed compile replays its earlier calls (from DSPy's cache; on another machine, from the gate's
    replay log), so its own call count already covers them, but its server requests, tokens and wall time
    are only this invocation's. The ledger
    (``<stem>.compile-ledger.json``, beside the compiled program) keeps each invocation's spend: `start`
    reads the earlier ones (refusing another configuration's), `checkpoint` rewrites this one's (every
    minute from a thread, and on SIGTERM, so a kill loses at most a minute of counts), `finish` returns
    the sums and removes the file. `stats` reads the gate's counters; it may fail (the gate stopped
    first), and then the last checkpoint stands.

    >>> import tempfile; path = Path(tempfile.mkdtemp()) / "c.compile-ledger.json"
    >>> served = {"lm_requests": 0}; calls = [0]; clock = iter(range(0, 100, 10))
    >>> first = CompileLedger(path, {"config": "rs"}, lambda: dict(served), lambda: calls[0], lambda: next(clock))
    >>> first.start(); served["lm_requests"] += 30; calls[0] += 30; first.checkpoint()  # then killed
    >>> second = CompileLedger(path, {"config": "rs"}, lambda: dict(served), lambda: calls[0], lambda: next(clock))
    >>> second.start(); served["lm_requests"] += 20; calls[0] += 50  # 30 replayed from the cache
    >>> total = second.finish()
    >>> total["server"]["lm_requests"], total["lm_calls"], total["wall_seconds"], len(total["invocations"])
    (50, 50, 20.0, 2)
    >>> path.exists()
    False
    """

    def __init__(self, path: Path, header: dict[str, Any], stats: Callable[[], dict[str, Any]],
                 calls: Callable[[], int], clock: Callable[[], float] = time.perf_counter) -> None:
        self.path, self.header, self.stats, self.calls, self.clock = path, header, stats, calls, clock
        self.earlier: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.current: dict[str, Any] = {}

    def start(self) -> None:
        if self.path.exists():
            kept = json.loads(self.path.read_text(encoding="utf-8"))
            if kept.get("header") != self.header:
                raise SystemExit(f"dspy_side: {self.path} is the ledger of another configuration's compile; "
                                 "move it away")
            self.earlier = list(kept.get("invocations") or [])
        self.before, self.calls_before, self.started = self.stats(), self.calls(), self.clock()
        self.current = {"wall_seconds": 0.0, "lm_calls": 0, "server": {key: 0 for key in SERVER_KEYS}, "replayed": 0}

    def checkpoint(self) -> None:
        try:
            after = self.stats()
        except OSError:  # the gate is gone (stopped before this process): the last checkpoint stands
            return
        with self.lock:
            self.current = {"wall_seconds": round(float(self.clock() - self.started), 1),
                            "lm_calls": self.calls() - self.calls_before,
                            "server": {key: int(after.get(key, 0)) - int(self.before.get(key, 0))
                                       for key in SERVER_KEYS},
                            "replayed": int(after.get("lm_replayed", 0)) - int(self.before.get("lm_replayed", 0))}
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps({"header": self.header, "invocations": self.earlier + [self.current]},
                                            indent=1) + "\n", encoding="utf-8")
            temporary.replace(self.path)

    def finish(self) -> dict[str, Any]:
        self.checkpoint()
        invocations = self.earlier + [self.current]
        self.path.unlink(missing_ok=True)
        return {"wall_seconds": round(float(sum(i["wall_seconds"] for i in invocations)), 1),
                # the last invocation replayed the earlier ones' calls from the cache: its count is the whole
                "lm_calls": self.current["lm_calls"],
                "server": {key: sum(i["server"][key] for i in invocations) for key in SERVER_KEYS},
                "replayed": sum(int(i.get("replayed", 0)) for i in invocations),
                "invocations": invocations}


def _keep_ledger(ledger: CompileLedger, every: float = 60.0) -> Callable[[], None]:
    """Checkpoints `ledger` every `every` seconds and on SIGTERM (then exits, as SIGTERM would); returns
    the function that stops both and checkpoints once more (a compile that raised keeps its last
    minute's counts: they were lost when it did not)."""
    import signal

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            ledger.checkpoint()

    def on_term(signum: int, frame: Any) -> None:
        ledger.checkpoint()
        os._exit(128 + signum)  # DSPy's worker threads would hold a normal exit; its cache writes are synchronous

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    previous = signal.signal(signal.SIGTERM, on_term)

    def release() -> None:
        stop.set()
        thread.join()  # a checkpoint under way ends first, so the last one written is this one
        signal.signal(signal.SIGTERM, previous)
        ledger.checkpoint()

    return release


def _examples(records: list[dict[str, Any]]) -> list[Any]:
    import dspy

    # `answer` (the first gold) is what a demonstration shows; `answers` (every gold) is what the metric
    # accepts. Only the question is an input.
    return [dspy.Example(question=r["question"], answer=r["gold"][0], answers=r["gold"]).with_inputs("question")
            for r in records]


def _metric(example: Any, prediction: Any, trace: Any = None) -> bool:
    """DSPy's own exact match (its SQuAD-style normalisation) against every gold answer: what its
    optimizers maximise. The reported score is the project's dsp.EM, computed by peer.py convert."""
    from dspy.evaluate import EM

    answer = getattr(prediction, "answer", None)
    return bool(EM(str(answer), list(example.answers))) if answer is not None else False


def _digest(records: list[dict[str, Any]]) -> dict[str, Any]:
    text = json.dumps([[r["question"], r["gold"]] for r in records], sort_keys=True, ensure_ascii=False)
    return {"items": len(records), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]}


def draw(data: dict[str, Any], seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The training and validation records seed `seed` draws from the column's pool (data.json).

    >>> pool = [{"question": f"q{i}", "gold": [f"a{i}"]} for i in range(400)]
    >>> train, val = draw({"pool": pool, "task": "nq"}, 0)
    >>> (len(train), len(val), train == draw({"pool": pool, "task": "nq"}, 0)[0])
    (200, 80, True)
    """
    pool = data["pool"]
    order = list(range(len(pool)))
    random.Random(f"dspy-{seed}").shuffle(order)
    train = [pool[i] for i in order[:DSPY_TRAIN]]
    return train, [pool[i] for i in order[DSPY_TRAIN:DSPY_TRAIN + DSPY_VAL[data["task"]]]]


def unit_header(data: dict[str, Any], config: str, seed: int, model: str, gate: str, rs_candidates: int | None,
                dspy_version: str = DSPY_VERSION) -> dict[str, Any]:
    """The raw file's header of one unit: everything that makes its rows (a resumed run must match it).
    `model` is DSPy's model name (config.dspy_model), `gate` the column's gate URL."""
    program_name, optimizer, adapter_name = parse_config(config)
    train, val = draw(data, seed)
    return {"system": "dspy", "dspy_version": dspy_version, "config": config, "program": program_name,
            "optimizer": _optimizer_settings(optimizer, rs_candidates),
            "adapter": "ChatAdapter" if adapter_name == "chat" else "JSONAdapter", "seed": seed,
            "lm": {"model": model, "api_base": f"{gate}/lm/v1", "generation": dict(GENERATION)},
            "rm": {"colbertv2": f"{gate}/rm/api/search"}, "k": MULTIHOP if program_name == "multihop" else DSPY_K,
            "train": _digest(train), "val": _digest(val), "task": data["task"], "split": data["split"]}


def _optimizer(name: str, trainset: list[Any], threads: int, seed: int, rs_candidates: int | None) -> Any:
    import dspy

    if name == "labeled":
        return dspy.LabeledFewShot()
    if name == "bootstrap":
        return dspy.BootstrapFewShot(metric=_metric)
    if name == "rs":
        return dspy.BootstrapFewShotWithRandomSearch(metric=_metric, num_threads=threads)
    if name == "rsmatched":
        if not rs_candidates:
            raise SystemExit("dspy_side: rsmatched needs --rs-candidates N (matched to dsp compile's LM calls)")
        return dspy.BootstrapFewShotWithRandomSearch(metric=_metric, num_threads=threads,
                                                     num_candidate_programs=rs_candidates)
    if name == "mipro":
        return dspy.MIPROv2(metric=_metric, auto="light", num_threads=threads, seed=seed)
    if name == "knn":
        embed = HashingTfidf([e.question for e in trainset])
        return dspy.KNNFewShot(k=KNN_K, trainset=trainset, vectorizer=dspy.Embedder(embed, caching=False),
                               metric=_metric)
    raise ValueError(f"no optimizer {name!r}")


def _compile(optimizer: str, student: Any, trainset: list[Any], valset: list[Any], threads: int, seed: int,
             rs_candidates: int | None) -> Any:
    teleprompter = _optimizer(optimizer, trainset, threads, seed, rs_candidates)
    if optimizer in ("rs", "rsmatched", "mipro"):
        return teleprompter.compile(student, trainset=trainset, valset=valset)
    if optimizer == "knn":
        return teleprompter.compile(student)
    return teleprompter.compile(student, trainset=trainset)


def compile_failure(error: BaseException, limit: int = 2000) -> dict[str, Any]:
    """What a failed compile's record says of its error: the type, the message (the completion DSPy could
    not parse is in it; cut to `limit` characters), the frames in DSPy that raised it (innermost last),
    and `step`: the innermost of them outside DSPy's call machinery (adapters, predict, clients, utils,
    primitives), i.e. which part of the optimizer made the call.

    >>> def propose(): raise ValueError("LM Response: 'Select a language model.'")
    >>> try:
    ...     propose()
    ... except ValueError as error:
    ...     failure = compile_failure(error)
    >>> failure["type"], failure["message"], failure["where"], failure["step"]
    ('ValueError', "LM Response: 'Select a language model.'", [], None)
    """
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if "site-packages/dspy/" in frame.filename]
    where = [f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno} {frame.name}" for frame in frames]
    machinery = ("/dspy/adapters/", "/dspy/predict/", "/dspy/clients/", "/dspy/utils/", "/dspy/primitives/")
    steps = [line for frame, line in zip(frames, where) if not any(part in frame.filename for part in machinery)]
    return {"type": type(error).__name__, "message": str(error)[:limit], "where": where[-40:],
            "step": steps[-1] if steps else None}


def _optimizer_settings(optimizer: str, rs_candidates: int | None) -> dict[str, Any]:
    """What the identity records of an optimizer: its name and the settings that are not DSPy's defaults."""
    settings: dict[str, Any] = {"name": optimizer, "max_errors": MAX_ERRORS}
    if optimizer == "rsmatched":
        settings["num_candidate_programs"] = rs_candidates
    elif optimizer == "mipro":
        settings["auto"] = "light"
    elif optimizer == "knn":
        settings.update(k=KNN_K, vectorizer="HashingTfidf(words+pairs, 2^14 buckets, IDF over the trainset)")
    return settings


def _read_raw(path: Path, header: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Finished rows of an earlier run of this configuration ({index: row}); refuses another's file."""
    done: dict[int, dict[str, Any]] = {}
    if not path.exists():
        return done
    with path.open(encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    if lines and lines[-1]:  # a last line cut mid-write by a kill: that question runs again
        lines = lines[:-1]
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if number == 0:
            old = record.get("dspy_raw") if isinstance(record, dict) else None
            if old != header:
                changed = sorted(k for k in set(old or {}) | set(header) if (old or {}).get(k) != header.get(k))
                raise SystemExit(f"dspy_side: {path} holds rows of another configuration (changed: "
                                 f"{', '.join(changed)}); move it away")
            continue
        if isinstance(record, dict) and (record.get("error") is None or record.get("parse_failure")):
            done[int(record["index"])] = record
    return done


def _answer_one(program: Any, counter: Any, record: dict[str, Any]) -> dict[str, Any]:
    import dspy
    from dspy.utils.exceptions import AdapterParseError

    counter.local.calls = 0
    counter.local.raw = None
    row: dict[str, Any] = {"index": record["index"], "id": record["id"], "fingerprint": record["fingerprint"]}
    started = time.perf_counter()
    tracker = None
    try:
        with dspy.track_usage() as tracker:
            prediction = program(question=record["question"])
        answer = getattr(prediction, "answer", None)
        row.update(prediction=None if answer is None else str(answer), error=None, parse_failure=False)
    except AdapterParseError as error:
        # A completion DSPy cannot parse: a wrong answer, counted as a parse failure (finished: a rerun
        # would read the same completion from the cache).
        row.update(prediction=None, error=f"AdapterParseError: {str(error)[:300]}", parse_failure=True)
    except Exception as error:  # one failing question must not stop the rest; it is retried on resume
        row.update(prediction=None, error=f"{type(error).__name__}: {str(error)[:300]}", parse_failure=False,
                   traceback="".join(traceback.format_exception(error))[-3000:])
    usage = {"lm_calls": counter.local.calls, "prompt_tokens": 0, "completion_tokens": 0}
    tokens = tracker.get_total_tokens() if tracker is not None else {}
    for counts in tokens.values():  # only calls that reached the server: DSPy counts no tokens for a cache hit
        usage["prompt_tokens"] += int(counts.get("prompt_tokens") or 0)
        usage["completion_tokens"] += int(counts.get("completion_tokens") or 0)
    row.update(usage=usage, seconds=round(time.perf_counter() - started, 3), raw=counter.local.raw)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the column's data.json (peer.py prepare)")
    parser.add_argument("--work", required=True, help="the column's work folder")
    parser.add_argument("--gate", required=True, help="the column's gate, http://127.0.0.1:PORT")
    parser.add_argument("--lm", required=True, choices=list(MODELS))
    parser.add_argument("--config", required=True, help="PROGRAM-OPTIMIZER-ADAPTER, e.g. rtr_predict-labeled-chat")
    parser.add_argument("--seed", type=int, default=0, help="the train/val draw from the pool (and MIPROv2's seed)")
    parser.add_argument("--threads", type=int, default=2, help="test questions at a time (and optimizers' threads)")
    parser.add_argument("--rs-candidates", type=int, help="rsmatched: BootstrapFewShotWithRandomSearch's "
                                                          "num_candidate_programs")
    parser.add_argument("--compile-only", action="store_true", help="compile (or load) and stop")
    args = parser.parse_args(argv)
    program_name, optimizer, adapter_name = parse_config(args.config)

    work = Path(args.work)
    os.environ["DSPY_CACHEDIR"] = str(work / "dspy-cache")  # before dspy is imported: it reads it then
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network look-up of prices
    import dspy
    from dspy.utils.exceptions import AdapterParseError

    if dspy.__version__ != DSPY_VERSION:
        raise SystemExit(f"dspy_side: DSPy {dspy.__version__} is installed, the harness pins {DSPY_VERSION}")
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    programs = build_programs()
    if program_name not in programs:
        raise SystemExit(f"dspy_side: no program {program_name!r}; choose one of {', '.join(programs)}")

    train_records, val_records = draw(data, args.seed)
    trainset, valset = _examples(train_records), _examples(val_records)

    def language_model(api_base: str) -> Any:
        return dspy.LM(dspy_model(args.lm), api_base=api_base, api_key="none", num_retries=3,
                       temperature=GENERATION["temperature"], max_tokens=GENERATION["max_tokens"])

    lm = language_model(f"{args.gate}/lm/v1")
    rm = dspy.ColBERTv2(url=f"{args.gate}/rm/api/search")
    adapter = dspy.ChatAdapter() if adapter_name == "chat" else dspy.JSONAdapter()
    counter = _counter_class()()
    dspy.configure(lm=lm, rm=rm, adapter=adapter, callbacks=[counter], max_errors=MAX_ERRORS)

    stem = f"{data['stem']}-dspy-{args.config}-seed{args.seed}"
    out = work / "dspy"
    out.mkdir(parents=True, exist_ok=True)
    header = unit_header(data, args.config, args.seed, dspy_model(args.lm), args.gate, args.rs_candidates)
    raw_path = out / f"{stem}.raw.jsonl"
    done = {i: row for i, row in _read_raw(raw_path, header).items()
            if i < len(data["test"]) and row.get("fingerprint") == data["test"][i]["fingerprint"]}

    program = programs[program_name]()
    program_path, cost_path = out / f"{stem}.program.json", out / f"{stem}.cost.json"
    failed_path = out / f"{stem}{COMPILE_FAILED}"
    if optimizer == "none":
        pass  # the program as written: nothing to compile
    elif optimizer != "knn" and program_path.exists():
        program.load(str(program_path))
        print(f"loaded the compiled program {program_path}", flush=True)
    elif optimizer != "knn" and failed_path.exists():
        print(f"the compile of {args.config} (seed {args.seed}) failed on a completion DSPy could not parse "
              f"({failed_path}); a rerun replays the same completions and fails the same way, so it is not "
              "run again (delete that file to try)", flush=True)
        return 0
    else:
        # KNNFewShot picks its demonstrations per question at inference (a BootstrapFewShot over the k
        # nearest training examples, run inside each call): its "compile" has no state to save, and its
        # LM calls show in the test rows' usage.
        print(f"compiling {args.config} (seed {args.seed}): train {len(trainset)}, val {len(valset)}", flush=True)
        if optimizer == "knn":
            program = _compile(optimizer, program, trainset, valset, args.threads, args.seed, args.rs_candidates)
        else:
            ledger = CompileLedger(out / f"{stem}{COMPILE_LEDGER}", header, lambda: _gate_stats(args.gate),
                                   lambda: counter.calls)
            ledger.start()
            if ledger.earlier:
                print(f"resuming a compile stopped {len(ledger.earlier)} time(s): its calls so far come from the "
                      f"cache and the gate's replay log, its cost so far from {ledger.path}", flush=True)
            release = _keep_ledger(ledger)
            # The same LM through the gate's replay route: the gate keeps the compile's answers (and gives
            # them again), so a compile stopped here resumes on another machine from the committed log.
            compile_lm = language_model(replay_base(args.gate, f"{stem}{COMPILE_REPLAY}"))
            failure: AdapterParseError | None = None
            try:
                with dspy.context(lm=compile_lm):
                    program = _compile(optimizer, program, trainset, valset, args.threads, args.seed,
                                       args.rs_candidates)
            except AdapterParseError as error:
                # Raised where the optimizer does not catch it; the completion is the LM's at temperature 0,
                # so this compile can only end here: its spend and error are kept, and it ends.
                failure = error
            finally:
                release()  # before finish: the checkpoint thread must not write the ledger again
            if failure is None:
                program.save(str(program_path))
            spent = ledger.finish()
            cost = {"system": "dspy", "config": args.config, "seed": args.seed, "optimizer": header["optimizer"],
                    **spent, "train": header["train"], "val": header["val"],
                    "note": "lm_calls: every LM call DSPy made (cache hits included; a resumed compile replays "
                            "the earlier invocations' calls from DSPy's cache or the gate's replay log); "
                            "server: the requests that reached the LM server, counted at the gate, summed over "
                            "the invocations; replayed: requests the gate answered from the replay log; "
                            "wall_seconds: summed over the invocations (each one's in invocations)"}
            if failure is not None:
                cost["failed"] = compile_failure(failure)
                failed_path.write_text(json.dumps(cost, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
                print(f"the compile failed after {cost['wall_seconds']:.0f} s and {cost['lm_calls']} LM calls "
                      f"({cost['server']['lm_requests']} reached the server): {cost['failed']['type']} in "
                      f"{cost['failed']['step']}; no program, no test rows -> {failed_path}",
                      flush=True)
                return 1
            cost_path.write_text(json.dumps(cost, indent=1) + "\n", encoding="utf-8")
            print(f"compiled in {cost['wall_seconds']:.0f} s: {cost['lm_calls']} LM calls, "
                  f"{cost['server']['lm_requests']} reached the server ({cost['server']['prompt_tokens']} prompt, "
                  f"{cost['server']['completion_tokens']} completion tokens) -> {program_path}", flush=True)
    if args.compile_only:
        return 0

    todo = [r for r in data["test"] if r["index"] not in done]
    if done:
        print(f"resumed {len(done)} rows from {raw_path}", flush=True)
    if not raw_path.exists() or raw_path.stat().st_size == 0:
        raw_path.write_text(json.dumps({"dspy_raw": header}, ensure_ascii=False) + "\n", encoding="utf-8")
    elif not raw_path.read_bytes().endswith(b"\n"):
        with raw_path.open("rb+") as handle:  # cut a torn last line off before appending
            content = handle.read()
            handle.seek(content.rfind(b"\n") + 1)
            handle.truncate()
    lock = threading.Lock()
    started = time.perf_counter()
    finished = parse_failures = errors = 0
    with ThreadPoolExecutor(max_workers=max(1, args.threads)) as pool_executor, \
            raw_path.open("a", encoding="utf-8") as handle:
        futures = [pool_executor.submit(_answer_one, program, counter, record) for record in todo]
        for future in as_completed(futures):
            row = future.result()
            with lock:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
                finished += 1
                parse_failures += int(bool(row.get("parse_failure")))
                errors += int(row.get("error") is not None and not row.get("parse_failure"))
            if finished % 25 == 0 or finished == len(todo):
                print(f"  {args.config} seed {args.seed}: {finished}/{len(todo)} questions, {parse_failures} parse "
                      f"failures, {errors} errors, {time.perf_counter() - started:.0f} s", flush=True)
    print(f"{args.config} seed {args.seed}: {len(done) + finished} of {len(data['test'])} questions in {raw_path}; "
          f"{time.perf_counter() - started:.0f} s this run", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
