"""How the benchmarks that report returns summarise their seeds (benchmarks/common.py) and reach their verdicts."""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import sys
import types

import gymnasium as gym
import numpy as np
import pytest
import torch

import rl_suite

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the scripts import their shared module as `common`, as when run from there

import common  # noqa: E402
import dmc_learning  # noqa: E402
import legged_training  # noqa: E402
import mujoco_suite  # noqa: E402
import offpolicy  # noqa: E402
import onpolicy_variants  # noqa: E402
import pql_vs  # noqa: E402
import sim2sim  # noqa: E402

# -- statistics over seeds -------------------------------------------------------------------------------------------


def test_over_seeds_mean_sample_std_and_best_seed():
    stats = common.over_seeds({0: 1.0, 1: 3.0, 2: 2.0})
    # mean (1 + 3 + 2) / 3 = 2; sample variance ((1-2)^2 + (3-2)^2 + 0) / (3 - 1) = 1
    assert (stats.mean, stats.std, stats.best, stats.best_seed, stats.n) == (2.0, 1.0, 3.0, 1, 3)
    assert common.mean_std(stats, "{:.1f}") == "2.0 ± 1.0"
    assert common.best_of(stats, "{:.1f}") == "3.0 (seed 1)"


def test_over_seeds_ties_go_to_the_first_seed_and_one_seed_has_no_std():
    assert common.over_seeds({4: 7.0, 2: 7.0}).best_seed == 4
    single = common.over_seeds({5: 6708.0})
    assert math.isnan(single.std)
    assert common.mean_std(single) == "6,708 (1 seed)"


def test_over_seeds_refuses_no_values():
    with pytest.raises(ValueError, match="at least one seed"):
        common.over_seeds({})


def test_win_rates_format_as_percentages():
    stats = common.over_seeds({0: 0.9, 1: 1.0})
    assert common.mean_std(stats, "{:.0%}") == "95% ± 7%"
    assert common.best_of(stats, "{:.0%}") == "100% (seed 1)"


# -- command line ----------------------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    common.add_seed_arguments(parser)
    args = parser.parse_args(argv)
    common.check_seed_arguments(parser, args)
    return args


def test_three_seeds_and_the_results_folder_by_default():
    args = parse([])
    assert args.seeds == [0, 1, 2]
    assert args.results_dir == BENCHMARKS / "results"
    assert parse(["--results-dir", "/tmp/x"]).results_dir == pathlib.Path("/tmp/x")


@pytest.mark.parametrize(
    "argv, message",
    [(["--seeds", "0", "1", "0"], "--seeds repeats a seed (0 1 0)"), (["--seeds", "-1", "2"], "non-negative")],
)
def test_bad_seeds_are_refused_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse(argv)
    assert message in capsys.readouterr().err


def test_too_few_seeds_run_with_a_note_and_the_table_says_so(capsys):
    assert parse(["--seeds", "3"]).seeds == [3]
    assert "a published number needs at least 3" in capsys.readouterr().err
    assert "smoke test" in common.seeds_line([3])
    assert "smoke test" not in common.seeds_line([0, 1, 2])
    assert common.seeds_line([0, 1, 2]).startswith("Seeds: 0, 1, 2 (3 runs per row")


