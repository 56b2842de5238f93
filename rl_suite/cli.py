"""The ``rl-suite`` command line (also ``python -m rl_suite``)."""

from __future__ import annotations

import argparse
import inspect
import json
import pathlib
import platform
import sys

import torch
import yaml


def _cmd_envs(args) -> int:
    from rl_suite.registry import registered, summary

    print(f"{'id':<28} {'observation':<13} {'action':<26} {'steps':>5}  entry point")
    for env_spec in registered():
        shown = summary(env_spec)
        if "unavailable" in shown:  # an optional extra is missing
            row = f"{env_spec.id:<28} (unavailable: {shown['unavailable']})"
        else:
            row = f"{env_spec.id:<28} {shown['observation']:<13} {shown['action']:<26} {shown['time_limit']:>5}"
        print(f"{row}  {env_spec.entry_point}")
    print("\nAny gymnasium id also runs through the adapter as 'gym:<id>', e.g. 'gym:LunarLander-v3'.")
    return 0


def _cmd_throughput(args) -> int:
    from rl_suite.registry import make, registered
    from rl_suite.throughput import env_steps_per_second

    env_ids = args.env_ids or [s.id for s in registered()]
    print(
        f"env-steps/s on {args.device} ({platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads), random actions, {args.seconds:g} s per figure"
    )
    print(f"{'env':<28}" + "".join(f"{f'N={n}':>14}" for n in args.num_envs))
    for env_id in env_ids:
        rates = []
        for n in args.num_envs:
            env = make(env_id, num_envs=n, device=args.device, seed=0)
            rates.append(env_steps_per_second(env, seconds=args.seconds))
            env.close()
        print(f"{env_id:<28}" + "".join(f"{rate:>14,.0f}" for rate in rates), flush=True)
    return 0


def _cmd_train(args) -> int:
    """Train; under torchrun every rank runs this, and rank 0 alone prints (see rl_suite/distributed.py)."""
    from rl_suite import distributed
    from rl_suite.config import ConfigError, parse_assignments
    from rl_suite.registry import load_algorithm
    from rl_suite.settings import check_new_run, new_run_settings, resumed_settings

    algo = load_algorithm(args.algo)
    flags = {
        "num_envs": args.num_envs,
        "seed": args.seed,
        "device": args.device,
        "total_steps": args.total_steps,
        "time_budget_s": args.time_budget,
        "stop_at_return": args.stop_at_return,
        "stop_at_win_rate": args.stop_at_win_rate,
        "compile": args.compile,
        "compile_exact": args.compile_exact,
        "loggers": args.logger,
    }
    flags = {key: value for key, value in flags.items() if value is not None}
    overrides = {**flags, **parse_assignments(args.set)}
    if args.resume:
        if args.profile is not None:
            raise ConfigError("--profile chooses a new run's settings; a resumed run keeps those its config.yaml holds")
        run_dir = pathlib.Path(args.resume)
        run_values, agent_values = resumed_settings(algo, args.env_id, run_dir, overrides)
    else:
        run_dir = pathlib.Path(args.run_dir) if args.run_dir else None
        run_values, agent_values = new_run_settings(algo, args.env_id, overrides, args.profile)
    config = check_new_run(algo, run_values, agent_values)  # every setting in range, before anything is built
    # Under torchrun: join the process group, train on cuda:LOCAL_RANK, and seed each rank differently.
    device = distributed.init(config.device, config.distributed_timeout_s)
    try:
        code = _train(algo, config, agent_values, device, run_dir, bool(args.resume))
    except BaseException:
        distributed.shutdown(finished=False)
        raise
    distributed.shutdown()
    return code


