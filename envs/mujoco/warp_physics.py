"""``WarpPhysics``: a ``PhysicsBackend`` (``physics.py``) over MuJoCo Warp, ``nworld = num_envs``.

Everything is float32 and lives on the device ``mujoco_warp`` runs on (``cpu`` or ``cuda:K``); the torch tensors
this class hands out are views of the ``mujoco_warp`` arrays, never copies.

The state is one ``[N, k]`` float32 tensor laid out as MuJoCo's ``mjSTATE_INTEGRATION`` (so a ``CPUPhysics``
state row, cast to float32, is a valid ``WarpPhysics`` state row and vice versa). ``mujoco_warp`` keeps each
state field in its own array; we allocate the rows ourselves and point the ``Data`` fields (``qpos``, ``qvel``,
``ctrl``, ``time``, ...) at column slices of them. Warp kernels index arrays through their strides, so the
solver reads and writes the rows in place; ``copy_`` into ``state`` is a checkpoint restore with nothing to sync.

Models that ``mujoco_warp`` cannot run as they are:

- the PGS solver (gymnasium's Humanoid uses it) is not implemented in ``mujoco_warp``: we run Newton instead,
  with the model's iteration count and tolerance, and warn. On Humanoid, MuJoCo's PGS and Newton stay within
  5e-8 of each other in qpos over 40 frames, far below what float32 changes.
- plugin state cannot be aliased (``mujoco_warp`` has no such array): such models are refused.

Where the physics differs from ``CPUPhysics``'s beyond float32 rounding: with the pyramidal friction cone (the
default, and gymnasium's), contact forces depend on the contact's tangent frame, and for a capsule standing steeper
than 60 degrees on a plane ``mujoco_warp`` picks a fixed tangent where MuJoCo follows the capsule's axis. Ant and
Humanoid then diverge within a frame of such a contact (Ant: qvel off by 1.4 in 12); HalfCheetah, being planar,
does not notice. With the elliptic cone both agree to float32 (see ``tests/test_mujoco_warp.py``).

Contact buffers (fixed-size in ``mujoco_warp``; what does not fit is dropped, and ``overflow`` says so): by
default ``nconmax = 4 * c`` contacts per world, where ``c`` counts the geoms that can collide and the explicit
contact pairs (the contact pool holds ``num_envs * nconmax``, shared by all worlds), and ``njmax`` constraint
rows per world = the rows that are always active at ``qpos0`` (equality, dof friction) + one per limited joint
or tendon + ``2 * c`` contacts' rows (each ``2 * (condim - 1)`` with the pyramidal cone, ``condim`` with the
elliptic one). For gymnasium's HalfCheetah, Ant and Humanoid that is nconmax 36/56/72 and njmax 78/120/161,
against at most 4/5/10 contacts and 18/25/38 rows seen in long random-action MuJoCo rollouts.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Sequence

import mujoco
import mujoco_warp as mjw
import numpy as np
import torch
import warp as wp

# mjSTATE_INTEGRATION's components in the order mj_getState writes them (by bit), with the mujoco_warp Data field
# holding each (None: no such field).
_STATE_FIELDS = (
    (mujoco.mjtState.mjSTATE_TIME, "time"),
    (mujoco.mjtState.mjSTATE_QPOS, "qpos"),
    (mujoco.mjtState.mjSTATE_QVEL, "qvel"),
    (mujoco.mjtState.mjSTATE_ACT, "act"),
    (mujoco.mjtState.mjSTATE_HISTORY, "history"),
    (mujoco.mjtState.mjSTATE_WARMSTART, "qacc_warmstart"),
    (mujoco.mjtState.mjSTATE_CTRL, "ctrl"),
    (mujoco.mjtState.mjSTATE_QFRC_APPLIED, "qfrc_applied"),
    (mujoco.mjtState.mjSTATE_XFRC_APPLIED, "xfrc_applied"),
    (mujoco.mjtState.mjSTATE_EQ_ACTIVE, "eq_active"),
    (mujoco.mjtState.mjSTATE_MOCAP_POS, "mocap_pos"),
    (mujoco.mjtState.mjSTATE_MOCAP_QUAT, "mocap_quat"),
    (mujoco.mjtState.mjSTATE_USERDATA, "userdata"),
    (mujoco.mjtState.mjSTATE_PLUGIN, None),
    (mujoco.mjtState.mjSTATE_PLASTIC, "plastic"),
)


def default_contact_sizes(model: mujoco.MjModel) -> tuple[int, int]:
    """``(nconmax, njmax)`` per world as described in the module's docstring."""
    collide = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
    ncollide = int(collide.sum()) + model.npair
    condim = int(np.concatenate([model.geom_condim[collide], model.pair_dim, [1]]).max())
    elliptic = model.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    rows_per_contact = condim if elliptic or condim == 1 else 2 * (condim - 1)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    limits = int(model.jnt_limited.sum()) + int(model.tendon_limited.sum())
    nconmax = max(16, 4 * ncollide)
    njmax = data.ne + data.nf + limits + 2 * ncollide * rows_per_contact
    return nconmax, max(16, njmax)


