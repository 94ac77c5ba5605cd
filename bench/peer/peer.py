"""The project's side of the peer harness (project venv): the column's data, the DSPy results files in the
project's format, compile costs, and the comparison. `run.sh` calls it; each command is also usable alone.

    .venv/bin/python bench/peer/peer.py prepare --dataset nq --n 1000 --work runs/peer/gemma/nq --index runs/peer/index/nq
    .venv/bin/python bench/peer/peer.py convert --work runs/peer/gemma/nq --out results/peer/gemma/nq
    .venv/bin/python bench/peer/peer.py restore --work runs/peer/gemma/nq --out results/peer/gemma/nq
    .venv/bin/python bench/peer/peer.py cut --src runs/peer/gemma/nq/dsp/nq-test-vanilla-seed0.jsonl --out results/peer/gemma/nq
    .venv/bin/python bench/peer/peer.py compile-cost --compiled C.json --before B.json --after A.json --wall 812 --out C.cost.json
    .venv/bin/python bench/peer/peer.py report --lm gemma --dataset nq --out results/peer/gemma/nq [--n 1000]
    .venv/bin/python bench/peer/peer.py scoreboard [--out results/peer] [--n 500]

- `prepare` loads the task's training pool and test questions exactly as `dsp run --split test` does (its
  own function), writes them to ``data.json`` for the DSPy side (whose venv lacks the project), with the
  identity entries our results files carry (task, metric, fields, split) and each question's
  fingerprint, and saves the task's BM25 index for `dsp serve` (once).
- `convert` turns each raw DSPy file (``dspy/*.raw.jsonl``, written by dspy_side.py) into a results
  file of the project's format: a header whose identity names ``"system": "dspy"``, its version,
  program, optimizer, adapter, LM, RM, task and split, with the same "metric", "task" and split keys as
  our runs of the column (so `dsp compare` pairs them), and one row per question scored with the
  project's own metric (dsp.EM) -- both systems are scored by the same code. A completion DSPy could not
  parse is a row with ``prediction: null``, score 0, its ``error`` and ``parse_failure: true``.
- `restore` gives a fresh work folder (a new machine) the DSPy units' state committed in the results
  folder: each results file's rows become the raw rows its unit resumes from (after `prepare`: the header
  is rebuilt from the file's identity and the column's data), and the compiled programs and costs are
  copied back, with the ledger and replay log of a compile `convert` found unfinished, so a unit longer
  than one sitting (its test questions or its compile) goes on where the last one stopped.
- `cut` copies one of our results files into the results folder with its prompt traces cut (as results/).
- `report` runs `dsp compare` over the column (the first dsp compile seed first) and writes ``report.md``
  with parse-failure rates and every compile's cost.
- `scoreboard` prints RESULTS.md's table of where each column stands (every dsp compiler over its seeds
  against DSPy's best configuration so far), recomputed from the results files.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dsp  # noqa: E402  (the project root on the path: run as a script)
from dsp.evaluation import RunLog, describe, read_run  # noqa: E402
from dsp.evaluation.rows import example_fingerprint, jsonable, metric_caller  # noqa: E402

from config import DSPY_VAL, GENERATION, MODELS, column_port, split_of  # noqa: E402
from dspy_side import COMPILE_FAILED, COMPILE_LEDGER, COMPILE_REPLAY, unit_header  # noqa: E402  (stdlib only until main())
from gate import REPLAY_SUFFIX, ReplayLog, replay_file  # noqa: E402

__all__ = ["prepare_data", "column_identity", "dspy_identity", "convert_raw", "convert_all", "restore_dspy", "cut_traces", "gate_stats",
           "compile_cost", "compile_calls", "matched_candidates", "parse_failures", "report", "scoreboard", "main"]

# Row keys our results/ files drop (the prompts and passages: large, and rerunning the command restores them).
CUT = ("trace", "context", "traceback", "raw")


def _loaded(dataset: str, n: int | None) -> tuple[Any, list, list, dict[str, Any], str]:
    """(task, pool, examples, identity entries, file stem) as `dsp run --split <the column's split>` loads them."""
    from programs.cli import build_parser
    from programs.cli.run import run_examples, split_stem
    from programs.tasks import TASKS

    task = TASKS[dataset]
    split = split_of(dataset)
    argv = ["run", "vanilla", "--dataset", dataset, "--split", split] + (["--n", str(n)] if n else [])
    pool, examples, entries = run_examples(task, build_parser().parse_args(argv))
    return task, pool, examples, entries, split_stem(task, split)


def column_identity(task: Any, entries: Mapping[str, Any]) -> dict[str, Any]:
    """The identity keys a column's results files share with ours: task, metric, fields and the split's
    entries ({"dev": ...} or {"split": "test", "test": ...}), as `dsp run` writes them."""
    return {"task": task.name, "metric": describe(task.metric), "fields": task.fields.as_dict(), **dict(entries)}


def _golds(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def prepare_data(dataset: str, n: int | None, work: Path, index: Path | None = None) -> dict[str, Any]:
    """Write ``work/data.json`` (pool, test questions with fingerprints, identity keys) and, with `index`,
    the task's BM25 index for `dsp serve` (kept if it exists). Returns the data."""
    task, pool, examples, entries, stem = _loaded(dataset, n)
    gold = task.fields.gold
    data = {
        "task": task.name, "split": split_of(dataset), "stem": stem, "identity": column_identity(task, entries),
        "test": [{"index": i, "id": jsonable(e.get("id")), "question": e.question, "gold": _golds(e[gold]),
                  "gold_as_written": jsonable(e.get(gold)), "fingerprint": example_fingerprint(e)}
                 for i, e in enumerate(examples)],
        "pool": [{"id": jsonable(e.get("id")), "question": e.question, "gold": _golds(e[gold])} for e in pool],
    }
    work.mkdir(parents=True, exist_ok=True)
    _write_json(work / "data.json", data)
    if index is not None and not (index / "meta.json").is_file():
        from programs.cli.run import build_rm

        rm = build_rm(task, None)
        if not isinstance(rm, dsp.BM25):
            raise SystemExit(f"peer.py prepare: dataset {dataset}'s retriever is {type(rm).__name__}, not BM25")
        rm.save(index)
    return data


