"""Issue 29, item 21: a script beside a clone folder named `dsp` imports the installed package.

Python puts the script's own folder first on sys.path, so a clone named `dsp` there (the repository's root:
no __init__.py at its top) is found first, as a namespace package with nothing in it. A regular package
found anywhere later on the path wins over it, but an import hook (setuptools' default editable install)
is consulted only after the whole path: `AttributeError: module 'dsp' has no attribute 'Example'`, even
with that very clone installed. setup.py declares the packages' root, so `pip install -e .` is a .pth line
putting the root on the path instead. Tested for real: a subprocess of the project's python, and the
editable wheel setup.py builds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """\
import json, dsp
print(json.dumps({"file": dsp.__file__, "Example": dsp.Example(question="q").question}))
"""


def _clone(into: Path) -> Path:
    """A folder `dsp` laid out as a clone of this repository: setup.py, README.md and the packages (the
    package `dsp` inside it), no __init__.py at its top."""
    clone = into / "dsp"
    clone.mkdir()
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, clone / name)
    for package in ("dsp", "programs", "templates"):
        shutil.copytree(ROOT / package, clone / package, ignore=shutil.ignore_patterns("__pycache__"))
    return clone


def _environment() -> dict[str, str]:
    """This environment without PYTHONPATH: the script must find the package as an installed one does."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.mark.parametrize("run_from", ["the script's folder", "elsewhere"])
def test_a_script_beside_a_clone_named_dsp_imports_the_installed_package(tmp_path, run_from):
    home = tmp_path / "project"
    home.mkdir()
    clone = _clone(home)
    assert not (clone / "__init__.py").exists() and (clone / "dsp" / "__init__.py").exists()
    script = home / "script.py"
    script.write_text(SCRIPT, encoding="utf-8")
    cwd = home if run_from == "the script's folder" else tmp_path
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, env=_environment(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["Example"] == "q"
    assert found["file"] is not None and not Path(found["file"]).resolve().is_relative_to(home)


def test_the_editable_install_puts_the_root_on_the_path_and_installs_no_import_hook(tmp_path):
    # What `pip install -e .` installs, built from setup.py as pip asks for it (PEP 660), in a copy.
    source = _clone(tmp_path)
    out = tmp_path / "wheel"
    out.mkdir()
    code = "import sys; from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, env=_environment(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = out / done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        pth = [n for n in names if n.endswith(".pth")]
        assert len(pth) == 1, names
        lines = archive.read(pth[0]).decode().split()
    assert lines == [str(source.resolve())]  # a path, not `import __editable___..._finder`
    assert not [n for n in names if n.endswith(".py")], names
