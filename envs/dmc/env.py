"""``DMCVecEnv``: the DeepMind Control Suite's tasks on batched physics, behind the ``VecEnv`` contract.

Ids follow the Farama convention, ``dm_control/<domain>-<task>-v0`` (``rl_suite.registry.DMC_TASKS`` lists them).
Each task keeps dm_control's semantics (``base.DMCTask``): its model files, read from the installed dm_control
package; its rewards; its observation dict, flattened in dm_control's key order to float32; its initial states,
drawn from each environment's own random stream; and its control timestep, as ``n_sub_steps`` physics steps per
control step. Episodes last the task's time limit (1,000 control steps for every task here) and end only by
truncation. After every step the physics recomputes positions, velocities and their sensors at the new state, as
dm_control's legacy step does, so observations and rewards read the state the step reached; acceleration-dependent
sensors (touch, accelerometers, forces) are the last physics step's, as in dm_control.

``action_repeat=k`` (default 1) holds each action for ``k`` control steps and sums their rewards, as the
benchmarks that report on the suite do (DrQ, TD-MPC: 2 to 8): an episode is then ``ceil(1000 / k)`` steps. Where
``k`` does not divide 1,000 the last step still repeats ``k`` times (DrQ's wrapper stops at the time limit instead);
the common 1, 2, 4 and 8 divide it.

Backends as for the MuJoCo tasks: ``"cpu"`` (MuJoCo's batch API, float64) and ``"warp"`` (``mujoco_warp``,
float32); the device picks one, ``backend=`` forces either.

``get_state`` returns ``(qpos, qvel, task_state)``: ``task_state`` is what decides an episode beyond qpos and
qvel, the actuators' activations (where the model has any: quadruped, dog) then the task's per-episode randomised
targets (documented by each task), ``[N, 0]`` where there are neither. ``set_state`` takes the same three, so that
any state can be set.
"""

from __future__ import annotations

import difflib
import math

import gymnasium as gym
import numpy as np
import torch

from rl_suite.device import resolve_device
from rl_suite.env import Selection, VecEnv, check_num_envs
from rl_suite.envs.dmc.base import DMCTask, compile_model, selected_ids, write_rows
from rl_suite.envs.mujoco.env import BACKENDS, PhysicsRendering, PhysicsRows, observe_task
from rl_suite.registry import DMC_TASKS, load_entry_point

# The domains by name: where each one's task table (``TASKS: {task name: DMCTask subclass}``) lives. A key of this
# table, never a name read from a file, chooses the module.
DOMAINS: dict[str, str] = {domain: f"rl_suite.envs.dmc.{domain}:TASKS" for domain in dict.fromkeys(DMC_TASKS)}


