"""CONTRIBUTING.md's promises, kept: every registered algorithm ships valid tuned settings, has a row in the README's
Agents table and exports or says why not; every registered task id has a row in the Environments tables of
docs/reference/tasks.md that agrees with the env; that page names every adapter and physics backend; the paths
CONTRIBUTING.md names exist; and its examples run. Each check returns the problems it finds, in words that tell a
contributor what to add, and each is also shown failing on a broken input."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import pathlib
import re
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import rl_suite
from rl_suite import registry
from rl_suite.agent import Agent
from rl_suite.agents import PPO
from rl_suite.config import ConfigError, check_settings, read_yaml, split_overrides
from rl_suite.deploy.export import export_policy
from rl_suite.deploy.inference import ExportError, InferencePolicy, MLPInference
from rl_suite.networks import mlp
from rl_suite.onpolicy import OnPolicyAgent, check_minibatches
from rl_suite.runner import RunConfig
from rl_suite.settings import new_run_settings

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TASKS = (ROOT / "docs" / "reference" / "tasks.md").read_text()  # the tasks' tables, moved from the README
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()


# -- reading Markdown ---------------------------------------------------------------------------------------------


def section(text: str, heading: str) -> str:
    """The lines under ``heading`` (``"## Agents"``) up to the next heading of its level or above; headings inside
    code blocks (a YAML comment) do not count."""
    level = len(heading) - len(heading.lstrip("#"))
    found, lines, fenced = False, [], False
    for line in text.splitlines():
        is_heading = not fenced and line.startswith("#")
        fenced ^= line.startswith("```")
        if is_heading and found and len(line) - len(line.lstrip("#")) <= level:
            break
        if found:
            lines.append(line)
        found = found or (is_heading and line.strip() == heading)
    return "\n".join(lines)


def tables(text: str) -> list[list[dict[str, str]]]:
    """The Markdown tables in ``text``, each as its rows: ``{column header: cell}`` (``\\|`` stays in a cell)."""
    found, lines = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            lines.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif lines:
            header, _, *rows = lines
            found.append([dict(zip(header, row, strict=False)) for row in rows])
            lines = []
    return found


def code_blocks(text: str) -> list[tuple[str, str]]:
    """``(info string, code)`` of each fenced code block."""
    return re.findall(r"^```([^\n]*)\n(.*?)^```", text, flags=re.M | re.S)


def quoted(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# -- what the package registers (a test may register simulators or algorithms of its own besides) -----------------


def native_env_ids() -> list[str]:
    return [spec.id for spec in registry.registered() if spec.entry_point.startswith("rl_suite.envs.")]


def builtin_algorithms() -> dict[str, type[Agent]]:
    return {
        name: registry.load_algorithm(name)
        for name, entry_point in registry.ALGORITHMS.items()
        if entry_point.startswith("rl_suite.agents.")
    }


def source_file(algo: type[Agent]) -> str:
    return shown(pathlib.Path(inspect.getfile(algo)))


def shown(path: pathlib.Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def tuned_settings_path(algo: type[Agent]) -> pathlib.Path:
    """Where ``rl_suite.settings.tuned_settings`` reads the algorithm's shipped settings."""
    return pathlib.Path(inspect.getfile(algo)).parent / "hyperparams" / f"{algo.name}.yaml"


@pytest.fixture
def registries():
    """Undo the registrations a test makes (CONTRIBUTING.md's examples register an algorithm and a task)."""
    algorithms, envs = dict(registry.ALGORITHMS), dict(registry._REGISTRY)
    yield
    registry.ALGORITHMS.clear()
    registry.ALGORITHMS.update(algorithms)
    registry._REGISTRY.clear()
    registry._REGISTRY.update(envs)


# -- the checks ---------------------------------------------------------------------------------------------------


