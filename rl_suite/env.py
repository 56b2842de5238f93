"""The batched environment contract: one ``VecEnv`` for native simulators and adapters alike.

A ``VecEnv`` holds ``num_envs`` environments as tensors on one ``device`` and advances all of them with one
call. Shapes, with ``N = num_envs``:

- ``reset(seed=None) -> obs``: float32 ``[N, *observation_space.shape]``.
- ``step(actions) -> (obs, reward, terminated, truncated, info)``:
    - ``actions``: a tensor on ``device``; integers ``[N]`` for ``Discrete``, ``[N, k]`` for ``MultiDiscrete``,
      floats ``[N, *action_space.shape]`` for ``Box``.
    - ``obs`` float32 ``[N, ...]``, ``reward`` float32 ``[N]``, ``terminated`` and ``truncated`` bool ``[N]``.
      Time limits are truncation, never termination; both can be true at once.
    - Environments whose episode ended reset inside the same step: ``obs`` is then the first observation of
      the new episode. ``info`` holds, as tensors:
        - ``final_obs`` ``[N, ...]``: the observation this step reached, before any reset (equal to ``obs``
          where nothing ended). Bootstrap truncated episodes from it.
        - ``done`` bool ``[N]``: ``terminated | truncated``, the episodes that ended in this step.
        - ``episode_return`` float32 ``[N]`` and ``episode_length`` int32 ``[N]``: the undiscounted return
          and the length of each ended episode, zero where ``done`` is false. No host sync is needed.

The tensors returned by ``reset`` and ``step`` are buffers owned by the environment and are overwritten by
the next ``reset`` or ``step``: clone what you keep. Observation and action spaces describe one environment.

Native simulators subclass ``VecEnv`` and implement three hooks over their batched physical state (``_advance``,
``_observe``, ``_reset_envs``, plus ``_state_view`` for ``get_state``/``set_state``); the shared ``reset`` and
``step`` here do the rest: checks, time limits, auto-reset and episode statistics. Adapters of outside simulators
override ``reset`` and ``step`` themselves: ``check_actions`` checks what they are given, and they hand what the
outside simulator returned to ``start_episodes`` (after its reset) and ``finish_step`` (after its step), which keep
the buffers, the episode statistics and ``info``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rl_suite.device import resolve_device
from rl_suite.rng import EnvStreams


def check_num_envs(num_envs: Any) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs <= 0:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    return int(num_envs)


class Selection(NamedTuple):
    """Which environments an operation touches.

    By index (``ids``), work scales with the number chosen, but counting them is a host sync on CUDA. By
    ``mask``, the work is full width and needs no sync. Both give identical results.
    """

    ids: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def uniform(self, rng: EnvStreams, low, high, size: int, dtype: torch.dtype) -> torch.Tensor:
        return rng.uniform(low, high, size, env_ids=self.ids, mask=self.mask, dtype=dtype)

    def normal(self, rng: EnvStreams, size: int, dtype: torch.dtype) -> torch.Tensor:
        return rng.normal(size, env_ids=self.ids, mask=self.mask, dtype=dtype)

    def read(self, src: torch.Tensor) -> torch.Tensor:
        """The selected rows of ``src`` (by index), or all of them (by mask): the rows ``uniform`` draws for."""
        return src if self.ids is None else src.index_select(0, self.ids)

    def write(self, dst: torch.Tensor, values: torch.Tensor) -> None:
        """Write ``values`` into the selected rows of ``dst`` (environment axis first)."""
        if self.ids is not None:
            dst.index_copy_(0, self.ids, values.to(dst.dtype))
        else:
            mask = self.mask.view(-1, *([1] * (dst.dim() - 1)))
            dst.copy_(torch.where(mask, values, dst))


class VecEnv:
    """``num_envs`` environments advanced together on ``device``. See the module docstring for shapes.

    Args:
        num_envs: how many environments.
        device: where every tensor lives.
        observation_space, action_space: gymnasium spaces of one environment.
        max_episode_steps: episodes are truncated after this many steps; ``None`` for no limit.
        seed: seed of the per-environment random streams; ``None`` draws one from the operating system.
        check_values: check action values (range, finiteness). They need a host sync, so they default
            to on for the CPU and off for other devices. Shapes, dtypes and devices are always checked.
        masked_resets: reset ended environments with full-width masked operations (no host sync) rather
            than by index. Defaults to on for non-CPU devices. Results are identical either way.
    """

    env_id: str | None = None
    """The registered id ``rl_suite.make`` built this env from; None for an env built directly."""
    env_kwargs: dict | None = None
    """The keywords ``rl_suite.make`` was given beyond ``num_envs``, ``device`` and ``seed`` (those the registry adds
    are not among them): ``Agent.learn`` builds its evaluation env with the same ones."""
    reward_threshold: float | None = None
    critic_observation_space: gym.Space | None = None
    """A privileged observation for an asymmetric critic, where the env has one (``offer_critic_observation``)."""
    episode_metric_names: tuple[str, ...] = ()
    """Task metrics that ``step`` reports per ended episode in ``info["episode_metrics"]`` (``{name: float32 [N]}``,
    valid where ``info["done"]``; NaN for an episode where the metric is undefined): a legged task's tracking error
    and falls. The collector averages them over the episodes that ended (``rollout/<name>`` in TensorBoard) and
    evaluation over its episodes (``eval/<name>``), both skipping NaN."""
    compile_options: dict = {"cpp.simdlen": 0}
    """Inductor options for compiling this env's step (``rl_suite.compiled.compile_env_step``). Scalar C++ for the
    CPU by default (GCC still vectorises the plain loops): inductor's AVX2 code stores bool tensors (done, terminated,
    truncated) about 7 times slower than its scalar code, which made CartPole's compiled step at N = 65536 2x slower
    than eager; scalar, 1.2x (torch 2.13, 2-core AMD EPYC). CUDA code is not affected. A task whose kernels vectorise
    well (gathers and minima over many candidates) sets ``{}``."""

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device,
        observation_space: gym.Space,
        action_space: gym.Space,
        max_episode_steps: int | None = None,
        seed: int | None = None,
        check_values: bool | None = None,
        masked_resets: bool | None = None,
    ):
        self.num_envs = n = check_num_envs(num_envs)
        self.device = device = resolve_device(device)
        self.observation_space = observation_space
        self.action_space = action_space
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or max_episode_steps <= 0
        ):
            raise ValueError(f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}")
        self.max_episode_steps = max_episode_steps
        on_cpu = device.type == "cpu"
        self.check_values = on_cpu if check_values is None else bool(check_values)
        self.masked_resets = (not on_cpu) if masked_resets is None else bool(masked_resets)
        self.rng = EnvStreams(n, device, seed)
        self._action_shape = (n, *action_space.shape)

        obs_shape = (n, *observation_space.shape)
        self._obs = torch.zeros(obs_shape, device=device)
        self._final_obs = torch.zeros(obs_shape, device=device)
        # Per-step increments of the running episode statistics: row 0 is the reward buffer that simulators write,
        # row 1 is ones (one step more), so one add updates both statistics.
        self._increment = torch.ones(2, n, device=device)
        self._reward = self._increment[0].zero_()
        self._terminated = torch.zeros(n, device=device, dtype=torch.bool)
        self._truncated = torch.zeros(n, device=device, dtype=torch.bool)
        self._done = torch.zeros(n, device=device, dtype=torch.bool)
        # (return, length) of the running episodes, and of those that ended this step. Float32 counts steps
        # exactly up to 2**24 per episode.
        self._running = torch.zeros(2, n, device=device)
        self._final = torch.zeros(2, n, device=device)
        self._final_length = torch.zeros(n, device=device, dtype=torch.int32)
        self._done_float = torch.zeros(n, device=device)
        self._all_envs = Selection(ids=torch.arange(n, device=device))

    # -- the contract -------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Start a new episode in every environment; with ``seed``, restart the random streams first."""
        if seed is not None:
            self.rng.seed(seed)
        self._running.zero_()
        self._reset_envs(self._all_envs)
        self._observe_current()
        return self._obs

    def step(self, actions: torch.Tensor):
        """Advance every environment by one step; see the module docstring."""
        return self._step_checked(self.check_actions(actions), self.masked_resets)

    def _step_checked(self, actions: torch.Tensor, masked_resets: bool):
        """``step`` after the action checks. With ``masked_resets`` it is pure tensor work, with no host sync and no
        data-dependent shapes: what ``rl_suite.compiled`` compiles and captures in CUDA graphs."""
        reward, terminated = self._step_until_resets(actions)
        self._reset_ended(masked_resets)
        return self._obs, reward, terminated, self._truncated, self._step_info()

    def _step_until_resets(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Physics, time limits and episode statistics, up to the resets: pure tensor work. Returns ``_advance``'s
        ``(reward, terminated)``; ``self._done`` holds the episodes that ended."""
        reward, terminated = self._advance(actions)
        self._running.add_(self._increment)
        truncated = self._truncated
        if self.max_episode_steps is not None:
            torch.ge(self._running[1], self.max_episode_steps, out=truncated)
        done = torch.logical_or(terminated, truncated, out=self._done)
        self._observe_final()
        self._close_episodes(done)
        return reward, terminated

    def _reset_ended(self, masked_resets: bool) -> None:
        """Start new episodes where ``self._done`` says they ended, and observe the current state."""
        done = self._done
        if masked_resets:
            self._reset_envs(Selection(mask=done))
            self._observe_current()
        else:  # on the CPU, counting the ended environments costs no device sync, and work scales with them
            ids = done.nonzero().squeeze(1)
            if ids.numel():
                self._reset_envs(Selection(ids=ids))
            self._observe_current(ids)

    def get_state(self) -> torch.Tensor:
        """A copy of the batched physical state, ``[N, ...]`` on ``device``."""
        return self._state_view().clone(memory_format=torch.contiguous_format)

    def set_state(self, state, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Set the physical state of all environments (or of ``env_ids``) and return the new observations.

        Only the physics changes: step counters and episode statistics carry on. ``state`` is ``[N, ...]`` as
        ``get_state`` returns it, or ``[len(env_ids), ...]``. Simulators whose state has several parts take one
        argument per part, in ``get_state``'s order, before ``env_ids`` (``MujocoVecEnv.set_state(qpos, qvel,
        env_ids=None)``): that is how a task with structured state extends this method.
        """
        self._write_state(self._state_view(), state, env_ids)
        self._observe_current()
        return self._obs

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Everything that decides what the environments do next: the physical state, the random streams, the
        running episode statistics and the current observations. Checkpoints hold it, so a resumed run continues
        exactly. Adapters of outside simulators cannot offer it."""
        return {"state": self._state_view().clone(), **self._episode_state_dict()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self._state_view().copy_(state["state"])
        self._load_episode_state_dict(state)

    def close(self) -> None:
        """Release outside resources (processes, windows); native simulators hold none."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        name = f"{self.env_id}, " if self.env_id else ""
        return f"{type(self).__name__}({name}num_envs={self.num_envs}, device={self.device})"

    # -- hooks for native simulators ----------------------------------------------------------------------

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance the physics of every environment in place; return ``self._reward`` (written by the hook) and a
        bool terminated tensor."""
        raise NotImplementedError

    def _observe(self, out: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Write the observation of the current state into ``out``: every row, or only the rows ``env_ids``."""
        raise NotImplementedError

    def _reset_envs(self, selection: Selection) -> None:
        """Draw initial states for the selected environments from their random streams."""
        raise NotImplementedError

    def _state_view(self) -> torch.Tensor:
        """The physical state as a writable ``[N, ...]`` view, for simulators whose state is one tensor."""
        raise NotImplementedError(f"{type(self).__name__} does not expose its physical state")

    # -- shared helpers -----------------------------------------------------------------------------------

    def _episode_state_dict(self) -> dict[str, torch.Tensor]:
        """The part of ``state_dict`` that every native simulator shares: the random streams, the running episode
        statistics and the current observations. Simulators whose state is not one tensor add theirs to it."""
        return {"streams": self.rng.get_state(), "running": self._running.clone(), "obs": self._obs.clone()}

    def _load_episode_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.rng.set_state(state["streams"])
        self._running.copy_(state["running"])
        self._obs.copy_(state["obs"])

    def _observe_final(self) -> None:
        """Observe what each environment reached in this step, before any reset (``info["final_obs"]``)."""
        self._observe(self._final_obs)

    def _observe_current(self, env_ids: torch.Tensor | None = None) -> None:
        """Observe the current state: every row, or only the rows ``env_ids`` that were reset (the others are
        unchanged since ``_observe_final``). Multi-agent envs extend this with their global state and masks."""
        if env_ids is None:
            self._observe(self._obs)
        else:
            self._obs.copy_(self._final_obs)
            if env_ids.numel():
                self._observe(self._obs, env_ids)

    def _close_episodes(self, done: torch.Tensor) -> None:
        """Report the return and length of the episodes that ended, and start counting their successors."""
        # Multiplying by a float copy of the mask is much faster on the CPU than masked_fill_ or where, and a
        # bool->float copy is faster through uint8 (eagerly: under torch.compile the bitcast view costs 60 times more
        # than the cast, which inductor fuses; rl_suite/compiled.py).
        uint8_view = not torch.compiler.is_compiling()
        done_float = self._done_float.copy_(done.view(torch.uint8) if uint8_view else done)
        torch.mul(self._running, done_float, out=self._final)
        self._running.sub_(self._final)
        self._final_length.copy_(self._final[1])

    @property
    def critic_obs(self) -> torch.Tensor | None:
        """The critic's observation of the current state, ``[N, *critic_observation_space.shape]`` (after ``reset``
        or ``step``, as ``info["critic_obs"]``), where the env offers one; else ``None``."""
        return self._critic_obs if self.critic_observation_space is not None else None

    def offer_critic_observation(self, space: gym.spaces.Box) -> None:
        """Declare a privileged critic observation of one environment's ``space``: ``step`` then reports
        ``info["critic_obs"]`` and ``info["final_critic_obs"]`` (``[N, *space.shape]``). Adapters pass them to
        ``start_episodes`` and ``finish_step``; native simulators write ``self._critic_obs`` and
        ``self._final_critic_obs`` as they write ``_obs``."""
        self.critic_observation_space = space
        self._critic_obs = torch.zeros((self.num_envs, *space.shape), device=self.device)
        self._final_critic_obs = torch.zeros_like(self._critic_obs)

    # -- for adapters of outside simulators ---------------------------------------------------------------

    def start_episodes(
        self, obs: torch.Tensor, critic_obs: torch.Tensor | None = None, env_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Record the first observations of new episodes that an outside simulator started, and restart their
        episode statistics; returns the observations, as ``reset`` does.

        Args:
            obs: ``[N, *observation_space.shape]``, on any device.
            critic_obs: ``[N, *critic_observation_space.shape]``, where the env offers one
                (``offer_critic_observation``); else ``None``.
            env_ids: ``None`` for every environment (after a full reset); or the rows, a 1-D integer tensor on
                ``device``, that an adapter reset itself after ``finish_step``: only those rows of ``obs`` and
                ``critic_obs`` are read, and the others keep what ``finish_step`` recorded.
        """
        for buffer, value in self._adapter_buffers("start_episodes", obs=obs, critic_obs=critic_obs):
            if env_ids is None:
                buffer.copy_(value)
            else:
                buffer.index_copy_(0, env_ids, value.to(self.device).index_select(0, env_ids).to(buffer.dtype))
        if env_ids is None:
            self._running.zero_()
        else:
            self._running.index_fill_(1, env_ids, 0.0)
        return self._obs

    def finish_step(
        self,
        obs: torch.Tensor,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        final_obs: torch.Tensor | None = None,
        critic_obs: torch.Tensor | None = None,
        final_critic_obs: torch.Tensor | None = None,
    ):
        """Record one step of an outside simulator and return it as the contract's ``(obs, reward, terminated,
        truncated, info)``, with the episode statistics updated (no host sync). The inputs may be on any device;
        they are copied into the env's buffers, which the tensors returned are.

        Args:
            obs: ``[N, *observation_space.shape]``, the current observations: where an episode ended and the
                simulator reset it, the first of the new one (an adapter that resets afterwards writes those rows
                with ``start_episodes(..., env_ids=...)``).
            reward: ``[N]``. terminated, truncated: bool ``[N]``.
            final_obs: ``[N, ...]``, the observations this step reached before any reset (``info["final_obs"]``);
                ``None`` when they are ``obs`` (nothing was reset yet, or the simulator cannot tell).
            critic_obs, final_critic_obs: the same for the critic's observation, where the env offers one
                (``offer_critic_observation``); ``final_critic_obs`` defaults to ``critic_obs``.
        """
        outputs = self._adapter_buffers(
            "finish_step",
            obs=obs,
            final_obs=obs if final_obs is None else final_obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            critic_obs=critic_obs,
            final_critic_obs=critic_obs if final_critic_obs is None else final_critic_obs,
        )
        for buffer, value in outputs:
            buffer.copy_(value)
        self._running.add_(self._increment)
        self._close_episodes(torch.logical_or(self._terminated, self._truncated, out=self._done))
        return self._obs, self._reward, self._terminated, self._truncated, self._step_info()

    def _adapter_buffers(self, method: str, **outputs) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(buffer, value)`` for each output an adapter hands to ``method`` by name (``obs``, ``reward``, ...: the
        buffer is ``self._<name>``), checked: a shape other than the buffer's (which ``copy_`` would broadcast) or
        critic observations where the env offers none, or none where it does, are refused."""
        name = f"{type(self).__name__}.{method}"
        offered = self.critic_observation_space is not None
        if offered != (outputs["critic_obs"] is not None):
            raise ValueError(
                f"{name} got critic_obs={'None' if outputs['critic_obs'] is None else 'a tensor'}, but the env "
                f"{'offers' if offered else 'does not offer'} a critic observation (offer_critic_observation)"
            )
        pairs = []
        for output, value in outputs.items():
            if value is None:  # the critic's, where the env has none
                continue
            buffer = getattr(self, f"_{output}")
            if not isinstance(value, torch.Tensor) or value.shape != buffer.shape:
                got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"{name} expects {output} as a tensor of shape {tuple(buffer.shape)}, got {got}")
            pairs.append((buffer, value))
        return pairs

    def _step_info(self) -> dict[str, torch.Tensor]:
        info = {
            "final_obs": self._final_obs,
            "done": self._done,
            "episode_return": self._final[0],
            "episode_length": self._final_length,
        }
        if self.critic_observation_space is not None:
            info["critic_obs"] = self._critic_obs
            info["final_critic_obs"] = self._final_critic_obs
        return info

    def check_actions(self, actions) -> torch.Tensor:
        """Return ``actions`` if they fit the action space, else raise an error that says what was expected."""
        space, name = self.action_space, type(self).__name__
        if not isinstance(actions, torch.Tensor):
            raise TypeError(
                f"{name}.step expects actions as a torch.Tensor on {self.device}, got {type(actions).__name__}; "
                f"convert with torch.as_tensor(actions, device=env.device)"
            )
        if tuple(actions.shape) != self._action_shape:
            raise ValueError(
                f"{name}.step expects actions of shape {self._action_shape} ([num_envs, *action_space.shape] "
                f"for {space}), got {tuple(actions.shape)}"
            )
        if actions.device != self.device:
            raise ValueError(f"{name}.step expects actions on {self.device}, got actions on {actions.device}")
        discrete = isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
        if discrete and (actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool):
            raise TypeError(f"{name}.step expects integer actions for {space}, got dtype {actions.dtype}")
        if not discrete and not actions.dtype.is_floating_point:
            raise TypeError(f"{name}.step expects floating-point actions for {space}, got dtype {actions.dtype}")
        if self.check_values:
            if discrete:
                self._check_action_range(actions)
            elif not bool(torch.isfinite(actions).all()):
                bad = (~torch.isfinite(actions)).reshape(self.num_envs, -1).any(1).nonzero().squeeze(1)
                first = int(bad[0])
                raise ValueError(
                    f"{name}.step got non-finite actions in {bad.numel()} of {self.num_envs} environments "
                    f"(first: env {first}, action {actions[first].tolist()})"
                )
        return actions

    def _check_action_range(self, actions: torch.Tensor) -> None:
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            low, high = int(space.start), int(space.start + space.n)
            smallest, largest = torch.aminmax(actions)  # one pass; comparisons into bool cost several
            if int(smallest) >= low and int(largest) < high:
                return
        else:
            low = torch.as_tensor(np.asarray(space.start), device=self.device)
            high = low + torch.as_tensor(np.asarray(space.nvec), device=self.device)
            if not bool(((actions < low) | (actions >= high)).any()):
                return
        outside = ((actions < low) | (actions >= high)).reshape(self.num_envs, -1).any(1)
        bad = outside.nonzero().squeeze(1)
        first = int(bad[0])
        valid = f"{low} to {high - 1}" if isinstance(low, int) else f"{low.tolist()} to {(high - 1).tolist()}"
        raise ValueError(
            f"{type(self).__name__}.step got actions outside {space} (valid: {valid}) in {bad.numel()} of "
            f"{self.num_envs} environments (first: env {first}, action {actions[first].tolist()})"
        )

    def _write_state(self, dst: torch.Tensor, state, env_ids: torch.Tensor | None, what: str = "state") -> None:
        """Check ``state`` against ``dst`` (``[N, ...]``) and write it into all rows or into ``env_ids``."""
        name = type(self).__name__
        state = torch.as_tensor(state)
        if env_ids is not None:
            env_ids = torch.as_tensor(env_ids, device=self.device)
            if env_ids.dim() != 1 or env_ids.dtype.is_floating_point or env_ids.dtype == torch.bool:
                raise ValueError(f"{name}.set_state expects env_ids as a 1-D integer tensor, got {env_ids!r}")
            if env_ids.numel() and (int(env_ids.min()) < 0 or int(env_ids.max()) >= self.num_envs):
                raise ValueError(f"{name}.set_state got env_ids outside [0, {self.num_envs})")
        rows = self.num_envs if env_ids is None else env_ids.numel()
        expected = (rows, *dst.shape[1:])
        if tuple(state.shape) != expected:
            raise ValueError(f"{name}.set_state expects {what} of shape {expected}, got {tuple(state.shape)}")
        if not torch.isfinite(state).all():
            raise ValueError(f"{name}.set_state got a non-finite {what}")
        state = state.to(device=self.device, dtype=dst.dtype)
        if env_ids is None:
            dst.copy_(state)
        else:
            dst[env_ids] = state
