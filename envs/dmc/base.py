"""What every Control Suite task shares: the task interface ``DMCTask``, dm_control's model files, and the helpers
its tasks use to draw initial states.

A task is dm_control's ``Task`` and ``Physics`` subclass of one domain, written once in torch over a
``PhysicsBackend`` (``rl_suite.envs.mujoco.physics``): it draws initial states from the environments' own random
streams, observes, and rewards. ``DMCVecEnv`` (``env.py``) does the rest: the model, the physics, the control
timestep, action repeat, time limits and auto-reset.

dm_control's model files are data: we locate the installed package without importing it (importing it imports its
physics, which does not run against MuJoCo 4.0) and compile its XML with our own ``mujoco``. Where dm_control
builds or edits a model in code (swimmer's links, manipulator's props), the domain's ``model_xml`` does the same
edit. dm_control's ``Physics.after_reset`` runs ``mj_forward`` with actuation disabled, and so does ours
(``DMCTask.after_reset``) where actuators have activations or bias forces; elsewhere, with zero controls, the two are
the same numbers.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import mujoco
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.envs.mujoco.env import PhysicsRows
from rl_suite.envs.mujoco.physics import PhysicsBackend, compile_spec
from rl_suite.rng import EnvStreams

Tensor = torch.Tensor
COMMON_ASSETS = ("./common/materials.xml", "./common/skybox.xml", "./common/visual.xml")
INSTALL_HINT = "pip install 'rl-suite[dmc]' (or pip install dm_control)"


def suite_dir() -> Path:
    """The installed ``dm_control/suite`` folder, found without importing dm_control."""
    spec = importlib.util.find_spec("dm_control")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the DeepMind Control Suite tasks read their model files from the dm_control package: {INSTALL_HINT}"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "suite"
    if not (folder / "common" / "materials.xml").is_file():
        raise FileNotFoundError(f"{folder} does not hold dm_control's suite model files; reinstall: {INSTALL_HINT}")
    return folder


def read_model(filename: str) -> str:
    """One of dm_control's suite model files, as text."""
    return (suite_dir() / filename).read_text()


def compile_model(xml: str) -> mujoco.MjModel:
    """Compile a suite model's XML with the suite's common assets (materials, skybox, visual), as dm_control's
    ``Physics.from_xml_string(xml, common.ASSETS)`` does."""
    folder = suite_dir()
    assets = {name: (folder / name).read_bytes() for name in COMMON_ASSETS}
    return compile_spec(mujoco.MjSpec.from_string(xml, include=assets))


def write_rows(field: Tensor, selection: Selection, values: Tensor) -> None:
    """Write ``values`` (the selected rows: ``[len(ids), ...]`` by index, ``[N, ...]`` by mask) into ``field``, a
    physics tensor that may live on another device than the selection."""
    values = values.to(device=field.device, dtype=field.dtype)
    if selection.ids is not None:
        field.index_copy_(0, selection.ids.to(field.device), values)
    else:
        mask = selection.mask.to(field.device).view(-1, *[1] * (field.dim() - 1))
        field.copy_(torch.where(mask, values, field))


def read_rows(field: Tensor, selection: Selection) -> Tensor:
    """The selected rows of ``field`` (a physics tensor), as ``write_rows`` takes them back: a copy."""
    if selection.ids is not None:
        return field.index_select(0, selection.ids.to(field.device))
    return field.clone()


def selected_ids(selection: Selection, device: torch.device) -> Tensor:
    """The selected environments as indices on ``device`` (a host sync on CUDA where the selection is a mask)."""
    ids = selection.ids if selection.ids is not None else selection.mask.nonzero().squeeze(1)
    return ids.to(device)


def selection_device(selection: Selection) -> torch.device:
    """Where the selection lives: the env's device, on which its random streams draw. Physics tensors may live on
    another (``backend="cpu"`` with ``device="cuda"``): draw with selections on this device, and index the physics
    with ids on the physics' (``write_rows`` and ``read_rows`` move them)."""
    return (selection.ids if selection.ids is not None else selection.mask).device


def random_quaternion(selection: Selection, rng: EnvStreams, dtype=torch.float64) -> Tensor:
    """Unit quaternions uniform on the 3-sphere (dm_control: ``randn(4)``, normalised)."""
    quat = selection.normal(rng, 4, torch.float64)
    return (quat / quat.norm(dim=1, keepdim=True)).to(dtype)


def random_limited_quaternion(selection: Selection, rng: EnvStreams, limit: float) -> Tensor:
    """dm_control's ``random_limited_quaternion``: a rotation by an angle uniform in ``[0, limit)`` about an axis
    uniform on the sphere."""
    axis = selection.normal(rng, 3, torch.float64)
    axis = axis / axis.norm(dim=1, keepdim=True)
    half = selection.uniform(rng, 0.0, limit, 1, torch.float64) / 2
    return torch.cat([torch.cos(half), axis * torch.sin(half)], dim=1)


