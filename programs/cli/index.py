"""`dsp index` (build a BM25 or dense index, or a Milvus collection, from a passages file) and `dsp serve`
(serve one with the ColBERTv2 server API, so `dsp.ColBERTv2(url)` or DSP v1's client can query it).

    dsp index --passages passages.jsonl.gz --out index/ [--backend bm25|dense]
    dsp index --backend milvus --passages passages.jsonl.gz --out runs/wiki.db[,collection=NAME][,mode=hybrid]
    dsp serve --index index/ --port 8893
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

from dsp.datasets import CorpusError
from dsp.serve import DEFAULT_PORT, MAX_K, load_index, serve

from .options import UsageError, existing_path, positive_int

__all__ = ["add_parser", "cmd_index", "cmd_serve"]


def add_parser(sub: Any) -> None:
    index = sub.add_parser("index", help="build a BM25 or dense index, or a Milvus collection, from a passages file")
    index.add_argument("--passages", required=True, type=existing_path,
                       help="a passages .jsonl(.gz) file ({id, title, text} rows)")
    index.add_argument("--out", required=True,
                       help="the index directory to write; milvus: URI[,collection=NAME][,mode=bm25|dense|hybrid][,shards=N], URI "
                            "a Milvus Lite database (runs/wiki.db) or a server (http://host:19530, token from "
                            "$MILVUS_TOKEN); a rerun resumes an interrupted ingest")
    index.add_argument("--backend", choices=("bm25", "dense", "milvus"), default="bm25", help="the index kind")
    index.set_defaults(handler=cmd_index)

    serve_ = sub.add_parser("serve", help="serve an index with the ColBERTv2 server API",
                            description="Serve a local index over HTTP with the ColBERTv2 server API "
                                        "(GET/POST /api/search?query=...&k=..., GET /health). No authentication: "
                                        "keep it on loopback or a private network.")
    serve_.add_argument("--index", required=True, type=existing_path,
                        help="a saved index directory, or a passages .jsonl(.gz) file to index at start-up")
    serve_.add_argument("--backend", choices=("bm25", "dense", "colbert"), default="bm25", help="the index kind")
    serve_.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve_.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (0: any free port)")
    serve_.add_argument("--vectorizer", choices=("e5", "hashing"), default="e5",
                        help="dense backend over a passages file: the embedding model")
    serve_.add_argument("--checkpoint", type=existing_path, help="colbert backend: the ColBERTv2 checkpoint directory")
    serve_.add_argument("--max-k", type=positive_int, default=MAX_K, help="largest k served")
    serve_.add_argument("--no-cache", action="store_true", help="do not put searches in the dsp cache")
    serve_.add_argument("--log-level", default=os.environ.get("DSP_LOG_LEVEL", "INFO"),
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper, help="log level")
    serve_.set_defaults(handler=cmd_serve)


def cmd_index(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.backend == "milvus":
        return _index_milvus(args, started)
    try:
        if args.backend == "bm25":
            from dsp import BM25

            rm = BM25(args.passages)
        else:
            from dsp import DenseRM

            rm = DenseRM(args.passages)
    except (CorpusError, ValueError) as error:
        raise UsageError(f"--passages {args.passages}: {error}") from None
    rm.save(args.out)
    print(f"{args.backend} index of {args.passages} written to {args.out} in {time.perf_counter() - started:.1f} s")
    return 0


def _index_milvus(args: argparse.Namespace, started: float) -> int:
    from dsp import MilvusRM
    from dsp.clients.specs import parse_spec

    _, uri, options = parse_spec(f"milvus:{args.out}")
    unknown = sorted(set(options) - {"collection", "mode", "shards"})
    if unknown:
        raise UsageError(f"--out {args.out}: unknown option(s) {', '.join(unknown)}; it takes collection=NAME, "
                         "mode=bm25|dense|hybrid, shards=N")
    try:
        shards = positive_int(options.get("shards", "1"))
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"--out {args.out}: shards: {error}") from None
    try:
        rm = MilvusRM.build(args.passages, uri, options.get("collection", "passages"), options.get("mode", "bm25"),
                            progress=True, shards=shards)
    except CorpusError as error:
        raise UsageError(f"--passages {args.passages}: {error}") from None
    except (ValueError, ConnectionError) as error:  # a bad URI or option, no server, another corpus there
        raise UsageError(f"--out {args.out}: {error}") from None
    print(f"milvus collection {rm.collection!r} at {uri} holds the {len(rm):,} passages of {args.passages} "
          f"({rm.mode}); {time.perf_counter() - started:.1f} s")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    if args.port < 0 or args.port > 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    if args.backend == "colbert" and not args.checkpoint:
        raise UsageError("the colbert backend needs --checkpoint (a local ColBERTv2 checkpoint directory)")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        rm = load_index(args.index, args.backend, args.vectorizer, args.checkpoint)
    except (CorpusError, ValueError, ImportError) as error:
        raise UsageError(f"--index {args.index}: {error}") from None
    try:
        serve(rm, args.host, args.port, max_k=args.max_k, cache=False if args.no_cache else None)
    except OSError as error:
        raise UsageError(str(error)) from None
    return 0