def test_a_stopped_suite_resumes_with_the_runs_it_finished_and_reruns_only_the_rest(tmp_path, monkeypatch):
    parser = argparse.ArgumentParser()
    common.add_seed_arguments(parser)
    common.add_resume_arguments(parser)
    args = parser.parse_args(["--runs-dir", str(tmp_path), "--seeds", "0", "1"])
    args.tasks, args.algos, args.libs, args.minutes, args.suffix = ["HalfCheetah-v5"], ["ppo"], ["ours", "sb3"], 15, ""
    launched = []

    class FakeRun:  # a worker process that writes its result and exits, or fails on seed 1 the first time
        def __init__(self, lib, algo, task, seed, minutes, core, out):
            launched.append((lib, seed))
            self.returncode = 1 if seed == 1 and len(launched) <= 4 else 0
            out.write_text(json.dumps(dict(lib=lib, algo=algo, task=task, seed=seed, final_return=100.0 + seed,
                                           env_steps=10, curve=[])))  # fmt: skip

        def wait(self):
            return self.returncode

    monkeypatch.setattr(mujoco_suite, "launch", FakeRun)
    with pytest.raises(SystemExit, match="a ppo run on HalfCheetah-v5 failed"):
        mujoco_suite.run_all(args)  # seed 0 finishes, seed 1 fails: seed 0's runs are kept
    assert launched == [("ours", 0), ("sb3", 0), ("ours", 1), ("sb3", 1)]
    rows = mujoco_suite.run_all(args)
    assert launched[4:] == [("ours", 1), ("sb3", 1)]  # only the missing round runs again
    assert [(r["lib"], r["seed"], r["final_return"]) for r in rows] == [
        ("ours", 0, 100.0), ("sb3", 0, 100.0), ("ours", 1, 101.0), ("sb3", 1, 101.0)
    ]  # fmt: skip
    assert common.commits_line(rows).startswith("Code: commit ") and "Runs made on" not in common.commits_line(rows)
    assert {row["machine"] for row in rows} == {common.cpu_name()}
    elsewhere = [*rows, {**rows[0], "machine": "Some Other CPU, 8 cores"}]
    assert common.commits_line(elsewhere).endswith(
        f"Runs made on: {common.cpu_name()}; Some Other CPU, 8 cores (wall-clock is comparable only between runs on "
        "one machine)."
    )
    # a different budget is a different job; --fresh ignores what is kept
    args.minutes = 5
    mujoco_suite.run_all(args)
    assert len(launched) == 10
    args.minutes, args.fresh = 15, True
    mujoco_suite.run_all(args)
    assert len(launched) == 14


TOY_WORKER = """
import sys
sys.path.insert(0, {benchmarks!r})
import common

def run(job):
    if job["seed"] == 13:
        raise SystemExit(3)
    return {{"square": job["seed"] ** 2, "marker": {marker!r}}}

common.run_worker(sys.argv[2:4], run)
"""


def test_pinned_pool_runs_each_missing_job_in_its_own_process_and_keeps_the_results(tmp_path, capsys):
    args = argparse.Namespace(runs_dir=tmp_path / "runs", fresh=False)
    script = tmp_path / "toy.py"
    script.write_text(TOY_WORKER.format(benchmarks=str(BENCHMARKS), marker="first"))
    jobs = [dict(seed=seed, settings={"lr": 1}) for seed in (1, 2, 13, 3)]
    with pytest.raises(SystemExit, match='"seed": 13.*exit 3'):
        common.run_pinned(common.FinishedRuns(args, "toy"), jobs, str(script), 1, lambda r: f"seed {r['seed']} done")
    kept = sorted(path.name.split("-")[0] for path in (tmp_path / "runs" / "toy").glob("*.json"))
    assert kept == ["1", "2"]  # the runs before the failure are kept, and it started no new one
    assert "seed 1 done" in capsys.readouterr().out
    script.write_text(TOY_WORKER.format(benchmarks=str(BENCHMARKS), marker="second"))
    results = common.run_pinned(common.FinishedRuns(args, "toy"), jobs[:2] + jobs[3:], str(script), 2, str)
    assert [r["square"] for r in results] == [1, 4, 9]
    assert results[0]["marker"] == "first" and results[2]["marker"] == "second"  # kept runs did not run again
    assert all(r["seconds"] > 0 and "settings" not in r and r["commit"] for r in results)


def test_wall_clock_estimate():
    line = common.wall_clock_estimate(6, 15, "1 task x 2 algorithms x 3 seeds", "start-up")
    assert (
        line == "Estimated wall-clock: 6 runs (1 task x 2 algorithms x 3 seeds) x 15 min = 1 h 30 min, plus start-up."
    )
    assert common.duration(18 * 15) == "4 h 30 min"
    assert common.duration(0.4) == "24 s"
    assert common.count(["ours", "sb3"], "library") == "2 libraries"
    assert common.count([0], "seed") == "1 seed"


# -- what a policy that learned nothing gets -------------------------------------------------------------------------