class WarpPhysics:
    """A ``PhysicsBackend``: ``num_envs`` worlds of one model stepped by ``mujoco_warp`` on ``device``.

    Args:
        model: the compiled model (a PGS model runs with Newton, see the module's docstring).
        num_envs: how many worlds.
        fields: the derived MjData fields the task reads, as ``[N, *MjData shape]`` views in ``derived``.
        device: ``cpu`` or ``cuda:K``; on CUDA, ``step`` replays a CUDA graph, and all work is ordered on torch's
            current stream, so the tensors can be read and written around the calls without synchronising.
        nconmax, njmax: contacts and constraint rows per world; None for the defaults above.

    ``overflow`` (``[N]`` int32) is nonzero for worlds whose contacts or constraints did not fit since their last
    ``reset`` (``mujoco_warp``'s ``OverflowType`` bits); raise ``nconmax``/``njmax`` if it ever is.
    """

    backend = "warp"
    dtype = torch.float32

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        fields: Sequence[str] = (),
        device: torch.device | str = "cpu",
        nconmax: int | None = None,
        njmax: int | None = None,
    ):
        self.model = model
        self.num_envs = num_envs
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        wp.init()
        self._wp_device = wp.device_from_torch(self.device)
        if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
            warnings.warn("mujoco_warp has no PGS solver; this model runs with Newton instead", stacklevel=2)
            model = copy.copy(model)
            model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
        self._mjm = model  # the model mujoco_warp simulates
        default_nconmax, default_njmax = default_contact_sizes(model)
        self.nconmax = default_nconmax if nconmax is None else nconmax
        self.njmax = default_njmax if njmax is None else njmax
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        with wp.ScopedDevice(self._wp_device):
            self._m = mjw.put_model(model)
            self._d = mjw.put_data(model, data, nworld=num_envs, nconmax=self.nconmax, njmax=self.njmax)

        nstate = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION)
        self.state = torch.zeros(num_envs, nstate, dtype=self.dtype, device=self.device)
        slots = self._alias_state(model)
        self.qpos, self.qvel, self.ctrl = slots["qpos"], slots["qvel"], slots["ctrl"]
        self.xfrc_applied = slots["xfrc_applied"].view(num_envs, model.nbody, 6)
        self._warmstart = slots["qacc_warmstart"]
        # eq_active is bool in mujoco_warp and cannot live in float rows: the row is the truth, copied into the
        # bool array before every call that reads it.
        self._eq_active_row = slots["eq_active"] if model.neq else None
        self._eq_active = wp.to_torch(self._d.eq_active) if model.neq else None
        # mj_resetData's state, for reset(): what a fresh MjData holds.
        fresh = mujoco.MjData(model)
        row = np.empty(nstate)
        mujoco.mj_getState(model, fresh, row, mujoco.mjtState.mjSTATE_INTEGRATION)
        self._reset_row = torch.as_tensor(row, dtype=self.dtype, device=self.device)

        self.derived = {name: self._derived_view(name, data) for name in fields}
        self.overflow = wp.to_torch(self._d.overflow)
        self._rne_post = "cfrc_ext" in fields
        # mjw.step1 zeroes sensordata before it computes the position and velocity sensors, where MuJoCo's mj_step1
        # keeps the acceleration-stage ones (touch, accelerometer, force, torque) of the last substep, as dm_control
        # reads them: step(kinematics=True) saves those columns before mjw.step1 and puts them back after it.
        acc = [s for s in range(model.nsensor) if model.sensor_needstage[s] == mujoco.mjtStage.mjSTAGE_ACC]
        columns = [int(model.sensor_adr[s]) + k for s in acc for k in range(int(model.sensor_dim[s]))]
        self._acc_sensor_columns = torch.tensor(columns, device=self.device) if columns else None
        if columns:
            self._sensor_scratch = wp.zeros_like(self._d.sensordata)
            self._sensordata = wp.to_torch(self._d.sensordata)
            self._saved_sensordata = wp.to_torch(self._sensor_scratch)
        self._graphs: dict[tuple[int, bool], wp.Graph] = {}  # CUDA graphs of step, by (nstep, kinematics)
        self._model_fields: dict[str, torch.Tensor] = {}  # per-world model fields, kept alive here
        self._wp_stream = None
        if self._wp_device.is_cuda:
            # put_data's copies ran on warp's stream and the copies into the rows on torch's, reading arrays that
            # the Data no longer holds: let both finish before anything else runs or the old arrays are freed.
            wp.synchronize_device(self._wp_device)
            torch.cuda.synchronize(self.device)

    def _alias_state(self, model: mujoco.MjModel) -> dict[str, torch.Tensor]:
        """Point the Data's state fields at column slices of ``self.state``; return those slices by field."""
        slots, offset = {}, 0
        for component, name in _STATE_FIELDS:
            size = mujoco.mj_stateSize(model, component)
            slot = self.state[:, offset : offset + size]
            offset += size
            if name is None:
                if size:
                    raise NotImplementedError(f"mujoco_warp cannot hold this model's {component.name} state")
                continue
            array = getattr(self._d, name)
            current = wp.to_torch(array)  # [N, ...] with vector dtypes (xfrc_applied, mocap_*) as a last dim
            if current[0].numel() != size:
                raise NotImplementedError(f"mujoco_warp's {name} does not match MuJoCo's {component.name}")
            slot = slot.view(current.shape)
            slot.copy_(current)
            slots[name] = slot
            if name != "eq_active" and size:
                setattr(self._d, name, wp.from_torch(slot, dtype=array.dtype))
        if offset != self.state.shape[1]:
            raise NotImplementedError("this MuJoCo's mjSTATE_INTEGRATION has components WarpPhysics does not know")
        return slots

    def _derived_view(self, name: str, template: mujoco.MjData) -> torch.Tensor:
        array, reference = getattr(self._d, name, None), getattr(template, name, None)
        if not isinstance(array, wp.array) or not isinstance(reference, np.ndarray):
            raise ValueError(f"{name!r} is not an MjData field that mujoco_warp computes")
        view = wp.to_torch(array)
        if view.shape[0] != self.num_envs or view[0].numel() != reference.size:
            raise ValueError(f"mujoco_warp's {name!r} is not laid out as MjData's {name!r}")
        return view.view(self.num_envs, *reference.shape)

    def _stream(self) -> wp.Stream:
        """Torch's current CUDA stream as a warp stream, so that warp's work is ordered with torch's."""
        current = torch.cuda.current_stream(self.device)
        if self._wp_stream is None or self._wp_stream.cuda_stream != current.cuda_stream:
            self._wp_stream = wp.stream_from_torch(current)
        return self._wp_stream

    def _sync_eq_active(self) -> None:
        if self._eq_active is not None:
            self._eq_active.copy_(self._eq_active_row != 0)

    def _step(self, nstep: int, kinematics: bool) -> None:
        for _ in range(nstep):
            mjw.step(self._m, self._d)
        if kinematics:
            if self._acc_sensor_columns is not None:
                wp.copy(self._sensor_scratch, self._d.sensordata)
            mjw.step1(self._m, self._d)
        if self._rne_post:
            # as gymnasium's mj_rnePostConstraint after mj_step: cfrc_ext from the last substep's contacts
            mjw.rne_postconstraint(self._m, self._d)

    def step(self, nstep: int, kinematics: bool = False, env_ids: torch.Tensor | None = None) -> None:
        """Advance every world (or ``env_ids``) by ``nstep`` calls to ``mjw.step`` with the current controls; with
        ``kinematics``, then compute the position and velocity stages at the new state (``mjw.step1``). mujoco_warp
        steps every world: with ``env_ids``, the others' state and derived fields are put back afterwards."""
        if env_ids is not None:
            if env_ids.numel():  # numel is the tensor's shape: no host sync
                with self._keeping_others(env_ids):
                    self.step(nstep, kinematics)
            return
        self._sync_eq_active()
        with wp.ScopedDevice(self._wp_device):
            if not self._wp_device.is_cuda:
                self._step(nstep, kinematics)  # CPU launches run synchronously: results are there on return
            else:
                graph = self._graphs.get((nstep, kinematics))
                if graph is None:
                    # capture only records the launches (it runs nothing); the arrays never move, so it stays valid
                    with wp.ScopedCapture(device=self._wp_device) as capture:
                        self._step(nstep, kinematics)
                    graph = self._graphs[nstep, kinematics] = capture.graph
                wp.capture_launch(graph, stream=self._stream())
        if kinematics and self._acc_sensor_columns is not None:  # on torch's stream, after warp's launches
            columns = self._acc_sensor_columns
            self._sensordata.index_copy_(1, columns, self._saved_sensordata.index_select(1, columns))

    def reset(self, env_ids: torch.Tensor | None = None) -> None:
        """``mj_resetData`` on the chosen worlds: the model's initial state, zero controls, zero derived fields."""
        if env_ids is None:
            self.state.copy_(self._reset_row)
            for view in self.derived.values():
                view.zero_()
            self.overflow.zero_()
        else:
            self.state.index_copy_(0, env_ids, self._reset_row.expand(len(env_ids), -1))
            for view in self.derived.values():
                view.index_fill_(0, env_ids, 0.0)
            self.overflow.index_fill_(0, env_ids, 0)

    def forward(self, env_ids: torch.Tensor | None = None, actuation: bool = True) -> None:
        """Make the chosen worlds' state alone decide what follows: clear the solver's warm-start and recompute
        their derived fields (``mjw.forward``, which, as ``mj_forward``, leaves ``cfrc_ext`` alone unless sensors
        need it; with ``actuation=False``, with actuation disabled). Other worlds keep theirs."""
        self._sync_eq_active()
        if env_ids is None:
            self._warmstart.zero_()
            self._forward(actuation)
            return
        if not env_ids.numel():  # no world chosen (masked resets where nothing ended): no host sync to know it
            return
        # mjw.forward runs on every world: keep the others' derived fields and put them back (no host sync). It
        # writes neither the state nor the warm-start, so the others' next step is unchanged.
        with self._keeping_others(env_ids, state=False):
            self._warmstart.index_fill_(0, env_ids, 0.0)
            self._forward(actuation)

    @contextlib.contextmanager
    def _keeping_others(self, env_ids: torch.Tensor, state: bool = True):
        """Run a call on every world, then put back the derived fields (and with ``state``, the state rows) of the
        worlds outside ``env_ids``: no host sync."""
        keep = torch.ones(self.num_envs, dtype=torch.bool, device=self.device).index_fill_(0, env_ids, False)
        saved = {name: view.clone() for name, view in self.derived.items()}
        if state:
            saved["state"] = self.state.clone()
        yield
        views = {**self.derived, "state": self.state} if state else self.derived
        for name, view in views.items():
            view.copy_(torch.where(keep.view(-1, *[1] * (view.dim() - 1)), saved[name], view))

    def _forward(self, actuation: bool = True) -> None:
        flags = self._m.opt.disableflags
        if not actuation:  # a Python-side flag that mujoco_warp reads when it launches the call's kernels
            self._m.opt.disableflags = flags | mjw.DisableBit.ACTUATION
        try:
            with wp.ScopedDevice(self._wp_device):
                if self._wp_device.is_cuda:
                    with wp.ScopedStream(self._stream()):
                        mjw.forward(self._m, self._d)
                else:
                    mjw.forward(self._m, self._d)
        finally:
            self._m.opt.disableflags = flags

    # mujoco_warp reads a model field's row ``worldid % rows``; set_const writes the rows its outputs have. These are
    # what it derives from masses and inertias, given one row per world when the masses get one.
    _MASS_DERIVED = ("body_subtreemass", "dof_invweight0", "body_invweight0", "tendon_invweight0", "actuator_acc0")

    def contact_counts(self) -> torch.Tensor:
        """``[N]`` int64: the contacts each world's last evaluation found (``MjData.ncon``). Reading how many
        contacts there are in all is a host sync."""
        total = int(wp.to_torch(self._d.nacon)[0])
        worlds = wp.to_torch(self._d.contact.worldid)[:total].long()
        return torch.bincount(worlds, minlength=self.num_envs)

    def model_field(self, name: str) -> torch.Tensor:
        """The model field ``name`` with one row per world, as a writable ``[N, *field shape]`` view initialised to
        the model's. Call it before the first ``step`` on CUDA: captured graphs hold the arrays they were given."""
        if name in self._model_fields:
            return self._model_fields[name]
        array = getattr(self._m, name, None)
        if not isinstance(array, wp.array) or name not in self._mjm.__dir__():
            raise ValueError(f"{name!r} is not a model field mujoco_warp can vary per world")
        if self._graphs:
            raise RuntimeError(f"model_field({name!r}) after the first step: captured CUDA graphs read the old array")
        rows = wp.to_torch(array)
        field = rows[:1].expand(self.num_envs, *rows.shape[1:]).clone()
        setattr(self._m, name, wp.from_torch(field, dtype=array.dtype))
        reference = getattr(self._mjm, name)
        self._model_fields[name] = view = field.view(self.num_envs, *reference.shape)
        return view

    def set_const(self, env_ids: torch.Tensor | None = None) -> None:
        """``mjw.set_const``: recompute what mujoco_warp derives from masses and inertias, per world. It runs on
        every world (the others' constants come out as they were); their derived fields are put back."""
        for name in self._MASS_DERIVED:
            if getattr(self._mjm, name).size:
                self.model_field(name)
        saved = {name: view.clone() for name, view in self.derived.items()}
        self._sync_eq_active()
        with wp.ScopedDevice(self._wp_device):
            if self._wp_device.is_cuda:
                with wp.ScopedStream(self._stream()):
                    mjw.set_const(self._m, self._d)
            else:
                mjw.set_const(self._m, self._d)
        for name, view in self.derived.items():
            view.copy_(saved[name])

    def data(self, env_id: int) -> mujoco.MjData:
        """A copy of one world as an ``MjData``, derived fields (as of the last call) included, for rendering."""
        self._sync_eq_active()
        if self._wp_device.is_cuda:
            torch.cuda.current_stream(self.device).synchronize()
        data = mujoco.MjData(self._mjm)
        mjw.get_data_into(data, self._mjm, self._d, world_id=env_id)
        return data
