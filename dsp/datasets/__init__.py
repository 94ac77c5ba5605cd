"""Datasets: where local data lives (DSP_DATA_DIR) and loaders that return lists of dsp.Example."""

from .paths import data_dir, data_path

__all__ = ["data_dir", "data_path"]
