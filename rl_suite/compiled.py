"""Opt-in compilation of the hot loop: the policy's ``act``, the env's ``step`` and the buffer write.

Three modes, picked by ``make_collector(env, agent, buffer, mode)``:

- ``"none"``: the plain ``Collector``.
- ``"compile"``: ``torch.compile`` (inductor) of two pieces, each as one whole graph:
    - the env step after its action checks: physics, time limits, episode statistics and, with masked resets (the
      default on CUDA), the auto-reset (``VecEnv._step_until_resets``, ``_reset_ended``), with no host sync and no
      data-dependent shapes. On the CPU the few environments that ended are reset eagerly, by index. The checks
      stay eager: they are cheap, and on the CPU they read values, which would break the graph.
    - ``agent.act``.
  A piece that cannot be compiled as one graph (a graph break, an env that overrides ``step``, such as the
  adapters) runs eagerly, with a warning that says why: a graph broken into pieces is often slower than eager.
  Inductor's code rounds a little differently from eager kernels (1-2 ulp in transcendental functions, say). With
  ``exact=True`` (``RunConfig.compile_exact``), compiled trajectories on the CPU equal eager ones bitwise; that mode
  changes every compilation in the process and relies on private torch internals (``rl_suite.exact_compile``).
  Without it, compiling here changes nothing for other code that the process compiles.
- ``"cuda_graph"``: the whole collect (``steps`` times act + env step + buffer write + episode statistics) is
  captured once as one CUDA graph and replayed; CUDA devices only.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

from rl_suite.collector import Collector
from rl_suite.env import VecEnv
from rl_suite.exact_compile import enable_exact_cpu_numerics
from rl_suite.multiagent import MultiAgentCollector, MultiAgentVecEnv

MODES = ("none", "compile", "cuda_graph")

# Inductor settings for the compiled pieces, for their compilation alone. fallback_random: random ops call the eager
# kernels, so compiled sampling draws the same numbers from the same generator state as eager, in both modes.
INDUCTOR_OPTIONS = {"fallback_random": True}


# -- compiling the pieces -----------------------------------------------------------------------------------------


class WholeGraphOrEager:
    """``fn`` compiled as one graph (``fullgraph=True``). If it cannot be (a graph break), warn once with the reason
    and call ``fn`` eagerly from then on: a graph broken into pieces adds guards and copies and is often slower.
    Tracing fails before anything runs, so falling back repeats no side effect. ``exact``: see
    ``rl_suite.exact_compile``."""

    def __init__(self, fn: Callable, name: str, exact: bool = False, options: dict | None = None):
        if exact:
            enable_exact_cpu_numerics()
        self.eager, self.name = fn, name
        options = {**INDUCTOR_OPTIONS, **(options or {})}
        self.compiled = torch.compile(fn, fullgraph=True, dynamic=False, options=options)
        self.fallback_reason: str | None = None

    def __call__(self, *args, **kwargs):
        if self.compiled is not None:
            try:
                return self.compiled(*args, **kwargs)
            except torch._dynamo.exc.Unsupported as error:  # a graph break, or too many recompilations
                self.compiled = None
                self.fallback_reason = str(error).strip().splitlines()[0]
                warnings.warn(
                    f"torch.compile could not compile {self.name} as one graph, so it runs eagerly: "
                    f"{self.fallback_reason}",
                    stacklevel=2,
                )
        return self.eager(*args, **kwargs)


def compile_env_step(env: VecEnv, exact: bool = False, masked_resets: bool | None = None) -> Callable:
    """``env.step`` with its tensor work compiled; it returns what ``env.step`` does (the env's own buffers).

    With masked resets (the default on CUDA) the whole step compiles into one graph. With resets by index (the
    default on the CPU) the step compiles up to the resets, and the few environments that ended are reset eagerly
    by index: full-width masked draws cost more on the CPU than the fused kernels save, and the index path has
    data-dependent shapes. Both give the same results. Environments that override ``step`` (the adapters,
    wrappers) keep their eager step, with a warning."""
    if type(env).step is not VecEnv.step or type(env)._step_checked is not VecEnv._step_checked:
        warnings.warn(f"{type(env).__name__} overrides step, so compile mode runs it eagerly", stacklevel=2)
        return env.step
    masked = env.masked_resets if masked_resets is None else masked_resets

    def tensor_work(actions: torch.Tensor) -> None:
        _, terminated = env._step_until_resets(actions)
        # Where _advance returned its own tensor rather than the env's buffer, keep the buffer that step returns.
        env._terminated.copy_(terminated)
        if masked:
            env._reset_ended(True)

    work = WholeGraphOrEager(tensor_work, f"{type(env).__name__}.step", exact, options=env.compile_options)

    def step(actions: torch.Tensor):
        actions = env.check_actions(actions)
        if work.compiled is None:  # fell back to eager: the env's own step
            return env._step_checked(actions, masked)
        work(actions)
        if not masked:
            env._reset_ended(False)
        return env._obs, env._reward, env._terminated, env._truncated, env._step_info()

    step.compiled = work  # for tests and benchmarks: did it compile?
    return step


def compile_act(agent, exact: bool = False) -> Callable:
    """``agent.act`` compiled as one graph (or eager, with a warning, if it breaks)."""
    return WholeGraphOrEager(agent.act, f"{type(agent).__name__}.act", exact)


# -- collectors ---------------------------------------------------------------------------------------------------


class CompiledCollector(Collector):
    """The collector with the env step and ``agent.act`` compiled (``mode="compile"``); ``exact``: bitwise equal to
    eager on the CPU (``rl_suite.exact_compile``)."""

    def __init__(self, env: VecEnv, agent, buffer, exact: bool = False):
        super().__init__(env, agent, buffer, act=compile_act(agent, exact), step=compile_env_step(env, exact))


class GraphCollector(Collector):
    """The whole collect captured as one CUDA graph and replayed (``mode="cuda_graph"``).

    The first ``collect`` runs eagerly on a side stream: it is the real first rollout and the warm-up that
    capturing needs (cuBLAS handles, allocator pools, lazy initialisation). Then ``steps`` iterations of act + env
    step + buffer write + episode statistics are captured, with the buffer at the row it starts from; every later
    ``collect`` of the same length from the same row replays the graph. Everything that lives across steps is a
    static tensor (the collector's ``obs``, the env's state and buffers, the buffer's storage, the statistics), so
    replays read and write the same memory. The env steps through ``_step_checked`` with masked resets, without the
    action checks (they ran in the first collect; the graph replays the same shapes, dtypes and device).

    Needs an agent whose ``act`` does not synchronise with the host: capture fails otherwise, with an error that
    says so. With ``compiled=True``, the captured pieces are the ``torch.compile``-d ones (fewer, fused kernels).
    """

    def __init__(self, env: VecEnv, agent, buffer, compiled: bool = False):
        if env.device.type != "cuda":
            raise ValueError(
                f"the cuda_graph mode captures CUDA graphs and needs a CUDA device; the env is on {env.device}. "
                f"Use compile='compile' (or 'none') on {env.device.type}"
            )
        if type(env).step is not VecEnv.step or type(env)._step_checked is not VecEnv._step_checked:
            raise ValueError(f"the cuda_graph mode needs a native VecEnv; {type(env).__name__} overrides step")
        if not hasattr(buffer, "step"):
            raise ValueError(
                f"the cuda_graph mode supports rollout buffers (on-policy agents), whose collect always starts at "
                f"the same row; {type(buffer).__name__} moves on between collects"
            )
        if compiled:
            tensor_work = compile_env_step(env, masked_resets=True).compiled

            def step(actions):
                tensor_work(actions)
                return env._obs, env._reward, env._terminated, env._truncated, env._step_info()

        else:
            step = functools.partial(env._step_checked, masked_resets=True)
        super().__init__(env, agent, buffer, act=compile_act(agent) if compiled else agent.act, step=step)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.graph_key: tuple[int, int] | None = None  # (steps, the buffer row the graph starts writing at)
        self.graph_end = 0  # the buffer row after a replay

    def _checked_step(self, actions: torch.Tensor):
        return self.step_fn(self.env.check_actions(actions))

    @torch.no_grad()
    def collect(self, steps: int) -> None:
        key = (steps, self.buffer.step)
        if self.graph is not None and key == self.graph_key:
            self.graph.replay()
            self.buffer.step = self.graph_end
            return
        if self.graph is not None:
            warnings.warn(
                f"collect({steps}) from buffer row {key[1]} does not match the captured graph (steps, row) "
                f"{self.graph_key}: capturing again",
                stacklevel=2,
            )
        # The real rollout, eagerly on a side stream: the warm-up that capture needs. The checks run here once.
        side = torch.cuda.Stream(self.env.device)
        side.wait_stream(torch.cuda.current_stream(self.env.device))
        with torch.cuda.stream(side):
            self._collect(steps, self._checked_step)
        torch.cuda.current_stream(self.env.device).wait_stream(side)
        torch.cuda.synchronize(self.env.device)
        # Capture from the same starting row; capturing records kernels without running them, so the data of the
        # rollout just collected stays as it is.
        end, self.buffer.step = self.buffer.step, key[1]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._collect(steps, self.step_fn)
        except RuntimeError as error:
            self.graph = None
            raise RuntimeError(
                f"capturing the collect step in a CUDA graph failed ({error}). The usual cause is an op that waits "
                f"for the host inside agent.act or env.step, such as torch.multinomial (it checks its input with "
                f".item()), .item(), .tolist(), nonzero or boolean indexing; run with compile='compile' or 'none'"
            ) from error
        finally:
            self.buffer.step = end
        self.graph, self.graph_key, self.graph_end = graph, key, end


def make_collector(env: VecEnv, agent, buffer, mode: str = "none", exact: bool = False) -> Collector:
    """The collector for ``RunConfig.compile``: ``"none"``, ``"compile"`` or ``"cuda_graph"``; ``exact`` is
    ``RunConfig.compile_exact``. Teams get the ``MultiAgentCollector``, with the same two pieces compiled."""
    if mode not in MODES:
        raise ValueError(f"unknown compile mode {mode!r}; choose one of {MODES}")
    if exact and (mode != "compile" or env.device.type != "cpu"):
        raise ValueError(
            f"compile_exact makes compile='compile' round as eager does on the CPU; it does not apply to "
            f"compile={mode!r} on {env.device.type}. Turn compile_exact off, or use compile='compile' on the CPU"
        )
    if isinstance(env, MultiAgentVecEnv):
        if mode == "cuda_graph":
            raise ValueError("compile='cuda_graph' supports single-agent envs only; use 'compile' or 'none'")
        if mode == "none":
            return MultiAgentCollector(env, agent, buffer)
        return MultiAgentCollector(env, agent, buffer, act=compile_act(agent, exact), step=compile_env_step(env, exact))
    if mode == "none":
        return Collector(env, agent, buffer)
    if mode == "compile":
        return CompiledCollector(env, agent, buffer, exact)
    return GraphCollector(env, agent, buffer)
