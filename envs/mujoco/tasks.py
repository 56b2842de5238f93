"""gymnasium's eleven v5 MuJoCo tasks, each written once in torch over the physics fields.

Every task keeps gymnasium's defaults and keyword arguments (same names, same meaning): observations,
rewards and their terms, health and termination rules, reset noise, frame skip and time limit. Fields are read
as gymnasium reads them from ``MjData`` after ``mj_step`` and ``mj_rnePostConstraint``: ``qpos``/``qvel`` are the
new state, while derived fields (``xpos``, ``cfrc_ext``, ``cinert``, ...) come from the last evaluation inside the
step (the last substep's start, or with RK4 its last stage). ``rows`` below is a ``PhysicsRows``: ``rows.qpos`` and
``rows.xpos`` are ``[n, ...]`` tensors.

Initial states are drawn from each environment's own random stream with gymnasium's distributions. Where
gymnasium uses rejection sampling (the goals of Reacher and Pusher), we draw the same distribution without a
loop: Reacher's goal uniformly on the disc, Pusher's cylinder as the first accepted of 32 candidates (a rejection
rate of 0.38 per candidate leaves about 4e-14 of resets on the last candidate).
"""

from __future__ import annotations

import difflib
import inspect
import math
from dataclasses import dataclass

import mujoco
import torch

from rl_suite.env import Selection
from rl_suite.registry import MUJOCO_TASKS
from rl_suite.rng import EnvStreams

Tensor = torch.Tensor


class MujocoTask:
    """What differs between tasks. Each task is a dataclass whose fields are its gymnasium keyword arguments, with
    gymnasium's names, defaults and meaning (``make_task`` builds a task from them); its class attributes are the
    task's fixed facts, declared below."""

    xml_file: str
    frame_skip: int
    max_episode_steps: int = 1000
    reward_threshold: float | None = None
    fields: tuple[str, ...] = ()  # derived MjData fields read by observe/reward/position
    position_size = 1  # how many numbers position() tracks; velocity = their change over dt

    reset_noise_scale: float
    """The scale of the initial state's noise around the model's, read by ``initial_state`` and the noise helpers
    below: a field of every task that draws its noise with them."""
    timestep: float
    """The compiled model's physics timestep, set by ``bind``."""

    def bind(self, model: mujoco.MjModel, device: torch.device, dtype: torch.dtype) -> None:
        """Resolve names and constants of the compiled model."""
        self.timestep = model.opt.timestep

    def observation_size(self, model: mujoco.MjModel) -> int:
        raise NotImplementedError

    def position(self, rows) -> Tensor:
        """The tracked position ``[n, position_size]``: by default the root's first coordinates (x, or x and y)
        in ``qpos``, which gymnasium reads before and after the step."""
        return rows.qpos[:, : self.position_size]

    def observe(self, rows) -> list[Tensor]:
        """The observation's parts, ``[n, k]`` each, concatenated in order."""
        raise NotImplementedError

    def reward(self, rows, action: Tensor, velocity: Tensor) -> tuple[Tensor, Tensor]:
        """``(reward [N], terminated [N] bool)`` after a step; ``velocity`` is ``[N, position_size]``."""
        raise NotImplementedError

    def initial_state(self, selection: Selection, rng: EnvStreams, qpos0: Tensor, qvel0: Tensor):
        """``(qpos, qvel)`` of the selected environments' new episodes: by default gymnasium's uniform noise of
        ``reset_noise_scale`` around the model's initial state, on positions and velocities."""
        return self._uniform_noise(selection, rng, qpos0), self._uniform_noise(selection, rng, qvel0)

    def _uniform_noise(self, selection: Selection, rng: EnvStreams, around: Tensor, scale: float | None = None):
        scale = self.reset_noise_scale if scale is None else scale
        return selection.uniform(rng, -scale, scale, around.numel(), around.dtype).add_(around)

    def _normal_noise(self, selection: Selection, rng: EnvStreams, around: Tensor):
        return selection.normal(rng, around.numel(), around.dtype).mul_(self.reset_noise_scale).add_(around)


