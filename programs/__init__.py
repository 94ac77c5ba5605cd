"""The paper's programs and baselines, written against the public `dsp` API only."""