def test_random_agent_draws_uniform_actions_within_the_bounds():
    env = rl_suite.make("Pendulum-v1", num_envs=4096, seed=0)
    actions, extras = common.UniformRandomAgent(env, seed=0).act(env.reset(), deterministic=True)
    assert extras == {} and actions.shape == (4096, 1)
    assert actions.min() >= -2.0 and actions.max() <= 2.0
    # uniform on [-2, 2]: mean 0, variance 16 / 12
    assert abs(actions.mean().item()) < 0.1 and abs(actions.var().item() - 16 / 12) < 0.1


def test_random_agent_refuses_an_unbounded_box():
    env = types.SimpleNamespace(device=torch.device("cpu"), action_space=gym.spaces.Box(-np.inf, np.inf, (2,)))
    with pytest.raises(ValueError, match="needs a bounded action space"):
        common.UniformRandomAgent(env, seed=0)


def test_random_policy_evaluation_is_far_below_a_trained_one():
    # A trained Pendulum policy gets about -200; uniformly random torques about -1,200.
    result = common.random_policy_evaluation("Pendulum-v1", episodes=10, seed=0)
    assert result["episodes"] == 10
    assert -1700 < result["mean_return"] < -800


def test_random_multiagent_actions_are_available_ones_and_win_nothing():
    env = rl_suite.make("Skirmish-3m-v0", num_envs=64, seed=0)
    env.reset(seed=0)
    agent = common.UniformRandomAgent(env, seed=0)
    actions, extras, memory = agent.act({"avail_actions": env.avail_actions}, agent.initial_memory(64))
    assert env.avail_actions.gather(2, actions.unsqueeze(-1)).all()
    assert len(actions.unique()) > 1
    assert common.random_policy_evaluation("Skirmish-3m-v0", episodes=50, seed=0)["win_rate"] < 0.1


# -- the scripts' verdicts -------------------------------------------------------------------------------------------


def test_mujoco_suite_goal_compares_the_best_mean_of_each_library():
    final = {("ours", "ppo"): 6000.0, ("ours", "sac"): 2500.0, ("sb3", "ppo"): 5000.0, ("sb3", "sac"): 2000.0}
    line = mujoco_suite.goal_line("HalfCheetah-v5", final)
    assert "(PPO, 6,000)" in line and "1.20x" in line and line.endswith("goal (at least 1.5x): missed.")
    final["ours", "sac"] = 7600.0
    assert mujoco_suite.goal_line("HalfCheetah-v5", final).endswith("1.52x; goal (at least 1.5x): met.")
    final["sb3", "ppo"] = final["sb3", "sac"] = -5.0
    assert "no ratio (SB3's mean is not positive)" in mujoco_suite.goal_line("HalfCheetah-v5", final)


def curve(*points: tuple[float, float]) -> list[dict]:
    return [{"wall_time_s": t, "mean_return": r} for t, r in points]


def test_pql_goal_on_one_seed():
    ppo = {"label": "PPO", "peak": 4000.0, "curve": curve((60, 1000), (200, 4000))}
    sac = {"label": "SAC", "peak": 900.0, "curve": curve((60, 900))}
    sooner = {"peak": 4100.0, "curve": curve((60, 2000), (150, 4100))}
    met, how = pql_vs.goal_on_seed(sooner, [ppo, sac], minutes=4)
    assert met and how.endswith("reached it after 150 s against PPO's 200 s (0.75x the time): met")
    never = {"peak": 3000.0, "curve": curve((60, 2000), (240, 3000))}
    met, how = pql_vs.goal_on_seed(never, [ppo, sac], minutes=4)
    assert not met and how.endswith("did not reach it in 4 minutes (peak 3000): missed")


def offpolicy_row(task: str, label: str, seed: int, *points: tuple[float, float]) -> dict:
    curve = [{"wall_time_s": t, "score": v} for t, v in points]
    return {"task": task, "label": label, "seed": seed, "curve": curve, "final": curve[-1]["score"]}


