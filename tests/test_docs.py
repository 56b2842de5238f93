"""The documentation site: the guides' Python runs, the generated reference covers every registered id, algorithm,
setting and command, every benchmark report gets a page, and the site builds with --strict (what `make docs` and CI
run)."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUNNABLE = "{.python .runnable}"  # a guide's Python block that the tests run (MkDocs renders it as Python)


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_blocks(text: str) -> list[tuple[str, str]]:
    """``(info string, code)`` of each fenced code block."""
    return re.findall(r"^```([^\n]*)\n(.*?)^```", text, flags=re.M | re.S)


GUIDES = sorted((DOCS / "guides").glob("*.md"))


@pytest.mark.parametrize("guide", GUIDES, ids=[path.stem for path in GUIDES])
def test_every_python_block_of_a_guide_runs_or_is_marked_as_a_sketch(guide, tmp_path, monkeypatch):
    """A guide's runnable blocks run in order as one script, in a fresh directory (they may write runs and files);
    a plain ``python`` block is a sketch with placeholders (``...``), which says so by holding one."""
    blocks = code_blocks(guide.read_text())
    runnable = [code for info, code in blocks if info.strip() == RUNNABLE]
    sketches = [code for info, code in blocks if info.strip() == "python"]
    unmarked = [code for code in sketches if "..." not in code]
    assert not unmarked, f"{guide.name}: a plain python block without placeholders: mark it {RUNNABLE}"
    if not runnable:
        pytest.skip(f"{guide.name} has no runnable block")
    monkeypatch.chdir(tmp_path)
    exec(compile("\n".join(runnable), str(guide), "exec"), {"__name__": f"guide_{guide.stem.replace('-', '_')}"})


def test_the_getting_started_guide_has_runnable_python():
    blocks = code_blocks((DOCS / "guides" / "getting-started.md").read_text())
    assert sum(info.strip() == RUNNABLE for info, _ in blocks) >= 3


def test_the_environment_reference_lists_every_registered_id():
    from rl_suite.registry import registered

    page = hooks().environments_page()
    for env_spec in registered():
        assert f"| `{env_spec.id}` |" in page, env_spec.id
    assert "unavailable" not in page  # the dev extra holds every optional dependency


def test_the_algorithm_reference_lists_every_algorithm_and_every_setting_with_its_docstring():
    from rl_suite.registry import ALGORITHMS, load_algorithm
    from rl_suite.runner import RunConfig

    module = hooks()
    page = module.algorithms_page()
    for name in ALGORITHMS:
        assert f"## `{name}`" in page, name
        for field in dataclasses.fields(load_algorithm(name).Config):
            assert f"| `{field.name}` |" in page, (name, field.name)
    rows = {row["name"]: row for row in module.config_fields(RunConfig)}
    assert set(rows) == {field.name for field in dataclasses.fields(RunConfig)}
    undocumented = [
        (name, row["name"]) for name in ALGORITHMS for row in module.config_fields(load_algorithm(name).Config)
        if not row["doc"]
    ]  # fmt: skip
    assert not undocumented, f"settings without a docstring: {undocumented}"
    ppo = {row["name"]: row for row in module.config_fields(load_algorithm("ppo").Config)}
    assert ppo["gamma"]["default"] == "0.99" and ppo["gamma"]["doc"] == "Discount factor."


def test_the_cli_reference_has_every_command():
    from rl_suite.cli import build_parser

    page = hooks().cli_page()
    commands = next(action for action in build_parser()._actions if action.dest == "command")
    for name in commands.choices:
        assert f"## `rl-suite {name}`" in page
    assert "--profile NAME" in page and "--stop-at-return" in page


def test_every_report_gets_a_page_and_the_index_quotes_each_verdict(tmp_path, monkeypatch):
    module = hooks()
    results = tmp_path / "results"
    results.mkdir()
    (results / "a.md").write_text(
        "# Study A\n\nRun on X.\n\n![curve](a.png) [runs](finished/a/) [peer](https://example.org)\n\n"
        "Goal (at least 1): **missed**, 0 of 3 seeds.\n"
    )
    (results / "a.png").write_bytes(b"png")
    (results / "b.md").write_text(
        "# Study B\n\n| goal | met |\n|---|---|\n\nGoals:\n\n- faster than the peer: met.\n- a bullet here\n\n"
        "Prose after the list, which met nothing.\nKept 0.9; goal (0.8): met.\n"
    )
    (results / "grid").mkdir()
    (results / "grid" / "report.md").write_text("# Grid\n\nVerdict: 2 of 3.\n")
    monkeypatch.setattr(module, "RESULTS", results)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    pages = {"index": module.results_index(module.reports()), "a": module.result_page(results / "a.md")}
    assert pages["index"].splitlines()[-8:] == [
        "- [Study A](a.md)",
        "    - Goal (at least 1): **missed**, 0 of 3 seeds.",
        "- [Study B](b.md)",
        "    - faster than the peer: met.",
        "    - a bullet here",
        "    - Kept 0.9; goal (0.8): met.",
        "- [Grid](grid/report.md)",
        "    - Verdict: 2 of 3.",
    ]
    # the plot beside it stays a link; a folder the site does not carry becomes its path in the repository
    assert "![curve](a.png) runs (`results/finished/a`) [peer](https://example.org)" in pages["a"]
    real = hooks()  # unpatched: the repository's own reports, each a page, each with a goal quoted in the index
    pages = real.generated_pages()
    reports = real.reports()
    assert reports and all(f"results/{real.site_path(report)}" in pages for report in reports)
    for report in reports:
        text = report.read_text()
        states_a_goal = any(
            re.search(r"\bgoals?\b", line, re.I) and re.search(r"\b(met|missed)\b", line) and not line.startswith("|")
            for line in text.splitlines()
        )
        assert not states_a_goal or real.verdicts(text), f"{report.name} states a goal the index does not quote"


def test_the_site_builds_with_strict(tmp_path):
    """`make docs`: a broken link, a page outside the navigation or an unresolved docstring reference fails it."""
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    built = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    for page in ("index.html", "guides/legged/index.html", "reference/environments/index.html", "results/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "RobotConfig" in api and "ControlLoop" in api and "export_policy" in api