def _ctrl_cost(weight: float, action: Tensor) -> Tensor:
    return action.square().sum(1).mul_(weight)


def _body_id(model: mujoco.MjModel, body: int | str) -> int:
    if isinstance(body, str):
        index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
        if index < 0:
            raise ValueError(f"the model has no body named {body!r}")
        return index
    return int(body)


def _within(x: Tensor, bounds: tuple[float, float]) -> Tensor:
    """``low < x < high``, strictly, as gymnasium's health checks compare."""
    return (x > bounds[0]) & (x < bounds[1])


class _Locomotion(MujocoTask):
    """A task that observes its joint positions and velocities, less the root's first ``excluded_positions``
    coordinates (x, or x and y) when its field ``exclude_current_positions_from_observation`` is set."""

    excluded_positions = 1
    exclude_current_positions_from_observation: bool

    def __post_init__(self):
        self.skip = self.excluded_positions * int(self.exclude_current_positions_from_observation)

    def observation_size(self, model):
        return model.nq + model.nv - self.skip

    def observe(self, rows):
        return [rows.qpos[:, self.skip :], rows.qvel]


# -- locomotion in the plane ------------------------------------------------------------------------------


@dataclass(eq=False)
class HalfCheetah(_Locomotion):
    """Run forward: reward ``forward_reward_weight * x_velocity - ctrl_cost_weight * |a|^2``; never terminates."""

    xml_file, frame_skip, reward_threshold = "half_cheetah.xml", 5, 4800.0

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1
    exclude_current_positions_from_observation: bool = True

    def reward(self, rows, action, velocity):
        reward = velocity[:, 0] * self.forward_reward_weight - _ctrl_cost(self.ctrl_cost_weight, action)
        return reward, torch.zeros_like(reward, dtype=torch.bool)

    def initial_state(self, selection, rng, qpos0, qvel0):
        return self._uniform_noise(selection, rng, qpos0), self._normal_noise(selection, rng, qvel0)


