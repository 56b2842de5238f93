"""The package layout and the one-way import direction of DESIGN.md."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import rl_suite
import rl_suite.agents
import rl_suite.envs

ROOT = pathlib.Path(__file__).resolve().parents[1]


def imported_modules(folder: pathlib.Path) -> dict[str, set[str]]:
    found = {}
    for path in folder.rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def test_core_imports_neither_envs_nor_agents():
    for path, names in imported_modules(ROOT / "rl_suite").items():
        bad = {
            n
            for n in names
            if n.split(".")[0] in ("envs", "agents") or n.startswith(("rl_suite.envs", "rl_suite.agents"))
        }
        assert not bad, f"{path} imports {bad}"


def test_envs_import_no_agents():
    for path, names in imported_modules(ROOT / "envs").items():
        bad = {n for n in names if n.startswith("rl_suite.agents") or n.split(".")[0] == "agents"}
        assert not bad, f"{path} imports {bad}"


def test_envs_and_agents_install_inside_the_rl_suite_namespace():
    assert pathlib.Path(rl_suite.envs.__file__).resolve().parent == ROOT / "envs"
    assert pathlib.Path(rl_suite.agents.__file__).resolve().parent == ROOT / "agents"


def test_no_top_level_envs_or_agents_module_is_installed(tmp_path):
    code = "import importlib.util as u; print(*(u.find_spec(m) for m in ('envs', 'agents', 'rl_suite.envs.classic')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert out.startswith("None None ModuleSpec(name='rl_suite.envs.classic'")


def test_the_deployment_modules_sit_together_and_export_has_no_per_algorithm_branches():
    folder = ROOT / "rl_suite" / "deploy"
    assert sorted(path.stem for path in folder.glob("*.py")) == ["__init__", "export", "inference", "runtime", "sb3"]
    for path in folder.glob("*.py"):
        purpose = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert purpose.split("\n")[0].endswith("."), f"{path.name} does not open with a one-line purpose"
    for name in ("export.py", "inference.py", "runtime.py"):  # each agent provides its own inference module
        branches = re.findall(r"\.name\s*(?:==|!=|in\b)", (folder / name).read_text())
        assert not branches, f"rl_suite/deploy/{name} switches on an agent's name: {branches}"