def _train(algo, config, agent_values: dict, device, run_dir, resume: bool) -> int:
    from rl_suite import distributed
    from rl_suite.config import to_plain
    from rl_suite.registry import make
    from rl_suite.rng import seed_everything
    from rl_suite.runner import Runner

    seed = distributed.rank_seed(config.seed)
    seed_everything(seed)
    env = make(config.env_id, num_envs=config.num_envs, device=device, seed=seed, **config.env_kwargs)
    try:
        agent = algo.for_env(env, algo.Config(**agent_values), device=device)
    except ValueError as error:
        raise ValueError(f"{algo.name} cannot train on {config.env_id}: {error}") from None
    runner = Runner(agent, env, config, run_dir=run_dir, resume=resume)
    if not distributed.is_main():  # ranks other than 0 train without printing
        runner.run()
        return 0
    world = distributed.world_size()
    print(
        f"training {algo.name} on {config.env_id} with {config.num_envs} envs on {config.device}"
        + (f" on each of {world} ranks" if world > 1 else "")
        + f"; run directory {runner.run_dir}"
    )
    if not resume:
        print(yaml.safe_dump({"agent": to_plain(agent.config)}, sort_keys=False, default_flow_style=None).rstrip())
    summary = runner.run()
    final = summary["final_eval"]
    line = f"{summary['env_steps']:,} env steps in {summary['wall_time_s']:.1f} s"
    if final is not None:
        line += (
            f"; evaluation over {final['episodes']} episodes: {final['mean_return']:.1f} +- {final['std_return']:.1f}"
        )
        if "win_rate" in final:
            line += f", win rate {final['win_rate']:.0%}"
    if "threshold" in summary:
        reached = summary["threshold"]
        target = " and ".join(f"{reached[key]}" for key in ("return", "win_rate") if key in reached)
        line += (
            f"; reached {target} after {reached['env_steps']:,} steps and {reached['wall_time_s']:.1f} s"
            if reached["reached"]
            else f"; did not reach {target}"
        )
    print(line)
    return 0


def _cmd_eval(args) -> int:
    from rl_suite.agent import agent_from_checkpoint
    from rl_suite.checkpoint import load_latest
    from rl_suite.registry import make, run_env_spec
    from rl_suite.runner import evaluate

    run_dir = pathlib.Path(args.run_dir)
    path, state = load_latest(run_dir)
    env_id, env_kwargs = run_env_spec(run_dir, state, confirmed_id=args.env)
    agent = agent_from_checkpoint(state, str(path), args.device)
    env = make(env_id, num_envs=args.episodes, device=args.device, seed=args.seed, **env_kwargs)
    result = {
        "env_id": env_id,
        "algo": state["algo"],
        "env_steps": state["runner"]["env_steps"],
        **evaluate(agent, env, seed=args.seed),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['algo']} on {result['env_id']} after {result['env_steps']:,} env steps: mean return "
            f"{result['mean_return']:.2f} +- {result['std_return']:.2f} over {result['episodes']} episodes"
            + (f", win rate {result['win_rate']:.0%}" if "win_rate" in result else "")
        )
    return 0


def _cmd_export(args) -> int:
    from rl_suite.deploy.export import export_run
    from rl_suite.deploy.sb3 import export_sb3

    if (args.run_dir is None) == (args.sb3 is None):
        raise ValueError("export takes exactly one source: a RUN_DIR, or --sb3 ZIP (a stable-baselines3 model)")
    if args.sb3 is None and (args.vecnormalize or args.algo):
        raise ValueError("--vecnormalize and --algo go with --sb3 ZIP")
    if args.sb3 is not None:
        report = export_sb3(
            args.sb3,
            args.output,
            args.format,
            algo=args.algo,
            vecnormalize_path=args.vecnormalize,
            env_id=args.env_id,
            control_hz=args.control_hz,
        )
    else:
        report = export_run(args.run_dir, args.output, args.format, control_hz=args.control_hz, env_id=args.env_id)
    print(f"wrote {report.format} policy {report.path} ({report.path.stat().st_size:,} bytes)")
    print("metadata:")
    for key, value in report.metadata.items():
        print(f"  {key}: {json.dumps(value)}")
    reference = "SB3's predict(deterministic=True)" if args.sb3 is not None else "the torch policy"
    print(
        f"parity against {reference} on {report.observations_checked} observations: "
        f"max abs error {report.max_abs_error:.3g}"
    )
    return 0