def test_offpolicy_goals_judge_sooner_on_each_seed_and_lower_errors_on_the_quadruped():
    seeds = argparse.Namespace(seeds=[0, 1])
    rows = []
    for seed in (0, 1):
        # Humanoid-v5: PPO ends at 5000, first reached at 800 s; FlashSAC gets there at 500 s (seed 0), 1000 s (seed 1).
        rows.append(offpolicy_row("Humanoid-v5", "PPO", seed, (300, 2000), (800, 5000), (900, 5000)))
        late = (1000, 5100) if seed else (500, 5200)
        rows.append(offpolicy_row("Humanoid-v5", "FlashSAC", seed, (100, 3000), late))
        # The quadruped: lower is better; FlashSAC's error falls below PPO's final 0.2 sooner on both seeds.
        rows.append(offpolicy_row("QuadrupedVelocity-Flat-v0", "PPO", seed, (600, 0.5), (3000, 0.2), (3600, 0.2)))
        rows.append(offpolicy_row("QuadrupedVelocity-Flat-v0", "FlashSAC", seed, (600, 0.3), (1200, 0.15)))
    lines = offpolicy.goals(rows, seeds)
    assert lines[0].startswith("- FlashSAC reaches PPO's final score sooner on Humanoid-v5: missed (on 1 of 2 seeds")
    assert "seed 1: PPO's final 5,000 first reached by PPO after 800 s, by FlashSAC after 1000 s" in lines[0]
    assert lines[1].startswith("- FlashSAC reaches PPO's final score sooner on QuadrupedVelocity-Flat-v0: met (on 2")
    assert lines[2] == "- FlashSAC beats SAC on all three MuJoCo tasks: not run on every task; open (no task run)."


def test_offpolicy_report_gives_the_quadrupeds_random_and_standing_play_over_the_seeds(tmp_path):
    quadruped = "QuadrupedVelocity-Flat-v0"
    rows = []
    for seed, error in ((0, 0.40), (1, 0.50)):
        row = offpolicy_row(quadruped, "FlashSAC", seed, (3600, error))
        row["curve"][0]["env_steps"] = 1000
        rows.append({**row, "num_envs": 64, "env_steps": 1000, "best": error})
    args = argparse.Namespace(seeds=[0, 1], tasks=[quadruped], trainings=["FlashSAC"], results_dir=tmp_path)
    fixed_plays = {quadruped: {"random": {0: 0.660, 1: 0.640}, "standing": {0: 0.605, 1: 0.565}}}
    offpolicy.write_results(rows, {}, fixed_plays, args)
    report = (tmp_path / "offpolicy.md").read_text()
    assert f"| {quadruped} | FlashSAC | 64 | 1,000 | 0.450 ± 0.071 | 0.400 (seed 0) | 0.450 ± 0.071 |" in report
    assert f"| {quadruped} | random (N(0, 1) actions) | | | 0.650 ± 0.014 | 0.640 (seed 1) | |" in report
    # Lower is better: the best seed is the lower error, seed 1's; no MuJoCo-style "uniformly random" row.
    assert f"| {quadruped} | standing (zero action) | | | 0.585 ± 0.028 | 0.565 (seed 1) | |" in report
    assert "uniformly random" not in report


def test_offpolicy_goals_of_a_suite_run_in_parts_say_whether_the_tasks_run_decide_them():
    rows = []
    finals = {"HalfCheetah-v5": (4500, 3500, 5200, 4200), "Ant-v5": (400, 2100, 860, 870)}
    for task, scores in finals.items():
        for label, score in zip(("SAC", "FlashSAC", "SAC + DSAC", "SAC + annealed Q"), scores, strict=True):
            rows.append(offpolicy_row(task, label, 0, (900, score)))
    lines = offpolicy.goals(rows, argparse.Namespace(seeds=[0]))
    assert lines[2] == (
        "- FlashSAC beats SAC on all three MuJoCo tasks: not run on every task; already missed (1 of the 2 tasks run: "
        "HalfCheetah-v5 3,500 vs 4,500, Ant-v5 2,100 vs 400)."
    )
    assert lines[3].startswith(
        "- SAC + DSAC improves SAC on at least two of the three: not run on every task; already met"
    )
    assert lines[4].startswith(
        "- SAC + annealed Q improves SAC on at least two of the three: not run on every task; open"
    )


