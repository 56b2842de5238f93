"""``MujocoVecEnv``: gymnasium's v5 MuJoCo tasks on batched physics, behind the ``VecEnv`` contract.

The env owns what every task shares: the model (gymnasium's own XML files), the physics backend, the action
space from the actuators' control ranges, the frame skip, time limits, auto-reset, ``set_state``/``get_state``
and rendering. A task (``tasks.py``) says only what differs: its observation, reward, termination and initial
state, written once in torch over the physics fields.

Backends (``physics.py``, ``warp_physics.py``): ``"cpu"`` (MuJoCo's batch API on native threads, float64) and
``"warp"`` (``mujoco_warp``, float32). The device picks one (CPU device: ``"cpu"``; CUDA: ``"warp"``);
``backend=`` forces either.

Model randomisation (``randomize_mass=d``, ``randomize_friction=d``, env keywords, off by default): at every
reset an environment draws new model parameters from its own random stream, and each simulation steps its own
copy of the fields (``physics.model_field``):

- mass: every body's mass and rotational inertia are multiplied by one factor uniform in ``[1 - d, 1 + d]`` (one
  factor per body: as if its density changed, so mass and inertia stay consistent), and MuJoCo's derived constants
  are recomputed (``mj_setConst``);
- friction: every geom's sliding friction is multiplied by one factor uniform in ``[1 - d, 1 + d]`` per
  environment (MuJoCo combines a contact's two geoms by their maximum, so one factor scales every contact's).

Observation noise and motor strength are the ``RandomizedVecEnv`` wrapper's (``randomization.py``); ``make`` applies
it when ``obs_noise_std`` or ``motor_strength`` are given as env keywords.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np
import torch

from rl_suite.env import Selection, VecEnv
from rl_suite.envs.mujoco import tasks as task_module
from rl_suite.envs.mujoco.physics import PhysicsBackend, compile_spec
from rl_suite.envs.mujoco.reset_bank import ResetBank, attached, bank_checkpoint, restore_bank
from rl_suite.registry import load_entry_point

# The physics backends by name (``MujocoVecEnv(backend=...)``): entry points of ``PhysicsBackend`` classes, each
# built as ``Backend(model, num_envs, fields, device=..., **options)``.
BACKENDS: dict[str, str] = {
    "cpu": "rl_suite.envs.mujoco.physics:CPUPhysics",
    "warp": "rl_suite.envs.mujoco.warp_physics:WarpPhysics",
}


def model_path(xml_file: str) -> Path:
    """Resolve ``xml_file`` as gymnasium does: a bare name is one of gymnasium's MuJoCo assets."""
    if xml_file.startswith(("/", ".", "~")):
        return Path(xml_file).expanduser()
    return Path(gym.__file__).parent / "envs" / "mujoco" / "assets" / xml_file


class OffscreenRenderer:
    """RGB frames of one model's simulations, with one ``mujoco.Renderer`` kept for the size last asked for.

    Needs an OpenGL context; on a headless machine set ``MUJOCO_GL=egl`` or ``MUJOCO_GL=osmesa``."""

    def __init__(self, model: mujoco.MjModel):
        self.model, self._renderer = model, None

    def render(self, data: mujoco.MjData, width: int, height: int, camera: int | str = -1) -> np.ndarray:
        renderer = self._renderer
        if renderer is None or (renderer.width, renderer.height) != (width, height):
            self.close()
            self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, width)
            self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, height)
            renderer = self._renderer = mujoco.Renderer(self.model, height=height, width=width)
        renderer.update_scene(data, camera=camera)
        return renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def observe_task(physics: PhysicsBackend, task, out: torch.Tensor, env_ids: torch.Tensor | None) -> None:
    """The ``_observe`` hook of an env whose task's ``observe`` reads physics rows (gymnasium's tasks, the Control
    Suite's): the observation of every environment, or of ``env_ids``, written into ``out``."""
    sim_ids = None if env_ids is None else env_ids.to(physics.device)
    obs = torch.cat(task.observe(PhysicsRows(physics, sim_ids)), dim=1)
    if env_ids is None:
        out.copy_(obs)
    else:
        out.index_copy_(0, env_ids, obs.to(device=out.device, dtype=out.dtype))


