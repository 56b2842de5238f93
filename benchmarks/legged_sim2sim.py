"""Sim-to-sim for the quadruped (``--robot humanoid``: the humanoid): an exported flat-ground policy, run by
``ControlLoop`` at 50 Hz, through a sweep of velocity commands in MuJoCo and in PyBullet, from the exported file alone.

For each policy file (``--policies``, default the three that ``benchmarks/legged_training.py`` exports for the robot,
one per seed) and each command of the sweep (``COMMANDS``, ``--seconds`` each, default 20), the file is loaded with
``load_policy(robot=True)`` and run by ``ControlLoop`` (on a simulated clock, so as fast as the simulation) against
``MujocoRobot`` and against ``BulletRobot`` (rl_suite/envs/robots/deploy.py and bullet.py), both built from the
file's robot entry and started in the default pose.

Per command: the RMS planar tracking error over the run after its first second (m/s), and whether the robot fell.
Tracking quality of a run: ``1 - error / |command|`` (1 is perfect; 0 is what standing still scores), averaged over
the moving commands. The goal, from the issue: PyBullet keeps at least 80% of MuJoCo's tracking quality, with no
falls, on the mean over policies. A standing policy (zero offsets) is measured the same way for reference.

    python benchmarks/legged_sim2sim.py [--robot quadruped] [--policies FILE ...] [--seconds 20]
                                        [--results-dir benchmarks/results]

Writes ``legged_sim2sim.md`` and ``legged_sim2sim.csv`` (the humanoid's: ``humanoid_sim2sim.*``) into
``--results-dir``, with the machine it ran on.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import platform

import common
import numpy as np

COMMANDS = [  # (v_x, v_y, yaw rate), within the training ranges
    (0.5, 0.0, 0.0),
    (1.0, 0.0, 0.0),
    (-0.5, 0.0, 0.0),
    (0.0, 0.5, 0.0),
    (0.0, 0.0, 1.0),
    (0.5, 0.0, 0.5),
    (0.0, 0.0, 0.0),
]
SETTLE_S = 1.0  # the first second (starting from rest) is left out of the error
GOAL_KEPT = 0.8
ROBOTS = {"quadruped": "legged_sim2sim", "humanoid": "humanoid_sim2sim"}  # robot: the report's file stem


def exported(robot: str) -> list[pathlib.Path]:
    """The policies ``benchmarks/legged_training.py`` exported for ``robot``, one per seed."""
    return sorted((common.RESULTS / "legged_policies").glob(f"{robot}_flat_seed*.onnx"))


class Recorder:
    """Wraps a robot for ``ControlLoop``: after every action, records the planar velocity and whether it fell."""

    def __init__(self, robot):
        self.robot, self.velocities, self.fell = robot, [], False

    def read_observation(self):
        return self.robot.read_observation()

    def apply_action(self, action) -> None:
        self.robot.apply_action(action)
        self.velocities.append(self.robot.planar_velocity())
        self.fell = self.fell or self.robot.fallen()


def run(policy, make_robot, command, seconds: float) -> dict:
    from rl_suite.deploy import ControlLoop

    robot = make_robot(command)
    recorder = Recorder(robot)
    rate = float(policy.robot["control_hz"]) if policy is not None else 50.0
    act = policy if policy is not None else (lambda obs: np.zeros(len(robot.default), dtype=np.float32))
    clock = common.SimulatedClock()
    loop = ControlLoop(
        act,
        recorder,
        rate_hz=rate,
        safe_action=np.zeros(len(robot.default), dtype=np.float32),
        clock=clock,
        sleep=clock.sleep,
        keep_observations=False,
    )
    result = loop.run(round(seconds * rate))
    if hasattr(robot, "close"):
        robot.close()
    velocities = np.asarray(recorder.velocities)[round(SETTLE_S * rate) :]
    error = float(np.sqrt(np.mean(np.sum((velocities[:, :2] - np.asarray(command[:2])) ** 2, axis=1))))
    yaw_error = float(np.sqrt(np.mean((velocities[:, 2] - command[2]) ** 2)))
    speed = float(np.hypot(command[0], command[1]))
    scale = speed if speed > 0 else abs(command[2])
    tracked = error if speed > 0 else yaw_error
    quality = 1.0 - tracked / scale if scale > 0 else None
    return {"error": error, "yaw_error": yaw_error, "quality": quality, "fell": recorder.fell, "faults": result.faults}


def machine() -> str:
    import onnxruntime

    return f"{common.cpu_name()}; onnxruntime {onnxruntime.__version__}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robot", choices=ROBOTS, default="quadruped", help="whose exported policies (default)")
    parser.add_argument("--policies", nargs="+", type=pathlib.Path, help="default: the robot's exported policies")
    parser.add_argument("--seconds", type=float, default=20.0, help="per command")
    parser.add_argument("--results-dir", type=pathlib.Path, default=common.RESULTS)
    args = parser.parse_args()
    args.policies = args.policies or exported(args.robot)
    if not args.policies:
        parser.error("no policies: run benchmarks/legged_training.py first, or give --policies")

    from rl_suite.deploy import load_policy
    from rl_suite.envs.robots.bullet import BulletRobot
    from rl_suite.envs.robots.deploy import MujocoRobot

    rows = []
    entries = []
    for path in [*args.policies, None]:
        policy = load_policy(path, robot=True) if path is not None else None
        entry = policy.robot if policy is not None else entries[0]
        entries.append(entry)
        label = path.name if path is not None else "standing (zero offsets)"
        for simulator, factory in (("MuJoCo", MujocoRobot), ("PyBullet", BulletRobot)):
            for command in COMMANDS:
                result = run(
                    policy, lambda c, factory=factory, entry=entry: factory(entry, command=c), command, args.seconds
                )
                rows.append({"policy": label, "simulator": simulator, "command": command, **result})
                print(
                    f"{label} {simulator} {command}: error {result['error']:.3f} m/s, quality "
                    f"{result['quality'] if result['quality'] is None else round(result['quality'], 2)}, "
                    f"{'fell' if result['fell'] else 'stood'}",
                    flush=True,
                )
    write(rows, args)


def summary(rows: list[dict], policy: str, simulator: str) -> tuple[float, int]:
    """(mean tracking quality over the moving commands, falls) of one policy in one simulator."""
    chosen = [r for r in rows if r["policy"] == policy and r["simulator"] == simulator]
    qualities = [r["quality"] for r in chosen if r["quality"] is not None]
    return float(np.mean(qualities)), sum(r["fell"] for r in chosen)


def write(rows: list[dict], args) -> None:
    folder, stem = args.results_dir, ROBOTS[args.robot]
    folder.mkdir(parents=True, exist_ok=True)
    common.write_csv(folder / f"{stem}.csv", rows)
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    trained = [p for p in policies if p.endswith(".onnx")]
    robot_flag = "" if args.robot == "quadruped" else f" --robot {args.robot}"
    lines = [
        f"# Sim-to-sim: the {args.robot}'s exported policy in MuJoCo and in PyBullet",
        "",
        f"Machine: {machine()}. Run: `python benchmarks/legged_sim2sim.py{robot_flag} --seconds {args.seconds:g}` on "
        f"{datetime.date.today()}; each command for {args.seconds:g} s from the default pose, `ControlLoop` at the "
        f"file's rate; the error leaves out the first {SETTLE_S:g} s.",
        "",
        "| policy | MuJoCo quality | MuJoCo falls | PyBullet quality | PyBullet falls | kept |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    kept = {}
    for policy in policies:
        (q_mujoco, f_mujoco), (q_bullet, f_bullet) = (summary(rows, policy, s) for s in ("MuJoCo", "PyBullet"))
        ratio = q_bullet / q_mujoco if q_mujoco > 0 else float("nan")
        if policy in trained:
            kept[policy] = (ratio, f_bullet)
        lines.append(
            f"| {policy} | {q_mujoco:.2f} | {f_mujoco} | {q_bullet:.2f} | {f_bullet} | "
            f"{'-' if policy not in trained else f'{ratio:.2f}'} |"
        )
    ratios = [r for r, _ in kept.values()]
    mean = float(np.mean(ratios)) if ratios else float("nan")
    std = float(np.std(ratios, ddof=1)) if len(ratios) > 1 else float("nan")
    falls = sum(f for _, f in kept.values())
    met = mean >= GOAL_KEPT and falls == 0
    lines += [
        "",
        f"Kept (PyBullet's quality over MuJoCo's) over {len(ratios)} policies: {mean:.2f} ± {std:.2f}; PyBullet falls: "
        f"{falls}. Goal (keep ≥ {GOAL_KEPT:.0%} with no falls, on the mean): {'met' if met else '**missed**'}.",
        "",
        "Per command (error in m/s after the first second; quality 1 - error / |command|):",
        "",
        "| policy | simulator | command | error | yaw error | quality | fell |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        quality = "-" if r["quality"] is None else f"{r['quality']:.2f}"
        lines.append(
            f"| {r['policy']} | {r['simulator']} | {r['command']} | {r['error']:.3f} | {r['yaw_error']:.3f} | "
            f"{quality} | {r['fell']} |"
        )
    common.write_report(folder / f"{stem}.md", lines)


if __name__ == "__main__":
    main()
