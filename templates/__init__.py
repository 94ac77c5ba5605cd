"""Prompt templates of the bundled programs, one module per program family."""

__all__: list[str] = []  # each family is its own module: `from templates.qa import qa`
