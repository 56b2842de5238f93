"""PPO, BPO, PROPS and FixPO on CartPole, Pendulum and three MuJoCo tasks, at equal env steps and equal wall-clock.

Each run trains with its algorithm's shipped settings for the task (``agents/hyperparams/<algo>.yaml``; the three
variants share PPO's rollout, epochs, learning rate and discount there, so that they differ in what the papers
change) for ``STEPS[task]`` env steps, without stopping at a return threshold, and evaluates its deterministic
policy over 10 episodes 20 times along the way. Runs go ``--jobs`` at a time (default 2), each in its own process
pinned to its own core with one torch thread; finished runs are kept in ``--runs-dir`` (the suite is long: run it
in parts with ``--runs-dir benchmarks/results/finished``, committed).

What is compared, per task and over seeds (mean ± standard deviation, best seed beside it):
- equal env steps: the final evaluation, and the mean over the whole learning curve (its area, a measure of data
  efficiency: a curve that rises sooner has more);
- equal wall-clock: each run's last evaluation within the time the fastest algorithm's runs took on the task (their
  mean), so that an algorithm that does more work per env step is compared at the time it costs;
- stability: the largest fall between two consecutive evaluations, relative to the task's range (the best
  evaluation of any run minus the random policy's return);
- the trust region: for every algorithm, the largest per-state KL(pi_before || pi_after) of each update, measured
  the same way at the newest rollout's states (analytic, per state), and for FixPO the share of its gradient steps
  spent in the fixup phase.

Each paper's headline claim gets a verdict per task, against PPO: *better* when the difference of means exceeds
the larger of the two standard deviations, *worse* when it falls below minus that, else *within the seeds' spread*.
- BPO: stability and final return (final return, and the mean largest fall);
- PROPS: data efficiency (the mean over the learning curve);
- FixPO: a guaranteed KL bound at under 5% extra gradient steps (every update of every seed within ``kl_bound``,
  no fixup capped, and the fixup's share of gradient steps under 5% on every seed).

    python benchmarks/onpolicy_variants.py [--tasks CartPole-v1 ...] [--algos ppo bpo props fixpo]
        [--seeds 0 1 2] [--steps-scale 1.0] [--jobs 2] [--runs-dir DIR] [--results-dir benchmarks/results]

Writes into ``--results-dir``: ``onpolicy_variants.md`` (tables, verdicts, machine), ``onpolicy_variants.csv`` (one
row per run), ``onpolicy_variants_curves.csv`` (every evaluation) and ``onpolicy_variants.png`` (return against
env steps and against wall-clock, per task).
"""

from __future__ import annotations

import copy
import csv
import datetime
import pathlib

import common
import numpy as np
import torch