class PhysicsRendering:
    """``render`` and ``close`` for a batched env with ``num_envs``, ``model`` and a ``PhysicsBackend`` as
    ``physics`` (mixed in before ``VecEnv``): one ``OffscreenRenderer``, made on the first frame asked for."""

    _renderer: OffscreenRenderer | None = None

    def render(self, env_id: int = 0, width: int = 480, height: int = 480, camera: int | str = -1) -> np.ndarray:
        """Environment ``env_id`` as an RGB array ``[height, width, 3]`` (uint8), from ``camera`` (-1: free; the
        legged robots' models have a ``track`` camera).

        Needs an OpenGL context; on a headless machine set ``MUJOCO_GL=egl`` or ``MUJOCO_GL=osmesa``.
        """
        if not 0 <= env_id < self.num_envs:
            raise ValueError(f"env_id must be in [0, {self.num_envs}), got {env_id}")
        if self._renderer is None:
            self._renderer = OffscreenRenderer(self.model)
        return self._renderer.render(self.physics.data(env_id), width, height, camera)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


class PhysicsRows:
    """The physics fields of every environment, or of ``env_ids`` only, as ``[n, ...]`` tensors by name:
    ``qpos``, ``qvel``, ``ctrl``, ``act`` (the actuators' activations, read from the state rows) and the bound derived
    fields (``xpos``, ``cfrc_ext``, ...)."""

    def __init__(self, physics: PhysicsBackend, env_ids: torch.Tensor | None = None):
        self._physics = physics
        self._ids = env_ids

    def __getattr__(self, name: str) -> torch.Tensor:
        physics = self._physics
        if name == "act":  # mjSTATE_INTEGRATION rows: time, qpos, qvel, then the activations
            model = physics.model
            start = 1 + model.nq + model.nv
            field = physics.state[:, start : start + model.na]
        else:
            field = getattr(physics, name) if name in ("qpos", "qvel", "ctrl") else physics.derived[name]
        return field if self._ids is None else field.index_select(0, self._ids)


