"""Env-steps per second of the hot loop (policy act + env step + buffer write), eager against compiled.

PPO collects rollouts of ``--rollout`` steps on CartPole-v1 (and ``--tasks`` more) through the collector each mode
gives (``rl_suite.compiled.make_collector``), from N = 1 up to ``--max-envs`` in powers of ``--factor``:

- ``eager``: the plain collector;
- ``compile``: ``torch.compile`` of the env step and ``agent.act``; on the CPU in exact mode (``--compile-exact``,
  rl_suite/exact_compile.py: trajectories bitwise equal to eager), as the published figures were measured. The
  default mode keeps inductor's own numerics, whose transcendental functions fuse with their neighbours;
- ``cuda_graph`` (CUDA only): the whole rollout captured as one CUDA graph and replayed;
- ``compile+cuda_graph`` (CUDA only): the compiled pieces, captured.

Each figure is the fastest of 3 windows of ``--seconds / 3`` after the first rollout (which compiles or captures;
its time is reported as the setup time). The modes of one N are measured one after another. A mode stops growing N
once one rollout of its took longer than ``--max-call-s``, or once the buffer does not fit in memory; the report
says where each mode stopped and why.

    python benchmarks/hot_loop.py [--tasks CartPole-v1 Pendulum-v1] [--max-envs 1048576] [--seconds 1.5]

Writes ``hot_loop.{csv,md,png}`` into ``--out`` (default ``benchmarks/results``) with the machine it ran on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import pathlib
import sys
import time
import traceback
import warnings

import torch

import rl_suite
from rl_suite.agents import PPO
from rl_suite.collector import Collector
from rl_suite.compiled import CompiledCollector, GraphCollector
from rl_suite.throughput import steps_per_second

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
CPU_MODES = ["eager", "compile"]
CUDA_MODES = ["eager", "compile", "cuda_graph", "compile+cuda_graph"]
WINDOWS = 3


def make(mode: str, env, agent, buffer) -> Collector:
    if mode == "eager":
        return Collector(env, agent, buffer)
    if mode == "compile":
        return CompiledCollector(env, agent, buffer, exact=env.device.type == "cpu")
    if mode == "cuda_graph":
        return GraphCollector(env, agent, buffer)
    if mode == "compile+cuda_graph":
        return GraphCollector(env, agent, buffer, compiled=True)
    raise ValueError(mode)


def measure(task: str, mode: str, num_envs: int, device: str, rollout: int, seconds: float) -> dict:
    """One figure: env-steps/s of ``collect(rollout)`` with ``num_envs`` environments."""
    torch._dynamo.reset()  # fresh compilations: no recompile limit reached across the N of a sweep
    torch.manual_seed(0)
    env = rl_suite.make(task, num_envs=num_envs, device=device, seed=0)
    agent = PPO.for_env(env, PPO.Config(n_steps=rollout), device=device)
    buffer = agent.make_buffer(num_envs)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collector = make(mode, env, agent, buffer)

        def rollout_once(_: int) -> None:
            buffer.clear()  # what the learner's update does; the collector writes from row 0 again
            collector.collect(rollout)

        start = time.perf_counter()
        rollout_once(0)  # compiles (or captures)
        sync()
        setup_s = time.perf_counter() - start
        start = time.perf_counter()
        rollout_once(1)
        sync()
        call_s = time.perf_counter() - start
        rate = steps_per_second(rollout_once, num_envs * rollout, seconds, sync, warmup=0, windows=WINDOWS)
    fallbacks = [str(w.message) for w in caught if "eagerly" in str(w.message)]
    return {
        "task": task,
        "mode": mode,
        "num_envs": num_envs,
        "env_steps_per_s": rate,
        "rollout_s": call_s,
        "setup_s": setup_s,
        "note": "; ".join(fallbacks),
    }


def sizes(max_envs: int, factor: int) -> list[int]:
    out, n = [], 1
    while n <= max_envs:
        out.append(n)
        n *= factor
    if out[-1] != max_envs:
        out.append(max_envs)
    return out


def plot(rows: list[dict], tasks: list[str], modes: list[str], path: pathlib.Path, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.5), squeeze=False)
    for axis, task in zip(axes[0], tasks, strict=True):
        for mode in modes:
            points = [(r["num_envs"], r["env_steps_per_s"]) for r in rows if r["task"] == task and r["mode"] == mode]
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", label=mode)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("num_envs")
        axis.set_ylabel("env-steps/s (act + step + buffer write)")
        axis.set_title(f"PPO collecting on {task} ({device})")
        axis.grid(alpha=0.3, which="both")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def report(rows, limits, args, modes, device) -> str:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from env_throughput import machine

    command = "python benchmarks/hot_loop.py " + " ".join(sys.argv[1:])
    lines = [
        "# The hot loop: eager against compiled",
        "",
        f"Machine: {machine()}.",
        f"Run: `{command}` on {datetime.date.today().isoformat()}, device {device}. PPO (64x64 tanh MLPs, observation "
        f"normalisation) collects rollouts of {args.rollout} steps: act + env step + buffer write + episode "
        f"statistics. Env-steps/s, the best of {WINDOWS} windows; setup is the first rollout (compilation or "
        "capture). On the CPU, compile runs in exact mode (`--compile-exact`: bitwise equal to eager).",
        "",
    ]
    others = [m for m in modes if m != "eager"]
    for task in args.tasks:
        lines += [
            f"## {task}",
            "",
            "| N | " + " | ".join(modes) + " | " + " | ".join(f"{m} / eager" for m in others) + " | setup (s) |",
            "|---:|" + "---:|" * (len(modes) + len(others)) + "---|",
        ]
        for n in sorted({r["num_envs"] for r in rows if r["task"] == task}):
            by_mode = {r["mode"]: r for r in rows if r["task"] == task and r["num_envs"] == n}
            figures = [f"{by_mode[m]['env_steps_per_s']:,.0f}" if m in by_mode else "-" for m in modes]
            eager = by_mode.get("eager")
            ratios = [
                f"{by_mode[m]['env_steps_per_s'] / eager['env_steps_per_s']:.2f}x" if m in by_mode and eager else "-"
                for m in others
            ]
            setup = ", ".join(f"{m} {r['setup_s']:.1f}" for m, r in by_mode.items())
            lines.append(f"| {n} | " + " | ".join(figures) + " | " + " | ".join(ratios) + f" | {setup} |")
        lines.append("")
        for mode in modes:
            lines.append(f"- {mode}: {limits.get((task, mode), f'measured up to N = {args.max_envs}')}.")
        notes = sorted({r["note"] for r in rows if r["task"] == task and r["note"]})
        lines += [f"- Fallback: {note}" for note in notes]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["CartPole-v1"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--modes", nargs="+", help="default: eager compile (+ cuda_graph, compile+cuda_graph on CUDA)")
    parser.add_argument("--max-envs", type=int, default=2**20)
    parser.add_argument("--factor", type=int, default=4, help="N grows by this factor from 1")
    parser.add_argument("--seconds", type=float, default=1.5, help="measuring time per figure")
    parser.add_argument("--rollout", type=int, default=8, help="steps per collect (the rollout length)")
    parser.add_argument("--max-call-s", type=float, default=2.0, help="stop a mode once one rollout takes longer")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS, help="folder for the result files")
    parser.add_argument(
        "--budget-s", type=float, default=float("inf"), help="start no new figure after this many seconds"
    )
    args = parser.parse_args()
    device = torch.device(args.device).type
    modes = args.modes or (CUDA_MODES if device == "cuda" else CPU_MODES)
    if device != "cuda" and any("cuda_graph" in m for m in modes):
        parser.error("the cuda_graph modes need --device cuda")

    rows: list[dict] = []
    limits: dict[tuple[str, str], str] = {}
    started = time.perf_counter()
    for task in args.tasks:
        for n in sizes(args.max_envs, args.factor):
            for mode in modes:
                if (task, mode) in limits:
                    continue
                if time.perf_counter() - started > args.budget_s:
                    limits[task, mode] = f"stopped before N = {n}: the run's --budget-s {args.budget_s:g} was spent"
                    continue
                try:
                    row = measure(task, mode, n, args.device, args.rollout, args.seconds)
                except MemoryError as error:
                    limits[task, mode] = f"stopped at N = {n}: {error}"
                    continue
                except Exception as error:  # noqa: BLE001 - one failing mode must not end the sweep
                    traceback.print_exc()
                    limits[task, mode] = f"failed at N = {n}: {type(error).__name__}: {str(error)[:300]}"
                    continue
                rows.append(row)
                print(
                    f"{task} {mode:>18} N={n:>8}: {row['env_steps_per_s']:>14,.0f} env-steps/s, rollout "
                    f"{row['rollout_s'] * 1e3:.1f} ms, setup {row['setup_s']:.1f} s {row['note']}",
                    flush=True,
                )
                if row["rollout_s"] > args.max_call_s:
                    limits[task, mode] = (
                        f"stopped after N = {n}: one rollout of {args.rollout} steps took {row['rollout_s']:.1f} s "
                        f"(> --max-call-s {args.max_call_s:g})"
                    )
                write_tables(rows, limits, args, modes, device)  # after every figure: a killed run keeps its results

    plot(rows, args.tasks, modes, args.out / "hot_loop.png", device)
    print(write_tables(rows, limits, args, modes, device))


def write_tables(rows, limits, args, modes, device) -> str:
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "hot_loop.csv", "w", newline="") as f:
        columns = ["task", "mode", "num_envs", "env_steps_per_s", "rollout_s", "setup_s", "note"]
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    text = report(rows, limits, args, modes, device)
    (args.out / "hot_loop.md").write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
