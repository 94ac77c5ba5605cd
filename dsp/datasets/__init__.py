"""Datasets: where local data lives (DSP_DATA_DIR), verified downloads, loaders returning dsp.Example lists,
and the paper's sampling protocol."""

from .corpus import (
    CorpusError, MappedPassages, corpus_fingerprint, iter_passages, normalize_passages, read_passages, write_passages,
)
from .jsonl import DataFileError, read_csv, read_json, read_jsonl
from .paths import data_dir, data_path, local_path
from .qa import (
    hotpotqa_corpus, load_hotpotqa, load_hotpotqa_csv, load_hotpotqa_simplified, load_litm_oracle, load_nq_open,
    load_qrecc, load_squad, qrecc_corpus, squad_corpus,
)
from .registry import REGISTRY, ChecksumError, DataFile, download, fetch, verify
from .splits import downsample, draw_order, few_shot_train, sample_indices, split_pool

__all__ = [
    "data_dir", "data_path", "local_path", "DataFileError", "read_jsonl", "read_json", "read_csv",
    "load_nq_open", "load_squad", "squad_corpus", "load_hotpotqa", "hotpotqa_corpus", "load_hotpotqa_simplified",
    "load_hotpotqa_csv",
    "load_qrecc", "qrecc_corpus", "load_litm_oracle",
    "REGISTRY", "DataFile", "ChecksumError", "fetch", "download", "verify",
    "few_shot_train", "downsample", "sample_indices", "draw_order", "split_pool",
    "CorpusError", "read_passages", "iter_passages", "normalize_passages", "write_passages", "MappedPassages",
    "corpus_fingerprint",
]
