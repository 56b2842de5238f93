"""The reference scores that ``rl-suite benchmark`` normalises by: a uniformly random policy's measured return (0 on
the normalised scale) and a published reference (1), per task, written to ``rl_suite/reference_scores.yaml``.

The random score is the runner's evaluation (``rl_suite.runner.evaluate``: the first episode of each of ``--episodes``
environments, on the evaluation seed of a run with seed 0) of uniformly random actions, with the task's default
keywords (a Control Suite task without action repeat). The references, with their sources:

- classic control and the MuJoCo v5 tasks: gymnasium's ``reward_threshold``, the return its registry calls solved
  (read from the installed gymnasium's registry, not typed here). Pendulum-v1, Walker2d-v5, Humanoid-v5 and
  HumanoidStandup-v5 have none: Pendulum gets its return's upper bound, 0 (every reward is at most 0); the three
  MuJoCo tasks are left out (the report shows their curves and leaves them out of the aggregates).
- the DeepMind Control Suite: 1,000, the largest return of its 1,000-step episodes with rewards in [0, 1] (Tassa et
  al., "DeepMind Control Suite", arXiv 1801.00690, section 2), the scale on which its papers report.

    python benchmarks/random_scores.py [--episodes 100] [--dmc-episodes 10] [--output rl_suite/reference_scores.yaml]
"""

from __future__ import annotations

import argparse
import pathlib

import common
import gymnasium as gym
import yaml

from rl_suite.device import cpu_name
from rl_suite.registry import registered

OUTPUT = pathlib.Path(__file__).resolve().parent.parent / "rl_suite" / "reference_scores.yaml"
DMC_MAXIMUM = 1000.0
GYMNASIUM_SOURCE = "gymnasium {version} registry: reward_threshold"
UPPER_BOUNDS = {"Pendulum-v1": (0.0, "the return's upper bound: every Pendulum-v1 reward is at most 0")}


def references() -> dict[str, tuple[float, str]]:
    """task -> (reference score, its source), for every registered task that has one."""
    table = {}
    for env_spec in registered():
        if env_spec.id.startswith("dm_control/"):
            table[env_spec.id] = (DMC_MAXIMUM, "the Control Suite's largest return (Tassa et al. 2018, section 2)")
        elif env_spec.id in UPPER_BOUNDS:
            table[env_spec.id] = UPPER_BOUNDS[env_spec.id]
        else:
            gym_spec = gym.envs.registry.get(env_spec.id)
            if gym_spec is not None and gym_spec.reward_threshold is not None:
                source = GYMNASIUM_SOURCE.format(version=gym.__version__)
                table[env_spec.id] = (float(gym_spec.reward_threshold), source)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100, help="random episodes per task (classic and MuJoCo)")
    parser.add_argument("--dmc-episodes", type=int, default=10, help="random episodes per Control Suite task")
    parser.add_argument("--output", type=pathlib.Path, default=OUTPUT)
    args = parser.parse_args()
    scores = {}
    for env_id, (reference, source) in references().items():
        episodes = args.dmc_episodes if env_id.startswith("dm_control/") else args.episodes
        random = common.random_policy_evaluation(env_id, episodes, seed=0)["mean_return"]
        scores[env_id] = {
            "random": round(random, 3),
            "reference": reference,
            "reference_source": source,
            "random_episodes": episodes,
        }
        print(f"{env_id:<40} random {random:10.2f}  reference {reference:10.2f}  ({source})", flush=True)
    header = (
        "# Reference scores for rl-suite benchmark's normalisation: random -> 0, reference -> 1.\n"
        "# Written by benchmarks/random_scores.py (which documents the sources); do not edit by hand.\n"
        f"# random: uniformly random actions, the runner's evaluation over random_episodes episodes, seed 0; measured "
        f"on {cpu_name()}.\n"
    )
    args.output.write_text(header + yaml.safe_dump(scores, sort_keys=False, width=200))
    print(f"wrote {args.output} ({len(scores)} tasks)")


if __name__ == "__main__":
    main()
