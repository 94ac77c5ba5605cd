"""The paper's programs and baselines, written against the public `dsp` API only."""

__all__: list[str] = []  # each program is its own module: `from programs import open_qa`