def make_task(domain: str, task: str) -> DMCTask:
    """The task ``task`` of ``domain``, or a clear error with the close matches."""
    if domain not in DOMAINS:
        close = difflib.get_close_matches(domain, list(DOMAINS), n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown Control Suite domain {domain!r}.{hint} Domains: {', '.join(DOMAINS)}")
    tasks = load_entry_point(DOMAINS[domain])
    if task not in tasks:
        close = difflib.get_close_matches(task, list(tasks), n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown {domain} task {task!r}.{hint} Its tasks: {', '.join(tasks)}")
    return tasks[task]()


class DMCVecEnv(PhysicsRendering, VecEnv):
    """``num_envs`` copies of one Control Suite task (``domain="cheetah", task="run"``).

    Args:
        domain, task: dm_control's names.
        action_repeat: control steps per action (rewards summed); 1 or more.
        backend: ``"cpu"`` or ``"warp"``; ``None`` picks by device.
        nthread: native threads of the CPU backend; 0 uses every core.
        warp_options: keyword arguments for the Warp backend (``nconmax``, ``njmax``).
        physics_options: keyword arguments for the backend's constructor, over the two above (any backend).
    """

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        domain: str = "cheetah",
        task: str = "run",
        action_repeat: int = 1,
        backend: str | None = None,
        nthread: int = 0,
        warp_options: dict | None = None,
        physics_options: dict | None = None,
        check_values: bool | None = None,
        masked_resets: bool | None = None,
    ):
        if isinstance(action_repeat, bool) or not isinstance(action_repeat, (int, np.integer)) or action_repeat < 1:
            raise ValueError(f"action_repeat must be an integer of 1 or more, got {action_repeat!r}")
        self.action_repeat = int(action_repeat)
        self.task = make_task(domain, task)
        self.domain, self.task_name = domain, task
        self.model = model = compile_model(self.task.model_xml())
        control_timestep = self.task.control_timestep or model.opt.timestep
        self.n_sub_steps = round(control_timestep / model.opt.timestep)
        if abs(self.n_sub_steps * model.opt.timestep - control_timestep) > 1e-9 * control_timestep:
            raise ValueError(f"{domain}-{task}: control timestep {control_timestep} is not a multiple of the model's")
        self.dt = model.opt.timestep * self.n_sub_steps * self.action_repeat  # seconds per env step
        # dm_control ends an episode at the first step count >= time_limit / (timestep * n_sub_steps)
        control_steps = math.ceil(self.task.time_limit / (model.opt.timestep * self.n_sub_steps))

        num_envs, device = check_num_envs(num_envs), resolve_device(device)
        if backend is None:
            backend = "cpu" if device.type == "cpu" else "warp"
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {tuple(BACKENDS)} or None, got {backend!r}")
        options = {"cpu": {"nthread": nthread}, "warp": dict(warp_options or {})}.get(backend, {})
        options.update(physics_options or {})
        physics_class = load_entry_point(BACKENDS[backend])  # a key of the table, never a name from a file
        self.physics = physics = physics_class(model, num_envs, self.task.fields, device=device, **options)
        self.backend = backend
        self.task.bind(model, physics)
        self._all_rows = PhysicsRows(physics)
        observation_size = sum(part.shape[1] for part in self.task.observe(self._all_rows))

        low, high = model.actuator_ctrlrange.copy().astype(np.float32).T
        super().__init__(
            num_envs,
            device,
            observation_space=gym.spaces.Box(-np.inf, np.inf, (observation_size,), np.float32),
            action_space=gym.spaces.Box(low, high, dtype=np.float32),
            max_episode_steps=math.ceil(control_steps / self.action_repeat),
            seed=seed,
            check_values=check_values,
            # indexed resets by default on every device: the tasks' resets need the ended environments' indices
            # (rejection loops, settling steps), so a mask would only add full-width work to every step
            masked_resets=False if masked_resets is None else masked_resets,
        )
        self._reward_sum = torch.zeros(num_envs, device=physics.device, dtype=physics.dtype)

    # -- hooks of the contract ----------------------------------------------------------------------------

    def _advance(self, actions):
        physics = self.physics
        physics.ctrl.copy_(actions.to(physics.device))  # as dm_control's set_control: MuJoCo clamps to ctrlrange
        total = self._reward_sum.zero_()
        for _ in range(self.action_repeat):
            physics.step(self.n_sub_steps, kinematics=True)
            total.add_(self.task.reward(self._all_rows))
        self._reward.copy_(total)
        self._terminated.zero_()
        return self._reward, self._terminated

    def _observe(self, out, env_ids=None):
        observe_task(self.physics, self.task, out, env_ids)

    def _reset_envs(self, selection: Selection):
        # dm_control's reset_context: mj_resetData, the task's initial state, then mj_forward (after_reset)
        ids = selected_ids(selection, self.physics.device)
        if not ids.numel():  # masked resets where nothing ended (counting them was the sync the draws need anyway)
            return
        self.physics.reset(ids)
        self.task.initialize_episode(self.physics, selection, self.rng)
        self.task.after_reset(self.physics, ids)

    # -- state --------------------------------------------------------------------------------------------

    @property
    def task_state_size(self) -> int:
        """The width of ``task_state``: the activations, then the task's targets."""
        return self.model.na + self.task.task_state_size

    def _activations(self) -> torch.Tensor:
        return self._all_rows.act  # a view of the physics' state rows

    def get_state(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Copies of ``(qpos [N, nq], qvel [N, nv], task_state [N, na + k])`` in the backend's precision."""
        task_state = torch.cat([self._activations(), self.task.get_task_state().to(self.physics.qpos)], dim=1)
        return self.physics.qpos.clone(), self.physics.qvel.clone(), task_state

    def set_state(self, qpos, qvel, task_state=None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Set ``qpos``, ``qvel`` and, where given, the task state of every environment (or of ``env_ids``), then
        recompute derived quantities as an episode start does (dm_control's ``reset_context``): zero controls, then
        the task's ``after_reset`` (``mj_forward`` with a cleared warm start, with actuation disabled where that
        changes anything). Returns the new observations. Step counters and episode statistics carry on."""
        physics = self.physics
        ids = None if env_ids is None else torch.as_tensor(env_ids, device=self.device)
        self._write_state(physics.qpos, qpos, ids, what=f"qpos ([rows, nq={self.model.nq}])")
        self._write_state(physics.qvel, qvel, ids, what=f"qvel ([rows, nv={self.model.nv}])")
        if task_state is not None:
            rows = self.get_state()[2]
            self._write_state(rows, task_state, ids, what=f"task_state ([rows, {self.task_state_size}])")
            selection = Selection(ids=ids if ids is not None else torch.arange(self.num_envs, device=self.device))
            selected = selection.read(rows.to(self.device))
            write_rows(self._activations(), selection, selected[:, : self.model.na])
            self.task.set_task_state(selected[:, self.model.na :], selection)
        sim_ids = None if ids is None else ids.to(physics.device)
        # as dm_control's reset_context (mj_resetData, then after_reset): zero controls, so that the observation of
        # the new state does not depend on the last action
        if sim_ids is None:
            physics.ctrl.zero_()
        else:
            physics.ctrl.index_fill_(0, sim_ids, 0.0)
        self.task.after_reset(physics, sim_ids)
        self._observe(self._obs)
        return self._obs

    def state_dict(self) -> dict[str, torch.Tensor]:
        task_state = {f"task.{name}": field.clone() for name, field in self.task.task_state_dict().items()}
        return {"physics": self.physics.state.clone(), **task_state, **self._episode_state_dict()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.physics.state.copy_(state["physics"])
        prefix = "task."
        self.task.load_task_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
        self._load_episode_state_dict(state)
