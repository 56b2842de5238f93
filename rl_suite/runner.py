"""The one training loop every agent uses: collect, update, log, evaluate, checkpoint.

A run stops at a step budget, at a time budget, or when the evaluation's mean return reaches a threshold, and
leaves behind its run directory:

    config.yaml          every setting, enough to rerun
    events.out.tfevents* TensorBoard scalars (and evaluation videos), with the tensorboard logger (the default)
    wandb/, wandb-run-id Weights & Biases' files and its run's id, with the wandb logger (rl_suite/logger.py)
    videos/              evaluation episodes as animated GIFs, when video_every_steps is set
    checkpoints/         full-state checkpoints (agent, optimisers, normalisers, env, counters, RNG)
    summary.json         env_steps, wall_time_s, machine, final_eval, evaluations (the learning curve: each evaluation's
                         metrics, with the training episodes' task metrics of the last log window as rollout_<name>
                         and the agent's training metrics of that window, such as lr and approx_kl, as train_<name>),
                         and threshold

Under ``torchrun`` every rank runs this loop on its own envs with an identical copy of the agent (see
rl_suite/distributed.py). Rank 0 alone logs, evaluates and writes the run directory; env-step counts are global (all
ranks' steps); rank 0's stop decision (time budget, evaluation threshold) is broadcast every iteration; and rank 0's
checkpoints hold every rank's env, collector, buffer and random state.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import os
import pathlib
import signal
import sys
import threading
import time
import warnings
from typing import Any

import torch
import yaml

from rl_suite import distributed
from rl_suite.checkpoint import (
    atomic_save,
    checkpoint_path,
    load_latest,
    prune,
    rng_state,
    set_rng_state,
    warm_start,
)
from rl_suite.collector import Collector
from rl_suite.compiled import make_collector
from rl_suite.config import check_settings, setting, to_plain
from rl_suite.device import cpu_name
from rl_suite.env import VecEnv
from rl_suite.logger import NullLogger, RunLogger, tracker_names
from rl_suite.multiagent import MultiAgentCollector, MultiAgentVecEnv

EVAL_SEED_OFFSET = 1_000_003  # evaluations run on the run's seed plus this: streams the training never draws


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How a run goes; the agent's hyperparameters are in its own config."""

    algo: str = "ppo"
    """Algorithm name, as registered (``rl-suite algos``)."""
    env_id: str = "CartPole-v1"
    """Environment id, as registered (``rl-suite envs``), or ``gym:<id>``."""
    num_envs: int = setting(16, at_least=1)
    """Environments stepped in parallel for training, per rank under torchrun (the run steps ``world_size`` times as
    many)."""
    seed: int = setting(0, at_least=0)
    """Seeds torch, the training envs' random streams and the evaluation envs' (with an offset)."""
    device: str = "cpu"
    """Where the envs, the buffers and the networks live."""
    total_steps: int = setting(100_000, at_least=1)
    """Step budget: env steps summed over all environments (of all ranks, under torchrun). Every step count of a run
    (logging, evaluation and checkpoint intervals, env steps per second) counts all ranks' steps."""
    time_budget_s: float | None = setting(None, above=0)
    """Wall-clock budget in seconds, evaluation included; ``None`` for none."""
    stop_at_return: float | None = None
    """Stop as soon as an evaluation's mean return reaches this; ``None`` to train for the whole budget."""
    stop_at_win_rate: float | None = setting(None, at_least=0, at_most=1)
    """Stop as soon as an evaluation's win rate (tasks with winners: the skirmishes) reaches this."""
    eval_every_steps: int = setting(25_000, at_least=0)
    """Evaluate every this many env steps (and at the end); 0 to evaluate only at the end."""
    eval_episodes: int = setting(100, at_least=0)
    """Episodes per evaluation, run at once on a batched env (one episode per environment)."""
    log_every_steps: int = setting(10_000, at_least=1)
    """Write scalars and refresh the progress display every this many env steps; each training metric written is its
    mean over the iterations since the last write."""
    checkpoint_every_steps: int = setting(100_000, at_least=1)
    """Write a checkpoint every this many env steps (and at the end)."""
    video_every_steps: int = setting(0, at_least=0)
    """Record a video of one evaluation episode every this many env steps (and at the end) into ``videos/`` and
    TensorBoard; 0 for none. Needs an environment that renders (the classic and MuJoCo tasks)."""
    init_from: str | None = None
    """Start a new run from another run's agent: a checkpoint file or a run directory (its newest checkpoint), of the
    same algorithm. Weights and observation statistics carry over, observation terms added at the end start with
    zero weights; optimisers and counters start afresh (``rl_suite.checkpoint.warm_start``). A resumed run ignores
    it."""
    keep_checkpoints: int = setting(2, at_least=1)
    """How many of the newest checkpoints to keep."""
    checkpoint_buffer: bool = True
    """Include a replay buffer's contents in checkpoints, so that a resumed off-policy run continues exactly."""
    loggers: str = "tensorboard"
    """The experiment trackers that get the scalars and videos, comma-separated: ``tensorboard`` (event files in the
    run directory) and ``wandb`` (Weights & Biases; ``WANDB_MODE=offline`` for no network). See rl_suite/logger.py."""
    progress: bool = True
    """Show progress on stderr: a bar on a terminal; without one (CI, ``nohup``, a file), one summary line per log
    interval, at most one every 5 s (steps, steps/s, mean return of the episodes that ended, the last evaluation)."""
    env_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments for the environment (task settings such as ``g`` for Pendulum)."""
    compile: str = setting("none", choices=("none", "compile", "cuda_graph"))
    """The hot loop (act + env step + buffer write): ``none`` (eager), ``compile`` (``torch.compile`` of the env step
    and ``agent.act``, for teams too; bitwise equal to eager on the CPU with ``compile_exact``, where the task keeps
    the default scalar ``compile_options``) or ``cuda_graph`` (each rollout captured as one CUDA graph; CUDA,
    single-agent on-policy agents whose ``act`` does not sync with the host). See rl_suite/compiled.py."""
    compile_exact: bool = False
    """With ``compile="compile"`` on the CPU: compiled rollouts bitwise equal to eager ones (otherwise they differ by
    an ulp here and there). It replaces private inductor lowerings for the whole process, for every later
    ``torch.compile`` in it, and was checked on torch 2.13 only (see rl_suite/exact_compile.py)."""
    distributed_timeout_s: float = setting(1800.0, above=0)
    """Under torchrun: how long a collective waits for a rank that stopped answering before the run fails (a rank
    that dies ends the run sooner: torchrun stops the other workers)."""

    def __post_init__(self):
        check_settings(self, "run")


def env_id_as_name(env_id: str) -> str:
    """``env_id`` as part of a directory's name: ``gym:Ant-v5`` -> ``gym_Ant-v5``, ``dm_control/cheetah-run-v0`` ->
    ``dm_control_cheetah-run-v0``."""
    return env_id.replace(":", "_").replace("/", "_")


def default_run_dir(config: RunConfig) -> pathlib.Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return pathlib.Path("runs") / f"{config.algo}-{env_id_as_name(config.env_id)}-s{config.seed}-{stamp}"


@torch.no_grad()
def evaluate(agent, env: VecEnv, seed: int) -> dict[str, Any]:
    """Mean and standard deviation of the return of the deterministic policy over ``env.num_envs`` episodes: the
    first episode of each environment, so that short episodes are not over-represented. Multi-agent envs report the
    team return, and the win rate where the task has winners; tasks with episode metrics (``env.episode_metric_names``:
    a legged task's tracking error and falls) report the mean of each over the same episodes."""
    # The collector's policy side (its act and advance, and a team's memory), with the deterministic policy.
    kind = MultiAgentCollector if isinstance(env, MultiAgentVecEnv) else Collector
    player = kind(env, agent, act=functools.partial(agent.act, deterministic=True), seed=seed)
    returns = torch.zeros(env.num_envs, device=env.device)
    wins = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    finished = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    metrics = {name: torch.zeros(env.num_envs, device=env.device) for name in env.episode_metric_names}
    steps = 0
    while True:
        actions, _ = player.act()
        obs, _, _, _, info = env.step(actions)
        first = info["done"] & ~finished
        returns = torch.where(first, info["episode_return"], returns)
        if "won" in info:
            wins |= first & info["won"]
        for name, values in metrics.items():
            torch.where(first, info["episode_metrics"][name], values, out=values)
        finished |= info["done"]
        player.advance(obs, info)
        steps += 1
        # Ask the device whether all have finished only now and then: each question is a host sync.
        if (steps % 32 == 0 or steps == env.max_episode_steps) and bool(finished.all()):
            break
    returns = returns.double()
    result = {
        "mean_return": returns.mean().item(),
        "std_return": returns.std(unbiased=False).item(),
        "episodes": env.num_envs,
    }
    if "won" in info:
        result["win_rate"] = wins.double().mean().item()
    result.update({name: values.double().nanmean().item() for name, values in metrics.items()})
    return result


class Runner:
    """Trains ``agent`` on ``env`` as ``config`` says, writing the run directory ``run_dir``.

    With ``resume=True`` it continues from the newest readable checkpoint in ``run_dir``; on the CPU the resumed run
    ends bitwise equal to one that never stopped. ``on_evaluation``, if given, is called with each evaluation's row
    of the learning curve (``env_steps``, ``wall_time_s``, ``mean_return``, ...) as soon as it is made; an exception
    it raises ends the run there, without a summary (a hyperparameter search prunes a trial so: rl_suite/tune.py).
    """

    def __init__(
        self,
        agent,
        env: VecEnv,
        config: RunConfig,
        run_dir=None,
        eval_env: VecEnv | None = None,
        resume: bool = False,
        on_evaluation=None,
    ):
        from rl_suite.registry import make

        self.agent, self.env, self.config = agent, env, config
        self.on_evaluation = on_evaluation
        distributed.init(env.device, config.distributed_timeout_s)  # joins torchrun's process group, else a no-op
        if distributed.world_size() > 1 and not agent.supports_distributed:
            raise ValueError(
                f"{agent.name} does not train under torchrun (world size {distributed.world_size()}); "
                "run it in a single process"
            )
        if config.stop_at_win_rate is not None and not getattr(env, "has_winner", False):
            raise ValueError(f"stop_at_win_rate needs a task with winners (a skirmish); {env} has none")
        tracker_names(config.loggers)  # a misspelt tracker fails here, before anything is built or written
        run_dir = pathlib.Path(run_dir) if run_dir is not None else default_run_dir(config)
        self.run_dir = pathlib.Path(distributed.broadcast_object(str(run_dir)))  # rank 0's name (a time stamp)
        if distributed.is_main():
            self.run_dir.mkdir(parents=True, exist_ok=True)
        else:
            eval_env = None  # rank 0 alone evaluates
        if eval_env is None and config.eval_episodes > 0 and distributed.is_main():
            eval_env = make(
                config.env_id,
                num_envs=config.eval_episodes,
                device=env.device,
                seed=config.seed + EVAL_SEED_OFFSET,
                **config.env_kwargs,
            )
        self.eval_env = eval_env
        self.buffer = agent.make_buffer(env.num_envs, max_episode_steps=env.max_episode_steps)
        self.collector = make_collector(env, agent, self.buffer, config.compile, config.compile_exact)
        # Counters a checkpoint restores.
        self.env_steps = self.iterations = 0
        self.wall_time_before = 0.0  # spent by earlier sessions of a resumed run
        self.next_log = config.log_every_steps
        self.next_eval = config.eval_every_steps if config.eval_every_steps > 0 else math.inf
        self.next_checkpoint = config.checkpoint_every_steps
        self.next_video = config.video_every_steps if config.video_every_steps > 0 else math.inf
        self.video_env = None
        self.last_eval: dict[str, Any] | None = None
        self.last_rollout_return: float | None = None
        # the training episodes' task metrics of the last window that defined them, for the evaluation rows: what the
        # training environments face (a terrain curriculum's level) can differ from the evaluation's
        self.last_rollout_metrics: dict[str, float] = {}
        self.last_train_metrics: dict[str, float] = {}  # the agent's of the last log window (lr, KL, policy std, ...)
        self.evaluations: list[dict[str, float]] = []  # the learning curve: one row per evaluation
        self.threshold: dict[str, Any] | None = None
        self.warm_start_note: str | None = None
        if resume:
            self._restore()
        else:
            if config.init_from:
                path, grown = warm_start(agent, config.init_from)
                self.warm_start_note = f"started from {path}" + (f"; grown: {', '.join(grown)}" if grown else "")
            if distributed.is_main():
                self._write_config()
        distributed.broadcast_modules(agent.modules.values())  # every rank starts from rank 0's agent

    # -- the loop ---------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:

        config, main = self.config, distributed.is_main()
        steps_per_iteration = self.agent.steps_per_iteration * self.env.num_envs * distributed.world_size()
        if main:
            logger = RunLogger(self.run_dir, config.total_steps, self.env_steps, config.progress,
                               loggers=config.loggers, config=self._config_data())  # fmt: skip
        else:
            logger = NullLogger()
        started = time.perf_counter() - self.wall_time_before
        window = (time.perf_counter(), self.env_steps, self.iterations)
        window_metrics: dict[str, list] = {}  # each training metric's sum and count since the last log
        if self.warm_start_note:
            logger.message(self.warm_start_note)
        stop = distributed.broadcast_flag(self._should_stop(started))
        interrupt = DeferredInterrupt()
        try:
            while not stop and not interrupt.requested:
                self.collector.collect(self.agent.steps_per_iteration)
                metrics = self.agent.update(self.buffer, progress=self.env_steps / config.total_steps)
                add_metrics(window_metrics, metrics)
                self.env_steps += steps_per_iteration
                self.iterations += 1
                logger.advance(self.env_steps)
                stop = self._should_stop(started)
                if main and (self.env_steps >= self.next_log or stop):
                    self.next_log = _next(self.env_steps, config.log_every_steps)
                    window = self._log(logger, window_means(window_metrics), window)
                    window_metrics = {}
                if self.eval_env is not None and (self.env_steps >= self.next_eval or stop):
                    self.next_eval = _next(self.env_steps, config.eval_every_steps)
                    self._evaluate(logger, time.perf_counter() - started)
                    if self.on_evaluation is not None:
                        self.on_evaluation(dict(self.evaluations[-1]))
                    stop = stop or self.threshold is not None and self.threshold["reached"]
                if main and (self.env_steps >= self.next_video or stop and config.video_every_steps > 0):
                    self.next_video = _next(self.env_steps, config.video_every_steps)
                    self._record_video(logger)
                stop = distributed.broadcast_flag(stop)  # rank 0 decides: time budget, evaluation threshold
                if self.env_steps >= self.next_checkpoint or stop:
                    self.next_checkpoint = _next(self.env_steps, config.checkpoint_every_steps)
                    self._checkpoint(time.perf_counter() - started)
                elif interrupt.requested:  # at the end of an iteration: the resumed run goes on as if never stopped
                    self._checkpoint(time.perf_counter() - started)
            if interrupt.requested and not stop:
                raise KeyboardInterrupt
        finally:
            interrupt.restore()
            self.agent.close()
            logger.close()
        summary = self._summary(time.perf_counter() - started)
        if main:  # atomically: a summary.json that exists is whole, and marks the run finished (rl_suite/benchmark.py)
            partial = self.run_dir / "summary.json.tmp"
            partial.write_text(json.dumps(summary, indent=2) + "\n")
            os.replace(partial, self.run_dir / "summary.json")
        return summary

    def _should_stop(self, started: float) -> bool:
        budget = self.config.time_budget_s
        return self.env_steps >= self.config.total_steps or (
            budget is not None and time.perf_counter() - started >= budget
        )

    def _log(self, logger, metrics, window):
        now, steps, iterations = time.perf_counter(), self.env_steps, self.iterations
        elapsed = max(now - window[0], 1e-9)
        values = {f"train/{name}": float(value) for name, value in metrics.items()}  # one host sync per metric
        self.last_train_metrics = {name.removeprefix("train/"): value for name, value in values.items()}
        values["time/env_steps_per_s"] = (steps - window[1]) / elapsed
        values["time/updates_per_s"] = (iterations - window[2]) / elapsed
        episodes = self.collector.stats.read()
        if episodes is not None:
            values["rollout/episode_return"] = episodes["episode_return"]
            values["rollout/episode_length"] = episodes["episode_length"]
            if "win_rate" in episodes:
                values["rollout/win_rate"] = episodes["win_rate"]
            # a metric that no episode of the window defined (NaN) is left out, as the return is when none ended
            task_metrics = {f"rollout/{name}": episodes[name] for name in self.env.episode_metric_names}
            values.update({name: value for name, value in task_metrics.items() if value == value})
            self.last_rollout_metrics.update(
                {name.removeprefix("rollout/"): value for name, value in task_metrics.items() if value == value}
            )
        logger.scalars(steps, values)
        # A window in which no episode ended shows the last known return (or none yet), never NaN.
        self.last_rollout_return = values.get("rollout/episode_return", self.last_rollout_return)
        postfix = {"steps/s": round(values["time/env_steps_per_s"])}
        if self.last_rollout_return is not None:
            postfix["return"] = self.last_rollout_return
        if "rollout/win_rate" in values:
            postfix["win"] = round(values["rollout/win_rate"], 2)
        if self.last_eval is not None:
            postfix["eval"] = self.last_eval["mean_return"]
        logger.progress(steps, **postfix)
        return now, steps, iterations

    def _evaluate(self, logger, wall_time: float) -> None:
        self.last_eval = evaluate(self.agent, self.eval_env, seed=self.config.seed + EVAL_SEED_OFFSET)
        row = {"env_steps": self.env_steps, "wall_time_s": wall_time, "mean_return": self.last_eval["mean_return"]}
        scalars = {"eval/mean_return": self.last_eval["mean_return"], "eval/std_return": self.last_eval["std_return"]}
        if "win_rate" in self.last_eval:
            row["win_rate"] = scalars["eval/win_rate"] = self.last_eval["win_rate"]
        for name in self.eval_env.episode_metric_names:
            row[name] = scalars[f"eval/{name}"] = self.last_eval[name]
        row.update({f"rollout_{name}": value for name, value in self.last_rollout_metrics.items()})
        row.update({f"train_{name}": value for name, value in self.last_train_metrics.items()})
        self.evaluations.append(row)
        logger.scalars(self.env_steps, scalars)
        for metric, target in self._targets():
            value = self.last_eval["mean_return" if metric == "return" else metric]
            if value >= target and not (self.threshold or {}).get("reached"):
                self.threshold = {
                    metric: target,
                    "reached": True,
                    "env_steps": self.env_steps,
                    "wall_time_s": wall_time,
                }
                logger.message(
                    f"evaluation {metric.replace('_', ' ')} {value:.4g} reached {target} after {self.env_steps:,} env "
                    f"steps and {wall_time:.1f} s"
                )

    def _targets(self) -> list[tuple[str, float]]:
        """The evaluation thresholds that end the run: ``(metric, value)``."""
        targets = (("return", self.config.stop_at_return), ("win_rate", self.config.stop_at_win_rate))
        return [(metric, value) for metric, value in targets if value is not None]

    def _record_video(self, logger) -> None:
        """Record one evaluation episode; a video that cannot be made (no renderer, no OpenGL) costs a message,
        never the run."""
        from rl_suite.registry import make
        from rl_suite.video import frame_rate, record_episode, write_video

        try:
            if self.video_env is None:
                seed = self.config.seed + 2_000_003
                self.video_env = make(self.config.env_id, num_envs=1, seed=seed, **self.config.env_kwargs)
            if not hasattr(self.video_env, "render"):
                raise NotImplementedError(f"{self.config.env_id} does not render")
            frames = record_episode(self.agent, self.video_env)
        except Exception as error:  # noqa: BLE001 - any failure to render must not stop training
            logger.message(f"no evaluation videos: {type(error).__name__}: {error}")
            self.next_video = math.inf
            return
        fps = frame_rate(self.video_env)  # the task's render_fps where it has one, else a frame per step
        path = write_video(self.run_dir / "videos" / f"eval-{self.env_steps:012d}.gif", frames, fps)
        logger.video("eval/video", path, frames.shape[1:], self.env_steps)

    def _summary(self, wall_time: float) -> dict[str, Any]:
        summary = {
            "algo": self.config.algo,
            "env_id": self.config.env_id,
            "env_steps": self.env_steps,
            "iterations": self.iterations,
            "wall_time_s": wall_time,
            "machine": cpu_name(),  # of this session; a resumed run's earlier sessions may have run elsewhere
            "final_eval": self.last_eval,
            "evaluations": self.evaluations,
        }
        if self._targets():
            summary["threshold"] = self.threshold or {
                **dict(self._targets()),
                "reached": False,
                "env_steps": None,
                "wall_time_s": None,
            }
        return summary

    # -- the run directory ------------------------------------------------------------------------------------

    def _config_data(self) -> dict[str, Any]:
        data = {"run": to_plain(self.config), "agent": to_plain(self.agent.config)}
        if distributed.world_size() > 1:
            data["distributed"] = {"world_size": distributed.world_size()}
        return data

    def _write_config(self) -> None:
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self._config_data(), sort_keys=False))

    def _local_state(self) -> dict[str, Any]:
        """What differs between ranks: the env, the collector, the buffer, the random streams and the agent's
        per-env counters (PPO's running discounted returns)."""
        try:
            env_state = self.env.state_dict()
        except NotImplementedError:
            env_state = None  # an adapter: a resumed run restarts its episodes
        with self.agent.paused():
            buffer_state = self.buffer.state_dict() if self.config.checkpoint_buffer else None
            counters = self.agent.counters() if distributed.world_size() > 1 else None
        return {
            "env": env_state,
            "collector": self.collector.state_dict() if env_state is not None else None,
            "buffer": buffer_state,
            "rng": rng_state(),
            "agent_counters": counters,
        }

    def _checkpoint(self, wall_time: float) -> None:
        """Rank 0 writes the checkpoint, with every rank's local state gathered into it (a collective)."""
        ranks = distributed.gather_to_main(self._local_state())
        if not distributed.is_main():
            return
        with self.agent.paused():
            agent_state = self.agent.state_dict()
        own = ranks[0]
        state = {
            **self.agent.describe(),
            "env_id": self.config.env_id,
            "agent": agent_state,
            "env": own["env"],
            "collector": own["collector"],
            "buffer": own["buffer"],
            "world_size": distributed.world_size(),
            "ranks": ranks[1:],  # the local state of ranks 1, 2, ...
            "runner": {
                "env_steps": self.env_steps,
                "iterations": self.iterations,
                "wall_time_s": wall_time,
                "next_log": self.next_log,
                "next_eval": self.next_eval,
                "next_checkpoint": self.next_checkpoint,
                "next_video": self.next_video,
                "last_eval": self.last_eval,
                "evaluations": self.evaluations,
                "threshold": self.threshold,
            },
            "rng": own["rng"],
        }
        atomic_save(state, checkpoint_path(self.run_dir, self.env_steps))
        prune(self.run_dir, self.config.keep_checkpoints)

    def _restore(self) -> None:
        from rl_suite.checkpoint import CheckpointError

        path, state = load_latest(self.run_dir)
        if state.get("algo") != self.agent.name or state.get("env_id") != self.config.env_id:
            raise CheckpointError(
                f"{path} is a checkpoint of {state.get('algo')} on {state.get('env_id')}, not of "
                f"{self.agent.name} on {self.config.env_id}"
            )
        self.agent.load_state_dict(state["agent"])
        saved_world, world = state.get("world_size", 1), distributed.world_size()
        if saved_world == world:  # each rank continues exactly where it stopped
            local = state if distributed.rank() == 0 else state["ranks"][distributed.rank() - 1]
            if local.get("agent_counters") is not None:
                self.agent.load_counters(local["agent_counters"])
            self._restore_local(local)
        elif distributed.is_main():
            warnings.warn(
                f"{path} was written by a run of {saved_world} rank(s) and this one has {world}: the agent (weights, "
                "optimisers, normalisers) and the counters resume exactly, but the environments restart their "
                "episodes and the buffers and random streams start afresh",
                stacklevel=2,
            )
        runner = state["runner"]
        self.env_steps, self.iterations = runner["env_steps"], runner["iterations"]
        self.wall_time_before = runner["wall_time_s"]
        self.next_log, self.next_eval = runner["next_log"], runner["next_eval"]
        self.next_checkpoint = runner["next_checkpoint"]
        self.next_video = runner.get("next_video", self.next_video)
        self.last_eval, self.threshold = runner["last_eval"], runner["threshold"]
        self.evaluations = runner.get("evaluations", [])

    def _restore_local(self, local: dict[str, Any]) -> None:
        if local["env"] is not None:
            self.env.load_state_dict(local["env"])
            self.collector.load_state_dict(local["collector"])
        else:
            warnings.warn("the checkpoint holds no environment state (an adapter): episodes restart", stacklevel=3)
        if local["buffer"] is not None:
            self.buffer.load_state_dict(local["buffer"])
        set_rng_state(local["rng"])