def test_offpolicy_options_that_do_not_improve_sac_are_reported_as_not_helping():
    rows = []
    for task, sac, dsac in (("HalfCheetah-v5", 3000, 3500), ("Ant-v5", 1000, 900), ("Humanoid-v5", 500, 450)):
        rows.append(offpolicy_row(task, "SAC", 0, (900, sac)))
        rows.append(offpolicy_row(task, "SAC + DSAC", 0, (900, dsac)))
    lines = offpolicy.goals(rows, argparse.Namespace(seeds=[0]))
    dsac = next(line for line in lines if line.startswith("- SAC + DSAC"))
    assert dsac == (
        "- SAC + DSAC improves SAC on at least two of the three: missed, not helping here (1 of 3: HalfCheetah-v5 "
        "3,500 vs 3,000, Ant-v5 900 vs 1,000, Humanoid-v5 450 vs 500)."
    )


def test_offpolicy_trains_on_shipped_settings_with_one_set_of_task_keywords_per_task():
    """Every training of the suite has a settings section for every task (not the agent's bare defaults), and on each
    task all trainings make the same environment (the quadruped's reward keywords are PPO's), so scores compare."""
    assert offpolicy.unshipped(list(offpolicy.TASK_MINUTES), list(offpolicy.TRAININGS)) == []
    for task in offpolicy.TASK_MINUTES:
        keywords = {label: common.shipped_settings(algo, task).get("env_kwargs") for label, (algo, _) in
                    offpolicy.TRAININGS.items()}  # fmt: skip
        assert all(k == keywords["PPO"] for k in keywords.values()), (task, keywords)
    assert offpolicy.unshipped(["CartPole-v1"], ["PPO", "FlashSAC"]) == [
        "FlashSAC on CartPole-v1 (agents/hyperparams/flashsac.yaml has no CartPole-v1 section)"
    ]


def test_offpolicy_random_play_on_the_quadruped_is_scored_by_the_tracking_error():
    # N(0, 1) actions: an untrained Gaussian policy's, on the task as PPO's settings make it
    error = offpolicy.fixed_play_scores("QuadrupedVelocity-Flat-v0", "random", [0])[0]
    settings = common.shipped_settings("ppo", "QuadrupedVelocity-Flat-v0")
    keywords = settings.get("env_kwargs", {})  # none: the task's defaults are PPO's recipe
    expected = common.fixed_policy_evaluation("QuadrupedVelocity-Flat-v0", "random", 0, 32, keywords)
    assert error == expected["tracking_error_lin"] and 0.3 < error < 2.0


def sim2sim_row(training: str, seed: int, mujoco: float, pybullet: float, task: str = "HalfCheetah-v5") -> dict:
    return {
        "task": task,
        "training": training,
        "seed": seed,
        "train_env_steps": 1000,
        "pybullet_robot": "default",
        "mujoco_return": mujoco,
        "pybullet_return": pybullet,
        "fraction_kept": pybullet / mujoco if mujoco > 0 else float("nan"),
        "control_loop_faults": 0,
    }


def test_sim2sim_goal_is_judged_on_the_mean_kept_over_seeds():
    rows = [sim2sim_row("plain", 0, 4000, 3600), sim2sim_row("plain", 1, 4000, 2400)]  # kept 0.90 and 0.60
    rows += [sim2sim_row(sim2sim.RANDOM, 0, -300, -280)]
    rows += [sim2sim_row("plain", 0, 2000, 600, task="Ant-v5")]
    plain, random_row, ant = sim2sim.summary_lines(rows)[2:]
    assert "| 4,000 ± 0 | 4,000 (seed 0) | 3,000 ± 849 | 3,600 (seed 0) | 0.75 ± 0.21 | met (>= 0.70) |" in plain
    assert random_row.endswith("| -300 (1 seed) | -300 (seed 0) | -280 (1 seed) | -280 (seed 0) | - | - | 0 |")
    assert "| 0.30 (1 seed) | - |" in ant  # no goal on Ant
    rows[0]["pybullet_return"], rows[0]["fraction_kept"] = 2800, 0.70  # mean kept 0.65
    assert "missed (>= 0.70)" in sim2sim.summary_lines(rows)[2]


