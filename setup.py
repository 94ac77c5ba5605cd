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
    packages=find_packages(include=["dsp", "dsp.*", "programs", "programs.*", "templates", "templates.*"]),
    include_package_data=True,
    install_requires=[
        "numpy>=1.24",
        "diskcache>=5.6",
        "regex>=2023.0",
        "faiss-cpu>=1.7.4",
        "pandas>=2.0",
        "tqdm>=4.60",
    ],
    extras_require={
        "dev": ["pytest>=8", "pytest-timeout>=2.3"],
        # Reserved for the real backends: the embedded model, and a local ColBERT index.
        "local": [],
        "colbert": [],
    },
    classifiers=["Programming Language :: Python :: 3", "License :: OSI Approved :: MIT License"],
)