def _cmd_tune(args) -> int:
    from rl_suite import tune

    if args.best:
        print(tune.best(args.algo, args.env_id, args.storage, args.study_name, args.study_dir))
        return 0
    flags = {"num_envs": args.num_envs, "device": args.device, "total_steps": args.total_steps}
    report = tune.tune(
        args.algo, args.env_id, args.trials, args.workers, args.storage, args.study_name, args.study_dir, args.space,
        args.pruner, args.startup_trials, args.seed, tune.overrides_from_flags(flags, args.set),
    )  # fmt: skip
    print(report)
    return 0


# What `rl-suite play` runs: an entry point of the code, never a name read from a file (the core does not import envs).
_PLAYER = "rl_suite.envs.robots.deploy:play"


# The flags of `rl-suite play` that only one kind of source takes (a run directory, an exported file).
_RUN_PLAY_FLAGS = {
    "episodes": "--episodes",
    "env_kwargs": "--env-kwargs",
    "env": "--env",
    "seed": "--seed",
    "device": "--device",
    "deterministic": "--[no-]deterministic",
}
_FILE_PLAY_FLAGS = {"command": "--command", "seconds": "--seconds"}


def _env_kwargs(items: list[str]) -> dict:
    """``--env-kwargs g=9.81 max_episode_steps=100`` (values parsed as YAML) or ``--env-kwargs '{"g": 9.81}'``."""
    from rl_suite.config import parse_assignments

    if len(items) == 1 and items[0].lstrip().startswith("{"):
        try:
            value = yaml.safe_load(items[0])
        except yaml.YAMLError:
            value = None
        if type(value) is not dict:
            raise ValueError(f"--env-kwargs: {items[0]!r} is not a JSON object of keyword arguments")
        return value
    bad = [item for item in items if "=" not in item]
    if bad:
        raise ValueError(f"--env-kwargs expects KEY=VALUE pairs or one JSON object, got {bad[0]!r}")
    return parse_assignments(items)


def _cmd_play(args) -> int:
    from rl_suite.registry import load_entry_point

    if args.source is not None and not pathlib.Path(args.source).exists():
        raise ValueError(f"{args.source}: no such run directory or exported policy file")
    if args.source is not None and args.robot is not None:
        raise ValueError("--robot picks a shipped policy: give it without a RUN_DIR or FILE")
    is_run = args.source is not None and pathlib.Path(args.source).is_dir()
    flags = _FILE_PLAY_FLAGS if is_run else _RUN_PLAY_FLAGS
    given = [flag for key, flag in flags.items() if getattr(args, key) not in (None, [])]
    if given and is_run:
        raise ValueError(f"{', '.join(given)}: only for an exported policy FILE, not a run directory")
    if given:
        raise ValueError(f"{', '.join(given)}: only for a RUN_DIR (a training run's directory), not an exported file")
    viewer = False if args.no_viewer else None
    size = {"width": args.size[0], "height": args.size[1]} if args.size else {}
    if is_run:
        from rl_suite.play import play_run

        result = play_run(
            args.source,
            episodes=1 if args.episodes is None else args.episodes,
            video=args.video,
            env_kwargs=_env_kwargs(args.env_kwargs),
            env_id=args.env,
            seed=0 if args.seed is None else args.seed,
            deterministic=args.deterministic is not False,
            device=args.device or "cpu",
            viewer=viewer,
            **size,
        )
        print(f"{result['algo']} on {result['env_id']} after {result['env_steps']:,} env steps:")
        for episode, (ret, length) in enumerate(zip(result["returns"], result["lengths"], strict=True), start=1):
            print(f"  episode {episode}: return {ret:.2f}, length {length}")
        if result["video"]:
            print(f"video {result['video']} ({result['frames']} frames)")
        return 0
    play = load_entry_point(_PLAYER)
    command = (0.5, 0.0, 0.0) if args.command is None else tuple(args.command)
    seconds, robot = 10.0 if args.seconds is None else args.seconds, args.robot or "quadruped"
    result = play(args.source, command, seconds, args.video, viewer, robot=robot, **size)
    print(
        f"{result['policy']}: command {result['command']} for {result['seconds']:.1f} s: mean velocity "
        f"{[round(v, 2) for v in result['mean_velocity']]}, RMS planar tracking error "
        f"{result['tracking_error_lin']:.3f} m/s, {'fell' if result['fell'] else 'did not fall'}"
        + (f"; video {result['video']}" if result["video"] else "")
    )
    return 0