def _write_json(path: Path, value: Any) -> None:
    """Write JSON atomically: a reader (or a kill) never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def dspy_identity(header: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """The results-file identity of a DSPy run: its raw header (configuration) and the column's keys.

    The "program" entry has the shape of ours (function, keywords.train = size and digest of what the
    seed drew from the pool: the training and the validation examples), so `dsp compare` groups a
    configuration's seeds as it groups our training seeds.
    """
    lm = header["lm"]
    drawn = hashlib.sha256(f"{header['train']['sha256']}+{header['val']['sha256']}".encode()).hexdigest()[:16]
    return {
        "system": "dspy", "dspy_version": header["dspy_version"], "config": header["config"],
        "program": {"function": f"dspy.{header['program']}", "args": [],
                    "keywords": {"train": {"items": header["train"]["items"], "sha256": drawn}}},
        "program_name": f"dspy-{header['program']}", "optimizer": header["optimizer"], "adapter": header["adapter"],
        "seed": header["seed"], "val_items": header["val"]["items"], "k": header["k"],
        "lm": {"lm": {"provider": "dspy.LM", "model": lm["model"], "api_base": lm["api_base"]},
               "defaults": lm["generation"]},
        "rm": {"rm": {"provider": "dspy.ColBERTv2", **header["rm"]}},
        **data["identity"],
    }


def _read_raw(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    header: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.endswith("\n") or not line.strip():
                continue  # a torn last line: the DSPy side reruns that question
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "dspy_raw" in record:
                header = header or record["dspy_raw"]
            elif isinstance(record, dict) and isinstance(record.get("index"), int):
                rows.append(record)
    if header is None:
        raise ValueError(f"{path}: no dspy_raw header: not a file of dspy_side.py")
    return header, rows


def convert_raw(raw: Path, data: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """Write the results file `out` of the raw DSPy file `raw` (rewritten whole each time: the raw file is
    the resumable record). Returns a summary: rows, parse failures, errors, EM."""
    from programs.tasks import TASKS

    header, rows = _read_raw(raw)
    task = TASKS[data["task"]]
    score_of = metric_caller(task.metric)
    test = data["test"]
    chosen: dict[int, dict[str, Any]] = {}
    for row in rows:  # the last finished row of each question (a parse failure is finished), else its last
        index = row["index"]
        if index >= len(test) or row.get("fingerprint") != test[index]["fingerprint"]:
            continue  # a row of another question at this index (another --n drew another sample)
        finished = row.get("error") is None or bool(row.get("parse_failure"))
        if finished or index not in chosen or not _finished(chosen[index]):
            chosen[index] = row
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    log = RunLog(out, dspy_identity(header, data))
    counts = {"rows": 0, "parse_failures": 0, "errors": 0, "right": 0}
    log.open()  # releases its lock itself if it fails
    try:
        for index in sorted(chosen):
            row, example = chosen[index], test[index]
            prediction = row.get("prediction")
            gold = example["gold_as_written"]
            score = 0.0
            if isinstance(prediction, str):
                score = score_of(prediction, gold, dsp.Example(question=example["question"], answer=gold))
            log.append({
                "index": index, "id": example["id"], "seed": header["seed"], "fingerprint": example["fingerprint"],
                "question": example["question"], "gold": gold, "prediction": prediction, "score": score,
                "error": row.get("error"), "parse_failure": bool(row.get("parse_failure")),
                "usage": row.get("usage") or {}, "seconds": row.get("seconds"), "raw": row.get("raw"),
                **({"traceback": row["traceback"]} if row.get("traceback") else {}),
            })
            counts["rows"] += 1
            counts["parse_failures"] += int(bool(row.get("parse_failure")))
            counts["errors"] += int(row.get("error") is not None and not row.get("parse_failure"))
            counts["right"] += int(score == 1.0)
    finally:
        log.close()  # the writer lock of dsp.evaluation.RunLog
    return counts


# A raw row's keys that a results row keeps (the raw completion and traceback are cut from results/).
RAW_KEYS = ("index", "id", "fingerprint", "prediction", "error", "parse_failure", "usage", "seconds")


def _raw_row(row: Any, where: str) -> dict[str, Any]:
    """The raw row of a committed results row, validated (a results file from elsewhere is data)."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a row is not a JSON object")
    checks = {"index": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
              "id": lambda v: isinstance(v, str), "fingerprint": lambda v: isinstance(v, str),
              "prediction": lambda v: v is None or isinstance(v, str), "error": lambda v: v is None or isinstance(v, str),
              "parse_failure": lambda v: isinstance(v, bool), "usage": lambda v: isinstance(v, dict),
              "seconds": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}
    for key, valid in checks.items():
        if not valid(row.get(key)):
            raise ValueError(f"{where}: row {row.get('index')!r} has no valid {key!r} ({row.get(key)!r})")
    return {**{key: row[key] for key in RAW_KEYS}, "raw": None}


