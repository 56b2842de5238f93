"""The deterministic policies agents hand to export: plain modules from raw observations to ready actions.

``Agent.inference_policy()`` returns an ``InferencePolicy``: a module whose ``forward(obs, *extra)`` computes the
action ``act(..., deterministic=True)`` would, with observation normalisation, action scaling and clipping inside,
and which describes its inputs and output for the exported file's metadata. The pieces agents compose it from:

- ``FrozenNorm`` and ``FrozenScale``: a ``RunningNorm`` and an ``ActionScaler`` as float32 constants;
- ``MLPInference``: normalise, a network, then the argmax of its logits or its (optionally tanh-squashed) mean scaled
  to the bounds (PPO, SAC, PQL);
- ``FlowInference``: a flow policy's sampler unrolled from zero noise (FPO, PolicyFlow);
- ``JointOffsets``: around any of these, for a legged robot: the action clipped and scaled into the joint position
  offsets from the default pose, as the task turns actions into PD targets.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import nn

from rl_suite.networks import scale_action


class ExportError(ValueError):
    """An agent that cannot be exported, or an exported file that disagrees with the agent."""


def tensor_spec(name: str, shape: tuple[int, ...], dtype: str) -> dict[str, Any]:
    """One input or output of an exported policy, as its metadata records it: a dynamic ``batch`` axis first."""
    return {"name": name, "shape": ["batch", *(int(size) for size in shape)], "dtype": dtype}


def action_spec(action_space: gym.Space) -> dict[str, Any]:
    """The output of a policy acting in ``action_space``: indices (int64) for discrete actions, else float32."""
    if isinstance(action_space, gym.spaces.Discrete):
        return tensor_spec("action", (), "int64")
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return tensor_spec("action", action_space.shape, "int64")
    return tensor_spec("action", action_space.shape, "float32")


class FrozenNorm(nn.Module):
    """Observation normalisation with fixed statistics, ``clip((x - mean) / sqrt(var + eps), -clip, clip)`` with
    ``sqrt`` taken in float64 and the constants stored in float32 (``RunningNorm``'s and SB3's ``VecNormalize``'s
    arithmetic); the identity without statistics."""

    def __init__(self, stats: tuple[Any, Any, float, float] | None = None):
        """``stats``: ``(mean, var, eps, clip)``, arrays or tensors; ``None`` for the identity."""
        super().__init__()
        self.enabled = stats is not None
        if self.enabled:
            mean, var, eps, clip = stats
            self.clip = float(clip)
            var = torch.as_tensor(var, dtype=torch.float64).detach().cpu()
            self.register_buffer("mean", torch.as_tensor(mean).detach().float().cpu().clone())
            self.register_buffer("std", torch.sqrt(var + eps).float())

    @classmethod
    def of(cls, normalizer: nn.Module) -> FrozenNorm:
        """A ``RunningNorm``'s current statistics, or the identity for an agent that does not normalise."""
        if not hasattr(normalizer, "mean"):
            return cls()
        return cls((normalizer.mean, normalizer.var, normalizer.eps, normalizer.clip))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        return ((x - self.mean) / self.std).clamp(-self.clip, self.clip)


class FrozenScale(nn.Module):
    """``ActionScaler``'s forward, in either of its modes: ``scale`` clips to [-1, 1] where the env's bounds are
    finite, then maps to the bounds; ``clip`` clips the action itself to the bounds."""

    def __init__(self, scaler: nn.Module):
        super().__init__()
        for name in ("center", "half_range", "bounded"):
            self.register_buffer(name, getattr(scaler, name).detach().cpu().clone())
        self.clip = bool(getattr(scaler, "clip", False))

    def forward(self, action: torch.Tensor) -> torch.Tensor:
        return scale_action(action, self.center, self.half_range, self.bounded, self.clip)


class InferencePolicy(nn.Module):
    """An agent's deterministic policy as a stateless module: ``forward(obs, *extra)`` maps raw float32
    observations ``[B, *observation_shape]`` (and the inputs after them) to the actions in the env's units.

    What it tells the exporter:

    - ``inputs`` and ``output``: name, shape (a dynamic ``batch`` axis first) and dtype of each forward argument,
      ``obs`` first, and of the action; they go to the file's metadata, and the input names are the keys a
      multi-agent agent's ``act`` takes them by.
    - ``norm``: the observation normalisation (a ``FrozenNorm``); parity observations are drawn around its
      statistics.
    - ``parity_inputs(count, seed)``: values for the inputs after ``obs`` to check the file with (none by default).
    - ``observation_space``, ``action_space`` and ``multiagent``: recorded in the metadata.
    """

    multiagent: ClassVar[bool] = False

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, norm: FrozenNorm):
        super().__init__()
        self.observation_space, self.action_space = observation_space, action_space
        self.norm = norm
        self.inputs = [tensor_spec("obs", observation_space.shape, "float32")]
        self.output = action_spec(action_space)

    def parity_inputs(self, count: int, seed: int) -> list[torch.Tensor]:
        """``count`` values of each input after ``obs``, for the parity check."""
        return []


