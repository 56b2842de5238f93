"""Pursuit at scale on this CPU: how the batched pursuit task's cost grows with the number of pursuers, and whether a
MAPPO policy trained with 100 pursuers works with 10 and 1,000.

``--part throughput``: env-steps and agent-steps per second of ``Pursuit-v0`` under uniformly random discrete moves
at P = 10, 100 and 1,000 pursuers (``--pursuers``), with N environments chosen so that N * P = ``--agents`` (16,384)
throughout: the same number of agents each step, so that the rate per agent shows what more pursuers per
environment cost. Each size is measured twice: ``env.step`` eagerly, and compiled by
``rl_suite.compiled.compile_env_step`` (what ``rl-suite train ... --compile compile`` steps; compiling takes under a
minute per size here, timed apart), with one thread and with one per core (``--threads``). Goal (the issue): at
least 1M agent-steps per second at P = 1,000 on this CPU.

``--part training``: MAPPO with its shipped ``Pursuit-v0`` settings (``agents/hyperparams/mappo.yaml``: one policy
shared by all pursuers without agent ids, a critic on each pursuer's own observation, so that nothing depends on P)
trains with ``num_pursuers=100`` for ``--minutes`` of wall-clock per seed (``--seeds``, default 0 1 2), one run at a
time with one thread. Each trained policy then plays, without retraining, with P = 10, 100 and 1,000 pursuers
(``EVAL_AGENTS`` / P environments, one 100-step episode each, greedy actions), beside uniformly random pursuers on
the same episodes. The score is ``captures_per_evader``: captures in an episode over the number of evaders (P / 4;
captured evaders reappear, so it can exceed 1).

    python benchmarks/pursuit.py [--part throughput|training|all] [--seconds 3] [--agents 16384] [--threads 1 2]
        [--minutes 20] [--seeds 0 1 2] [--runs-dir DIR] [--results-dir benchmarks/results]

Writes ``pursuit_throughput.{csv,md}`` and ``pursuit_training.md`` into ``--results-dir``, with the machine they ran
on. Finished training runs are kept in ``<--runs-dir>/pursuit/`` (a stopped invocation resumes with what it lacks).
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import common
import torch
import torch._inductor.utils

ENV_ID = "Pursuit-v0"
PURSUERS = (10, 100, 1000)
TRAIN_PURSUERS = 100
EVAL_AGENTS = 10_000  # pursuers per evaluation, over N = EVAL_AGENTS / P environments
GOAL_AGENT_STEPS = 1_000_000


def machine() -> str:
    return f"{common.cpu_name()}; torch {torch.__version__} ({torch.get_num_threads()} threads)"


def throughput(pursuers: int, num_envs: int, seconds: float, compiled: bool, threads: int) -> dict:
    """Env-steps and agent-steps per second of ``env.step``, or of its compiled form (``compile_env_step``, what
    the runner's ``compile="compile"`` steps; its compilation is timed apart, before the measurement), with
    ``threads`` torch threads (inductor's kernels take their OpenMP thread count from it when they are compiled)."""
    import rl_suite
    from rl_suite.compiled import compile_env_step
    from rl_suite.throughput import steps_per_second

    torch.set_num_threads(threads)
    env = rl_suite.make(ENV_ID, num_envs=num_envs, seed=0, num_pursuers=pursuers)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    actions = [torch.randint(0, 5, (num_envs, pursuers), generator=generator) for _ in range(16)]
    step, compile_s = env.step, 0.0
    # A cold compile, as on a machine's first run: no kernels from an earlier run's on-disk cache, nor from an
    # earlier measurement of this one (another thread count compiles other kernels).
    with torch._inductor.utils.fresh_cache():
        if compiled:
            torch._dynamo.reset()
            step = compile_env_step(env)
            started = time.perf_counter()
            step(actions[0])
            compile_s = time.perf_counter() - started
            if step.compiled.compiled is None:
                raise SystemExit(f"the Pursuit step did not compile as one graph: {step.compiled.fallback_reason}")
        rate = steps_per_second(lambda i: step(actions[i % 16]), num_envs, seconds)
    return {"pursuers": pursuers, "num_envs": num_envs, "mode": "compiled" if compiled else "eager", "threads": threads,
            "env_steps_per_s": rate, "agent_steps_per_s": rate * pursuers, "compile_s": compile_s}  # fmt: skip


def captures(policy, pursuers: int, seed: int) -> float:
    """Mean captures per evader over one episode in each of ``EVAL_AGENTS / pursuers`` environments, ``policy`` an
    agent or ``None`` for uniformly random moves."""
    import rl_suite
    from rl_suite.runner import evaluate

    env = rl_suite.make(ENV_ID, num_envs=max(1, EVAL_AGENTS // pursuers), seed=seed, num_pursuers=pursuers)
    if policy is None:
        policy = common.UniformRandomAgent(env, seed)
    else:  # the same weights in an agent built for this many pursuers (nothing in them depends on P)
        trained = policy
        policy = type(trained).for_env(env, trained.config)
        policy.load_state_dict(trained.state_dict())
    return evaluate(policy, env, seed)["captures_per_evader"]


def train_seed(job: dict) -> dict:
    started = time.perf_counter()
    summary, _, agent = common.train(
        "mappo",
        ENV_ID,
        job["seed"],
        {"env_kwargs": {"num_pursuers": TRAIN_PURSUERS}},
        time_budget_s=job["minutes"] * 60,
        total_steps=10**12,
    )
    seconds = time.perf_counter() - started
    scores = {str(p): captures(agent, p, 10_000 + job["seed"]) for p in PURSUERS}
    return {"env_steps": summary["env_steps"], "train_seconds": seconds, "captures": scores}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("throughput", "training", "all"), default="all")
    parser.add_argument("--seconds", type=float, default=3.0, help="timing per throughput figure")
    parser.add_argument("--agents", type=int, default=16_384, help="N * P for every throughput figure")
    parser.add_argument("--pursuers", type=int, nargs="+", default=list(PURSUERS))
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}),
                        help="torch thread counts of the throughput part (default: 1 and one per core)")  # fmt: skip
    parser.add_argument("--minutes", type=float, default=20.0, help="MAPPO's training wall-clock per seed")
    common.add_seed_arguments(parser)
    common.add_resume_arguments(parser)
    args = parser.parse_args()
    common.check_seed_arguments(parser, args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    if args.part in ("throughput", "all"):
        rows = []
        for threads in args.threads:
            for p in args.pursuers:
                for compiled in (False, True):
                    row = throughput(p, max(1, args.agents // p), args.seconds, compiled, threads)
                    rows.append(row)
                    print(
                        f"{threads} threads, P = {p}, {row['mode']}: {row['agent_steps_per_s']:,.0f} agent-steps/s",
                        flush=True,
                    )
        write_throughput(rows, args)
    if args.part in ("training", "all"):
        torch.set_num_threads(1)  # one run at a time with one thread, whatever the throughput part used
        print(common.wall_clock_estimate(len(args.seeds), args.minutes, "seeds"), flush=True)
        finished = common.FinishedRuns(args, "pursuit")
        runs = {}
        for seed in args.seeds:
            job = {"task": ENV_ID, "algo": "mappo", "seed": seed, "minutes": args.minutes, "pursuers": TRAIN_PURSUERS}
            runs[seed] = finished.get(job) or finished.put(job, train_seed(job))
            print(f"seed {seed}: {runs[seed]['env_steps']:,} env steps; captures per evader {runs[seed]['captures']}")
        random = {str(p): captures(None, p, 10_000) for p in PURSUERS}
        write_training(runs, random, args)


def write_throughput(rows: list[dict], args) -> None:
    common.write_csv(args.results_dir / "pursuit_throughput.csv", rows)
    at_goal = [row for row in rows if row["pursuers"] == 1000]
    best = max(at_goal, key=lambda row: row["agent_steps_per_s"], default=None)
    one_thread = max((row["agent_steps_per_s"] for row in at_goal if row["threads"] == 1), default=0.0)
    met = best is not None and best["agent_steps_per_s"] >= GOAL_AGENT_STEPS
    first = rows[0]["pursuers"]
    base = {(r["mode"], r["threads"]): r["agent_steps_per_s"] for r in rows if r["pursuers"] == first}
    lines = [
        "# Pursuit-v0: steps per second against the number of pursuers, on this CPU",
        "",
        f"Machine: {common.cpu_name()}; torch {torch.__version__}. Run: `python "
        f"benchmarks/pursuit.py --part throughput --agents {args.agents} --seconds {args.seconds:g} --threads "
        f"{' '.join(map(str, args.threads))}` on {datetime.date.today()}; uniformly random discrete moves, N * P = "
        f"{args.agents:,} agents every step; `env.step` eagerly, and compiled by `rl_suite.compiled.compile_env_step` "
        f"(what `rl-suite train ... --compile compile` steps), whose compilation is timed apart. Code: commit "
        f"{common.git_commit()}.",
        "",
        "| threads | pursuers P | environments N | mode | env-steps/s | agent-steps/s | per agent, relative to the "
        "first P | compile (s) |",
        "|---:|---:|---:|---|---:|---:|---:|---:|",
        *(
            f"| {r['threads']} | {r['pursuers']:,} | {r['num_envs']:,} | {r['mode']} | {r['env_steps_per_s']:,.0f} | "
            f"{r['agent_steps_per_s']:,.0f} | {r['agent_steps_per_s'] / base[r['mode'], r['threads']]:.2f} | "
            + (f"{r['compile_s']:.0f} |" if r["mode"] == "compiled" else "- |")
            for r in rows
        ),
        "",
    ]
    if best is not None:
        lines.append(
            f"- The script's verdict: goal (at least {GOAL_AGENT_STEPS:,} agent-steps/s at P = 1,000 on this CPU, in "
            f"either mode) **{common.verdict(met)}**: {best['agent_steps_per_s']:,.0f} {best['mode']} with "
            f"{best['threads']} thread(s); {one_thread:,.0f} at best with one thread."
        )
    common.write_report(args.results_dir / "pursuit_throughput.md", lines)


def write_training(runs: dict[int, dict], random: dict[str, float], args) -> None:
    fmt = "{:.3f}"
    header = " | ".join(f"P = {p:,}" for p in PURSUERS)
    lines = [
        "# MAPPO trained with 100 pursuers, played with 10, 100 and 1,000, on this CPU",
        "",
        f"Machine: {machine()}. Run: `python benchmarks/pursuit.py --part training --minutes {args.minutes:g}` on "
        f"{datetime.date.today()}; shipped settings (`agents/hyperparams/mappo.yaml`), {args.minutes:g} minutes of "
        f"training per seed with {TRAIN_PURSUERS} pursuers. {common.commits_line(list(runs.values()))}",
        "",
        common.seeds_line(list(runs)),
        "",
        "Score: captures per evader in a 100-step episode (greedy actions), over "
        f"{EVAL_AGENTS:,} pursuers at each size.",
        "",
        f"| | {header} |",
        "|---|" + "---:|" * len(PURSUERS),
    ]
    stats = {p: common.over_seeds({s: r["captures"][str(p)] for s, r in runs.items()}) for p in PURSUERS}
    lines.append("| MAPPO, final (mean ± std) | " + " | ".join(common.mean_std(stats[p], fmt) for p in PURSUERS) + " |")
    lines.append("| MAPPO, best (seed k) | " + " | ".join(common.best_of(stats[p], fmt) for p in PURSUERS) + " |")
    lines.append("| random pursuers | " + " | ".join(fmt.format(random[str(p)]) for p in PURSUERS) + " |")
    ratios = ", ".join(f"{stats[p].mean / max(random[str(p)], 1e-9):.1f}x at P = {p:,}" for p in PURSUERS)
    better = all(stats[p].mean - stats[p].std > random[str(p)] for p in PURSUERS)
    lines += [
        "",
        f"- Mean captures against random pursuers: {ratios}.",
        f"- The script's verdict: the policy beats random pursuers at every size by more than its spread over seeds: "
        f"**{'yes' if better else 'no'}**.",
    ]
    common.write_report(args.results_dir / "pursuit_training.md", lines)


if __name__ == "__main__":
    main()