def _header_of(identity: Any, data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The raw header that made the DSPy results file `path` (identity `identity`), rebuilt as dspy_side.py
    builds it and checked: its identity must be the file's, key for key (the draw's digests included)."""
    try:
        api_base = identity["lm"]["lm"]["api_base"]
        if not api_base.endswith("/lm/v1"):
            raise ValueError(f"LM api_base {api_base!r} is not a gate's")
        header = unit_header(dict(data), identity["config"], identity["seed"], identity["lm"]["lm"]["model"],
                             api_base.removesuffix("/lm/v1"), identity["optimizer"].get("num_candidate_programs"),
                             identity["dspy_version"])
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise ValueError(f"{path}: not the identity of a DSPy unit of this harness ({error!r})") from None
    if dspy_identity(header, data) != identity:
        raise ValueError(f"{path}: its identity is not what this column's unit {identity['config']} seed "
                         f"{identity['seed']} writes (another column's file, or one altered)")
    return header


_LEDGER, _REPLAY = COMPILE_LEDGER, f"{COMPILE_REPLAY}{REPLAY_SUFFIX}"  # an unfinished compile's files, as suffixes


def _compile_replay(folder: Path, stem: str) -> Path:
    """The replay log of unit `stem`'s compile in `folder` (its answers, to resume or replay it).

    >>> _compile_replay(Path("d"), "nq-test-dspy-x-seed0") == Path("d") / f"nq-test-dspy-x-seed0{_REPLAY}"
    True
    """
    return replay_file(folder, f"{stem}{COMPILE_REPLAY}")


def _compile_ledger(text: str, source: Path) -> dict[str, Any]:
    """A committed compile ledger's content, checked for its shape (a header and a list of invocations);
    anything else is refused naming `source`. (Its header is checked against the unit's when it is used.)"""
    try:
        kept = json.loads(text)
    except ValueError:
        kept = None
    if not (isinstance(kept, dict) and isinstance(kept.get("header"), dict)
            and isinstance(kept.get("invocations"), list) and all(isinstance(i, dict) for i in kept["invocations"])):
        raise ValueError(f"{source}: not a compile ledger (a header and a list of invocations)")
    return kept


def restore_dspy(work: Path, out: Path) -> list[str]:
    """Give the work folder `work` the DSPy units' state committed in the results folder `out`, where it
    has none: each ``out/<stem>.jsonl`` of a DSPy run becomes ``work/dspy/<stem>.raw.jsonl`` (its header
    rebuilt from the file's identity and the column's ``work/data.json``, and checked against it; its rows,
    the results rows less the cut raw completion), and the compiled programs, costs and failed compiles'
    records in ``out/dspy/`` are copied back, with a compile's ledger and replay log. A unit then resumes on
    a new machine where the last sitting stopped (dspy_side.py loads the program instead of compiling and
    skips the finished questions; a compile replays the answers it had and goes on), and a finished or
    failed one is not run again. Nothing already in `work` is overwritten; a file is validated whole
    (identity and every row) before anything is written from it. Returns what was done, a line each.

    >>> import tempfile; folder = Path(tempfile.mkdtemp())
    >>> restore_dspy(folder / "work", folder / "results")
    []
    """
    done: list[str] = []
    data: dict[str, Any] | None = None
    for path in sorted(out.glob("*-dspy-*.jsonl")):
        stem = path.name.removesuffix(".jsonl")
        raw = work / "dspy" / f"{stem}.raw.jsonl"
        if raw.exists():
            continue  # this work folder has the unit's own record: it is the newer one
        if data is None:
            if not (work / "data.json").exists():
                raise ValueError(f"{work / 'data.json'}: missing; `peer.py prepare` the column before restoring "
                                 f"{path.name}")
            data = json.loads((work / "data.json").read_text(encoding="utf-8"))
        identity, rows = read_run(path)
        header = _header_of(identity, data, path)
        if not stem.endswith(f"-dspy-{header['config']}-seed{header['seed']}"):
            raise ValueError(f"{path}: its identity names {header['config']} seed {header['seed']}, not this file")
        restored = [_raw_row(row, str(path)) for row in rows]
        raw.parent.mkdir(parents=True, exist_ok=True)
        tmp = raw.with_name(raw.name + ".tmp")
        tmp.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n"
                               for record in [{"dspy_raw": header}, *restored]), encoding="utf-8")
        os.replace(tmp, raw)
        done.append(f"{path.name}: {len(restored)} rows")
    # Compiled programs and costs, a unit's test rows or not (a sitting may stop between compile and test).
    for src in _compile_records(out / "dspy"):
        dst = work / "dspy" / src.name
        if dst.exists():
            continue
        if not isinstance(json.loads(src.read_text(encoding="utf-8")), dict):
            raise ValueError(f"{src}: not a JSON object")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        done.append(src.name)
    # A compile stopped mid-way: it goes on from its replay log, its cost so far in its ledger. A failed
    # one: its log, so that deleting its record and rerunning replays it to the same end.
    stems = {path.name.removesuffix(suffix) for suffix in (_LEDGER, _REPLAY, COMPILE_FAILED)
             for path in out.glob(f"dspy/*{suffix}")}
    for stem in sorted(stems):
        if not (work / "dspy" / f"{stem}.program.json").exists():
            done += _restore_compile(out / "dspy", stem, work)
    return done


