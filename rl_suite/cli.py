"""The ``rl-suite`` command line (also ``python -m rl_suite``)."""

from __future__ import annotations

import argparse
import platform
import sys

import torch


def _cmd_envs(args) -> int:
    from rl_suite.registry import registered

    print(f"{'id':<28} {'observation':<13} {'action':<26} {'steps':>5}  entry point")
    for env_spec in registered():
        try:
            env = env_spec.load()(num_envs=1, **env_spec.kwargs)
            row = (
                f"{env_spec.id:<28} {str(tuple(env.observation_space.shape)):<13} "
                f"{str(env.action_space):<26} {str(env.max_episode_steps):>5}"
            )
        except ImportError as error:  # an optional extra is missing
            row = f"{env_spec.id:<28} (unavailable: {error})"
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError, RuntimeError) as error:  # bad input: a message, not a traceback
        print(f"rl-suite: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