def test_sim2sim_append_reads_the_seed_of_rows_written_before_seeds(tmp_path):
    path = tmp_path / "sim2sim.csv"
    header = "task,training,train_minutes,train_env_steps,pybullet_robot,mujoco_return,mujoco_std,pybullet_return,"
    header += "pybullet_std,fraction_kept,control_loop_faults,command\n"
    old = "Ant-v5,plain,4.0,212992,default,2597.6,493.0,829.3,307.1,0.319,0,python benchmarks/sim2sim.py --seed 7\n"
    path.write_text(header + old + old.replace("Ant-v5", "HalfCheetah-v5"))
    kept = sim2sim.read_kept_rows(path, measured={("HalfCheetah-v5", "plain")})
    assert len(kept) == 1 and kept[0]["seed"] == 7 and kept[0]["mujoco_return"] == 2597.6
    path.write_text(header + old.replace("--seed 7", ""))
    with pytest.raises(ValueError, match=r"a row of Ant-v5 \(plain\) names no seed"):
        sim2sim.read_kept_rows(path, measured=set())


def test_multiagent_table_gives_mean_std_best_seed_and_random_play(tmp_path):
    import multiagent

    def run(method: str, seed: int, returns: list[float]) -> dict:
        curve = [
            {"env_steps": 1000 * (i + 1), "wall_time_s": 10.0 * (i + 1), "mean_return": r}
            for i, r in enumerate(returns)
        ]
        return {"task": "Spread-v0", "method": method, "seed": seed, "env_steps": 1000 * len(returns), "curve": curve}

    rows = [run("MAPPO", 0, [-30.0, -21.0]), run("MAPPO", 1, [-25.0, -19.0]), run("MAPPO", 2, [-18.0, -20.0])]
    args = argparse.Namespace(minutes=3.0, seeds=[0, 1, 2], tasks=["Spread-v0"], methods=["MAPPO"])
    multiagent.write_training(rows, args, tmp_path)
    table = (tmp_path / "multiagent_training.md").read_text()
    # final returns -21, -19, -20: mean -20, sample std 1; the best final is seed 1's; peaks -21, -19, -18
    assert "| Spread-v0 | MAPPO | 2,000 | return -20.00 ± 1.00 | -19.00 (seed 1) | -19.33 ± 1.53 | - |" in table
    random_play = re.search(r"- Spread-v0: random play, return (-?[\d.]+)", table)
    assert random_play is not None and -35 < float(random_play.group(1)) < -20  # about -26: trained play reaches -15
    assert "| Spread-v0 | MAPPO | 2 | 2,000 | return -20.00 | -18.00 | - | - |" in table
    assert (tmp_path / "multiagent_training.csv").read_text().count("Spread-v0,MAPPO,") == 6


def test_onpolicy_variants_judge_against_ppo_by_the_larger_spread_of_seeds():
    ppo = common.over_seeds({0: 5.0, 1: 6.0, 2: 7.0})  # 6 ± 1
    assert onpolicy_variants.against_ppo(common.over_seeds({0: 10.0, 1: 12.0, 2: 14.0}), ppo) == "better"  # 12 ± 2
    assert onpolicy_variants.against_ppo(common.over_seeds({0: 2.0, 1: 3.0, 2: 4.0}), ppo) == "worse"  # 3 ± 1
    wide = common.over_seeds({0: 4.0, 1: 7.0, 2: 10.0})  # 7 ± 3
    assert onpolicy_variants.against_ppo(wide, ppo) == "within the seeds' spread"
    falls = common.over_seeds({0: 0.1, 1: 0.1, 2: 0.1})
    assert onpolicy_variants.against_ppo(falls, ppo, higher_is_better=False) == "better"  # a smaller fall is better
    two = common.over_seeds({0: 10.0, 1: 12.0})
    assert onpolicy_variants.against_ppo(two, ppo) == "no verdict (2 seeds)"


def test_onpolicy_variants_read_curves_at_a_wall_clock_and_find_the_largest_fall():
    curve = [{"wall_time_s": t, "mean_return": r} for t, r in ((10, 0.0), (20, 50.0), (30, 20.0), (40, 40.0), (50, 10))]
    run = {"task": "T", "algo": "ppo", "curve": curve}
    assert onpolicy_variants.return_at(run, 25) == 50.0
    assert onpolicy_variants.return_at(run, 5) == 0.0  # nothing within: the first evaluation
    assert onpolicy_variants.largest_fall(run, 100.0) == pytest.approx(0.3)  # 40 -> 10
    rising = {"curve": [{"wall_time_s": 1, "mean_return": r} for r in (1.0, 2.0, 3.0)]}
    assert onpolicy_variants.largest_fall(rising, 10.0) == 0.0
    slow = {"task": "T", "algo": "props", "curve": [{"wall_time_s": 90, "mean_return": 0.0}]}
    assert onpolicy_variants.equal_time([run, slow], "T", ["ppo", "props"]) == 50