def _cmd_benchmark(args) -> int:
    from rl_suite.benchmark import benchmark, load_grid, make_grid

    file_values = load_grid(args.grid) if args.grid else {}
    bench_dir = pathlib.Path(args.dir)
    if args.report_only:
        grid = None
    else:
        seeds = args.seeds[0] if args.seeds and len(args.seeds) == 1 else args.seeds  # one number is a count
        grid = make_grid(file_values, args.algos, args.envs, seeds, args.total_steps, args.time_budget, args.set)
    try:
        return benchmark(bench_dir, grid, args.jobs, args.threads, args.references, args.report_only)
    except KeyboardInterrupt:
        print("rl-suite: benchmark interrupted; the same command continues it", file=sys.stderr)
        return 130


def _cmd_algos(args) -> int:
    from rl_suite.registry import ALGORITHMS, load_algorithm

    for name, entry_point in ALGORITHMS.items():
        algo = load_algorithm(name)
        spaces = ", ".join(t.__name__ for t in algo.action_space_types)
        summary = (inspect.getmodule(algo).__doc__ or "").strip().splitlines()[0]
        print(f"{name:<8} actions: {spaces:<15} {summary}  ({entry_point})")
    return 0


_CONFIRM_ENV_HELP = (
    "the run's environment id, repeated to confirm an adapter id (gym:..., pz:...) read from the run directory; "
    "ids from files are otherwise used only when they name a native task"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-suite", description="Batched RL for classic control and robotics.")
    commands = parser.add_subparsers(dest="command", required=True)

    envs = commands.add_parser("envs", help="list the registered environment ids")
    envs.set_defaults(run=_cmd_envs)

    throughput = commands.add_parser("throughput", help="measure env-steps per second under random actions")
    throughput.add_argument("env_ids", nargs="*", help="ids to measure (default: every registered id)")
    throughput.add_argument("--num-envs", type=int, nargs="+", default=[1, 4096, 65536])
    throughput.add_argument("--device", default="cpu")
    throughput.add_argument("--seconds", type=float, default=1.0, help="measuring time per figure")
    throughput.set_defaults(run=_cmd_throughput)

    bench = commands.add_parser(
        "benchmark",
        help="train every (algorithm, task, seed) of a grid as ordinary runs, in parallel and resumably, and report "
        "them: learning curves and rliable's aggregates of normalised scores (rl_suite/benchmark.py)",
    )
    bench.add_argument("grid", nargs="?", metavar="GRID.yaml", help="a grid file (algos, envs, seeds, budgets, set)")
    bench.add_argument("--algos", nargs="+", help="algorithms (see `rl-suite algos`)")
    bench.add_argument("--envs", nargs="+", help="task ids (see `rl-suite envs`), or gym:<id>")
    bench.add_argument("--seeds", type=int, nargs="+", help="a count (--seeds 5: seeds 0-4), or the seeds")
    bench.add_argument("--total-steps", type=int, help="step budget of each run")
    bench.add_argument("--time-budget", type=float, help="wall-clock budget of each run, in seconds")
    bench.add_argument("--dir", default="benchmark", help="the benchmark directory (default: ./benchmark)")
    bench.add_argument("--jobs", type=int, help="runs at once (default: the cores this process may use // threads)")
    bench.add_argument("--threads", type=int, default=1, help="torch threads (and pinned cores) per run")
    bench.add_argument("--references", metavar="FILE", help="reference scores (rl_suite/reference_scores.yaml)")
    bench.add_argument("--report-only", action="store_true", help="write the report over the finished runs only")
    bench.add_argument("--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE", help="for every run")
    bench.set_defaults(run=_cmd_benchmark)

    algos = commands.add_parser("algos", help="list the registered algorithms")
    algos.set_defaults(run=_cmd_algos)

    train = commands.add_parser("train", help="train an agent; settings come from the shipped YAML, then flags")
    train.add_argument("algo", help="algorithm, e.g. ppo or sac (see `rl-suite algos`)")
    train.add_argument("env_id", help="environment id (see `rl-suite envs`), or gym:<id>")
    train.add_argument("--num-envs", type=int)
    train.add_argument("--seed", type=int)
    train.add_argument("--device")
    train.add_argument("--total-steps", type=int, help="step budget (env steps over all environments)")
    train.add_argument("--time-budget", type=float, help="wall-clock budget in seconds")
    train.add_argument("--stop-at-return", type=float, help="stop once an evaluation's mean return reaches this")
    train.add_argument("--stop-at-win-rate", type=float, help="stop once an evaluation's win rate reaches this")
    train.add_argument(
        "--compile", choices=["none", "compile", "cuda_graph"], help="compile the hot loop (rl_suite/compiled.py)"
    )
    train.add_argument(
        "--compile-exact",
        action="store_true",
        default=None,
        help="with --compile compile on the CPU: bitwise equal to eager (rl_suite/exact_compile.py)",
    )
    train.add_argument(
        "--logger",
        metavar="NAMES",
        help="experiment trackers, comma-separated: tensorboard (the default), wandb (WANDB_MODE=offline: no network)",
    )
    train.add_argument("--run-dir", help="where to write the run (default: runs/<algo>-<env>-s<seed>-<time>)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    train.add_argument(
        "--profile",
        metavar="NAME",
        help="a named set of the algorithm's shipped settings, over the task's (its YAML's `profiles`: flashsac's gpu)",
    )
    train.add_argument(
        "--set",
        nargs="*",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="any setting, e.g. lr=3e-4 (repeatable)",
    )
    train.set_defaults(run=_cmd_train)

    evaluate = commands.add_parser("eval", help="evaluate a run's newest checkpoint")
    evaluate.add_argument("run_dir")
    evaluate.add_argument("--episodes", type=int, default=100)
    evaluate.add_argument("--seed", type=int, default=12345)
    evaluate.add_argument("--device", default="cpu")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument(
        "--env",
        metavar="ENV_ID",
        help=_CONFIRM_ENV_HELP,
    )
    evaluate.set_defaults(run=_cmd_eval)

    export = commands.add_parser(
        "export",
        help="export a run's newest policy, or a stable-baselines3 model, as ONNX or TorchScript (normalisation, "
        "scaling, clipping inside)",
    )
    export.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a training run (or give --sb3 instead)")
    export.add_argument("--sb3", metavar="ZIP", help="a model saved by stable-baselines3 (instead of a RUN_DIR)")
    export.add_argument("--algo", help="the SB3 zip's algorithm: ppo, a2c, sac, td3 or dqn (default: from the zip)")
    export.add_argument("--vecnormalize", metavar="PKL", help="the SB3 VecNormalize pickle to bake into the graph")
    export.add_argument(
        "--env",
        "--env-id",
        dest="env_id",
        metavar="ENV_ID",
        help=f"with RUN_DIR: {_CONFIRM_ENV_HELP}; with --sb3: the id to record in the metadata",
    )
    export.add_argument("--format", choices=["onnx", "torchscript"], default="onnx")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write")
    export.add_argument("--control-hz", type=float, help="control rate to record (default: the env's 1/dt, if any)")
    export.set_defaults(run=_cmd_export)

    play = commands.add_parser(
        "play",
        help="watch a training run's newest policy (RUN_DIR) or an exported legged policy (FILE; default: the shipped "
        "quadruped's, or --robot humanoid): in MuJoCo's viewer where a display exists, else as a video",
        description="Play a run's newest policy for a few episodes, printing each episode's return and length, or an "
        "exported legged policy on a MuJoCo robot built from its file. With a display and no --video, MuJoCo tasks "
        "open MuJoCo's passive viewer, in real time; otherwise the episodes are written to a video, one frame per "
        "step (the classic tasks drawn by gymnasium's renderers).",
    )
    play.add_argument(
        "source",
        nargs="?",
        metavar="RUN_DIR | FILE",
        help="a training run's directory, or an exported .onnx or .pt policy of a legged task (default: the shipped "
        "quadruped)",
    )
    play.add_argument(
        "--robot",
        choices=("quadruped", "humanoid"),
        help="without a RUN_DIR or FILE: whose shipped flat-ground policy to play (default quadruped)",
    )
    play.add_argument("--episodes", type=int, help="RUN_DIR: episodes to play, one after another (default 1)")
    play.add_argument(
        "--env-kwargs",
        nargs="*",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="RUN_DIR: env keywords over the run's, e.g. g=9.81 (values parsed as YAML), or one JSON object",
    )
    play.add_argument("--env", metavar="ENV_ID", help=f"RUN_DIR: {_CONFIRM_ENV_HELP}")
    play.add_argument("--seed", type=int, help="RUN_DIR: the environment's seed (default 0)")
    play.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        help="RUN_DIR: the policy's deterministic action (the default), or sampled actions (--no-deterministic)",
    )
    play.add_argument("--device", help="RUN_DIR: where the policy and the environment run (default cpu)")
    play.add_argument(
        "--command", type=float, nargs=3, metavar=("VX", "VY", "YAW_RATE"), help="FILE: the command (default 0.5 0 0)"
    )
    play.add_argument("--seconds", type=float, help="FILE: how long to walk (default 10)")
    play.add_argument(
        "--video",
        metavar="FILE",
        help="write a .gif (or an .mp4, with imageio-ffmpeg) instead of opening the viewer; a run without a display "
        "writes RUN_DIR/videos/play.mp4 (play.gif without imageio-ffmpeg) when none is named",
    )
    play.add_argument(
        "--size", type=int, nargs=2, metavar=("WIDTH", "HEIGHT"), help="video size (default: the task's; FILE: 640 480)"
    )
    play.add_argument("--no-viewer", action="store_true", help="never open MuJoCo's viewer")
    play.set_defaults(run=_cmd_play)

    tuner = commands.add_parser(
        "tune",
        help="search hyperparameters with Optuna: each trial an ordinary run, the study in a database that worker "
        "processes and machines share (rl_suite/tune.py)",
    )
    tuner.add_argument("algo", help="algorithm, e.g. ppo or sac (see `rl-suite algos`)")
    tuner.add_argument("env_id", help="environment id (see `rl-suite envs`), or gym:<id>")
    tuner.add_argument("--trials", type=int, default=20, help="trials this command runs, shared out among its workers")
    tuner.add_argument("--workers", type=int, default=1, help="worker processes (the cores are split among them)")
    tuner.add_argument(
        "--storage",
        metavar="URL",
        help="the study's database, a SQLAlchemy URL (sqlite:///path/study.db, postgresql://user@host/db; default: "
        "sqlite:///<study-dir>/study.db); another machine joins the study by giving the same URL",
    )
    tuner.add_argument("--study-name", help="default: <algo>-<env>")
    tuner.add_argument("--study-dir", help="where the trials' run directories go (default: tune/<study-name>)")
    tuner.add_argument("--space", metavar="FILE", help="search space YAML (default: agents/search_spaces/<algo>.yaml)")
    tuner.add_argument("--pruner", choices=["median", "hyperband", "none"], default="median")
    tuner.add_argument("--startup-trials", type=int, default=5, help="median pruner: trials finished before pruning")
    tuner.add_argument("--seed", type=int, default=0, help="seeds the sampler and every trial's run")
    tuner.add_argument("--num-envs", type=int)
    tuner.add_argument("--device")
    tuner.add_argument("--total-steps", type=int, help="step budget of each trial")
    tuner.add_argument(
        "--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE", help="a setting of every trial"
    )
    tuner.add_argument("--best", action="store_true", help="run nothing: print the best trial's settings")
    tuner.set_defaults(run=_cmd_tune)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError, RuntimeError, MemoryError) as error:  # bad input: a message, not a traceback
        print(f"rl-suite: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
