"""`dsp.compile`: programs tuned by search on their training data (DSP's parts put together).

- space.py: the candidates (demonstrations: raw, bootstrapped, how many, random or knn; program options;
  retrievers), plain data;
- bootstrap.py: augmented demonstrations from the program's own traces that pass, or whose context held
  the answer, gold-labelled (`annotate`, generalised);
- config.py: `CompileConfig`, the search and its budget as one checked frozen dataclass;
- search.py: the split into pool and validation, the candidates scored by `dsp.evaluate`, the choice
  (named phases: prepare, bootstrap, race, choose);
- table.py: the table of candidates as text (`report`);
- plan.py: a compile's LM requests and prompt tokens projected without calling the LM (`plan`, `--dry-run`);
- scratch.py: with the cache off, the in-process cache a compile keeps its own calls in until it ends;
- racing.py: the race the candidates run: dropped on paired evidence, ties settled by a declared rule;
- compiled.py: the compiled program, saved and loaded as plain JSON (data: checked, never imported from);
- registry.py: the programs a compiled file may name (`register_program`).
"""

from .bootstrap import LABELS, bootstrap, bootstrap_runs, demo_from_row, demos_of_rows
from .compiled import Compiled, load_compiled
from .config import CompileConfig
from .plan import Plan, Projection, plan
from .racing import CandidateFailed, Drop, Race, doubling_sizes, race
from .registry import program_name, register_program, register_programs, registered_program
from .search import compile, fixed_demos, split_train
from .space import DEMO_KINDS, Candidate, DemoSpace, Space
from .table import report

__all__ = [
    "compile", "CompileConfig", "plan", "Plan", "Projection", "load_compiled", "Compiled", "Space", "DemoSpace",
    "Candidate", "bootstrap", "demo_from_row", "split_train", "fixed_demos", "report", "program_name",
    "register_program", "register_programs", "registered_program", "bootstrap_runs", "demos_of_rows",
    "LABELS", "DEMO_KINDS", "race", "Race", "Drop", "CandidateFailed", "doubling_sizes",
]
