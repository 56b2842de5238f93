"""Record dm_control's own behaviour, for the parity tests of the Control Suite tasks (tests/test_dmc_parity.py).

dm_control 1.0.50 does not run against MuJoCo 4.0 (its named indexers fail on ``flex_vertedge``), so this script
runs in a separate virtual environment with the versions it was written for:

    python3 -m venv .venv-dmc
    .venv-dmc/bin/pip install dm_control==1.0.50 mujoco==3.17.0
    .venv-dmc/bin/python tests/dmc_reference/record.py [domain-task ...]

For every task (or those named) it writes ``tests/dmc_reference/<domain>-<task>.npz``:

- ``reset_*``: ``RESETS`` episode starts (``env.reset()``): ``qpos``, ``qvel``, ``act``, the task state (``TASK_STATE``:
  the activations, then the randomised targets) and the flattened observation (float32, as ours);
- transitions along ``EPISODES`` trajectories under uniform random actions, at the steps in ``RECORDED_STEPS``:
  the state before (``qpos``, ``qvel``, ``act``, ``warmstart``: the solver's warm start, ``task``), the ``action``,
  and the ``reward``, ``obs``, ``next_qpos`` and ``next_qvel`` after;
- ``start_mean``, ``start_std`` and ``start_quantiles`` (at ``START_QUANTILES``) of ``START_SAMPLES`` more episode
  starts, per coordinate of ``[qpos, qvel, task state]``: dm_control's initial-state distribution;
- ``n_sub_steps`` and ``step_limit`` of the environment, the observation keys in order, and the versions.

It also writes ``tolerance.npz``: ``rewards.tolerance`` for every sigmoid on a grid of inputs. Everything is seeded
(``SEED``), so a rerun writes the same numbers.
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
from pathlib import Path

import mujoco
import numpy as np
from dm_control import suite
from dm_control.utils import rewards

SEED = 0
RESETS = 8
START_SAMPLES = 2000  # episode starts summarised in start_moments and start_quantiles
START_QUANTILES = (0.01, 0.25, 0.5, 0.75, 0.99)
EPISODES = 1
RECORDED_STEPS = (0, 1, 2, 10, 50, 100, 200, 400, 700, 999)  # the last: the step that reaches the time limit
OUT = Path(__file__).resolve().parent

# The per-episode task state of the tasks that randomise a target, as the parity tests set it: task -> a function of
# the physics giving a flat float64 vector. The same layout as the task's get_task_state in rl_suite/envs/dmc.
TASK_STATE: dict[str, collections.abc.Callable] = {}
TASK_STATE["reacher-easy"] = lambda physics: physics.named.model.geom_pos["target"][:2].copy()  # x, y
TASK_STATE["reacher-hard"] = lambda physics: physics.named.model.geom_pos["target"][:2].copy()
TASK_STATE["finger-turn_easy"] = lambda physics: physics.named.model.site_pos["target"][[0, 2]]  # x, z (a copy)
TASK_STATE["finger-turn_hard"] = lambda physics: physics.named.model.site_pos["target"][[0, 2]]
TASK_STATE["fish-swim"] = lambda physics: physics.named.model.geom_pos["target"].copy()  # a copy: the model changes
TASK_STATE["swimmer-swimmer6"] = lambda physics: physics.named.model.geom_pos["target"][:2].copy()
TASK_STATE["swimmer-swimmer15"] = lambda physics: physics.named.model.geom_pos["target"][:2].copy()
TASK_STATE["manipulator-bring_ball"] = lambda physics: np.concatenate(  # target_ball's x, z, then its quat's w, y
    [physics.named.model.body_pos["target_ball"][[0, 2]], physics.named.model.body_quat["target_ball"][[0, 2]]]
)


def flat_observation(observation: collections.OrderedDict) -> np.ndarray:
    """dm_control's observation dict, flattened in its own key order (``control.flatten_observation``)."""
    return np.concatenate([np.asarray(value, dtype=np.float64).ravel() for value in observation.values()])


def task_state(name: str, physics) -> np.ndarray:
    """The env's ``task_state``: the activations (empty where the model has none), then the task's targets."""
    function = TASK_STATE.get(name)
    targets = np.zeros(0) if function is None else np.asarray(function(physics), dtype=np.float64).ravel()
    return np.concatenate([physics.data.act, targets])