def settings_problems(algo: type[Agent], path: pathlib.Path, env_ids: list[str]) -> list[str]:
    """The tuned settings at ``path`` must exist, name a task, and hold only registered ids (or ``default``) with
    settings that ``RunConfig`` and ``algo.Config`` take, as ``rl-suite train`` merges them."""
    where = shown(path)
    if not path.is_file():
        return [
            f"{algo.name} has no tuned settings: add {where} with a `default` section and one per task (keys: fields "
            f"of RunConfig or {algo.Config.__name__}); see CONTRIBUTING.md"
        ]
    try:
        table = read_yaml(path)
    except ConfigError as error:
        return [str(error)]
    default = table.get("default") or {}
    problems = [] if set(table) & set(env_ids) else [f"{where} names no task: add a section for a registered id"]
    profiles = table.pop("profiles", None) or {}
    if type(profiles) is not dict:
        problems.append(f"{where}: `profiles` is not a mapping of profile names to settings")
        profiles = {}
    for name, settings in {**table, **{f"profiles.{key}": value for key, value in profiles.items()}}.items():
        if name != "default" and name not in env_ids and not name.startswith("profiles."):
            problems.append(f"{where}: section {name!r} is neither `default` nor a registered env id")
        if type(settings) is not dict or type(default) is not dict:
            problems.append(f"{where}: section {name!r} (or `default`) is not a mapping of settings")
            continue
        try:
            run_values, agent_values = split_overrides({**default, **settings}, RunConfig, algo.Config)
            run, agent = RunConfig(**run_values), algo.Config(**agent_values)  # RunConfig checks its ranges
            check_settings(agent, algo.name)
            if issubclass(algo, OnPolicyAgent) and hasattr(agent, "minibatches"):  # as its make_buffer checks
                check_minibatches(algo.name, agent.minibatches, agent.n_steps, run.num_envs)
        except (ConfigError, TypeError, ValueError) as error:
            problems.append(f"{where}: section {name!r}: {error}")
    return problems


def registration_problems(algorithms: dict[str, type[Agent]], env_ids: list[str]) -> list[str]:
    problems = []
    for key, algo in algorithms.items():
        if algo.name != key:
            problems.append(f"ALGORITHMS registers {algo.__name__} as {key!r}, but its name is {algo.name!r}")
        problems += settings_problems(algo, tuned_settings_path(algo), env_ids)
    return problems


def agent_row_problems(rows: list[dict[str, str]], algorithms: dict[str, tuple[type[Agent], str]]) -> list[str]:
    """``rows``: the Agents table; ``algorithms``: each name's class and source file. Rows that name no algorithm
    first, then algorithms without a row, then each row's problems in the table's order."""
    by_name = {quoted(row["algorithm"])[0]: row for row in rows if quoted(row.get("algorithm", ""))}
    problems = [
        f"README.md's Agents table has a row for `{name}`, which is not a registered algorithm"
        for name in by_name
        if name not in algorithms
    ]
    problems += [
        f"README.md's Agents table has no row for `{name}`: add "
        f"| `{name}` | {', '.join(kind.__name__ for kind in algo.action_space_types)} | `{file}` | what it has |"
        for name, (algo, file) in algorithms.items()
        if name not in by_name
    ]
    for name, row in by_name.items():
        if name not in algorithms:
            continue
        algo, file = algorithms[name]
        kinds = [kind.__name__ for kind in algo.action_space_types]
        missing = [kind for kind in kinds if not re.search(rf"\b{kind}\b", row.get("actions", ""))]
        if missing:
            problems.append(f"README.md's Agents row for `{name}` does not name its action spaces {missing}")
        if quoted(row.get("file", "")) != [file]:
            problems.append(f"README.md's Agents row for `{name}` gives the file {row.get('file')}; it is `{file}`")
    return problems


def agents_table(readme: str) -> list[dict[str, str]]:
    found = tables(section(readme, "## Agents"))
    return found[0] if found else []


def env_rows(readme: str) -> dict[str, dict[str, str]]:
    """The rows of the Environments section's tables (those whose first column is ``id``), by id."""
    rows = {}
    for table in tables(section(readme, "## Environments")):
        for row in table:
            for env_id in quoted(row.get("id", "")):
                rows[env_id] = row
    return rows


