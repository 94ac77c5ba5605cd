"""Prompt templates of the bundled programs, one module per program family."""