TASKS = ("CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
ALGOS = ("ppo", "bpo", "props", "fixpo")
NAMES = {"ppo": "PPO", "bpo": "BPO", "props": "PROPS", "fixpo": "FixPO"}  # as the papers write them
# Env steps per run: the shipped CartPole and Pendulum budgets (agents/hyperparams/ppo.yaml), and 1M on MuJoCo, the
# budget of the PPO papers' MuJoCo tables.
STEPS = {"CartPole-v1": 100_000, "Pendulum-v1": 300_000, "HalfCheetah-v5": 1_000_000, "Hopper-v5": 1_000_000,
         "Walker2d-v5": 1_000_000}  # fmt: skip
EVALUATIONS = 20
EVAL_EPISODES = 10
FIXUP_SHARE_CLAIM = 0.05  # FixPO's paper: the fixup phase takes under 5% of the gradient steps
# For the estimate printed at the start, minutes per run on one core of an Intel Xeon (PPO at 1M MuJoCo steps took
# about 11 minutes in benchmarks/mujoco_suite.py's runs; PROPS's behaviour updates add about half).
MINUTES = {"CartPole-v1": 1.5, "Pendulum-v1": 4.0, "HalfCheetah-v5": 13.0, "Hopper-v5": 13.0, "Walker2d-v5": 13.0}


# -- one run, in its own process ---------------------------------------------------------------------------------


def record_update_kl(agent) -> list[torch.Tensor]:
    """Make each of ``agent``'s policy updates append the largest per-state KL(pi_before || pi_after) of its policy
    (PROPS: its target's, on the iterations that update it) at the newest rollout's states, as FixPO states its
    bound; the same measurement for every algorithm, kept as tensors until the run ends."""
    policy = getattr(agent, "target", agent)  # PROPS trains a PPO target on its behaviour policy's data
    largest: list[torch.Tensor] = []
    update = agent.update

    def measured_update(buffer, progress: float = 0.0):
        newest = buffer.newest(agent.config.props_steps) if hasattr(buffer, "newest") else buffer.data
        samples = {  # normalised as the update sees them, before the normaliser moves; a flow policy's noise too
            "obs": policy.normalizer(newest["obs"]).flatten(0, 1),
            **{name: newest[name].flatten(0, 1) for name in policy.policy_conditions},
        }
        before, target_updates = copy.deepcopy(policy.actor), getattr(agent, "target_updates", None)
        metrics = update(buffer, progress)
        if target_updates is None or agent.target_updates > target_updates:
            with torch.no_grad():
                largest.append(policy.policy(samples, before).kl(policy.policy(samples)).max())
        return metrics

    agent.update = measured_update
    return largest


def kl_bound(task: str) -> float:
    """FixPO's trust region on ``task``: its shipped ``kl_bound``, else FixPOConfig's default."""
    from rl_suite.registry import load_algorithm

    return common.shipped_settings("fixpo", task).get("kl_bound", load_algorithm("fixpo").Config().kl_bound)


def run(job: dict) -> dict:
    steps, recorded = job["steps"], {}

    def prepare(agent) -> None:
        recorded["kl"] = record_update_kl(agent)

    summary, _, agent = common.train(
        job["algo"],
        job["task"],
        job["seed"],
        {"stop_at_return": None},  # the whole budget: curves end at the same step
        prepare=prepare,
        total_steps=steps,
        eval_every_steps=steps // EVALUATIONS,
        eval_episodes=EVAL_EPISODES,
        env_kwargs={"nthread": 1} if job["task"].endswith("-v5") else {},  # MuJoCo's native threads: one core
    )
    kls, bound = torch.stack(recorded["kl"]).tolist(), kl_bound(job["task"])
    result = {
        "env_steps": summary["env_steps"],
        "updates": len(kls),
        "update_kl_max": max(kls),
        "updates_over_bound": sum(kl > bound for kl in kls),
        "kl_bound": bound,
        "curve": [
            {"env_steps": e["env_steps"], "wall_time_s": e["wall_time_s"], "mean_return": e["mean_return"]}
            for e in summary["evaluations"]
        ],
    }
    if job["algo"] == "fixpo":
        counters = agent.counters()
        result["fixup_share"] = counters["fixup_steps"] / (counters["fixup_steps"] + counters["primary_steps"])
        result["fixup_capped"] = counters["fixup_capped"]
    return result


def run_all(args) -> list[dict]:
    jobs = [
        dict(
            task=task,
            algo=algo,
            seed=seed,
            steps=round(STEPS[task] * args.steps_scale),
            settings=common.shipped_settings(algo, task),
        )
        for task in args.tasks
        for algo in args.algos
        for seed in args.seeds
    ]

    def describe(r: dict) -> str:
        return (
            f"{r['task']} {r['algo']} seed {r['seed']}: final {r['curve'][-1]['mean_return']:,.0f} after "
            f"{r['env_steps']:,} env steps, {r['seconds'] / 60:.1f} min, largest update KL {r['update_kl_max']:.3g}"
        )

    rows = common.run_pinned(common.FinishedRuns(args, "onpolicy_variants"), jobs, __file__, args.jobs, describe)
    for row in rows:
        returns = [point["mean_return"] for point in row["curve"]]
        row["final"], row["best"], row["area"] = returns[-1], max(returns), float(np.mean(returns))
    return rows


# -- the comparisons ---------------------------------------------------------------------------------------------


def of(rows: list[dict], task: str, algo: str) -> list[dict]:
    return [row for row in rows if row["task"] == task and row["algo"] == algo]


def stats(runs: list[dict], values: list[float] | None = None, field: str = "") -> common.OverSeeds:
    """Over the seeds of ``runs``: their ``field``, or ``values`` (one per run)."""
    values = values if values is not None else [run[field] for run in runs]
    return common.over_seeds({run["seed"]: value for run, value in zip(runs, values, strict=True)})


def return_at(run: dict, seconds: float) -> float:
    """The run's last evaluation within ``seconds`` of wall-clock (its first, if even that came later)."""
    within = [point for point in run["curve"] if point["wall_time_s"] <= seconds]
    return (within[-1] if within else run["curve"][0])["mean_return"]


def equal_time(rows: list[dict], task: str, algos) -> float:
    """The wall-clock of the task's fastest algorithm: the least of the algorithms' mean run times."""
    return min(float(np.mean([run["curve"][-1]["wall_time_s"] for run in of(rows, task, a)])) for a in algos)


def largest_fall(run: dict, scale: float) -> float:
    """The largest drop between two consecutive evaluations, as a share of ``scale`` (0 if the curve never falls)."""
    returns = [point["mean_return"] for point in run["curve"]]
    return max([0.0] + [before - after for before, after in zip(returns[:-1], returns[1:], strict=True)]) / scale


def against_ppo(mine: common.OverSeeds, ppo: common.OverSeeds, higher_is_better: bool = True) -> str:
    """``better``, ``worse`` or ``within the seeds' spread``: the difference of means against the larger std."""
    if mine.n < common.MIN_PUBLISHED_SEEDS or ppo.n < common.MIN_PUBLISHED_SEEDS:
        return f"no verdict ({common.count(min(mine.n, ppo.n), 'seed')})"
    difference = (mine.mean - ppo.mean) * (1 if higher_is_better else -1)
    spread = max(mine.std, ppo.std)
    return "better" if difference > spread else "worse" if difference < -spread else "within the seeds' spread"


# -- the report ----------------------------------------------------------------------------------------------------


def write_results(rows: list[dict], randoms: dict[str, float], args) -> None:
    folder = args.results_dir
    folder.mkdir(parents=True, exist_ok=True)
    fields = ["task", "algo", "seed", "env_steps", "final", "best", "area", "seconds", "updates", "update_kl_max",
              "updates_over_bound", "fixup_share", "fixup_capped", "commit"]  # fmt: skip
    common.write_csv(folder / "onpolicy_variants.csv", rows, fields)
    with open(folder / "onpolicy_variants_curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "algo", "seed", "env_steps", "wall_time_s", "mean_return"])
        for run in rows:
            for point in run["curve"]:
                writer.writerow([run["task"], run["algo"], run["seed"], *point.values()])

    lines = [
        "# PPO, BPO, PROPS and FixPO at equal env steps and equal wall-clock",
        "",
        f"Machine: {common.cpu_name()}; torch {torch.__version__}. Run: `python benchmarks/onpolicy_variants.py` on "
        f"{datetime.date.today()}, {args.jobs} run(s) at a time, each on its own core with one torch thread; shipped "
        f"settings (`agents/hyperparams/<algo>.yaml`) without a stopping threshold; {EVALUATIONS} evaluations of "
        f"{EVAL_EPISODES} episodes of the deterministic policy per run. " + common.commits_line(rows),
        "",
        common.seeds_line(list(args.seeds)),
        "",
        "| task | algorithm | env steps | final return | best (seed k) | curve mean (area) | at equal wall-clock "
        "| largest fall | minutes per run | largest update KL | updates past the bound |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = {"bpo": [], "props": [], "fixpo": []}
    for task in args.tasks:
        seconds = equal_time(rows, task, args.algos)
        scale = max(run["best"] for run in rows if run["task"] == task) - randoms[task]
        table: dict[str, dict[str, common.OverSeeds]] = {}
        for algo in args.algos:
            runs = of(rows, task, algo)
            table[algo] = {
                "final": stats(runs, field="final"),
                "area": stats(runs, field="area"),
                "timed": stats(runs, [return_at(run, seconds) for run in runs]),
                "fall": stats(runs, [largest_fall(run, scale) for run in runs]),
            }
            over = sum(run["updates_over_bound"] for run in runs)
            lines.append(
                f"| {task} | {NAMES[algo]} | {runs[0]['env_steps']:,} | {common.mean_std(table[algo]['final'])} | "
                f"{common.best_of(table[algo]['final'])} | {common.mean_std(table[algo]['area'])} | "
                f"{common.mean_std(table[algo]['timed'])} | {common.mean_std(table[algo]['fall'], '{:.0%}')} | "
                f"{np.mean([run['seconds'] for run in runs]) / 60:.1f} | "
                f"{max(run['update_kl_max'] for run in runs):.3g} | {over} of {sum(r['updates'] for r in runs)} |"
            )
        lines.append(f"| {task} | random | | {randoms[task]:,.0f} | | | | | | | |")
        if "ppo" not in table:
            continue
        ppo = table["ppo"]
        if "bpo" in table:
            final = against_ppo(table["bpo"]["final"], ppo["final"])
            fall = against_ppo(table["bpo"]["fall"], ppo["fall"], higher_is_better=False)
            verdicts["bpo"].append(f"{task}: final return {final}, stability (largest fall) {fall}")
        if "props" in table:
            area = against_ppo(table["props"]["area"], ppo["area"])
            timed = against_ppo(table["props"]["timed"], ppo["timed"])
            verdicts["props"].append(f"{task}: curve mean {area}; at equal wall-clock {timed}")
        if "fixpo" in table:
            runs = of(rows, task, "fixpo")
            held = all(run["updates_over_bound"] == 0 and run["fixup_capped"] == 0 for run in runs)
            share = max(run["fixup_share"] for run in runs)
            ppo_over = sum(run["updates_over_bound"] for run in of(rows, task, "ppo"))
            verdicts["fixpo"].append(
                f"{task}: KL bound {'held on every update' if held else 'broken'}, fixup share at most {share:.1%} "
                f"({'under' if share < FIXUP_SHARE_CLAIM else 'not under'} 5%; PPO's updates past the bound: "
                f"{ppo_over}); final return {against_ppo(table['fixpo']['final'], ppo['final'])}"
            )
    claims = {
        "bpo": "BPO's claim, stability and final return, against PPO",
        "props": "PROPS's claim, data efficiency, against PPO",
        "fixpo": "FixPO's claim, a guaranteed KL bound at under 5% extra gradient steps",
    }
    for algo, claim in claims.items():
        if verdicts[algo]:
            lines += ["", f"{claim}:", *(f"- {line}" for line in verdicts[algo])]
    lines += [
        "",
        "*better* / *worse*: the difference of the two means exceeds the larger of their standard deviations over "
        "seeds; otherwise *within the seeds' spread*. Curve mean: the mean of a run's evaluations over the whole "
        "run. At equal wall-clock: each run's last evaluation within the mean run time of the task's fastest "
        "algorithm. Largest fall: the largest drop between consecutive evaluations, as a share of the task's range "
        "(the best evaluation of any run minus random play). Largest update KL: the largest per-state "
        "KL(pi_before || pi_after) over all updates of all seeds, at the newest rollout's states; the bound is "
        "FixPO's kl_bound.",
        "",
        "![return against env steps and wall-clock](onpolicy_variants.png)",
    ]
    common.write_report(folder / "onpolicy_variants.md", lines)
    plot(rows, randoms, args, folder / "onpolicy_variants.png")


def plot(rows: list[dict], randoms: dict[str, float], args, path: pathlib.Path) -> None:
    plt = common.pyplot()
    if plt is None:
        return
    figure, axes = plt.subplots(2, len(args.tasks), figsize=(4 * len(args.tasks), 6.4), squeeze=False)
    for column, task in enumerate(args.tasks):
        for colour, algo in enumerate(args.algos):
            runs = of(rows, task, algo)
            steps = [point["env_steps"] for point in runs[0]["curve"]]
            returns = np.array([[point["mean_return"] for point in run["curve"]] for run in runs])
            axes[0][column].plot(steps, returns.mean(axis=0), color=f"C{colour}", label=NAMES[algo])
            axes[0][column].fill_between(steps, returns.min(axis=0), returns.max(axis=0), color=f"C{colour}", alpha=0.2)
            for run in runs:
                minutes = [point["wall_time_s"] / 60 for point in run["curve"]]
                axes[1][column].plot(minutes, [point["mean_return"] for point in run["curve"]], color=f"C{colour}",
                                     alpha=0.6, label=NAMES[algo] if run is runs[0] else None)  # fmt: skip
        for row, xlabel in enumerate(("env steps", "wall-clock (minutes)")):
            axes[row][column].axhline(randoms[task], color="grey", linestyle=":", label="random")
            axes[row][column].set(title=task, xlabel=xlabel)
            axes[row][column].grid(alpha=0.3)
    for row in range(2):
        axes[row][0].set_ylabel("evaluation return")
    axes[0][-1].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# -- command line ------------------------------------------------------------------------------------------------


def main() -> None:
    parser = common.pool_parser(__doc__)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, metavar="TASK")
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--steps-scale", type=float, default=1.0, help="scale every task's env-step budget")
    args = common.parse_pool_arguments(parser, run)
    if args is None:  # a worker process, its job done
        return
    if not 0 < args.steps_scale <= 10:
        parser.error(f"--steps-scale must be in (0, 10], got {args.steps_scale}")
    minutes = sum(MINUTES[task] * args.steps_scale for task in args.tasks) * len(args.algos) * len(args.seeds)
    grid = common.grid((args.tasks, "task"), (args.algos, "algorithm"), (args.seeds, "seed"))
    print(f"Estimated wall-clock: {grid}, {args.jobs} at a time: about {common.duration(minutes / args.jobs)}, less "
          "the runs kept from earlier invocations.", flush=True)  # fmt: skip
    rows = run_all(args)
    randoms = {task: common.random_policy_evaluation(task, EVAL_EPISODES, args.seeds[0])["mean_return"]
               for task in args.tasks}  # fmt: skip
    write_results(rows, randoms, args)


if __name__ == "__main__":
    main()