def space_text(space: gym.Space) -> str:
    """A space as the tasks page's tables write it: ``Discrete(2)``, ``Box(-2, 2, (1,))``, and where the bounds differ
    between dimensions, their ranges: ``Box(-1..-0.8, 0.8..1.1, (12,))``."""
    if isinstance(space, gym.spaces.Box):
        low, high = np.unique(space.low), np.unique(space.high)
        if low.size == high.size == 1:
            return f"Box({low[0]:g}, {high[0]:g}, {space.shape})"
        return f"Box({low[0]:g}..{low[-1]:g}, {high[0]:g}..{high[-1]:g}, {space.shape})"
    return str(space)


def row_facts(env) -> dict[str, str]:
    """What a row of the env's table states, by column, as the env has it."""
    facts = {"time limit": str(env.max_episode_steps)}
    shape = env.observation_space.shape
    if hasattr(env, "global_state_space"):  # multi-agent: [A, d] observations and a global state
        facts.update({"agents": str(shape[0]), "observation per agent": str(shape[1])})
        facts["state"] = str(env.global_state_space.shape[0])
    else:
        facts.update({"observation": str(shape[0]), "action": space_text(env.action_space)})
    return facts


def env_row_problems(rows: dict[str, dict[str, str]], env_ids: list[str]) -> list[str]:
    """Every id in ``env_ids`` has a row, and its numbers agree with the env (the agents column's first number:
    Tag's "3 (4)")."""
    problems = []
    for env_id in env_ids:
        if env_id not in rows:
            problems.append(
                f"docs/reference/tasks.md has no row for `{env_id}` in its Environments tables: add one to its "
                "family's table (see CONTRIBUTING.md)"
            )
            continue
        with rl_suite.make(env_id, num_envs=1) as env:
            facts = row_facts(env)
        for column, fact in facts.items():
            stated = rows[env_id].get(column)
            if stated is None:
                continue
            if re.fullmatch(r"[\d,]+", stated):  # 1,000
                stated = stated.replace(",", "")
            if column == "agents":
                stated = re.match(r"\d*", stated).group()
            if stated != fact:
                problems.append(
                    f"docs/reference/tasks.md's row for `{env_id}` says {column} {stated!r}; the env has {fact!r}"
                )
    return problems


def adapter_row_problems(rows: dict[str, dict[str, str]], env_ids: list[str]) -> list[str]:
    """Every row names a registered id or an adapter prefix (``gym:<any id>``), and every prefix has its row."""
    prefixes = {env_id.split(":")[0] for env_id in rows if ":" in env_id}
    problems = [
        f"docs/reference/tasks.md's Environments tables list `{env_id}`, which is neither registered nor an adapter "
        "prefix"
        for env_id in rows
        if env_id not in env_ids and env_id.split(":")[0] not in registry.ADAPTER_PREFIXES
    ]
    problems += [
        f"docs/reference/tasks.md's Environments tables have no row for the adapter prefix `{prefix}:`"
        for prefix in registry.ADAPTER_PREFIXES
        if prefix not in prefixes
    ]
    return problems


def named_module_problems(readme: str, adapters: list[str], backends: list[str]) -> list[str]:
    """The tasks page names each adapter module and describes each physics backend in its MuJoCo section."""
    problems = [
        f"docs/reference/tasks.md does not name envs/adapters/{name}.py: add it to the Adapters section (an import "
        "line and what it assumes of the simulator)"
        for name in adapters
        if not re.search(rf"adapters[./]{name}\b", readme)
    ]
    mujoco = section(readme, "### MuJoCo")
    problems += [
        f"docs/reference/tasks.md's MuJoCo section does not describe the physics backend {name!r}: add a bullet "
        f"`- `{name}`: ...`"
        for name in backends
        if not re.search(rf"^\s*- `{name}`:", mujoco, flags=re.M)
    ]
    return problems