class DeferredInterrupt:
    """Ctrl-C (SIGINT) or a scheduler's SIGTERM during a run of one process, in its main thread: the first one lets
    the iteration finish, a checkpoint is written and the run stops (``KeyboardInterrupt``), so that the checkpoint is
    of a consistent state (an interrupt in the middle of a rollout or an update would leave a half-filled buffer); a
    second one has its usual effect at once, without a checkpoint. SIGHUP (a closed terminal, or the benchmark that
    launched the run gone: rl_suite/benchmark.py) asks for the same checkpointed stop, and repeats of it change nothing,
    then or after the run (the kernel sends a run's parent-death signal once for each thread of the dying parent); where
    SIGHUP is ignored (nohup) it stays ignored. After a hang-up the run's progress lines must go somewhere other than
    the closed terminal (nohup's file) for the checkpoint to be written. Elsewhere (other threads, torchrun's ranks,
    which cannot gather a checkpoint at different points) all keep their usual effect."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    REPEATABLE = (signal.SIGHUP,)

    def __init__(self):
        self.requested, self.hung_up, self.previous = False, False, {}
        if distributed.world_size() == 1 and threading.current_thread() is threading.main_thread():
            handled = self.SIGNALS + tuple(n for n in self.REPEATABLE if signal.getsignal(n) is not signal.SIG_IGN)
            self.previous = {number: signal.signal(number, self._handle) for number in handled}

    def _handle(self, signum, frame) -> None:
        if self.requested and signum in self.REPEATABLE:
            return
        self.requested, self.hung_up = True, signum in self.REPEATABLE
        for number in self.SIGNALS:  # a second Ctrl-C or SIGTERM acts at once
            signal.signal(number, self._previous(number))
        # os.write, not print: the handler runs between two bytecodes of the main thread, which may be inside a print
        # to the same stream (a second entry into its buffer raises RuntimeError and loses the checkpoint).
        try:
            os.write(sys.stdout.fileno(), f"\n{signal.Signals(signum).name}: finishing this iteration and writing a "
                                          "checkpoint (Ctrl-C again: stop now)\n".encode())  # fmt: skip
        except (OSError, ValueError, AttributeError):  # a closed terminal, a closed stream, or none (sys.stdout None)
            pass

    def _previous(self, number):
        previous = self.previous.get(number)
        return signal.SIG_DFL if previous is None else previous

    def restore(self) -> None:
        for number in self.previous:
            late_repeat = self.hung_up and number in self.REPEATABLE  # the parent-death signal's later copies
            signal.signal(number, signal.SIG_IGN if late_repeat else self._previous(number))
        self.previous = {}


def add_metrics(sums: dict[str, list], metrics: dict[str, Any]) -> None:
    """Add one iteration's metrics (tensors, read only when logged: no host sync) to the log window's ``[sum, count]``
    per name, so that each logged value is the window's mean, not its last iteration's."""
    for name, value in metrics.items():
        if name in sums:
            sums[name][0] = sums[name][0] + value
            sums[name][1] += 1
        else:  # a copy: an agent may return the same tensor, overwritten, every iteration
            sums[name] = [value.detach().clone() if isinstance(value, torch.Tensor) else value, 1]


def window_means(sums: dict[str, list]) -> dict[str, Any]:
    return {name: total / count for name, (total, count) in sums.items()}


def _next(steps: int, every: int) -> int:
    """The first multiple of ``every`` after ``steps``."""
    return (steps // every + 1) * every if every > 0 else math.inf