@dataclass(eq=False)
class _PlanarWalker(_Locomotion):
    """What Hopper and Walker2d share: their leading fields, the observation with velocities clipped to [-10, 10],
    and the reward ``forward + healthy - ctrl``, terminating when unhealthy (``is_healthy``, each task's own)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True

    def is_healthy(self, rows) -> Tensor:
        raise NotImplementedError

    def observe(self, rows):
        return [rows.qpos[:, self.skip :], rows.qvel.clamp(-10.0, 10.0)]

    def reward(self, rows, action, velocity):
        healthy = self.is_healthy(rows)
        reward = velocity[:, 0] * self.forward_reward_weight + healthy.to(velocity.dtype) * self.healthy_reward
        reward -= _ctrl_cost(self.ctrl_cost_weight, action)
        return reward, ~healthy & self.terminate_when_unhealthy


@dataclass(eq=False)
class Hopper(_PlanarWalker):
    """Hop forward on one leg; healthy while the state, height and torso angle stay in their ranges."""

    xml_file, frame_skip, reward_threshold = "hopper.xml", 4, 3800.0

    healthy_state_range: tuple[float, float] = (-100.0, 100.0)
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)
    reset_noise_scale: float = 5e-3
    exclude_current_positions_from_observation: bool = True

    def is_healthy(self, rows):
        qpos, qvel = rows.qpos, rows.qvel
        state_range = self.healthy_state_range
        state_ok = _within(qpos[:, 2:], state_range).all(1) & _within(qvel, state_range).all(1)
        return state_ok & _within(qpos[:, 1], self.healthy_z_range) & _within(qpos[:, 2], self.healthy_angle_range)


@dataclass(eq=False)
class Walker2d(_PlanarWalker):
    """Walk forward on two legs; healthy while height and torso angle stay in their ranges."""

    xml_file, frame_skip, reward_threshold = "walker2d_v5.xml", 4, None

    healthy_z_range: tuple[float, float] = (0.8, 2.0)
    healthy_angle_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 5e-3
    exclude_current_positions_from_observation: bool = True

    def is_healthy(self, rows):
        qpos = rows.qpos
        return _within(qpos[:, 1], self.healthy_z_range) & _within(qpos[:, 2], self.healthy_angle_range)


@dataclass(eq=False)
class Swimmer(_Locomotion):
    """Swim forward in a viscous fluid: reward ``forward_reward_weight * x_velocity - ctrl cost``."""

    xml_file, frame_skip, reward_threshold = "swimmer.xml", 4, 360.0
    position_size = excluded_positions = 2

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-4
    reset_noise_scale: float = 0.1
    exclude_current_positions_from_observation: bool = True

    def reward(self, rows, action, velocity):
        reward = velocity[:, 0] * self.forward_reward_weight - _ctrl_cost(self.ctrl_cost_weight, action)
        return reward, torch.zeros_like(reward, dtype=torch.bool)


# -- locomotion in 3-D, with contact forces ---------------------------------------------------------------


@dataclass(eq=False)
class Ant(_Locomotion):
    """Walk forward on four legs. Velocity from the main body's ``xpos``; contact forces (``cfrc_ext``, clipped to
    ``contact_force_range``) are observed and penalised."""

    xml_file, frame_skip, reward_threshold = "ant.xml", 5, 6000.0
    fields = ("xpos", "cfrc_ext")
    position_size = excluded_positions = 2

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.5
    contact_cost_weight: float = 5e-4
    healthy_reward: float = 1.0
    main_body: int | str = 1
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 0.1
    exclude_current_positions_from_observation: bool = True
    include_cfrc_ext_in_observation: bool = True

    def bind(self, model, device, dtype):
        super().bind(model, device, dtype)
        self.main_body_id = _body_id(model, self.main_body)

    def observation_size(self, model):
        return super().observation_size(model) + 6 * (model.nbody - 1) * self.include_cfrc_ext_in_observation

    def position(self, rows):
        return rows.xpos[:, self.main_body_id, :2]

    def contact_forces(self, rows) -> Tensor:
        return rows.cfrc_ext.clamp(*self.contact_force_range)

    def observe(self, rows):
        parts = super().observe(rows)
        if self.include_cfrc_ext_in_observation:
            parts.append(self.contact_forces(rows)[:, 1:].flatten(1))
        return parts

    def reward(self, rows, action, velocity):
        qpos, qvel = rows.qpos, rows.qvel
        finite = torch.isfinite(qpos).all(1) & torch.isfinite(qvel).all(1)
        low, high = self.healthy_z_range
        healthy = finite & (qpos[:, 2] >= low) & (qpos[:, 2] <= high)  # inclusive, unlike the other tasks
        contact_cost = self.contact_forces(rows).square().sum((1, 2)).mul_(self.contact_cost_weight)
        reward = velocity[:, 0] * self.forward_reward_weight + healthy.to(velocity.dtype) * self.healthy_reward
        reward -= _ctrl_cost(self.ctrl_cost_weight, action) + contact_cost
        return reward, ~healthy & self.terminate_when_unhealthy

    def initial_state(self, selection, rng, qpos0, qvel0):
        return self._uniform_noise(selection, rng, qpos0), self._normal_noise(selection, rng, qvel0)


@dataclass(eq=False, kw_only=True)
class _HumanoidObservation(_Locomotion):
    """What Humanoid and HumanoidStandup share: their observation (positions, velocities, then the chosen derived
    fields of every body but the world, and the actuator forces of every joint but the free root), its settings and
    the reset noise. The fields are keyword-only, so that they follow each task's own, as in gymnasium."""

    excluded_positions = 2

    reset_noise_scale: float = 1e-2
    exclude_current_positions_from_observation: bool = True
    include_cinert_in_observation: bool = True
    include_cvel_in_observation: bool = True
    include_qfrc_actuator_in_observation: bool = True
    include_cfrc_ext_in_observation: bool = True

    def __post_init__(self):
        super().__post_init__()
        self.include = {  # which derived fields the observation includes, by field
            "cinert": self.include_cinert_in_observation,
            "cvel": self.include_cvel_in_observation,
            "qfrc_actuator": self.include_qfrc_actuator_in_observation,
            "cfrc_ext": self.include_cfrc_ext_in_observation,
        }

    def observation_size(self, model):
        widths = {"cinert": 10 * (model.nbody - 1), "cvel": 6 * (model.nbody - 1)}
        widths |= {"qfrc_actuator": model.nv - 6, "cfrc_ext": 6 * (model.nbody - 1)}
        return super().observation_size(model) + sum(w for name, w in widths.items() if self.include[name])

    def observe(self, rows):
        parts = super().observe(rows)
        for name in ("cinert", "cvel"):
            if self.include[name]:
                parts.append(getattr(rows, name)[:, 1:].flatten(1))
        if self.include["qfrc_actuator"]:
            parts.append(rows.qfrc_actuator[:, 6:])
        if self.include["cfrc_ext"]:
            parts.append(rows.cfrc_ext[:, 1:].flatten(1))
        return parts