def export_problems(agent: Agent, folder: pathlib.Path) -> list[str]:
    """The agent's ``inference_policy()`` passes export's parity check, or refuses with an ``ExportError`` that names
    the agent and says why it cannot be exported."""
    name = agent.name
    try:
        policy = agent.inference_policy()
    except ExportError as error:
        if re.search(rf"\b{name}\b.*cannot be exported: \w", str(error), flags=re.I):
            return []
        return [
            f"{name} refuses export with {str(error)!r}: say what cannot be exported and why "
            f"('{name} cannot be exported: ...')"
        ]
    except NotImplementedError:
        return [
            f"{name} neither exports nor says why not: implement inference_policy() in {source_file(type(agent))}, "
            f"returning an InferencePolicy (rl_suite/deploy/inference.py), or raising "
            f"ExportError('{name} cannot be exported: <why>')"
        ]
    if not isinstance(policy, InferencePolicy):
        return [f"{name}.inference_policy() returns a {type(policy).__name__}, not an InferencePolicy"]
    try:
        export_policy(agent, folder / f"{name}.pt", "torchscript", parity_samples=64)
    except ExportError as error:
        return [f"{name}'s exported policy does not act as act(..., deterministic=True): {error}"]
    return []


def on_its_first_task(algo: type[Agent], env_ids: list[str]):
    """``(agent, env)``: the algorithm with its shipped settings on the first task its YAML names, one environment."""
    env_id = next(name for name in read_yaml(tuned_settings_path(algo)) if name in env_ids)
    run_values, agent_values = new_run_settings(algo, env_id, {})
    env = rl_suite.make(env_id, num_envs=1, seed=0, **run_values.get("env_kwargs", {}))
    return algo.for_env(env, algo.Config(**agent_values)), env


def path_problems(text: str) -> list[str]:
    """The repository paths quoted in ``text``'s prose exist; in one with a ``<placeholder>``, the folder before it."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    problems = []
    for token in quoted(prose):
        if not re.fullmatch(r"[\w.<>-]+(/[\w.<>-]*)+", token) or not re.search(r"\.\w+$|/$", token):
            continue  # not a path
        known = token.split("<")[0]
        path = ROOT / known if known.endswith("/") or known == token else (ROOT / known).parent
        if not path.exists():
            problems.append(f"CONTRIBUTING.md names `{token}`, which does not exist")
    return problems


def backend_problems(source: str) -> list[str]:
    """The physics backend defined in ``source`` has every member of ``PhysicsBackend``: its methods with the
    protocol's signatures, its data members set on the class or in ``__init__``."""
    from rl_suite.envs.mujoco.physics import PhysicsBackend

    (definition,) = [node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)]
    namespace = {"__name__": "contributing_backend"}
    exec(compile(source, "CONTRIBUTING.md", "exec"), namespace)  # the repository's own example, a class definition
    backend = namespace[definition.name]
    assigned = {  # class attributes, and attributes of self set in the methods
        target.id for node in definition.body if isinstance(node, ast.Assign) for target in node.targets
    }
    assigned |= {
        node.attr
        for node in ast.walk(definition)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and getattr(node.value, "id", "") == "self"
    }
    problems = [
        f"{backend.__name__} does not set {name!r}" for name in PhysicsBackend.__annotations__ if name not in assigned
    ]
    for name, method in vars(PhysicsBackend).items():
        if not inspect.isfunction(method) or name.startswith("_"):
            continue
        expected = inspect.signature(method)
        if not hasattr(backend, name):
            problems.append(f"{backend.__name__} lacks {name}{expected}")
        elif inspect.signature(getattr(backend, name)) != expected:
            problems.append(
                f"{backend.__name__}.{name}{inspect.signature(getattr(backend, name))}: expected {expected}"
            )
    return problems


# -- the checks on the repository ---------------------------------------------------------------------------------


def test_every_algorithm_is_registered_under_its_name_and_ships_valid_tuned_settings():
    problems = registration_problems(builtin_algorithms(), native_env_ids())
    assert not problems, "\n".join(problems)


def test_every_algorithm_has_a_row_in_the_readmes_agents_table():
    algorithms = {name: (algo, source_file(algo)) for name, algo in builtin_algorithms().items()}
    problems = agent_row_problems(agents_table(README), algorithms)
    assert not problems, "\n".join(problems)