def record(domain: str, task: str) -> dict[str, np.ndarray]:
    name = f"{domain}-{task}"
    env = suite.load(domain, task, task_kwargs={"random": SEED})
    physics = env.physics
    spec = env.action_spec()
    actions = np.random.RandomState(SEED + 1)
    out: dict[str, list] = collections.defaultdict(list)

    def state(prefix: str) -> None:
        out[prefix + "qpos"].append(physics.data.qpos.copy())
        out[prefix + "qvel"].append(physics.data.qvel.copy())
        out[prefix + "act"].append(physics.data.act.copy())
        out[prefix + "task"].append(task_state(name, physics))

    keys = None
    for _ in range(RESETS):
        step = env.reset()
        keys = list(step.observation)
        state("reset_")
        out["reset_obs"].append(flat_observation(step.observation))
    starts = []
    for _ in range(START_SAMPLES):
        env.reset()
        starts.append(np.concatenate([physics.data.qpos, physics.data.qvel, task_state(name, physics)]))
    starts = np.asarray(starts)
    out["start_mean"], out["start_std"] = starts.mean(axis=0), starts.std(axis=0, ddof=1)
    out["start_quantiles"] = np.quantile(starts, START_QUANTILES, axis=0)
    for _ in range(EPISODES):
        env.reset()
        for t in range(RECORDED_STEPS[-1] + 1):
            # float32, as our contract takes actions, so that both sides step with the same numbers
            action = actions.uniform(spec.minimum, spec.maximum).astype(np.float32).astype(np.float64)
            if t in RECORDED_STEPS:
                state("")
                out["warmstart"].append(physics.data.qacc_warmstart.copy())
                out["action"].append(action)
            step = env.step(action)
            if t in RECORDED_STEPS:
                out["reward"].append(step.reward)
                out["obs"].append(flat_observation(step.observation))
                out["next_qpos"].append(physics.data.qpos.copy())
                out["next_qvel"].append(physics.data.qvel.copy())
        assert step.last(), f"{name}: the episode did not end at step {RECORDED_STEPS[-1] + 1}"
    data = {key: np.asarray(values, dtype=np.float64) for key, values in out.items()}
    for key in ("obs", "reset_obs"):  # compared with float32 observations: float32 halves the files
        data[key] = data[key].astype(np.float32)
    data["start_count"] = np.asarray(START_SAMPLES)
    data["start_quantile_levels"] = np.asarray(START_QUANTILES)
    data["keys"] = np.asarray(keys)
    data["n_sub_steps"] = np.asarray(env._n_sub_steps)
    data["step_limit"] = np.asarray(env._step_limit)
    data["versions"] = np.asarray([f"dm_control {_dm_control_version()}", f"mujoco {mujoco.__version__}"])
    return data


def _dm_control_version() -> str:
    from importlib.metadata import version

    return version("dm_control")


def record_tolerance() -> dict[str, np.ndarray]:
    """``rewards.tolerance`` on a grid: bounds (-1, 0.5), margins 0 and 0.7, each sigmoid at two values at margin."""
    x = np.linspace(-4.0, 4.0, 161)
    data = {"x": x}
    sigmoids = ("gaussian", "hyperbolic", "long_tail", "reciprocal", "cosine", "linear", "quadratic", "tanh_squared")
    for sigmoid in sigmoids:
        for value in (0.1, 0.5):
            data[f"{sigmoid}/{value}"] = rewards.tolerance(x, (-1.0, 0.5), 0.7, sigmoid, value)
    data["quadratic/0"] = rewards.tolerance(x, (0.0, 0.0), 1.0, "quadratic", 0.0)
    data["margin0"] = rewards.tolerance(x, (-1.0, 0.5))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", help="domain-task names (default: every task the suite has here)")
    args = parser.parse_args()
    names = args.tasks or [f"{d}-{t}" for d, t in _our_tasks()]
    for name in names:
        domain, task = name.split("-", 1)
        path = OUT / f"{name}.npz"
        np.savez_compressed(path, **record(domain, task))
        print(f"{path.name}: {path.stat().st_size / 1000:.1f} kB", flush=True)
    np.savez_compressed(OUT / "tolerance.npz", **record_tolerance())


def _our_tasks() -> list[tuple[str, str]]:
    """The (domain, task) pairs rl_suite registers, read from its registry's source without importing it (this
    environment has no torch)."""
    import ast

    source = (OUT.parent.parent / "rl_suite" / "registry.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "DMC_TASKS":
            table = ast.literal_eval(node.value)
            return [(domain, task) for domain, tasks in table.items() for task in tasks]
    raise SystemExit("rl_suite/registry.py has no DMC_TASKS table")


if __name__ == "__main__":
    main()