def _contact_cost(rows, weight: float, bounds: tuple[float, float]) -> Tensor:
    return rows.cfrc_ext.square().sum((1, 2)).mul_(weight).clamp_(*bounds)


@dataclass(eq=False)
class Humanoid(_HumanoidObservation):
    """Walk forward without falling. Velocity of the centre of mass (from ``xipos``); observes com-based inertia
    and velocity, actuator forces and external contact forces of every body but the world."""

    xml_file, frame_skip, reward_threshold = "humanoid.xml", 5, None
    fields = ("xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext")
    position_size = 2

    forward_reward_weight: float = 1.25
    ctrl_cost_weight: float = 0.1
    contact_cost_weight: float = 5e-7
    contact_cost_range: tuple[float, float] = (-math.inf, 10.0)
    healthy_reward: float = 5.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (1.0, 2.0)

    def bind(self, model, device, dtype):
        super().bind(model, device, dtype)
        self.mass_fraction = torch.as_tensor(model.body_mass / model.body_mass.sum(), device=device, dtype=dtype)

    def position(self, rows):
        # gymnasium's mass_center: the mass-weighted mean of the bodies' centres of mass
        return torch.einsum("b,nbj->nj", self.mass_fraction, rows.xipos[:, :, :2])

    def reward(self, rows, action, velocity):
        healthy = _within(rows.qpos[:, 2], self.healthy_z_range)
        reward = velocity[:, 0] * self.forward_reward_weight + healthy.to(velocity.dtype) * self.healthy_reward
        reward -= _ctrl_cost(self.ctrl_cost_weight, action)
        reward -= _contact_cost(rows, self.contact_cost_weight, self.contact_cost_range)
        return reward, ~healthy & self.terminate_when_unhealthy


@dataclass(eq=False)
class HumanoidStandup(_HumanoidObservation):
    """Stand up from lying down: reward the torso's height over the physics timestep, minus control and impact
    costs, plus one. Never terminates. As in gymnasium, ``uph_cost_weight`` is accepted but not applied."""

    xml_file, frame_skip, reward_threshold = "humanoidstandup.xml", 5, None
    fields = ("cinert", "cvel", "qfrc_actuator", "cfrc_ext")
    position_size = 0

    uph_cost_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    impact_cost_weight: float = 0.5e-6
    impact_cost_range: tuple[float, float] = (-math.inf, 10.0)

    def reward(self, rows, action, velocity):
        uph = rows.qpos[:, 2] / self.timestep
        reward = uph - _ctrl_cost(self.ctrl_cost_weight, action) + 1.0
        reward -= _contact_cost(rows, self.impact_cost_weight, self.impact_cost_range)
        return reward, torch.zeros_like(reward, dtype=torch.bool)