@pytest.mark.parametrize("algo", ["fixpo", "props"])
def test_onpolicy_variants_measure_each_policy_update_kl(algo):
    # CartPole's shipped rollout is 8 envs x 32 steps; PROPS collects 8 steps at a time and updates its target every 4
    result = onpolicy_variants.run(dict(task="CartPole-v1", algo=algo, seed=0, steps=512))
    assert result["env_steps"] == 512 and result["updates"] == 2  # the target's updates only, for PROPS
    assert 0 < result["update_kl_max"] <= (result["kl_bound"] if algo == "fixpo" else math.inf)
    assert result["updates_over_bound"] == 0 and result["curve"][-1]["env_steps"] == 512
    if algo == "fixpo":
        assert 0 <= result["fixup_share"] < 1 and result["fixup_capped"] == 0


def test_the_dmc_goal_waits_for_tasks_without_sac_runs_and_a_single_miss_decides_it():
    seeds = [0, 1, 2]
    assert dmc_learning.overall_sac_verdict(3, 0, 5, seeds) == (
        "not decided yet: met on 3 of the 3 tasks with SAC runs, 2 to run."
    )
    assert dmc_learning.overall_sac_verdict(2, 1, 5, seeds) == "missed, 2 of 5 tasks."
    assert dmc_learning.overall_sac_verdict(5, 0, 5, seeds) == "met, 5 of 5 tasks."
    assert dmc_learning.overall_sac_verdict(0, 0, 2, [0]) == "no verdict with 1 seed."


@pytest.mark.parametrize("algo", dmc_learning.ALGOS)
def test_every_dmc_learning_algorithm_ships_settings_for_each_task_at_the_benchmark_budget(algo):
    """Without a task entry an algorithm would train with its default section (FlashSAC's: one environment, 1M steps,
    no action repeat) and the table would compare unlike runs."""
    for task in dmc_learning.TASKS:
        shipped = common.shipped_settings(algo, dmc_learning.env_id(task))
        assert dmc_learning.action_repeat(shipped) == 2, (algo, task)
        assert shipped["total_steps"] * 2 == dmc_learning.DMC_STEPS, (algo, task)
    assert dmc_learning.names(dmc_learning.ALGOS) == "SAC, PPO and FlashSAC"
    assert dmc_learning.names(["flashsac"]) == "FlashSAC"


def legged_summary(*evaluations: tuple[float, float, float]) -> dict:
    """A legged run's summary from its evaluations ``(minute, tracking error, falls)``; the last is the final one."""
    rows = [
        {
            "wall_time_s": 60 * minute,
            "env_steps": int(minute * 500_000),
            "tracking_error_lin": error,
            "fell": falls,
            "tracking_error_yaw": 0.1,
            "base_height": 0.3,
            "joint_limit_excess": 0.0,
            "actions_beyond_bounds": 0.0,
        }
        for minute, error, falls in evaluations
    ]
    return {"evaluations": rows, "final_eval": rows[-1], "env_steps": rows[-1]["env_steps"]}