def _restore_compile(folder: Path, stem: str, work: Path) -> list[str]:
    """Copy a compile's ledger and replay log, those of the two in `folder` (`convert_all`), into
    ``work/dspy/``: both checked before either is written (the ledger a JSON object of a header and
    invocations; every replay line a digest and a response, `ReplayLog`), and neither over a file already
    there."""
    src_ledger = folder / f"{stem}{_LEDGER}"
    sources = [src for src in (src_ledger, _compile_replay(folder, stem))
               if src.exists() and not (work / "dspy" / src.name).exists()]
    contents = {src: src.read_bytes() for src in sources}  # what is checked is what is written, byte for byte
    for src, content in contents.items():  # all checked before anything is written
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{src}: not UTF-8 text") from None
        if src == src_ledger:
            _compile_ledger(text, src)
        else:
            ReplayLog.parse(text, str(src))
    (work / "dspy").mkdir(parents=True, exist_ok=True)
    for src, content in contents.items():
        tmp = work / "dspy" / f"{src.name}.tmp"
        tmp.write_bytes(content)
        os.replace(tmp, work / "dspy" / src.name)
    return [src.name for src in sources]


def _compile_records(folder: Path) -> list[Path]:
    """The DSPy compiles' kept outcomes in `folder`: programs, costs, failed compiles' records."""
    return [path for pattern in ("*.program.json", "*.cost.json", f"*{COMPILE_FAILED}")
            for path in sorted(folder.glob(pattern))]


def _finished(row: Mapping[str, Any]) -> bool:
    return row.get("error") is None or bool(row.get("parse_failure"))


def cut_traces(src: Path, dst: Path) -> None:
    """Copy results file `src` to `dst` without its rows' prompt traces, passages and raw completions."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    with src.open(encoding="utf-8", errors="surrogateescape") as handle, \
            tmp.open("w", encoding="utf-8", errors="surrogateescape") as target:
        for line in handle:
            if not line.endswith("\n"):
                continue  # a row still being written
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "index" in record:
                record = {k: v for k, v in record.items() if k not in CUT}
            target.write(json.dumps(record, ensure_ascii=False) + "\n")
    if _same_rows_and_identity(tmp, dst):
        tmp.unlink()  # a DSPy file converted again from an unchanged raw file: keep the committed one as is
    else:
        os.replace(tmp, dst)


def _same_rows_and_identity(new: Path, old: Path) -> bool:
    """Whether results files `new` and `old` hold the same rows and the same header apart from when and where
    it was written (`created`, `machine`): rows restored on another machine and converted again are still
    the first machine's."""
    if not old.exists():
        return False
    with new.open("rb") as a, old.open("rb") as b:
        first_a, first_b = a.readline(), b.readline()
        if a.read() != b.read():
            return False
    try:
        header_a, header_b = json.loads(first_a), json.loads(first_b)
    except ValueError:
        return False
    for header in (header_a, header_b):
        if isinstance(header, dict) and isinstance(header.get("dsp_run"), dict):
            header["dsp_run"].pop("created", None)
            header["dsp_run"].pop("machine", None)
    return header_a == header_b


def convert_all(work: Path, out: Path) -> list[dict[str, Any]]:
    """Convert every raw DSPy file of a column, copy the results files (traces cut), compiled programs and
    compile costs into `out`; return one summary per configuration."""
    data = json.loads((work / "data.json").read_text(encoding="utf-8"))
    summaries = []
    for raw in sorted((work / "dspy").glob("*.raw.jsonl")):
        stem = raw.name.removesuffix(".raw.jsonl")
        full = work / "dspy-results" / f"{stem}.jsonl"
        counts = convert_raw(raw, data, full)
        cut_traces(full, out / f"{stem}.jsonl")
        summaries.append({"stem": stem, **counts})
    for extra in _compile_records(work / "dspy"):
        (out / "dspy").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(extra, out / "dspy" / extra.name)
    # A compile stopped before its end: its ledger and replay log go too, so that it resumes on another
    # machine; once the program is saved they are spent (its cost file holds the sums), and leave `out`.
    # A failed compile's log stays beside its record: a rerun from it reaches the same failure with no server.
    for ledger in sorted((work / "dspy").glob(f"*{_LEDGER}")):
        stem = ledger.name.removesuffix(_LEDGER)
        if not (work / "dspy" / f"{stem}.program.json").exists():
            for src in (ledger, _compile_replay(work / "dspy", stem)):
                if src.exists():
                    (out / "dspy").mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, out / "dspy" / src.name)
    for failed in sorted((work / "dspy").glob(f"*{COMPILE_FAILED}")):
        log = _compile_replay(work / "dspy", failed.name.removesuffix(COMPILE_FAILED))
        if log.exists():
            shutil.copyfile(log, out / "dspy" / log.name)
    for spent in sorted(out.glob(f"dspy/*{_LEDGER}")) + sorted(out.glob(f"dspy/*{_REPLAY}")):
        stem = spent.name.removesuffix(_LEDGER).removesuffix(_REPLAY)
        if (out / "dspy" / f"{stem}.program.json").exists() or (
                spent.name.endswith(_LEDGER) and (out / "dspy" / f"{stem}{COMPILE_FAILED}").exists()):
            spent.unlink()
    return summaries


def gate_stats(gate: str) -> dict[str, Any]:
    """The gate's counters (LM requests and tokens, RM searches) now."""
    with urllib.request.urlopen(f"{gate}/gate/stats", timeout=30) as response:
        return json.load(response)