# -- balancing --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class InvertedPendulum(MujocoTask):
    """Balance a pole on a cart: reward 1 per step while ``|angle| <= 0.2`` and the observation is finite."""

    xml_file, frame_skip, reward_threshold = "inverted_pendulum.xml", 2, 950.0
    position_size = 0

    reset_noise_scale: float = 0.01

    def observation_size(self, model):
        return model.nq + model.nv

    def observe(self, rows):
        return [rows.qpos, rows.qvel]

    def reward(self, rows, action, velocity):
        qpos, qvel = rows.qpos, rows.qvel
        finite = torch.isfinite(qpos).all(1) & torch.isfinite(qvel).all(1)
        terminated = ~finite | (qpos[:, 1].abs() > 0.2)
        return (~terminated).to(qpos.dtype), terminated


@dataclass(eq=False)
class InvertedDoublePendulum(MujocoTask):
    """Balance two poles on a cart: alive bonus while the tip is above 1, minus distance and velocity
    penalties. Reads the tip site's position and the cart's constraint force."""

    xml_file, frame_skip, reward_threshold = "inverted_double_pendulum.xml", 5, 9100.0
    fields = ("site_xpos", "qfrc_constraint")
    position_size = 0

    healthy_reward: float = 10.0
    reset_noise_scale: float = 0.1

    def observation_size(self, model):
        return 1 + 2 * (model.nq - 1) + model.nv + 1

    def observe(self, rows):
        qpos = rows.qpos
        return [
            qpos[:, :1],
            torch.sin(qpos[:, 1:]),
            torch.cos(qpos[:, 1:]),
            rows.qvel.clamp(-10.0, 10.0),
            rows.qfrc_constraint[:, :1].clamp(-10.0, 10.0),
        ]

    def reward(self, rows, action, velocity):
        tip = rows.site_xpos[:, 0]
        x, y = tip[:, 0], tip[:, 2]
        terminated = y <= 1
        v1, v2 = rows.qvel[:, 1], rows.qvel[:, 2]
        distance_penalty = 0.01 * x.square() + (y - 2).square()
        velocity_penalty = 1e-3 * v1.square() + 5e-3 * v2.square()
        reward = (~terminated).to(x.dtype) * self.healthy_reward - distance_penalty - velocity_penalty
        return reward, terminated

    def initial_state(self, selection, rng, qpos0, qvel0):
        return self._uniform_noise(selection, rng, qpos0), self._normal_noise(selection, rng, qvel0)


# -- arms -------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Reacher(MujocoTask):
    """Move a two-joint arm's fingertip to a random target on the disc of radius 0.2."""

    xml_file, frame_skip, reward_threshold, max_episode_steps = "reacher.xml", 2, -3.75, 50
    fields = ("xpos",)
    position_size = 0

    reward_dist_weight: float = 1.0
    reward_control_weight: float = 1.0

    def bind(self, model, device, dtype):
        super().bind(model, device, dtype)
        self.fingertip, self.target = _body_id(model, "fingertip"), _body_id(model, "target")

    def observation_size(self, model):
        return 2 * 2 + (model.nq - 2) + 2 + 2

    def _to_target(self, rows) -> Tensor:
        xpos = rows.xpos
        return xpos[:, self.fingertip] - xpos[:, self.target]

    def observe(self, rows):
        theta = rows.qpos[:, :2]
        return [torch.cos(theta), torch.sin(theta), rows.qpos[:, 2:], rows.qvel[:, :2], self._to_target(rows)[:, :2]]

    def reward(self, rows, action, velocity):
        reward = -torch.linalg.vector_norm(self._to_target(rows), dim=1) * self.reward_dist_weight
        reward -= _ctrl_cost(self.reward_control_weight, action)
        return reward, torch.zeros_like(reward, dtype=torch.bool)

    def initial_state(self, selection, rng, qpos0, qvel0):
        qpos = self._uniform_noise(selection, rng, qpos0, scale=0.1)
        # gymnasium redraws the goal uniformly in [-0.2, 0.2]^2 until it lies inside the disc of radius 0.2:
        # that is the uniform distribution on the disc, drawn here in polar form.
        u = selection.uniform(rng, 0.0, 1.0, 2, qpos0.dtype)
        radius, angle = 0.2 * u[:, 0].sqrt(), 2 * math.pi * u[:, 1]
        qpos[:, -2] = radius * torch.cos(angle)
        qpos[:, -1] = radius * torch.sin(angle)
        qvel = self._uniform_noise(selection, rng, qvel0, scale=0.005)
        qvel[:, -2:] = 0.0
        return qpos, qvel