def test_every_algorithm_exports_or_says_why_not(tmp_path):
    pytest.importorskip("mujoco")  # RARL's tasks
    problems = []
    for algo in builtin_algorithms().values():
        agent, env = on_its_first_task(algo, native_env_ids())
        try:
            problems += export_problems(agent, tmp_path)
        finally:
            agent.close()
            env.close()
    assert not problems, "\n".join(problems)


def test_every_registered_task_has_a_row_in_the_readmes_environment_tables_that_agrees_with_it():
    pytest.importorskip("mujoco")
    rows, env_ids = env_rows(TASKS), native_env_ids()
    problems = env_row_problems(rows, env_ids) + adapter_row_problems(rows, env_ids)
    assert not problems, "\n".join(problems)


def test_the_readme_names_every_adapter_and_physics_backend():
    pytest.importorskip("mujoco")
    from rl_suite.envs.mujoco.env import BACKENDS

    adapters = sorted(path.stem for path in (ROOT / "envs" / "adapters").glob("[!_]*.py"))
    problems = named_module_problems(TASKS, adapters, list(BACKENDS))
    assert not problems, "\n".join(problems)


def test_the_readme_links_contributing_and_the_paths_contributing_names_exist():
    assert "(CONTRIBUTING.md)" in section(README, "## Layout")
    problems = path_problems(CONTRIBUTING)
    assert not problems, "\n".join(problems)


# -- CONTRIBUTING.md's examples -----------------------------------------------------------------------------------


def run_examples(heading: str, tmp_path, monkeypatch):
    """Run the ``python runnable`` blocks of CONTRIBUTING.md's section ``heading`` as one module, in ``tmp_path``;
    returns the module (its entry points, ``f"{__name__}:A2C"``, resolve while the test runs)."""
    blocks = [
        code for info, code in code_blocks(section(CONTRIBUTING, heading)) if info.split() == ["python", "runnable"]
    ]
    assert blocks, f"CONTRIBUTING.md's section {heading!r} has no runnable example"
    name = "contributing_" + re.sub(r"\W+", "_", heading.strip("# ").lower())
    path = tmp_path / f"{name}.py"
    path.write_text("\n\n".join(blocks))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # removed again after the test
    monkeypatch.chdir(tmp_path)
    spec.loader.exec_module(module)
    return module


def example(heading: str, language: str) -> str:
    (code,) = [code for info, code in code_blocks(section(CONTRIBUTING, heading)) if info == language]
    return code


def under_header(text: str, heading: str, row: str) -> str:
    """``row`` under the header of the first table in ``text``'s section ``heading``: that section, in short."""
    header = [line for line in section(text, heading).splitlines() if line.startswith("|")][:2]
    return "\n".join([heading, "", *header, row])


def test_the_algorithm_example_trains_saves_loads_and_exports_and_its_yaml_and_row_pass_the_checks(
    tmp_path, monkeypatch, registries
):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    heading = "## A new algorithm"
    a2c = run_examples(heading, tmp_path, monkeypatch).A2C  # its own asserts ran: trained, loaded, exported
    path = tmp_path / "hyperparams" / "a2c.yaml"
    path.parent.mkdir()
    path.write_text(example(heading, "yaml"))
    assert settings_problems(a2c, path, native_env_ids()) == []
    rows = agents_table(under_header(README, "## Agents", example(heading, "markdown")))
    assert agent_row_problems(rows, {"a2c": (a2c, "agents/a2c.py")}) == []


def test_the_task_example_runs_and_its_row_agrees_with_it(tmp_path, monkeypatch, registries):
    heading = "## A new task in an existing family"
    run_examples(heading, tmp_path, monkeypatch)  # registers DoubleIntegrator-v0, steps it 100 times, asserts
    rows = env_rows(under_header(TASKS, "## Environments", example(heading, "markdown")))
    assert env_row_problems(rows, ["DoubleIntegrator-v0"]) == []