def compile_cost(compiled: Path, before: Mapping[str, Any], after: Mapping[str, Any], wall: float,
                 previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A dsp compile's cost: what it counted itself (its JSON's meta) and what the gate's servers saw.

    A compile rerun on a warm cache (its compiled JSON deleted, its search rows cached) costs nothing and
    would write zeros over the measurement of the run that paid; given the earlier cost (`previous`),
    that measurement stays, and this invocation's goes under ``rerun``.

    >>> import tempfile; c = Path(tempfile.mkdtemp()) / "c.json"; _ = c.write_text('{"meta": {"seed": 1}}')
    >>> first = compile_cost(c, {}, {"lm_requests": 300}, 60.0)
    >>> again = compile_cost(c, {"lm_requests": 300}, {"lm_requests": 300}, 2.0, previous=first)
    >>> again["server"]["lm_requests"], again["rerun"]["server"]["lm_requests"], again["rerun"]["wall_seconds"]
    (300, 0, 2.0)
    """
    meta = json.loads(compiled.read_text(encoding="utf-8")).get("meta") or {}
    cost = {
        "system": "dsp", "compiled": compiled.name, "seed": meta.get("seed"), "wall_seconds": round(wall, 1),
        "lm_usage": meta.get("lm_usage"), "rows_usage": meta.get("rows_usage"),
        **({"readings_usage": meta["readings_usage"]} if meta.get("readings_usage") else {}),
        "server": {key: after.get(key, 0) - before.get(key, 0)
                   for key in ("lm_requests", "prompt_tokens", "completion_tokens", "rm_requests", "lm_errors")},
        "note": "lm_usage: the compile's own count of LM requests (cache hits apart) and tokens; server: the "
                "requests that reached the LM server, counted at the gate (a compile resumed on a warm cache "
                "shows fewer); wall_seconds: this invocation",
    }
    paid = int((cost.get("lm_usage") or {}).get("requests") or 0) + cost["server"]["lm_requests"]
    if previous and not paid and compile_calls(previous):
        kept = {key: value for key, value in previous.items() if key != "rerun"}
        kept["rerun"] = {key: cost[key] for key in ("wall_seconds", "lm_usage", "server")}
        return kept
    return cost


def compile_calls(cost: Mapping[str, Any]) -> int:
    """A compile's LM calls: the larger of its own count (cache hits included) and the requests that
    reached the LM server. dsp counts a call asking n samples as one, while llama.cpp's server answers
    one sample per request, so there the server's count is the true one; a compile resumed on a warm
    cache reached the server less, and there its own count is. A compile rerun on its saved search rows
    (a resumed search) makes no call at all: its rows still say what they cost when they ran.

    >>> compile_calls({"lm_usage": {"requests": 90, "cached_requests": 10}, "server": {"lm_requests": 300}})
    300
    >>> compile_calls({"lm_calls": 120, "server": {"lm_requests": 0}})
    120
    >>> compile_calls({"lm_usage": {"requests": 0}, "rows_usage": {"requests": 3326}, "server": {"lm_requests": 0}})
    3326
    """
    rows = int((cost.get("rows_usage") or {}).get("requests") or 0)
    return max(own_calls(cost), rows, int((cost.get("server") or {}).get("lm_requests") or 0))


def own_calls(cost: Mapping[str, Any]) -> int:
    """A compile's own count of its LM calls, cache hits included, less the readings it read back from
    the cache (`readings_usage`: a free option's other values, scored from the calls already made).

    >>> own_calls({"lm_usage": {"requests": 90, "cached_requests": 110}, "readings_usage": {"cached_requests": 100}})
    100
    """
    usage, read = cost.get("lm_usage") or {}, cost.get("readings_usage") or {}
    if cost.get("lm_calls") is not None:
        return int(cost["lm_calls"])
    # A resumed compile's readings may count rows read before it ran: never below none.
    return max(0, int(usage.get("requests") or 0) + int(usage.get("cached_requests") or 0)
               - int(read.get("requests") or 0) - int(read.get("cached_requests") or 0))


def matched_candidates(costs: Iterable[Path], val: int) -> int:
    """BootstrapFewShotWithRandomSearch's num_candidate_programs whose LM calls match dsp compile's: the
    mean LM calls of the dsp compiles (`compile_calls`), over the validation questions each candidate
    is scored on, less the 3 programs DSPy's random search always adds (zero-shot, labeled only,
    unshuffled bootstrap); at least 1. An estimate (a candidate's bootstrapping costs calls too, and a
    multi-step program several per question): the cost files give the calls both actually made.

    >>> import tempfile; d = Path(tempfile.mkdtemp()); p = d / "c.cost.json"
    >>> _ = p.write_text(json.dumps({"lm_usage": {"requests": 1600}}))
    >>> matched_candidates([p], 80)
    17
    """
    requests = []
    for path in costs:
        total = compile_calls(json.loads(Path(path).read_text(encoding="utf-8")))
        if total:
            requests.append(total)
    if not requests:
        raise SystemExit("peer.py matched: no dsp compile cost with LM requests yet; run dsp:compiled first "
                         "or give --rs-candidates")
    return max(1, round(statistics.mean(requests) / val) - 3)


def parse_failures(paths: Iterable[Path]) -> list[tuple[str, int, int]]:
    """(file, rows, parse failures) of each DSPy results file."""
    out = []
    for path in paths:
        identity, rows = read_run(path)
        if (identity or {}).get("system") == "dspy":
            out.append((path.name, len(rows), sum(1 for r in rows if r.get("parse_failure"))))
    return out


class CompiledRun(NamedTuple):
    """What a compiled program's test-run file name says: `setting` (the name without its seeds: one
    compiler on one column), `tag` (run.sh's --compile-tag, "" untagged) and the compile `seed`."""
    setting: str
    tag: str
    seed: int


_COMPILED = re.compile(r"-test-dsp-compiled_[a-z]+-dsp-small(?:-(?P<tag>[A-Za-z0-9_-]+?))?-seed(?P<seed>\d+)-seed\d+$")


def compiled_run(name: str) -> CompiledRun | None:
    """Parse a results file name made by run.sh's `dsp:compiled-seedN` unit (None: another kind of run).

    >>> compiled_run("nq-test-dsp-compiled_nq-dsp-small-readings-seed2-seed0.jsonl")
    CompiledRun(setting='nq-test-dsp-compiled_nq-dsp-small-readings', tag='readings', seed=2)
    >>> compiled_run("nq-test-dsp-compiled_nq-dsp-small-seed1-seed0").tag, compiled_run("nq-test-vanilla-seed0")
    ('', None)
    """
    stem = name.removesuffix(".jsonl")
    found = _COMPILED.search(stem)
    if not found:
        return None
    return CompiledRun(stem[:found.start("seed") - len("-seed")], found["tag"] or "", int(found["seed"]))


def _order(paths: list[Path], tag: str = "") -> list[Path]:
    """The comparison's order: dsp compile's runs first, the compiler `tag` names (run.sh's --compile-tag;
    "": the untagged one) before the others (its seed 0 leads: every other run is paired with it), then
    our baselines, then DSPy's configurations.

    >>> names = ["nq-test-dsp-compiled_nq-dsp-small-seed0-seed0.jsonl", "nq-test-retrieve_then_read-seed0.jsonl",
    ...          "nq-test-dsp-compiled_nq-dsp-small-readings-seed0-seed0.jsonl"]
    >>> [p.name.split("small")[-1] for p in _order([Path(n) for n in names], "readings")][:2]
    ['-readings-seed0-seed0.jsonl', '-seed0-seed0.jsonl']
    >>> _order([Path(n) for n in names[:2]], "readings")[0].name  # no run of it yet: the untagged one leads
    'nq-test-dsp-compiled_nq-dsp-small-seed0-seed0.jsonl'
    """
    tags = {run.tag for run in map(compiled_run, (path.name for path in paths)) if run}
    lead = tag if tag in tags else ""  # that compiler has no test run yet: the untagged one leads

    def rank(path: Path) -> tuple[int, str]:
        name, run = path.name, compiled_run(path.name)
        if "-dspy-" in name:
            return 4, name
        if run:  # the compiler named first; a trial's or another compiler's after
            return (0 if run.tag == lead else 1), name
        return (2 if "-dsp-small" in name else 3), name
    return sorted(paths, key=rank)


def report(lm: str, dataset: str, out: Path, n: int | None, tag: str = "") -> str:
    """`dsp compare` over the column's results files, parse failures and compile costs, as markdown
    (also written to ``out/report.md``); `tag`: the compiler whose runs lead (run.sh's --compile-tag)."""
    from dsp.evaluation.compare import compare_runs, format_comparison

    files = _order([p for p in out.glob("*.jsonl")], tag)
    if not files:
        raise SystemExit(f"peer.py report: no results files in {out}")
    # At --n N, a run of fewer questions (one not extended yet) is named apart, not compared on part of them.
    short = {path: len(read_run(path)[1]) for path in files} if n is not None else {}
    short = {path: rows for path, rows in short.items() if rows < n}
    if len(short) == len(files):
        raise SystemExit(f"peer.py report: no results file in {out} has {n} questions yet")
    table = compare_runs([path for path in files if path not in short], n=n)
    lines = [f"# {MODELS[lm].label} on {dataset} ({split_of(dataset)} split)", "",
             f"Generation on both sides: {GENERATION} (the gate fills these into any request lacking them); "
             f"gate port {column_port(lm, dataset)}.", "", "```", format_comparison(table), "```", ""]
    if short:
        lines += [f"Left out at --n {n} (fewer questions so far; `--n` with their count compares them): "
                  + ", ".join(f"{path.name} ({rows})" for path, rows in short.items()), ""]
    # Each seed's compile is its own program (compare does not group them); compiles of one setting (one
    # name but for the seed: run.sh's, or a tagged trial's) are summarized together, never mixed.
    settings: dict[str, list[Any]] = {}
    for run in table.runs:
        compiled = compiled_run(run.name)
        if compiled:
            settings.setdefault(compiled.setting, []).append(run)
    for setting, runs in settings.items():
        if len(runs) > 1:
            scores = [run.score for run in runs]
            lines += [f"dsp compile over {len(scores)} seeds ({setting}): mean {statistics.mean(scores):.1f}, sd "
                      f"{statistics.stdev(scores):.1f}, best {max(scores):.1f} (" +
                      ", ".join(f"{run.name}: {run.score:.1f}" for run in runs) + ")", ""]
    for path in sorted((out / "compiled").glob("*.json")):
        compiled = json.loads(path.read_text(encoding="utf-8"))
        lines += [f"Search table of {path.name} (chose {compiled.get('candidate', {}).get('key')}):", "", "```",
                  dsp.compiling.report(compiled.get("table") or [], (compiled.get("meta") or {}).get("race")),
                  "```", ""]
    failures = parse_failures(files)
    if failures:
        lines += ["| DSPy configuration | rows | parse failures | rate |", "|---|---|---|---|"]
        lines += [f"| {name.removesuffix('.jsonl')} | {rows} | {bad} | {100 * bad / max(rows, 1):.1f}% |"
                  for name, rows, bad in failures]
        lines.append("")
    costs = sorted(out.glob("*.cost.json")) + sorted((out / "dspy").glob("*.cost.json"))
    if costs:
        # A resumed compile's invocation is only its last sitting; its rows keep the seconds of every one.
        lines += ["| compile | wall s (this invocation) | wall s by its rows | LM calls (own count) | reached the "
                  "server | by its rows (when they ran) | prompt tokens | completion tokens |",
                  "|---|---|---|---|---|---|---|---|"]
        for path in costs:
            cost = json.loads(path.read_text(encoding="utf-8"))
            server = cost.get("server") or {}
            rows = cost.get("rows_usage") or {}
            cells = [cost.get("wall_seconds"), rows.get("seconds"), own_calls(cost), server.get("lm_requests"),
                     rows.get("requests"), server.get("prompt_tokens"), server.get("completion_tokens")]
            # A DSPy compile has no rows of its own (dsp's search keeps one per evaluation): "—", not "None".
            lines.append(f"| {path.name.removesuffix('.cost.json')} | "
                         + " | ".join("—" if cell is None else str(cell) for cell in cells) + " |")
        lines.append("")
    unfinished = sorted((out / "dspy").glob(f"*{_LEDGER}"))
    if unfinished:
        lines += ["| DSPy compile in progress (to resume: its ledger and replay log) | sittings | wall s so far | "
                  "reached the server so far | prompt tokens | completion tokens | answers kept to replay |",
                  "|---|---|---|---|---|---|---|"]
        for path in unfinished:
            invocations = _compile_ledger(path.read_text(encoding="utf-8"), path)["invocations"]
            replay = _compile_replay(path.parent, path.name.removesuffix(_LEDGER))
            kept = replay.read_bytes().count(b"\n") if replay.exists() else 0  # its whole lines
            spent = {key: sum(int((i.get("server") or {}).get(key) or 0) for i in invocations)
                     for key in ("lm_requests", "prompt_tokens", "completion_tokens")}
            lines.append(f"| {path.name.removesuffix(_LEDGER)} | {len(invocations)} | "
                         f"{sum(float(i.get('wall_seconds') or 0) for i in invocations):.0f} | {spent['lm_requests']} | "
                         f"{spent['prompt_tokens']} | {spent['completion_tokens']} | {kept} |")
        lines.append("")
    failed = sorted((out / "dspy").glob(f"*{COMPILE_FAILED}"))
    if failed:
        lines += ["| DSPy compile that failed (no program, no test rows: a completion DSPy could not parse, raised "
                  "where its optimizer does not catch it) | in | sittings | wall s | LM calls | reached the server | "
                  "prompt tokens | completion tokens |", "|---|---|---|---|---|---|---|---|"]
        for path in failed:
            record = json.loads(path.read_text(encoding="utf-8"))
            if not (isinstance(record, dict) and isinstance(record.get("failed"), dict)):
                raise ValueError(f"{path}: not a failed compile's record (no 'failed' object)")
            server = record.get("server") or {}
            lines.append(f"| {path.name.removesuffix(COMPILE_FAILED)} | {record['failed'].get('type')} in "
                         f"`{record['failed'].get('step')}` | {len(record.get('invocations') or [])} | "
                         f"{record.get('wall_seconds')} | {record.get('lm_calls')} | {server.get('lm_requests')} | "
                         f"{server.get('prompt_tokens')} | {server.get('completion_tokens')} |")
        lines.append("")
    text = "\n".join(lines)
    (out / "report.md").write_text(text + "\n", encoding="utf-8")
    return text


def _dspy_compile_calls(folder: Path, name: str) -> str:
    """A DSPy configuration's LM calls to compile, from its cost file (none: the program as written)."""
    cost = folder / "dspy" / f"{name}.cost.json"
    if cost.exists():
        return f"{compile_calls(json.loads(cost.read_text(encoding='utf-8'))):,}"
    return "0" if "-none-" in name else "per question" if "-knn-" in name else "not recorded"


def scoreboard(root: Path, n: int = 500) -> str:
    """RESULTS.md's "Where each column stands", recomputed from the results files under `root`
    (``<lm>/<dataset>/``): per served model and dataset, each dsp compiler's test EM on the first `n`
    questions by compile seed, DSPy's best configuration so far, the weakest compile seed against it
    (right only one / only the other, exact McNemar p), the LM calls each made to compile (dsp: the
    range over seeds), and how many DSPy configurations have run (and whose compile failed: no test
    rows, `COMPILE_FAILED`). Columns of one served model (SmolLM2's
    chat and text columns) are one row group: they answer the same test questions with the same model.

    >>> scoreboard(ROOT / "results" / "peer").splitlines()[0].startswith("| LM × dataset | dsp compiler")
    True
    """
    from dsp.evaluation.compare import compare_runs

    lines = ["| LM × dataset | dsp compiler (column, tag) | test EM by compile seed | DSPy's best so far | weakest "
             "seed vs DSPy's best: right only dsp / only DSPy (exact McNemar p) | LM calls to compile: dsp / "
             "DSPy's best | DSPy configurations run |", "|---|---|---|---|---|---|---|"]
    aliases: dict[str, list[str]] = {}
    for key, model in MODELS.items():
        aliases.setdefault(model.alias, []).append(key)
    datasets = sorted({path.name for path in root.glob("*/*") if path.is_dir()})
    for keys in aliases.values():
        for dataset in datasets:
            folders = [root / key / dataset for key in keys if (root / key / dataset).is_dir()]
            files = [path for folder in folders for path in sorted(folder.glob("*.jsonl"))
                     if len(read_run(path)[1]) >= n]
            settings: dict[tuple[str, str], dict[int, Path]] = {}
            for path in files:
                compiled = compiled_run(path.name)
                if compiled:
                    settings.setdefault((path.parent.parent.name, compiled.tag), {})[compiled.seed] = path
            dspy = [path for path in files if "-dspy-" in path.name]
            failed = [path for folder in folders for path in sorted((folder / "dspy").glob(f"*{COMPILE_FAILED}"))]
            if not settings:
                continue
            scores = {run.path: run.score for run in compare_runs(
                [p for runs in settings.values() for p in runs.values()] + dspy, n=n).runs}
            best = max(dspy, key=lambda p: (scores[str(p)], p.name)) if dspy else None
            label = f"{MODELS[keys[0]].label.split(' (')[0]} × {dataset}"
            for (column, tag), runs in settings.items():
                seeds = sorted(runs)
                by_seed = ", ".join(f"{scores[str(runs[s])]:.1f}" for s in seeds)
                costs = [root / column / dataset / f"dsp-compile{f'-{tag}' if tag else ''}-seed{s}.cost.json"
                         for s in seeds]
                calls = [compile_calls(json.loads(c.read_text(encoding="utf-8"))) for c in costs if c.exists()]
                dsp_calls = (f"{min(calls):,}" if min(calls) == max(calls) else f"{min(calls):,}–{max(calls):,}") \
                    if calls else "not recorded"
                if best is None:
                    versus, best_cell, best_calls = "", "none run yet", ""
                else:
                    weakest = min((runs[s] for s in seeds), key=lambda p: scores[str(p)])
                    pair = compare_runs([weakest, best], n=n).runs[1].paired or {}
                    versus = f"{pair['a_only']} / {pair['b_only']} ({pair['p']:.2g})"
                    name = best.name.removesuffix(".jsonl")
                    best_cell = f"`{name.split('-dspy-')[1]}`: {scores[str(best)]:.1f}"
                    best_calls = _dspy_compile_calls(best.parent, name)
                lines.append(f"| {label} | `{column}`, {tag or 'untagged'} | {by_seed} | {best_cell} | "
                             f"{versus} | {dsp_calls} / {best_calls or '–'} | {len(dspy)}"
                             f"{f' (+{len(failed)} whose compile failed)' if failed else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="data.json and the BM25 index of a column")
    p.add_argument("--dataset", required=True)
    p.add_argument("--n", type=int, help="test questions (default: all of the split)")
    p.add_argument("--work", required=True)
    p.add_argument("--index", help="the folder of the task's saved BM25 index (built if missing)")
    p = sub.add_parser("convert", help="every raw DSPy file of a column -> results files")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("restore", help="the DSPy units' committed state -> a fresh work folder")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("cut", help="one of our results files -> the results folder, traces cut")
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True, help="the results folder")
    p = sub.add_parser("stats", help="the gate's counters, as JSON")
    p.add_argument("--gate", required=True)
    p = sub.add_parser("compile-cost", help="a dsp compile's cost JSON")
    p.add_argument("--compiled", required=True)
    p.add_argument("--before", required=True, help="the gate's counters before (a JSON file)")
    p.add_argument("--after", required=True, help="... and after")
    p.add_argument("--wall", type=float, required=True)
    p.add_argument("--previous", help="the cost of an earlier run of this compile, kept if this one made no call")
    p.add_argument("--out", required=True)
    p = sub.add_parser("matched", help="num_candidate_programs matched to dsp compile's LM calls")
    p.add_argument("--dataset", required=True)
    p.add_argument("costs", nargs="+")
    p = sub.add_parser("scoreboard", help="RESULTS.md's table of where each column stands")
    p.add_argument("--out", default=str(ROOT / "results" / "peer"), help="the results folder (default results/peer)")
    p.add_argument("--n", type=int, default=500)
    p = sub.add_parser("report", help="dsp compare over the column, parse failures, compile costs")
    p.add_argument("--lm", required=True, choices=list(MODELS))
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int)
    p.add_argument("--compile-tag", default="", help="the compiler whose runs lead (run.sh's --compile-tag)")
    args = parser.parse_args(argv)

    if args.command == "prepare":
        started = time.perf_counter()
        data = prepare_data(args.dataset, args.n, Path(args.work), Path(args.index) if args.index else None)
        print(f"{data['stem']}: {len(data['test'])} {data['split']} questions, a pool of {len(data['pool'])} "
              f"({time.perf_counter() - started:.0f} s)")
    elif args.command == "convert":
        for s in convert_all(Path(args.work), Path(args.out)):
            rate = 100 * s["parse_failures"] / max(s["rows"], 1)
            print(f"  {s['stem']}: {s['rows']} rows, EM {100 * s['right'] / max(s['rows'], 1):.1f}, "
                  f"{s['parse_failures']} parse failures ({rate:.1f}%), {s['errors']} other errors")
    elif args.command == "restore":
        for line in restore_dspy(Path(args.work), Path(args.out)):
            print(f"  restored {line}")
    elif args.command == "cut":
        for src in glob.glob(args.src):
            cut_traces(Path(src), Path(args.out) / Path(src).name)
    elif args.command == "stats":
        print(json.dumps(gate_stats(args.gate)))
    elif args.command == "compile-cost":
        before = json.loads(Path(args.before).read_text(encoding="utf-8"))
        after = json.loads(Path(args.after).read_text(encoding="utf-8"))
        previous = json.loads(Path(args.previous).read_text(encoding="utf-8")) if args.previous else None
        _write_json(Path(args.out), compile_cost(Path(args.compiled), before, after, args.wall, previous))
    elif args.command == "matched":
        print(matched_candidates([Path(p) for p in args.costs], DSPY_VAL[args.dataset]))
    elif args.command == "scoreboard":
        print(scoreboard(Path(args.out), args.n))
    elif args.command == "report":
        print(report(args.lm, args.dataset, Path(args.out), args.n, args.compile_tag))
    return 0


if __name__ == "__main__":
    sys.exit(main())