def random_availability(action_space: gym.spaces.MultiDiscrete, count: int, seed: int) -> torch.Tensor:
    """``count`` random availability masks ``[count, A, n]`` for a team's parity check: each agent has at least one
    available action, and only actions it has (agent a has ``nvec[a]`` of the ``n`` columns)."""
    generator = torch.Generator().manual_seed(seed + 1)
    nvec = torch.as_tensor(action_space.nvec)
    num_agents, n_actions = len(nvec), int(nvec.max())
    exists = torch.arange(n_actions) < nvec.unsqueeze(-1)  # [A, n]
    avail = (torch.rand(count, num_agents, n_actions, generator=generator) < 0.6) & exists
    first = torch.randint(0, 1 << 30, (count, num_agents), generator=generator) % nvec
    return avail.scatter_(-1, first.unsqueeze(-1), True)


def frozen(policy: InferencePolicy) -> InferencePolicy:
    """A copy of ``policy`` that shares nothing with the agent: on the CPU, in eval mode, without gradients."""
    return copy.deepcopy(policy).cpu().eval().requires_grad_(False)


class MLPInference(InferencePolicy):
    """normalise -> net -> head: the argmax of the logits (``Discrete`` actions), or the mean (the first half of a
    mean/log-std output with ``split``), its ``tanh`` with ``tanh``, then scaled to the bounds by ``scaler``."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        normalizer: nn.Module,
        net: nn.Module,
        scaler: nn.Module | None = None,
        split: bool = False,
        tanh: bool = False,
    ):
        super().__init__(observation_space, action_space, FrozenNorm.of(normalizer))
        self.net = net
        self.argmax = isinstance(action_space, gym.spaces.Discrete)
        self.scale = None if self.argmax else FrozenScale(scaler)
        self.split, self.tanh = split, tanh

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(self.norm(obs))
        if self.argmax:
            return out.argmax(-1)
        if self.split:
            out = out.chunk(2, dim=-1)[0]
        if self.tanh:
            out = torch.tanh(out)
        return self.scale(out)


class FlowInference(InferencePolicy):
    """A ``FlowPolicy``'s sampler unrolled: ``flow.steps`` Euler steps from zero noise, then scaling."""

    def __init__(
        self, observation_space: gym.Space, action_space: gym.Space, normalizer: nn.Module, flow: nn.Module, scaler
    ):
        super().__init__(observation_space, action_space, FrozenNorm.of(normalizer))
        self.flow, self.scale = flow, FrozenScale(scaler)
        self.times = [float(t) for t in flow.schedule().cpu()]  # the sampler's grid, 1 down to 0
        self.act_dim = int(flow.act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = self.norm(obs)
        zeros = torch.zeros_like(obs[..., :1])  # [B, 1], batch size followed dynamically
        x = zeros + torch.zeros(self.act_dim, dtype=obs.dtype)  # [B, act_dim]: the zero noise
        times = torch.tensor(self.times, dtype=obs.dtype)
        for k in range(len(self.times) - 1):
            t = zeros + times[k]
            x = x + (times[k + 1] - times[k]) * self.flow.velocity(obs, x, t)
        return self.scale(x)


def actions_from_offsets(offsets, action_scale):
    """``JointOffsets``' output back in the task's action units: each joint's offset divided by its action scale (a
    joint of scale 0 keeps its value). Numpy arrays or torch tensors."""
    return offsets / (action_scale + (action_scale == 0))


class JointOffsets(InferencePolicy):
    """A legged robot's policy: ``policy``'s action clipped to ``[-clip, clip]`` and multiplied by each joint's
    ``action_scale``, the offsets from the default pose that the robot's PD controllers track (target =
    default_joint_pos + output), as the legged tasks compute them (rl_suite/envs/robots/velocity.py)."""

    def __init__(self, policy: InferencePolicy, action_scale, clip: float):
        super().__init__(policy.observation_space, policy.action_space, policy.norm)
        self.policy, self.clip = policy, float(clip)
        self.register_buffer("action_scale", torch.as_tensor(action_scale, dtype=torch.float32).clone())
        self.output = tensor_spec("joint_pos_offset", policy.action_space.shape, "float32")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy(obs).clamp(-self.clip, self.clip) * self.action_scale