def test_the_adapter_example_runs(tmp_path, monkeypatch):
    run_examples("## A new simulator adapter", tmp_path, monkeypatch)  # steps it, checks its statistics, trains PPO


def test_the_backend_example_has_every_member_of_the_protocol():
    pytest.importorskip("mujoco")
    assert backend_problems(example("## A new physics backend", "python")) == []


# -- each check fails where it should -----------------------------------------------------------------------------


class Unshipped(PPO):
    """PPO under another name, with no tuned settings next to this file."""

    name = "unshipped"


def test_an_algorithm_without_tuned_settings_or_registered_under_another_name_is_reported(monkeypatch):
    monkeypatch.setitem(registry.ALGORITHMS, "unshipped", f"{__name__}:Unshipped")
    monkeypatch.setitem(registry.ALGORITHMS, "ppo2", "rl_suite.agents.ppo:PPO")
    algorithms = {name: registry.load_algorithm(name) for name in ("unshipped", "ppo2")}
    assert registration_problems(algorithms, native_env_ids()) == [
        "unshipped has no tuned settings: add tests/hyperparams/unshipped.yaml with a `default` section and one per "
        "task (keys: fields of RunConfig or PPOConfig); see CONTRIBUTING.md",
        "ALGORITHMS registers PPO as 'ppo2', but its name is 'ppo'",
    ]


def test_tuned_settings_with_an_unknown_key_a_bad_value_or_no_task_are_reported(tmp_path):
    path = tmp_path / "ppo.yaml"
    path.write_text(
        "default: {num_envs: 8}\nCartPole-v1: {lrr: 0.001}\nCartPol-v1: {epochs: many}\n"
        "profiles: {big: {num_envs: 64}, fast: {epochz: 3}}\n"
    )
    problems = settings_problems(PPO, path, native_env_ids())
    assert len(problems) == 4
    assert "section 'CartPole-v1': unknown setting 'lrr'. Did you mean 'lr'? Settings: " in problems[0]
    assert problems[1].endswith("section 'CartPol-v1' is neither `default` nor a registered env id")
    assert problems[2].endswith("section 'CartPol-v1': setting 'epochs' expects int, got 'many'")
    assert "section 'profiles.fast': unknown setting 'epochz'. Did you mean 'epochs'?" in problems[3]
    path.write_text("default: {num_envs: 8}\n")
    assert settings_problems(PPO, path, native_env_ids()) == [
        f"{path} names no task: add a section for a registered id"
    ]


def test_a_missing_wrong_or_stale_agents_row_is_reported():
    readme = README.replace("| `sac` | Box |", "| `sac` | Discrete |")
    rows = [row for row in agents_table(readme) if quoted(row["algorithm"]) != ["ppo"]]
    rows.append({"algorithm": "`a3c`", "actions": "Box", "file": "`agents/a3c.py`"})
    algorithms = {name: (algo, source_file(algo)) for name, algo in builtin_algorithms().items()}
    algorithms["rarl"] = (algorithms["rarl"][0], "agents/robust.py")
    assert agent_row_problems(rows, algorithms) == [
        "README.md's Agents table has a row for `a3c`, which is not a registered algorithm",
        "README.md's Agents table has no row for `ppo`: add | `ppo` | Discrete, Box | `agents/ppo.py` | what it has |",
        "README.md's Agents row for `sac` does not name its action spaces ['Box']",
        "README.md's Agents row for `rarl` gives the file `agents/rarl.py`; it is `agents/robust.py`",
    ]


