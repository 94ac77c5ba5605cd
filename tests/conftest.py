"""Shared fixtures: an isolated cache per test, settings restored after each test, the data directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import dsp

DATA_DIR = os.environ.get("DSP_DATA_DIR")


@pytest.fixture
def data_dir() -> Path:
    """The shared data directory; tests that need it skip only when DSP_DATA_DIR is unset."""
    if not DATA_DIR:
        pytest.skip("DSP_DATA_DIR is not set")
    return Path(DATA_DIR)


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path, monkeypatch):
    """Every test gets its own cache directory and leaves dsp.settings as it found them."""
    monkeypatch.setenv("DSP_CACHEDIR", str(tmp_path / "dsp-cache"))
    monkeypatch.delenv("DSP_CACHE", raising=False)
    monkeypatch.delenv("DSP_CACHE_WRITE", raising=False)
    monkeypatch.delenv("DSP_CACHE_URL", raising=False)  # a developer's shared Redis must not get test traffic
    base = dict(dsp.settings._base)
    yield
    object.__setattr__(dsp.settings, "_base", type(dsp.settings._base)(base))


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if anything builds an LM or an index: every argument check must come before."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model or index was loaded before the arguments were checked")

    monkeypatch.setattr(dsp, "lm_from_spec", refuse)
    monkeypatch.setattr(dsp, "rm_from_spec", refuse)
    monkeypatch.setattr(dsp, "BM25", refuse)