def test_legged_training_holds_every_seed_to_the_goal_and_gives_each_seeds_first_minutes(tmp_path):
    """Every seed must track within 0.20 m/s with at most 5% falls by minute 30, and its final policy still on the
    final check of 512 episodes: a seed that got there only with falls, only after 30 minutes, or lost it again by
    the check misses; 2 falls in the last evaluation's 32 episodes do not decide it, the check does."""
    runs = {
        0: legged_summary((10, 0.40, 0.0), (20, 0.24, 0.0), (30, 0.18, 0.0)),  # 0.25 by 20 min, 0.20 by 30
        1: legged_summary((10, 0.19, 0.09), (20, 0.19, 0.03), (30, 0.15, 2 / 32)),  # 0.19 with 9% falls does not count
        2: legged_summary((10, 0.18, 0.0), (30, 0.30, 0.0)),  # reached, then lost
        3: legged_summary((10, 0.18, 0.0), (30, 0.15, 0.0)),  # reached, but the check finds 6% falls
    }
    checks = {
        0: {"tracking_error_lin": 0.17, "tracking_error_yaw": 0.1, "fell": 0.0},
        1: {"tracking_error_lin": 0.16, "tracking_error_yaw": 0.1, "fell": 0.02},
        2: {"tracking_error_lin": 0.31, "tracking_error_yaw": 0.1, "fell": 0.0},
        3: {"tracking_error_lin": 0.15, "tracking_error_yaw": 0.1, "fell": 0.06},
    }
    assert [legged_training.seed_meets_goal(runs[s], checks[s]) for s in runs] == [True, True, False, False]
    assert legged_training.first_minutes(runs[1]["evaluations"], 0.20) == 20
    assert legged_training.first_minutes(runs[0]["evaluations"], 0.25) == 20
    baselines = {
        kind: {"tracking_error_lin": 0.6, "tracking_error_yaw": 0.5, "fell": 0.0} for kind in common.FIXED_PLAYS
    }
    args = argparse.Namespace(results_dir=tmp_path, env="QuadrupedVelocity-Flat-v0", minutes=30.0)
    legged_training.write(runs, checks, baselines, args)
    report = (tmp_path / "legged_training.md").read_text()
    assert "| 0 | 0.180 | 0.0% | 0.170 | 0.0% | 0.300 | 0.000 | 20 min | 30 min |" in report
    assert "| 1 | 0.150 | 6.2% | 0.160 | 2.0% | 0.300 | 0.000 | 20 min | 20 min |" in report
    assert "| 2 | 0.300 | 0.0% | 0.310 | 0.0% | 0.300 | 0.000 | 10 min | 10 min |" in report
    assert "still does on the final check of 512 episodes): **missed**, 2 of 4 seeds." in report
    assert "| PPO, final check of 512 episodes (mean ± std) | 0.198 ± 0.075 |" in report
    assert "| standing (zero action) | 0.600 |" in report  # what a policy that learned nothing scores


def test_the_final_check_evaluates_the_exported_file_as_the_runner_evaluates_the_agent(tmp_path, monkeypatch):
    from rl_suite.agents.ppo import PPO
    from rl_suite.runner import evaluate

    env_id, env_kwargs, episodes = "QuadrupedVelocity-Flat-v0", {"episode_length_s": 1.0}, 6
    monkeypatch.setattr(legged_training, "FINAL_CHECK_EPISODES", episodes)
    with rl_suite.make(env_id, num_envs=2, seed=0, **env_kwargs) as env:
        torch.manual_seed(0)
        agent = PPO.for_env(env, hidden=(16, 16), init_log_std=-1.0)
    legged_training.export(env_id, agent, 3, tmp_path, env_kwargs)
    check = legged_training.final_check(env_id, 3, tmp_path, env_kwargs)
    check_seed = 3 + legged_training.FINAL_CHECK_SEED_OFFSET
    with rl_suite.make(env_id, num_envs=episodes, seed=check_seed, **env_kwargs) as env:
        reference = evaluate(agent, env, seed=check_seed)
    assert check["episodes"] == episodes and check["seed"] == check_seed
    for metric in ("mean_return", "tracking_error_lin", "tracking_error_yaw", "fell"):
        assert check[metric] == pytest.approx(reference[metric], rel=1e-4, abs=1e-6), metric

    # Kept beside the file and reused while the file is the same; a new file is checked again.
    path = tmp_path / "legged_policies" / "quadruped_flat_seed3.onnx"
    assert json.loads(path.with_suffix(".final_check.json").read_text()) == check

    def not_again(*args):
        raise AssertionError("checked again")

    monkeypatch.setattr(common, "exported_policy_evaluation", not_again)
    assert legged_training.final_check(env_id, 3, tmp_path, env_kwargs) == check
    with torch.no_grad():
        next(agent.actor.net.parameters()).add_(0.1)  # another policy in the same file
    legged_training.export(env_id, agent, 3, tmp_path, env_kwargs)
    with pytest.raises(AssertionError, match="checked again"):
        legged_training.final_check(env_id, 3, tmp_path, env_kwargs)
    with pytest.raises(SystemExit, match="seed 4's final policy is missing"):
        legged_training.final_check(env_id, 4, tmp_path, env_kwargs)