def randomize_limited_and_rotational_joints(
    model: mujoco.MjModel, qpos: Tensor, selection: Selection, rng: EnvStreams
) -> None:
    """dm_control's ``randomizers.randomize_limited_and_rotational_joints`` on the selected rows of ``qpos`` (a
    ``[n, nq]`` tensor of the physics, changed in place; the draws come from the streams' device), joint by joint
    in the model's order:

    - limited hinges and slides: uniform in their range; limited balls: ``random_limited_quaternion`` up to the
      range's upper end;
    - unlimited hinges: uniform in ``[-pi, pi)``; unlimited balls: uniform on the 3-sphere;
    - free joints: only the orientation, a normalised ``uniform(0, 1, 4)`` (dm_control's draw, which keeps every
      component non-negative); the position is left as it is.
    """
    joint = mujoco.mjtJoint
    for j in range(model.njnt):
        kind, address = int(model.jnt_type[j]), int(model.jnt_qposadr[j])
        low, high = (float(v) for v in model.jnt_range[j])
        if model.jnt_limited[j]:
            if kind in (joint.mjJNT_HINGE, joint.mjJNT_SLIDE):
                qpos[:, address] = selection.uniform(rng, low, high, 1, torch.float64)[:, 0].to(qpos)
            elif kind == joint.mjJNT_BALL:
                qpos[:, address : address + 4] = random_limited_quaternion(selection, rng, high).to(qpos)
        elif kind == joint.mjJNT_HINGE:
            qpos[:, address] = selection.uniform(rng, -math.pi, math.pi, 1, torch.float64)[:, 0].to(qpos)
        elif kind == joint.mjJNT_BALL:
            qpos[:, address : address + 4] = random_quaternion(selection, rng).to(qpos)
        elif kind == joint.mjJNT_FREE:
            quat = selection.uniform(rng, 0.0, 1.0, 4, torch.float64)
            qpos[:, address + 3 : address + 7] = (quat / quat.norm(dim=1, keepdim=True)).to(qpos)


def name_id(model: mujoco.MjModel, kind: mujoco.mjtObj, name: str) -> int:
    """The id of the element ``name``, or a clear error naming what the model lacks."""
    index = mujoco.mj_name2id(model, kind, name)
    if index < 0:
        raise ValueError(f"the model has no {kind.name[6:].lower()} named {name!r}")
    return index


