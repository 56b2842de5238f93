"""Batched MuJoCo physics behind one interface, ``PhysicsBackend``, so that each task is written once over torch
tensors.

A backend holds ``num_envs`` simulations of one ``MjModel`` and exposes their state, controls and derived fields as
``[N, ...]`` torch views of the simulator's own storage (no copies); ``PhysicsBackend`` lists every member, with
shapes. Two backends:

- ``CPUPhysics``: MuJoCo's batch API (``mjbatch.h``, new in MuJoCo 4.0): a native thread pool steps one
  ``mjData`` per environment with the GIL released. Results are bit-identical to stepping each environment's
  ``MjData`` in a Python loop, as gymnasium does.
- ``WarpPhysics`` (``rl_suite.envs.mujoco.warp_physics``): ``mujoco_warp`` with ``nworld = num_envs``, for CUDA
  (and, slowly, the CPU).
"""

from __future__ import annotations

import copy
import ctypes
import glob
import os
from collections.abc import Sequence
from typing import Protocol

import mujoco
import numpy as np
import torch


def _load_mujoco_library() -> ctypes.CDLL:
    """The MuJoCo shared library that the ``mujoco`` package ships (and has already loaded)."""
    folder = os.path.dirname(mujoco.__file__)
    candidates = sorted(glob.glob(os.path.join(folder, "libmujoco.so*")) + glob.glob(os.path.join(folder, "*.dylib")))
    candidates += glob.glob(os.path.join(folder, "mujoco.dll"))
    if not candidates:
        raise ImportError(f"cannot find the MuJoCo shared library in {folder}")
    lib = ctypes.CDLL(candidates[0])
    if not hasattr(lib, "mjb_makeBatch"):
        raise ImportError(f"the MuJoCo library in {folder} has no batch API: rl_suite needs mujoco>=4.0")
    ptr, i32, f64p = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_double)
    signatures = {
        "mjb_makeBatch": (ptr, [ptr, i32, ptr, ctypes.c_char_p, i32]),
        "mjb_deleteBatch": (None, [ptr]),
        "mjb_nstate": (i32, [ptr]),
        "mjb_state": (f64p, [ptr]),
        "mjb_stateComponent": (f64p, [ptr, i32, ctypes.POINTER(i32)]),
        "mjb_output": (ptr, [ptr, ctypes.c_char_p, ctypes.POINTER(i32), ctypes.POINTER(i32)]),
        "mjb_step": (i32, [ptr, ptr, i32, i32, i32]),
        "mjb_forward": (i32, [ptr, ptr, i32, i32]),
        "mjb_reset": (i32, [ptr, ptr, i32, ptr, i32]),
        "mjb_apply": (i32, [ptr, ptr, i32, ptr, ptr, i32]),
        "mjb_status": (ctypes.POINTER(i32), [ptr]),
        "mjb_error": (ctypes.c_char_p, [ptr, i32]),
        "mjb_getData": (None, [ptr, i32, ptr]),
        "mjb_expand": (ptr, [ptr, ctypes.c_char_p, ctypes.POINTER(i32), ctypes.POINTER(i32)]),
        "mjb_setConst": (i32, [ptr, ptr, i32]),
        "mjb_setModels": (None, [ptr, ptr]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


def compile_spec(spec: mujoco.MjSpec) -> mujoco.MjModel:
    """Compile a parsed model file into the model MuJoCo's compiler gives, without the compiler attribute
    ``settotalmass``: MuJoCo 4 deprecates it (and warns on every compile) in favour of ``mj_setTotalmass`` and
    ``mj_setConst`` on the compiled model. gymnasium's half_cheetah.xml and dm_control's cheetah.xml use it (14 kg).

    Those two calls give the compiler's arrays bit for bit, but not its statistics: ``mj_setConst`` leaves
    ``stat.meanmass`` and ``stat.meaninertia`` as they were before the masses were scaled, and the constraint solver
    scales its tolerance by ``meaninertia``. They are recomputed here as the compiler defines them (the mean body
    mass without the world, the mean diagonal of the inertia matrix at ``qpos0``), summed in the compiler's order so
    that they match it exactly (checked in tests/test_mujoco_env.py)."""
    total_mass = getattr(spec.compiler, "settotalmass", -1.0)  # gone once MuJoCo removes the attribute
    if total_mass <= 0:  # not set
        return spec.compile()
    spec.compiler.settotalmass = -1.0
    model = spec.compile()
    mujoco.mj_setTotalmass(model, total_mass)
    mujoco.mj_setConst(model, mujoco.MjData(model))
    model.stat.meanmass = sum(model.body_mass[1:].tolist()) / (model.nbody - 1)
    model.stat.meaninertia = sum(model.dof_M0.tolist()) / model.nv
    return model


class PhysicsBackend(Protocol):
    """What ``MujocoVecEnv``, its tasks (through ``PhysicsRows``) and its wrappers use of a physics backend.

    ``N = num_envs``. Tensors are ``[N, ...]`` views of the simulator's storage, of ``dtype`` on ``device``: write
    them in place (``copy_``, ``index_copy_``), and writes take effect at the next call. ``env_ids`` are 1-D
    integer tensors on ``device`` choosing simulations; ``None`` chooses all of them.
    """

    backend: str
    """``"cpu"`` or ``"warp"``: the name ``MujocoVecEnv(backend=...)`` takes."""
    dtype: torch.dtype
    """Of every tensor below: float64 on ``CPUPhysics``, float32 on ``WarpPhysics``."""
    device: torch.device
    """Where the tensors live (the CPU, or the CUDA device ``mujoco_warp`` runs on)."""
    model: mujoco.MjModel
    """The model as it was given (``WarpPhysics`` may simulate a copy with another solver)."""
    num_envs: int
    qpos: torch.Tensor
    """``[N, nq]`` joint positions, part of ``state``."""
    qvel: torch.Tensor
    """``[N, nv]`` joint velocities, part of ``state``."""
    ctrl: torch.Tensor
    """``[N, nu]`` controls, part of ``state``: they act at every ``step`` until changed."""
    xfrc_applied: torch.Tensor
    """``[N, nbody, 6]`` external forces, then torques, on the bodies (world frame, at the centres of mass), part of
    ``state``: they act until changed, and ``reset`` clears them."""
    derived: dict[str, torch.Tensor]
    """``{name: [N, *MjData shape]}``, read-only: the MjData fields the task asked for (``xpos``, ``cfrc_ext``, ...)
    as the simulator computed them. They are what gymnasium reads from ``MjData`` after ``mj_step`` and
    ``mj_rnePostConstraint``: the values of the last evaluation inside the step (with RK4, its last stage), not of the
    new state. After ``forward`` they describe the current state, except ``cfrc_ext``, which ``mj_forward`` does not
    compute."""
    state: torch.Tensor
    """``[N, k]`` rows laid out as MuJoCo's ``mjSTATE_INTEGRATION`` (time, qpos, qvel, act, warm-start, ctrl,
    applied forces, ...): everything that decides the next step, for checkpoints. ``qpos``, ``qvel``, ``ctrl`` and
    ``xfrc_applied`` are views of it."""

    def step(self, nstep: int, kinematics: bool = False, env_ids: torch.Tensor | None = None) -> None:
        """Advance every simulation (or only ``env_ids``: the others keep their state and derived fields) by ``nstep``
        physics steps (``mj_step``) with the current controls. With ``kinematics``, then recompute the position- and
        velocity-dependent fields and sensors at the new state (``mj_step1``), as dm_control's physics does after
        every step; acceleration-dependent ones stay the last substep's."""

    def reset(self, env_ids: torch.Tensor | None = None) -> None:
        """``mj_resetData`` on the chosen simulations: the model's initial state, zero controls and forces, zero
        derived fields."""

    def forward(self, env_ids: torch.Tensor | None = None, actuation: bool = True) -> None:
        """Make the chosen simulations' state alone decide what follows: clear the solver's warm-start and recompute
        their derived fields (``mj_forward``). Other simulations keep theirs. ``actuation=False`` computes them with
        actuation disabled (``mjDSBL_ACTUATION``), as dm_control's resets do."""

    def contact_counts(self) -> torch.Tensor:
        """``[N]`` int64: how many contacts each simulation's last evaluation found (``MjData.ncon``), for resets
        that redraw a state until nothing penetrates, as dm_control's do."""

    def model_field(self, name: str) -> torch.Tensor:
        """The model field ``name`` (``body_mass``, ``geom_friction``, ...) given one value per simulation, as a
        writable ``[N, *field shape]`` view initialised to the model's."""

    def set_const(self, env_ids: torch.Tensor | None = None) -> None:
        """``mj_setConst`` on the chosen simulations: recompute what MuJoCo derives from masses and inertias, after
        writing them through ``model_field``. It clobbers those simulations' state: reset them next."""

    def data(self, env_id: int) -> mujoco.MjData:
        """A copy of one simulation as an ``MjData``, derived fields included, for rendering."""


class _BatchConfig(ctypes.Structure):
    _fields_ = [("nthread", ctypes.c_int), ("persistent", ctypes.c_bool)]


_lib: ctypes.CDLL | None = None
_STAGE_NONE = int(mujoco.mjtStage.mjSTAGE_NONE)  # a call that computes nothing, but copies the outputs out
_STAGE_KINEMATICS = int(mujoco.mjtStage.mjSTAGE_VEL)  # mj_step1: positions, velocities and their sensors
_STAGE_FORWARD = int(mujoco.mjtStage.mjSTAGE_ACC)  # mj_forward


def _id_array(env_ids: torch.Tensor | None) -> tuple[np.ndarray | None, int | None, int]:
    """Simulation ids as the batch API takes them: a contiguous int32 array (which the caller keeps alive during
    the call), its address and its length; ``(None, None, 0)`` for every simulation."""
    if env_ids is None:
        return None, None, 0
    ids = np.ascontiguousarray(env_ids.numpy(), dtype=np.int32)
    return ids, ids.ctypes.data, len(ids)


class CPUPhysics:
    """A ``PhysicsBackend``: ``num_envs`` simulations stepped by MuJoCo's batch API on ``nthread`` native threads
    (0: every core).

    Each environment keeps its own ``mjData`` (a persistent batch), so that after a step the derived fields are
    exactly gymnasium's, and ``mj_rnePostConstraint`` can run on them as gymnasium runs it (for ``cfrc_ext``).
    The ``mjData`` of the batch are driven through ctypes, which releases the GIL for each call.

    Args:
        model: the compiled model; the batch works on a copy.
        num_envs: how many simulations.
        fields: the derived MjData fields the task reads; the batch copies them out after every call.
        device: where the env keeps its tensors; this backend's stay on the CPU, whose memory MuJoCo's batch API
            steps (``MujocoVecEnv`` moves what it returns to ``device``).
        nthread: native threads, the caller's included; 0 uses every core.
    """

    backend = "cpu"
    dtype = torch.float64

    def __init__(
        self, model: mujoco.MjModel, num_envs: int, fields: Sequence[str] = (), device="cpu", nthread: int = 0
    ):
        global _lib
        if _lib is None:
            _lib = _load_mujoco_library()
        self._lib = lib = _lib
        self.model = model
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        error = ctypes.create_string_buffer(1000)
        config = _BatchConfig(nthread=int(nthread), persistent=True)
        self._batch = lib.mjb_makeBatch(model._address, num_envs, ctypes.byref(config), error, len(error))
        if not self._batch:
            raise RuntimeError(f"MuJoCo could not make a batch of {num_envs} simulations: {error.value.decode()}")
        nstate = lib.mjb_nstate(self._batch)
        state = np.ctypeslib.as_array(lib.mjb_state(self._batch), shape=(num_envs, nstate))
        # The whole integration state (time, qpos, qvel, act, warm-start, ctrl, ...): one float64 row per env.
        self.state = torch.from_numpy(state)
        self.qpos = self._state_component(mujoco.mjtState.mjSTATE_QPOS)
        self.qvel = self._state_component(mujoco.mjtState.mjSTATE_QVEL)
        self.ctrl = self._state_component(mujoco.mjtState.mjSTATE_CTRL)
        self.xfrc_applied = self._state_component(mujoco.mjtState.mjSTATE_XFRC_APPLIED).view(num_envs, model.nbody, 6)
        self._warmstart = self._state_component(mujoco.mjtState.mjSTATE_WARMSTART)
        template = mujoco.MjData(model)
        self.derived = {name: self._output(name, getattr(template, name).shape) for name in fields}
        # gymnasium runs mj_rnePostConstraint after mj_step to fill cfrc_ext; we run it on every mjData of the
        # batch, on its threads. mjb_apply calls f(m, d, sim, arg); mj_rnePostConstraint(m, d) ignores the two
        # extra arguments, which every supported ABI (x86-64, AArch64) passes in registers the callee leaves alone.
        self._rne_post = ctypes.cast(lib.mj_rnePostConstraint, ctypes.c_void_p) if "cfrc_ext" in fields else None
        size, elemsize = ctypes.c_int(), ctypes.c_int()
        address = lib.mjb_output(self._batch, b"ncon", ctypes.byref(size), ctypes.byref(elemsize))
        buffer = (ctypes.c_int32 * num_envs).from_address(address)
        self._ncon = torch.from_numpy(np.frombuffer(buffer, dtype=np.int32))  # copied out after every call
        self._expanded: set[str] = set()  # model fields given per-simulation values (model_field)
        self._unactuated = None  # forward(actuation=False)'s model, made when first asked for

    def _state_component(self, component: mujoco.mjtState) -> torch.Tensor:
        size = ctypes.c_int()
        first_row = self._lib.mjb_stateComponent(self._batch, int(component), ctypes.byref(size))
        address = ctypes.addressof(first_row.contents)
        offset = (address - self.state.data_ptr()) // self.state.element_size()
        return self.state[:, offset : offset + size.value]

    def _output(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        size, elemsize = ctypes.c_int(), ctypes.c_int()
        address = self._lib.mjb_output(self._batch, name.encode(), ctypes.byref(size), ctypes.byref(elemsize))
        if not address or elemsize.value != 8:
            raise ValueError(f"{name!r} is not an MjData field of float64 values that the batch can copy out")
        buffer = (ctypes.c_double * (self.num_envs * size.value)).from_address(address)
        return torch.from_numpy(np.frombuffer(buffer, dtype=np.float64).reshape(self.num_envs, *shape))

    def _check(self, failed: int, what: str) -> None:
        if failed:
            status = np.ctypeslib.as_array(self._lib.mjb_status(self._batch), shape=(self.num_envs,))
            first = int(np.flatnonzero(status)[0])
            message = self._lib.mjb_error(self._batch, first).decode()
            raise RuntimeError(f"MuJoCo raised in {failed} simulations during {what} (env {first}: {message})")

    def step(self, nstep: int, kinematics: bool = False, env_ids: torch.Tensor | None = None) -> None:
        """Advance every simulation (or ``env_ids``) by ``nstep`` calls to ``mj_step`` with the current controls;
        with ``kinematics``, then compute the position and velocity stages at the new state (``mj_step1``)."""
        stage = _STAGE_KINEMATICS if kinematics else _STAGE_NONE
        ids, pointer, count = _id_array(env_ids)  # noqa: F841 - ids keeps the array alive during the call
        self._check(self._lib.mjb_step(self._batch, pointer, count, nstep, stage), "mj_step")
        if self._rne_post is not None:
            failed = self._lib.mjb_apply(self._batch, pointer, count, self._rne_post, None, 0)
            self._check(failed, "mj_rnePostConstraint")
            # mjb_apply does not copy the outputs out; a call that computes no stage does, and nothing else
            self._check(self._lib.mjb_forward(self._batch, pointer, count, _STAGE_NONE), "output copy")

    def reset(self, env_ids: torch.Tensor | None = None) -> None:
        """``mj_resetData`` on the chosen simulations: the model's initial state, zero controls and zero derived
        fields (gymnasium's ``reset`` does this before drawing the new state, so ``cfrc_ext`` starts at zero)."""
        ids, pointer, count = _id_array(env_ids)  # noqa: F841 - ids keeps the array alive during the call
        failed = self._lib.mjb_reset(self._batch, pointer, count, None, _STAGE_NONE)
        self._check(failed, "mj_resetData")

    def forward(self, env_ids: torch.Tensor | None = None, actuation: bool = True) -> None:
        """Make the chosen simulations' state alone decide what follows: clear the solver's warm-start and
        recompute their derived fields (``mj_forward``; with ``actuation=False``, with actuation disabled). Other
        simulations keep theirs."""
        if env_ids is None:
            self._warmstart.zero_()
        else:
            self._warmstart.index_fill_(0, env_ids, 0.0)
        ids, pointer, count = _id_array(env_ids)  # noqa: F841 - ids keeps the array alive during the call
        if actuation:
            failed = self._lib.mjb_forward(self._batch, pointer, count, _STAGE_FORWARD)
        else:
            failed = self._forward_unactuated(pointer, count)
        self._check(failed, "mj_forward")

    def _forward_unactuated(self, pointer, count: int) -> int:
        """``mj_forward`` on a copy of the model with actuation disabled (``mjb_setModels``, then back). A
        simulation with its own model fields (``model_field``) would lose them on that copy: refused."""
        if self._expanded:
            raise RuntimeError(
                f"forward(actuation=False) runs on the shared model: simulations with their own "
                f"{', '.join(sorted(self._expanded))} cannot use it"
            )
        if self._unactuated is None:
            model = copy.copy(self.model)
            model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
            pointers = (ctypes.c_void_p * self.num_envs)(*[model._address] * self.num_envs)
            self._unactuated = (model, pointers)  # kept alive: the batch reads them during the call
        self._lib.mjb_setModels(self._batch, self._unactuated[1])
        try:
            return self._lib.mjb_forward(self._batch, pointer, count, _STAGE_FORWARD)
        finally:
            self._lib.mjb_setModels(self._batch, None)

    def contact_counts(self) -> torch.Tensor:
        """``[N]`` int64: the contacts each simulation's last call found (``MjData.ncon``)."""
        return self._ncon.long()

    def data(self, env_id: int) -> mujoco.MjData:
        """A copy of one simulation's ``MjData``, derived fields included, for rendering."""
        data = mujoco.MjData(self.model)
        self._lib.mjb_getData(self._batch, env_id, data._address)
        return data

    def model_field(self, name: str) -> torch.Tensor:
        """The ``mjModel`` field ``name`` with one value per simulation (``mjb_expand``: each simulation steps its
        own copy from now on), as a writable ``[N, *field shape]`` float64 view, initialised to the model's."""
        reference = getattr(self.model, name)
        size, elemsize = ctypes.c_int(), ctypes.c_int()
        address = self._lib.mjb_expand(self._batch, name.encode(), ctypes.byref(size), ctypes.byref(elemsize))
        if not address or elemsize.value != 8 or size.value != reference.size:
            raise ValueError(f"{name!r} is not an mjModel field of float64 values that can vary per simulation")
        self._expanded.add(name)
        buffer = (ctypes.c_double * (self.num_envs * size.value)).from_address(address)
        return torch.from_numpy(np.frombuffer(buffer, dtype=np.float64).reshape(self.num_envs, *reference.shape))

    def set_const(self, env_ids: torch.Tensor | None = None) -> None:
        """``mj_setConst`` on the chosen simulations' models: recompute what MuJoCo derives from masses and
        inertias (subtree masses, inverse weights, ...). It overwrites their state, so reset them afterwards."""
        ids, pointer, count = _id_array(env_ids)  # noqa: F841 - ids keeps the array alive during the call
        self._check(self._lib.mjb_setConst(self._batch, pointer, count), "mj_setConst")

    def __del__(self):
        if getattr(self, "_batch", None):
            self._lib.mjb_deleteBatch(self._batch)
            self._batch = None