@dataclass(eq=False)
class Pusher(MujocoTask):
    """Push a cylinder to a goal with a seven-joint arm."""

    xml_file, frame_skip, reward_threshold, max_episode_steps = "pusher_v5.xml", 5, 0.0, 100
    fields = ("xpos",)
    position_size = 0
    candidates = 32  # cylinder positions drawn per reset; the first far enough from the goal is used

    reward_near_weight: float = 0.5
    reward_dist_weight: float = 1.0
    reward_control_weight: float = 0.1

    def bind(self, model, device, dtype):
        super().bind(model, device, dtype)
        self.bodies = [_body_id(model, name) for name in ("tips_arm", "object", "goal")]

    def observation_size(self, model):
        return 7 + 7 + 3 * 3

    def observe(self, rows):
        xpos = rows.xpos
        return [rows.qpos[:, :7], rows.qvel[:, :7], xpos[:, self.bodies].flatten(1)]

    def reward(self, rows, action, velocity):
        xpos = rows.xpos
        tips, cylinder, goal = (xpos[:, i] for i in self.bodies)
        reward = -torch.linalg.vector_norm(cylinder - tips, dim=1) * self.reward_near_weight
        reward -= torch.linalg.vector_norm(cylinder - goal, dim=1) * self.reward_dist_weight
        reward -= _ctrl_cost(self.reward_control_weight, action)
        return reward, torch.zeros_like(reward, dtype=torch.bool)

    def initial_state(self, selection, rng, qpos0, qvel0):
        k = self.candidates
        u = selection.uniform(rng, 0.0, 1.0, 2 * k, qpos0.dtype)
        x, y = u[:, :k] * 0.3 - 0.3, u[:, k:] * 0.4 - 0.2  # uniform in [-0.3, 0) x [-0.2, 0.2)
        far = torch.hypot(x, y) > 0.17  # the goal is at the origin
        first = torch.argmax(far.to(torch.uint8), dim=1, keepdim=True)  # first accepted (0 if none: ~4e-14)
        qpos = qpos0.expand(u.shape[0], -1).clone()
        qpos[:, -4] = x.gather(1, first).squeeze(1)
        qpos[:, -3] = y.gather(1, first).squeeze(1)
        qpos[:, -2:] = 0.0
        qvel = self._uniform_noise(selection, rng, qvel0, scale=0.005)
        qvel[:, -4:] = 0.0
        return qpos, qvel


# The registry names the tasks (rl_suite.registry.MUJOCO_TASKS), since the core never imports this module to learn
# them; each name is a class above.
TASKS: dict[str, type[MujocoTask]] = {name: globals()[name] for name in MUJOCO_TASKS}


def make_task(name: str, kwargs: dict) -> MujocoTask:
    """The task ``name`` with gymnasium's keyword arguments; an unknown keyword is refused with the valid ones."""
    if name not in TASKS:
        raise ValueError(f"unknown MuJoCo task {name!r}; tasks: {', '.join(TASKS)}")
    cls = TASKS[name]
    accepted = list(inspect.signature(cls.__init__).parameters)[1:]
    for key in kwargs:
        if key not in accepted:
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"{name}-v5 has no keyword argument {key!r}.{hint} Its keyword arguments (as in gymnasium): "
                f"{', '.join(accepted)}, plus frame_skip, max_episode_steps, xml_file, backend and nthread."
            )
    return cls(**kwargs)