def test_a_missing_wrong_or_stale_environment_row_is_reported():
    rows = env_rows(TASKS)
    del rows["CartPole-v1"], rows["pz:<module>"]
    rows["Bogus-v0"] = {"id": "`Bogus-v0`"}
    rows["Pendulum-v1"] = {**rows["Pendulum-v1"], "time limit": "201", "action": "Box(-1, 1, (1,))"}
    rows["Skirmish-3m-v0"] = {**rows["Skirmish-3m-v0"], "agents": "4", "state": "22"}
    env_ids = ["CartPole-v1", "Pendulum-v1", "Skirmish-3m-v0"]
    assert env_row_problems(rows, env_ids) + adapter_row_problems(rows, native_env_ids()) == [
        "docs/reference/tasks.md has no row for `CartPole-v1` in its Environments tables: add one to its family's "
        "table (see CONTRIBUTING.md)",
        "docs/reference/tasks.md's row for `Pendulum-v1` says time limit '201'; the env has '200'",
        "docs/reference/tasks.md's row for `Pendulum-v1` says action 'Box(-1, 1, (1,))'; the env has "
        "'Box(-2, 2, (1,))'",
        "docs/reference/tasks.md's row for `Skirmish-3m-v0` says agents '4'; the env has '3'",
        "docs/reference/tasks.md's row for `Skirmish-3m-v0` says state '22'; the env has '21'",
        "docs/reference/tasks.md's Environments tables list `Bogus-v0`, which is neither registered nor an adapter "
        "prefix",
        "docs/reference/tasks.md's Environments tables have no row for the adapter prefix `pz:`",
    ]


def test_an_adapter_or_backend_the_readme_does_not_name_is_reported():
    readme = TASKS.replace("adapters/pettingzoo.py", "adapters/").replace("- `warp`:", "- warp:")
    assert named_module_problems(readme, ["gymnasium", "pettingzoo"], ["cpu", "warp"]) == [
        "docs/reference/tasks.md does not name envs/adapters/pettingzoo.py: add it to the Adapters section (an import "
        "line and what it assumes of the simulator)",
        "docs/reference/tasks.md's MuJoCo section does not describe the physics backend 'warp': add a bullet "
        "`- `warp`: ...`",
    ]


class Unexportable(PPO):
    name = "unexportable"
    inference_policy = Agent.inference_policy  # as an algorithm that does not implement it


class Terse(PPO):
    name = "terse"

    def inference_policy(self):
        raise ExportError("no")


class Mismatched(PPO):
    name = "mismatched"

    def inference_policy(self):
        other = mlp(self.observation_space.shape[0], (8,), 2)  # not the network act() uses
        return MLPInference(self.observation_space, self.action_space, self.normalizer, other)


def test_an_agent_that_neither_exports_nor_says_why_is_reported(tmp_path):
    torch.manual_seed(0)
    spaces = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    problems = [
        problem for cls in (Unexportable, Terse, Mismatched) for problem in export_problems(cls(*spaces), tmp_path)
    ]
    assert problems[:2] == [
        "unexportable neither exports nor says why not: implement inference_policy() in tests/test_contributing.py, "
        "returning an InferencePolicy (rl_suite/deploy/inference.py), or raising ExportError('unexportable cannot be "
        "exported: <why>')",
        "terse refuses export with 'no': say what cannot be exported and why ('terse cannot be exported: ...')",
    ]
    assert len(problems) == 3 and problems[2].startswith(
        "mismatched's exported policy does not act as act(..., deterministic=True): the exported policy picks other "
        "actions than the agent on"
    )


def test_a_path_that_does_not_exist_is_reported():
    text = "Edit `agents/<name>.py`, `tests/test_<name>_adapter.py`, `rl_suite/registry.py` and `agents/nope.py`."
    assert path_problems(text + "\n```\n`agents/ignored.py`\n```\n") == [
        "CONTRIBUTING.md names `agents/nope.py`, which does not exist"
    ]


def test_a_backend_without_a_member_or_with_another_signature_is_reported():
    pytest.importorskip("mujoco")
    source = example("## A new physics backend", "python")
    source = source.replace("def step(self, nstep: int,", "def step(self, steps: int,").replace(
        "self.derived", "derived"
    )
    assert backend_problems(source) == [
        "MyPhysics does not set 'derived'",
        "MyPhysics.step(self, steps: 'int', kinematics: 'bool' = False, env_ids: 'torch.Tensor | None' = None) -> "
        "'None': expected (self, nstep: 'int', kinematics: 'bool' = False, env_ids: 'torch.Tensor | None' = None) "
        "-> 'None'",
    ]
