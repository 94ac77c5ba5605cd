"""The tree reads like the architecture: the library imports none of its users, every module declares
its public names, library modules stay small, and the package imports no heavy backend up front."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted((ROOT / "dsp").rglob("*.py"))
ALL_MODULES = sorted(p for folder in ("dsp", "programs", "templates") for p in (ROOT / folder).rglob("*.py"))


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_the_library_imports_none_of_its_applications():
    offending = [(str(path.relative_to(ROOT)), name) for path in LIBRARY for name in _imports(path)
                 if name.split(".")[0] in ("programs", "templates")]
    assert not offending, offending


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_declares_its_public_names(path):
    if path.name == "__main__.py":
        return
    tree = ast.parse(path.read_text(encoding="utf-8"))
    declared = any((isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                          for t in node.targets))
                   or (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                       and node.target.id == "__all__") for node in tree.body)
    assert declared, f"{path.relative_to(ROOT)} has no __all__"
    stars = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]
    assert not stars, f"{path.relative_to(ROOT)} uses a star import"


def test_no_library_module_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in LIBRARY if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, long


def test_programs_use_only_the_public_api():
    """programs/ and templates/ import dsp as a user would: no private name, no relative reach into dsp."""
    private = []
    for path in ALL_MODULES:
        if path.is_relative_to(ROOT / "dsp"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dsp"):
                private += [(str(path.relative_to(ROOT)), node.module, a.name) for a in node.names
                            if a.name.startswith("_") or any(part.startswith("_") for part in node.module.split("."))]
    assert not private, private


def test_importing_dsp_loads_no_heavy_backend_and_no_application():
    code = ("import sys, dsp; heavy = [m for m in ('llama_cpp', 'torch', 'colbert', 'ray', 'redis', 'bm25s', "
            "'faiss', 'programs', 'templates', 'matplotlib') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