class MujocoVecEnv(PhysicsRendering, VecEnv):
    """``num_envs`` copies of one gymnasium v5 MuJoCo task (``task="HalfCheetah"``, ...).

    Args:
        task: the task's name in ``rl_suite.envs.mujoco.tasks.TASKS``.
        backend: ``"cpu"`` or ``"warp"``; ``None`` picks by device.
        frame_skip, max_episode_steps, xml_file: as gymnasium's; ``None`` keeps the task's defaults.
        nthread: native threads of the CPU backend; 0 uses every core.
        warp_options: keyword arguments for the Warp backend (``nconmax``, ``njmax``).
        physics_options: keyword arguments for the backend's constructor, over the two above (any backend).
        randomize_mass, randomize_friction: model randomisation half-widths (see the module docstring); 0 for none.
        reset_bank, reset_bank_fraction: a reset bank's file (``reset_bank.ResetBank.save``) and the probability
            that an episode starts from one of its states; ``use_reset_bank`` attaches a bank in code.
        task_kwargs: the task's settings, named as gymnasium names them (``reset_noise_scale``,
            ``ctrl_cost_weight``, ...). A name the task does not have is refused.
    """

    physics: PhysicsBackend
    """The batched simulations: ``CPUPhysics`` or ``WarpPhysics``, as ``backend`` says."""

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        task: str = "HalfCheetah",
        backend: str | None = None,
        frame_skip: int | None = None,
        max_episode_steps: int | None = -1,
        xml_file: str | None = None,
        nthread: int = 0,
        warp_options: dict | None = None,
        physics_options: dict | None = None,
        check_values: bool | None = None,
        masked_resets: bool | None = None,
        randomize_mass: float = 0.0,
        randomize_friction: float = 0.0,
        reset_bank: str | None = None,
        reset_bank_fraction: float = 0.5,
        **task_kwargs,
    ):
        for name, value in (("randomize_mass", randomize_mass), ("randomize_friction", randomize_friction)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1) (a fraction of the nominal value), got {value!r}")
        self.randomize_mass, self.randomize_friction = float(randomize_mass), float(randomize_friction)
        self.task = task_module.make_task(task, task_kwargs)
        self.frame_skip = self.task.frame_skip if frame_skip is None else int(frame_skip)
        if self.frame_skip <= 0:
            raise ValueError(f"frame_skip must be a positive integer, got {frame_skip!r}")
        path = model_path(xml_file or self.task.xml_file)
        if not path.is_file():
            raise FileNotFoundError(f"{task}: model file {str(path)!r} does not exist")
        self.model = model = compile_spec(mujoco.MjSpec.from_file(str(path)))
        self.dt = model.opt.timestep * self.frame_skip
        self.reward_threshold = self.task.reward_threshold

        low, high = model.actuator_ctrlrange.copy().astype(np.float32).T
        super().__init__(
            num_envs,
            device,
            observation_space=gym.spaces.Box(-np.inf, np.inf, (self.task.observation_size(model),), np.float32),
            action_space=gym.spaces.Box(low, high, dtype=np.float32),
            max_episode_steps=self.task.max_episode_steps if max_episode_steps == -1 else max_episode_steps,
            seed=seed,
            check_values=check_values,
            masked_resets=masked_resets,
        )
        if backend is None:
            backend = "cpu" if self.device.type == "cpu" else "warp"
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {tuple(BACKENDS)} or None, got {backend!r}")
        options = {"cpu": {"nthread": nthread}, "warp": dict(warp_options or {})}.get(backend, {})
        options.update(physics_options or {})
        physics_class = load_entry_point(BACKENDS[backend])  # a key of the table, never a name from a file
        self.physics = physics_class(model, self.num_envs, self.task.fields, device=self.device, **options)
        self.backend = backend
        sim = self.physics.device
        dtype = self.physics.dtype
        self.task.bind(model, sim, dtype)
        self._init_qpos = torch.as_tensor(model.qpos0, device=sim, dtype=dtype)
        self._init_qvel = torch.zeros(model.nv, device=sim, dtype=dtype)
        # The task's tracked position (x or xy, read from the physics as gymnasium reads it) at the end of the last
        # step or reset: the "before" of the next step's velocity. Kept here, and checkpointed, so that a resumed
        # run computes the same velocity.
        self._position = torch.zeros(self.num_envs, self.task.position_size, device=sim, dtype=dtype)
        self._all_rows = PhysicsRows(self.physics)
        self._randomized = self._bind_randomized_fields(model)
        self.reset_bank, self.reset_bank_fraction = None, 0.0
        if reset_bank is not None:
            self.use_reset_bank(ResetBank.load(reset_bank, model), reset_bank_fraction)

    def use_reset_bank(self, bank: ResetBank | None, fraction: float = 0.5) -> None:
        """Start each episode from one of ``bank``'s states with probability ``fraction`` (``None``: no bank). The
        bank must be of this env's model; its states go to the physics' device and precision."""
        self.reset_bank, self.reset_bank_fraction = attached(bank, fraction, self.model, self.physics)

    def _bind_randomized_fields(self, model: mujoco.MjModel) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The per-environment model fields the randomisation writes, with their nominal values: ``{name: (field
        [N, ...], nominal [...])}``. Only the fields in use are expanded: the others stay shared."""
        names = (("body_mass", "body_inertia") if self.randomize_mass else ()) + (
            ("geom_friction",) if self.randomize_friction else ()
        )
        sim, dtype = self.physics.device, self.physics.dtype
        return {
            name: (self.physics.model_field(name), torch.as_tensor(getattr(model, name), device=sim, dtype=dtype))
            for name in names
        }

    def _randomize_model(self, selection: Selection, ids: torch.Tensor | None) -> None:
        """Draw new model parameters for the selected environments (``ids`` on the physics' device, or all)."""
        sim, dtype, fields = self.physics.device, self.physics.dtype, self._randomized
        if self.randomize_friction:
            d = self.randomize_friction
            factor = selection.uniform(self.rng, 1.0 - d, 1.0 + d, 1, torch.float32).to(sim, dtype)
            friction, nominal = fields["geom_friction"]
            scaled = nominal.expand(len(factor), *nominal.shape).clone()
            scaled[..., 0] *= factor  # sliding friction; torsional and rolling stay as they are
            self._write_rows(friction, scaled, selection, ids)
        if self.randomize_mass:
            d, nbody = self.randomize_mass, self.model.nbody
            factor = selection.uniform(self.rng, 1.0 - d, 1.0 + d, nbody, torch.float32).to(sim, dtype)
            for name in ("body_mass", "body_inertia"):
                field, nominal = fields[name]
                scaled = nominal * (factor if nominal.dim() == 1 else factor[..., None])
                self._write_rows(field, scaled, selection, ids)
            self.physics.set_const(ids)

    @staticmethod
    def _write_rows(field: torch.Tensor, values: torch.Tensor, selection: Selection, ids) -> None:
        if selection.ids is not None:
            field.index_copy_(0, ids, values)
        else:
            mask = selection.mask.to(field.device).view(-1, *[1] * (field.dim() - 1))
            field.copy_(torch.where(mask, values, field))

    # -- hooks of the contract ----------------------------------------------------------------------------

    def _advance(self, actions):
        physics = self.physics
        actions = actions.to(physics.device)
        physics.ctrl.copy_(actions)
        physics.step(self.frame_skip)
        rows = self._all_rows
        after = self.task.position(rows)
        velocity = (after - self._position).div_(self.dt)
        self._position.copy_(after)
        reward, terminated = self.task.reward(rows, actions.to(physics.dtype), velocity)
        self._reward.copy_(reward)
        self._terminated.copy_(terminated)
        return self._reward, self._terminated

    def _observe(self, out, env_ids=None):
        observe_task(self.physics, self.task, out, env_ids)

    def _reset_envs(self, selection: Selection):
        physics = self.physics
        qpos, qvel = self.task.initial_state(selection, self.rng, self._init_qpos, self._init_qvel)
        if self.reset_bank is not None:
            qpos, qvel = self.reset_bank.mix(selection, self.rng, qpos, qvel, self.reset_bank_fraction)
        if selection.ids is not None:
            ids = selection.ids.to(physics.device)
            if self._randomized:
                self._randomize_model(selection, ids)  # before the reset: mj_setConst overwrites the state
            physics.reset(ids)  # as gymnasium's reset: mj_resetData, then the new state, then mj_forward
            physics.qpos.index_copy_(0, ids, qpos.to(physics.device))
            physics.qvel.index_copy_(0, ids, qvel.to(physics.device))
        else:
            mask = selection.mask.to(physics.device)
            ids = mask.nonzero().squeeze(1)
            if self._randomized:
                self._randomize_model(selection, ids)
            physics.reset(ids)
            physics.qpos.copy_(torch.where(mask[:, None], qpos.to(physics.device), physics.qpos))
            physics.qvel.copy_(torch.where(mask[:, None], qvel.to(physics.device), physics.qvel))
        self._after_state_write(ids)

    def _after_state_write(self, ids: torch.Tensor | None) -> None:
        """Recompute what follows from a newly written state (``mj_forward``, cleared warm-start) and the tracked
        position, for all environments or ``ids``."""
        self.physics.forward(ids)
        if ids is None:
            self._position.copy_(self.task.position(self._all_rows))
        else:
            self._position.index_copy_(0, ids, self.task.position(PhysicsRows(self.physics, ids)))

    # -- state --------------------------------------------------------------------------------------------

    def get_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of ``(qpos [N, nq], qvel [N, nv])``, in the backend's precision (float64 on the CPU)."""
        return self.physics.qpos.clone(), self.physics.qvel.clone()

    def set_state(self, qpos, qvel, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Set ``qpos`` and ``qvel`` of every environment (or of ``env_ids``), as gymnasium's
        ``MujocoEnv.set_state`` does for one: derived quantities are recomputed and the solver's warm-start is
        cleared, so the state alone decides the next step. Returns the new observations. Float64 input keeps
        its precision on the CPU backend. Step counters and episode statistics carry on."""
        physics = self.physics
        ids = None if env_ids is None else torch.as_tensor(env_ids, device=self.device)
        # _write_state checks shapes, finiteness and env_ids, and writes into the physics' own rows.
        self._write_state(physics.qpos, qpos, ids, what=f"qpos ([rows, nq={self.model.nq}])")
        self._write_state(physics.qvel, qvel, ids, what=f"qvel ([rows, nv={self.model.nv}])")
        self._after_state_write(None if ids is None else ids.to(physics.device))
        self._observe(self._obs)
        return self._obs

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "physics": self.physics.state.clone(),
            "position": self._position.clone(),
            **self._episode_state_dict(),
            **{f"model.{name}": field.clone() for name, (field, _) in self._randomized.items()},
            **bank_checkpoint(self.reset_bank),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if self._randomized:
            for name, (field, _) in self._randomized.items():
                field.copy_(state[f"model.{name}"])
            self.physics.set_const()  # the state rows below then overwrite what it clobbered
        self.physics.state.copy_(state["physics"])
        self._position.copy_(state["position"])
        restore_bank(self.reset_bank, state)  # with the states recorded since it was attached
        self._load_episode_state_dict(state)