class DMCTask:
    """One Control Suite task: dm_control's ``Task`` with its domain's ``Physics`` features, in torch.

    Subclasses set the class attributes and implement ``model_xml``, ``initialize_episode``, ``observe`` and
    ``reward``. ``rows`` below is a ``PhysicsRows``: ``rows.qpos`` and ``rows.xmat`` are ``[n, ...]`` tensors of the
    physics' dtype on its device; derived fields describe the current state (the env steps with
    ``kinematics=True``, as dm_control's legacy step keeps positions and velocities up to date), except the
    acceleration-stage sensors (touch, accelerometer, force, torque), which are the last physics step's, as in
    dm_control.
    """

    domain: str
    """dm_control's domain name (``"cartpole"``)."""
    time_limit: float
    """The episode's length in seconds (dm_control's ``_DEFAULT_TIME_LIMIT``)."""
    control_timestep: float | None = None
    """Seconds per control step (the domain's ``_CONTROL_TIMESTEP``); ``None``: one physics step per control step."""
    fields: tuple[str, ...] = ()
    """The derived ``MjData`` fields ``observe`` and ``reward`` read (``xmat``, ``sensordata``, ...)."""
    observation_keys: tuple[str, ...] = ()
    """The keys of dm_control's observation dict, in its order: ``observe`` returns their values in this order."""
    task_state_size = 0
    """How many numbers the per-episode task state holds (randomised targets); 0 where there is none."""
    reset_actuation: bool | None = None
    """Whether ``after_reset``'s ``mj_forward`` runs with actuation. dm_control's runs without; ``None`` follows it
    where that can change anything (actuators with activations or bias forces) and otherwise runs with, which is the
    same numbers and works with per-environment model fields. A task sets ``True`` where nothing it reads at reset
    depends on accelerations."""

    def model_xml(self) -> str:
        """The domain's model XML, as dm_control's ``get_model_and_assets`` builds it."""
        raise NotImplementedError

    def bind(self, model: mujoco.MjModel, physics: PhysicsBackend) -> None:
        """Resolve names and constants of the compiled model, and take the per-environment model fields the task
        writes (``physics.model_field``)."""
        self.model = model
        self._num_envs = physics.num_envs
        if self.reset_actuation is None:
            self.reset_actuation = not (model.na > 0 or bool((model.actuator_biastype != 0).any()))

    def after_reset(self, physics: PhysicsBackend, ids: Tensor) -> None:
        """dm_control's ``physics.after_reset()`` on the simulations ``ids``: ``mj_forward`` with actuation disabled
        (``reset_actuation``), which also clears their solver warm start."""
        physics.forward(ids, actuation=self.reset_actuation)

    def redraw_while_in_contact(
        self, physics: PhysicsBackend, selection: Selection, draw, max_attempts: int | None = None
    ) -> None:
        """dm_control's ``while penetrating`` loop, on the environments still penetrating: ``draw(pending)`` writes
        a fresh initial state for the environments ``pending`` selects (first ``selection``, then by index those
        still in contact), then ``after_reset`` and the contact count (``ncon > 0``) decide which to redraw, until
        none is in contact. ``pending`` is on the selection's device, which the random streams draw on; the physics
        calls take ids on the physics' device. Raises after ``max_attempts`` draws where it is given."""
        device = selection_device(selection)
        pending, ids = selection, selected_ids(selection, physics.device)
        attempts = 0
        while len(ids):
            if max_attempts is not None and attempts == max_attempts:
                raise RuntimeError(
                    f"{self.domain}: {len(ids)} environments found no collision-free state in {max_attempts} attempts"
                )
            draw(pending)
            self.after_reset(physics, ids)
            ids = ids[physics.contact_counts().to(ids.device)[ids] > 0]
            pending = Selection(ids=ids.to(device))
            attempts += 1

    def initialize_episode(self, physics: PhysicsBackend, selection: Selection, rng: EnvStreams) -> None:
        """dm_control's ``initialize_episode`` for the selected environments: their physics was just reset
        (``mj_resetData``); write their initial state (``write_rows``), drawn from ``rng``. The env runs
        ``after_reset`` after it. Tasks that redraw until nothing penetrates use ``redraw_while_in_contact``."""
        raise NotImplementedError

    def observe(self, rows: PhysicsRows) -> list[Tensor]:
        """The values of dm_control's observation dict, in ``observation_keys`` order, each ``[n, k]``."""
        raise NotImplementedError

    def reward(self, rows: PhysicsRows) -> Tensor:
        """dm_control's ``get_reward``, ``[n]``."""
        raise NotImplementedError

    def get_task_state(self) -> Tensor:
        """``[N, task_state_size]``: the per-episode task state (targets) of every environment."""
        return torch.zeros(self._num_envs, 0, dtype=torch.float64)

    def set_task_state(self, values: Tensor, selection: Selection) -> None:
        """Write the task state of the selected environments (``get_task_state``'s layout)."""

    def task_state_dict(self) -> dict[str, Tensor]:
        """What a checkpoint keeps of the task beyond the physics state: the per-environment model fields it
        writes, by name."""
        return {}

    def load_task_state_dict(self, state: dict[str, Tensor]) -> None:
        for name, field in self.task_state_dict().items():
            field.copy_(state[name])


def xmat_component(rows: PhysicsRows, body: int | Tensor | slice, component: str) -> Tensor:
    """dm_control's ``named.data.xmat[body, 'zz']``: one entry of the bodies' rotation matrices (row-major
    ``xx xy xz yx yy yz zx zy zz``), ``[n]`` for one body, ``[n, k]`` for several (a slice, or an index tensor on
    the physics' device: indexing by a Python list copies it to the device, a host sync on CUDA)."""
    index = {"xx": 0, "xy": 1, "xz": 2, "yx": 3, "yy": 4, "yz": 5, "zx": 6, "zy": 7, "zz": 8}[component]
    return rows.xmat[:, body, index]


def as_tensor(values, physics: PhysicsBackend) -> Tensor:
    """A constant on the physics' device, in its dtype."""
    return torch.as_tensor(np.asarray(values), device=physics.device, dtype=physics.dtype)


def sensor_slice(model: mujoco.MjModel, name: str) -> slice:
    """The ``sensordata`` columns that the sensor ``name`` fills (dm_control's ``named.data.sensordata[name]``)."""
    sensor = name_id(model, mujoco.mjtObj.mjOBJ_SENSOR, name)
    start = int(model.sensor_adr[sensor])
    return slice(start, start + int(model.sensor_dim[sensor]))


def sensor_columns(model: mujoco.MjModel, physics: PhysicsBackend, *names: str) -> Tensor:
    """The ``sensordata`` columns of the sensors ``names``, one after another, as an index tensor (``index_tensor``)."""
    slices = [sensor_slice(model, name) for name in names]
    return index_tensor([column for part in slices for column in range(part.start, part.stop)], physics)


def index_tensor(indices, physics: PhysicsBackend) -> Tensor:
    """Integer indices (body, joint or sensor columns) as an int64 tensor on the physics' device, built once in
    ``bind``: ``observe`` and ``reward`` index with it, never with a Python list, which is copied to the device (a
    host sync on CUDA) at every call."""
    return torch.as_tensor(np.asarray(indices, dtype=np.int64), device=physics.device)
