"""MkDocs hooks (``mkdocs.yml``'s ``hooks``): the pages generated from the code and the benchmark results, added to the
site at build time, so that none of them is written by hand or committed.

- ``reference/environments.md``: every registered id, from the registry (one environment of each built, as
  ``rl-suite envs`` does);
- ``reference/algorithms.md``: every registered algorithm and each setting of its config dataclass, with its type,
  default and docstring (read from the source: a field's docstring is the string under it);
- ``reference/cli.md``: every ``rl-suite`` command's help, from the argparse parser;
- ``guides/contributing.md``: CONTRIBUTING.md, whose examples tests/test_contributing.py runs;
- ``results/<report>.md``: each report a benchmark script wrote into ``benchmarks/results/`` (with its plots and
  tables), and ``results/index.md`` listing them with each one's verdict line.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import re
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RESULT_FILES = ("*.md", "*.png", "*.csv")  # what a report links to beside it
OUTCOME = re.compile(r"\b(met|missed)\b", re.I)
GOAL_LIST = re.compile(r"^(#+ )?(Goals?|Verdicts?):?$", re.I)  # a heading over a list of goals, one a bullet


SOURCES = ROOT / "build" / "api-sources"  # mkdocs.yml's mkdocstrings paths


def on_startup(command, dirty):
    """The installed package's layout for mkdocstrings, which reads the source: ``rl_suite.envs`` and
    ``rl_suite.agents`` live in ``envs/`` and ``agents/`` (setup.cfg's ``package_dir``), so ``build/api-sources/``
    holds a ``rl_suite/`` of links to the core's files and to those two folders."""
    package = SOURCES / "rl_suite"
    if package.exists():
        for link in package.iterdir():
            link.unlink()
    package.mkdir(parents=True, exist_ok=True)
    for source in (ROOT / "rl_suite").iterdir():
        if source.name != "__pycache__":
            (package / source.name).symlink_to(source)
    for folder in ("envs", "agents"):
        (package / folder).symlink_to(ROOT / folder)


def on_config(config):
    """The navigation's Results entry becomes a section: the index, then one page per report."""
    pages = [f"results/{site_path(report)}" for report in reports()]
    for position, entry in enumerate(config["nav"]):
        if entry == {"Results": "results/index.md"}:
            config["nav"][position] = {"Results": ["results/index.md", *pages]}
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for path, content in generated_pages().items():
        files.append(File.generated(config, path, content=content))
    for folder in sorted({RESULTS, *(report.parent for report in reports())}):
        for pattern in RESULT_FILES:
            for source in sorted(folder.glob(pattern)):
                if source.suffix != ".md":  # reports are generated pages (their links adjusted); the rest as they are
                    files.append(File.generated(config, f"results/{site_path(source)}", abs_src_path=str(source)))
    return files


def reports() -> list[pathlib.Path]:
    """The benchmark reports: each script's ``benchmarks/results/<name>.md``, and each benchmark grid's
    ``benchmarks/results/<grid>/report.md``."""
    return sorted(RESULTS.glob("*.md")) + sorted(RESULTS.glob("*/report.md"))


def site_path(path: pathlib.Path) -> str:
    """Where a file of ``benchmarks/results/`` goes under the site's ``results/``."""
    return path.relative_to(RESULTS).as_posix()


def generated_pages() -> dict[str, str]:
    """Site path to Markdown of every generated page."""
    pages = {
        "reference/environments.md": environments_page(),
        "reference/algorithms.md": algorithms_page(),
        "reference/cli.md": cli_page(),
        "guides/contributing.md": contributing_page(),
    }
    pages["results/index.md"] = results_index(reports())
    for report in reports():
        pages[f"results/{site_path(report)}"] = result_page(report)
    return pages


# -- the reference ---------------------------------------------------------------------------------------------------


def environments_page() -> str:
    from rl_suite.registry import ADAPTER_PREFIXES, registered, summary

    lines = [
        "# Environments",
        "",
        "Every id registered with `rl_suite.make` (this page is generated from the registry: one environment of each",
        "is built with its defaults). `rl-suite envs` prints the same table.",
        "",
        "| id | observation | action | time limit | entry point |",
        "|---|---|---|---:|---|",
    ]
    for env_spec in registered():
        shown = summary(env_spec)
        if "unavailable" in shown:
            cells = ["(unavailable: " + shown["unavailable"].replace("|", "\\|") + ")", "", ""]
        else:
            cells = [f"`{shown['observation']}`", f"`{shown['action']}`", shown["time_limit"]]
        lines.append(f"| `{env_spec.id}` | " + " | ".join(cells) + f" | `{env_spec.entry_point}` |")
    lines += ["", "Outside simulators through adapters: " + ", ".join(f"`{p}:<id>`" for p in ADAPTER_PREFIXES) + "."]
    return "\n".join(lines) + "\n"


def config_fields(config_class: type) -> list[dict[str, str]]:
    """Each field of a config dataclass (its bases' first, as the dataclass orders them): name, type, default, the
    values it accepts (``rl_suite.config.setting``) and the docstring under it in the source."""
    from rl_suite.config import describe_limits, field_limits

    docs: dict[str, str] = {}
    for cls in reversed(config_class.__mro__):
        if not dataclasses.is_dataclass(cls):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
        for statement, following in zip(body, body[1:] + [None], strict=True):
            documented = isinstance(following, ast.Expr) and isinstance(getattr(following, "value", None), ast.Constant)
            if isinstance(statement, ast.AnnAssign) and documented:
                docs[statement.target.id] = inspect.cleandoc(following.value.value)
    rows = []
    for field in dataclasses.fields(config_class):
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        doc, valid = docs.get(field.name, ""), describe_limits(field_limits(config_class, field.name))
        rows.append({"name": field.name, "type": str(field.type), "default": repr(default), "valid": valid, "doc": doc})
    return rows


def algorithms_page() -> str:
    from rl_suite.registry import ALGORITHMS, load_algorithm

    lines = [
        "# Algorithms and their settings",
        "",
        "Every registered algorithm (`rl-suite algos`) and every setting of its config dataclass, generated from",
        "the source. Set them with `rl-suite train ALGO ENV_ID --set NAME=VALUE`, in Python with",
        "`ALGO.Config(NAME=VALUE)`, or per task in `agents/hyperparams/ALGO.yaml`. The run's own settings (budgets,",
        "evaluation, logging) are `RunConfig`'s, at the end of this page.",
        "",
    ]
    for name in ALGORITHMS:
        algo = load_algorithm(name)
        summary = (inspect.getmodule(algo).__doc__ or "").strip().split("\n\n")[0]
        source = pathlib.Path(inspect.getfile(algo)).relative_to(ROOT).as_posix()
        lines += [f"## `{name}`", "", " ".join(summary.split()), "", f"Source: `{source}`.", ""]
        lines += settings_table(algo.Config)
    from rl_suite.runner import RunConfig

    lines += ["## The run: `RunConfig`", "", "Settings of every run, whatever the algorithm.", ""]
    lines += settings_table(RunConfig)
    return "\n".join(lines) + "\n"


def settings_table(config_class: type) -> list[str]:
    lines = ["| setting | type | default | valid values | what it does |", "|---|---|---|---|---|"]
    for row in config_fields(config_class):
        doc = " ".join(row["doc"].split()).replace("|", "\\|")
        cells = [f"`{row['name']}`", f"`{row['type']}`", f"`{row['default']}`", row["valid"], doc]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def cli_page() -> str:
    import argparse

    from rl_suite.cli import build_parser

    parser = build_parser()
    lines = ["# The command line", "", "Every `rl-suite` command's `--help`, generated from its parser.", ""]
    lines += ["```text", parser.format_help().rstrip(), "```", ""]
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    for name, subparser in commands.choices.items():
        lines += [f"## `rl-suite {name}`", "", "```text", subparser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def contributing_page() -> str:
    """CONTRIBUTING.md as a guide: its runnable blocks (``python runnable``, which tests/test_contributing.py runs)
    marked so that MkDocs renders them as Python."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    return text.replace("```python runnable\n", "```{.python .runnable}\n")


# -- the results -----------------------------------------------------------------------------------------------------


def verdicts(text: str) -> list[str]:
    """A report's verdict lines, as the script wrote them (tables aside): a line that opens with its verdict, a line
    that states a goal and whether it was met or missed, and each bullet under a "Goals:" or "Verdicts" heading."""
    found, listing = [], False
    for line in text.splitlines():
        line = line.strip()
        if GOAL_LIST.match(line):
            listing = True
            continue
        if listing and line.startswith("- "):
            found.append(line.removeprefix("- "))
            continue
        listing = listing and not line  # a blank line may come before the list; anything else ends it
        plain = line.removeprefix("- ")
        if line.startswith("|"):
            continue
        if plain.lower().startswith(("verdict", "the script's verdict")) or (
            re.search(r"\bgoals?\b", plain, re.I) and OUTCOME.search(plain)
        ):
            found.append(plain)
    return found


def results_index(reports: list[pathlib.Path]) -> str:
    lines = [
        "# Results",
        "",
        "Each page is a report that a script in `benchmarks/` wrote into `benchmarks/results/`, shown as written,",
        "with the machine it ran on. Rerun a script to regenerate its page. Each entry quotes the script's own",
        "verdict where it states a goal.",
        "",
    ]
    for report in reports:
        text = report.read_text()
        title = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("# ")), report.stem)
        lines.append(f"- [{title}]({site_path(report)})")
        lines += [f"    - {verdict}" for verdict in verdicts(text)]
    return "\n".join(lines) + "\n"


def result_page(report: pathlib.Path) -> str:
    """The report as written; a link to a file that the site does not carry (anything but the reports, plots and tables
    of ``benchmarks/results/``'s top level) becomes its label and the file's path in the repository."""
    text = report.read_text()

    def relink(match: re.Match) -> str:
        label, target = match.group(1), match.group(2)
        if re.match(r"[a-z]+://|#", target) or ("/" not in target and (report.parent / target).is_file()):
            return match.group(0)
        path = (report.parent / target).resolve()
        shown = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else target
        return f"{label.lstrip('!').strip('[]')} (`{shown}`)"

    return re.sub(r"(!?\[[^\]]*\])\(([^)\s]+)\)", relink, text)
