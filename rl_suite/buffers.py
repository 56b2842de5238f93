"""Device-resident storage written by the collector: a ``[T, N, ...]`` rollout for on-policy agents and a replay ring
buffer with n-step returns for off-policy agents, plus the pure functions that turn them into learning targets.

Both buffers take the same ``add(obs, actions, reward, terminated, truncated, next_obs, **extras)``: ``next_obs`` is
``info["final_obs"]``, the observation the step reached before any reset, so that truncated episodes bootstrap
from where they really ended. ``extras`` are whatever the agent's ``act`` returned for the learner to keep.
"""

from __future__ import annotations

import os

import torch

Spec = dict[str, tuple[tuple[int, ...], torch.dtype]]  # field name -> (shape of one environment's entry, dtype)


def running_returns(
    running: torch.Tensor, rewards: torch.Tensor, done: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Carry each environment's discounted return G <- gamma G + r through ``[T, N]`` rewards (oldest first), from
    ``running`` ``[N]``, restarting it after each step whose ``done`` is set. Returns every step's G ``[T, N]`` and the
    running returns after the last step: the statistics that reward scaling divides by."""
    seen = torch.empty_like(rewards)
    for t in range(rewards.shape[0]):
        running = running * gamma + rewards[t]
        seen[t] = running
        running = running * ~done[t]
    return seen, running


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al., 2016) over ``[T, N]`` tensors.

    ``next_values[t]`` is the value of the observation step ``t`` reached (its ``final_obs``), so a truncated
    episode bootstraps from its last observation. ``terminated`` cuts the bootstrap; ``done`` (terminated or
    truncated) cuts the recursion, because step ``t + 1`` then belongs to a new episode.
    Returns ``(advantages, returns)`` with ``returns = advantages + values``.
    """
    # delta_t = r_t + gamma V(s'_t) (1 - terminated_t) - V(s_t)
    deltas = rewards + gamma * next_values * (~terminated) - values
    # A_t = delta_t + gamma lambda (1 - done_t) A_{t+1}
    carry = gamma * lam * (~done)
    advantages = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


def owed_updates(credit: float, earned: float) -> tuple[int, float]:
    """The whole gradient updates owed once ``earned`` (fractional) updates join the ``credit`` carried over, and the
    fraction carried on: ``(updates, credit)``."""
    credit += earned
    updates = int(credit)
    return updates, credit - updates


def check_fits_in_memory(nbytes: int, device: torch.device, what: str, setting: str) -> None:
    """Refuse, with a message that names ``setting``, storage that cannot fit on ``device``."""
    if device.type == "cuda":
        available, _ = torch.cuda.mem_get_info(device)
    else:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if nbytes > available:
        raise MemoryError(
            f"{what} needs {nbytes / 2**30:.2f} GiB on {device}, but only {available / 2**30:.2f} GiB is available; "
            f"lower {setting}"
        )


def _storage(rows: int, num_envs: int, spec: Spec, device: torch.device) -> dict[str, torch.Tensor]:
    return {
        name: torch.zeros((rows, num_envs, *shape), dtype=dtype, device=device) for name, (shape, dtype) in spec.items()
    }


def _spec_bytes(rows: int, num_envs: int, spec: Spec) -> int:
    return sum(rows * num_envs * torch.Size(shape).numel() * dtype.itemsize for shape, dtype in spec.values())


def _write_row(data, row, obs, actions, reward, terminated, truncated, next_obs, extras) -> None:
    """Copy one batched transition into row ``row`` of every field (no allocation)."""
    fields = dict(
        obs=obs,
        actions=actions,
        rewards=reward,
        terminated=terminated,
        truncated=truncated,
        next_obs=next_obs,
        **extras,
    )
    for name, value in fields.items():
        data[name][row].copy_(value)


def transition_spec(obs_shape, action_shape, action_dtype, extras: Spec | None = None) -> Spec:
    """The fields every buffer keeps, and the agent's extras."""
    return {
        "obs": (tuple(obs_shape), torch.float32),
        "actions": (tuple(action_shape), action_dtype),
        "rewards": ((), torch.float32),
        "terminated": ((), torch.bool),
        "truncated": ((), torch.bool),
        "next_obs": (tuple(obs_shape), torch.float32),
        **(extras or {}),
    }


class RolloutBuffer:
    """``steps`` consecutive batched transitions, ``[T, N, ...]`` per field, allocated once and refilled."""

    def __init__(self, steps: int, num_envs: int, spec: Spec, device: torch.device):
        check_fits_in_memory(
            _spec_bytes(steps, num_envs, spec), device, "the rollout buffer", "num_envs or the rollout length"
        )
        self.steps, self.num_envs, self.device = steps, num_envs, device
        self.data = _storage(steps, num_envs, spec, device)
        self.step = 0

    @property
    def fields(self) -> set[str]:
        """The names ``add`` takes."""
        return set(self.data)

    def add(self, obs, actions, reward, terminated, truncated, next_obs, **extras) -> None:
        _write_row(self.data, self.step, obs, actions, reward, terminated, truncated, next_obs, extras)
        self.step += 1

    @property
    def full(self) -> bool:
        return self.step == self.steps

    def clear(self) -> None:
        self.step = 0

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.data[name]

    def state_dict(self) -> dict:
        """What is stored between iterations: nothing, since each update consumes and clears the rollout."""
        return {"step": self.step, "data": {name: v[: self.step].clone() for name, v in self.data.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        for name, value in state["data"].items():
            self.data[name][: self.step].copy_(value)


class ReplayBuffer:
    """A ring of batched transitions, ``[capacity / N, N, ...]`` per field, sampled as n-step transitions.

    Each environment's transitions stay in time order along the first axis, so an n-step window is a run of rows.
    """

    def __init__(
        self, capacity: int, num_envs: int, spec: Spec, device: torch.device, n_step: int = 1, gamma: float = 0.99
    ):
        if capacity < num_envs * max(n_step, 1):
            raise ValueError(
                f"buffer_size={capacity} must hold at least n_step * num_envs = {n_step * num_envs} transitions"
            )
        self.rows = capacity // num_envs
        check_fits_in_memory(
            _spec_bytes(self.rows, num_envs, spec),
            device,
            f"a replay buffer of {self.rows * num_envs:,} transitions",
            "buffer_size",
        )
        self.num_envs, self.device, self.n_step, self.gamma = num_envs, device, n_step, gamma
        self.data = _storage(self.rows, num_envs, spec, device)
        # where an n-step transition reads each field: at its window's end (next_*) or its start (the rest)
        self._at_end = [name for name in self.data if _at_end(name)]
        self._at_start = [n for n in self.data if n not in ("rewards", "terminated", "truncated", *self._at_end)]
        self.pos, self.size = 0, 0  # next row to write, rows written (up to self.rows)

    def __len__(self) -> int:
        return self.size * self.num_envs

    @property
    def fields(self) -> set[str]:
        """The names ``add`` takes."""
        return set(self.data)

    def add(self, obs, actions, reward, terminated, truncated, next_obs, **extras) -> None:
        _write_row(self.data, self.pos, obs, actions, reward, terminated, truncated, next_obs, extras)
        self.pos = (self.pos + 1) % self.rows
        self.size = min(self.size + 1, self.rows)

    def state_dict(self) -> dict:
        """The stored transitions (only the rows written), so that a resumed off-policy run continues exactly."""
        return {
            "pos": self.pos,
            "size": self.size,
            "data": {name: v[: self.size].clone() for name, v in self.data.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.pos, self.size = state["pos"], state["size"]
        for name, value in state["data"].items():
            self.data[name][: self.size].copy_(value)

    def recent(self, name: str, rows: int) -> torch.Tensor:
        """The newest ``rows`` batched entries of field ``name``, ``[rows, N, ...]``."""
        index = (self.pos - 1 - torch.arange(min(rows, self.size), device=self.device)) % self.rows
        return self.data[name][index]

    def can_sample(self) -> bool:
        return self.size >= self.n_step

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """``batch_size`` n-step transitions, uniformly over complete windows: ``obs``, ``actions``, ``rewards``
        (the discounted sum over the window, which stops at an episode's end), ``next_obs`` (where the window
        ended) and ``discount`` (``gamma**m``, zero if the window ended by termination). Every other field named
        ``next_*`` (an asymmetric critic's ``next_critic_obs``) is also read where the window ended; the rest where it
        started."""
        if not self.can_sample():
            raise ValueError(f"cannot sample {self.n_step}-step transitions from {len(self)} stored ones")
        # Windows start at the oldest row and must not run past the newest one.
        starts = self.size - self.n_step + 1
        oldest = self.pos if self.size == self.rows else 0
        row = (oldest + torch.randint(0, starts, (batch_size,), device=self.device)) % self.rows
        env = torch.randint(0, self.num_envs, (batch_size,), device=self.device)
        d = self.data
        batch = {name: d[name][row, env] for name in self._at_start}
        if self.n_step == 1:
            batch.update({name: d[name][row, env] for name in self._at_end}, rewards=d["rewards"][row, env])
            if "discount" not in batch:  # transitions stored with their own discount (NStepWindow's) keep it
                batch["discount"] = self.gamma * (~d["terminated"][row, env])
            return batch
        rewards = torch.zeros(batch_size, device=self.device)
        discount = torch.ones(batch_size, device=self.device)
        alive = torch.ones(batch_size, dtype=torch.bool, device=self.device)
        last, terminated = row, torch.zeros(batch_size, dtype=torch.bool, device=self.device)
        for k in range(self.n_step):
            r = (row + k) % self.rows
            # Steps after the episode's end do not count; `alive` says whether step k is still in it.
            rewards += torch.where(alive, discount * d["rewards"][r, env], 0.0)
            discount = torch.where(alive, discount * self.gamma, discount)
            last = torch.where(alive, r, last)
            terminated = torch.where(alive, d["terminated"][r, env], terminated)
            alive = alive & ~(d["terminated"][r, env] | d["truncated"][r, env])
        batch.update({name: d[name][last, env] for name in self._at_end})
        batch.update(rewards=rewards, discount=discount * (~terminated))
        return batch


def _at_end(name: str) -> bool:
    """Whether an n-step transition reads field ``name`` where its window ends (``next_obs``, ``next_critic_obs``)
    rather than where it starts."""
    return name.startswith("next_")


class NStepWindow:
    """Forms n-step transitions as the collector produces 1-step ones, on the device, for all environments at once.

    It keeps the newest ``n`` batched transitions. Once it holds ``n``, each ``push`` completes the transitions that
    started ``n - 1`` steps earlier and returns them: ``obs`` and ``actions`` of that step, ``rewards`` (the
    discounted sum until the window or the episode ends), ``next_obs`` and any other ``next_*`` field (where it
    ended), ``terminated`` and ``truncated`` (how it ended) and ``discount`` (``gamma**m``, zero after termination), the
    same fields as ``ReplayBuffer.sample``, so that a 1-step replay buffer can store them. The returned tensors are
    reused by the next ``push``: copy them before then.
    """

    def __init__(self, n: int, gamma: float, num_envs: int, spec: Spec, device: torch.device):
        if n < 1:
            raise ValueError(f"n_step must be at least 1, got {n}")
        self.n, self.gamma, self.num_envs = n, gamma, num_envs
        self.data = _storage(n, num_envs, spec, device)
        self._ending = [name for name in self.data if _at_end(name)] + ["terminated", "truncated"]  # where it ended
        self.pushed = 0
        self.out = {name: torch.empty_like(value[0]) for name, value in self.data.items()}
        self.out["discount"] = torch.empty(num_envs, device=device)
        self._alive = torch.empty(num_envs, dtype=torch.bool, device=device)
        self._ended = torch.empty(num_envs, dtype=torch.bool, device=device)
        self._weight = torch.empty(num_envs, device=device)

    @torch.no_grad()
    def push(self, obs, actions, reward, terminated, truncated, next_obs, **extras) -> dict[str, torch.Tensor] | None:
        _write_row(self.data, self.pushed % self.n, obs, actions, reward, terminated, truncated, next_obs, extras)
        self.pushed += 1
        if self.pushed < self.n:
            return None
        d, out, oldest = self.data, self.out, self.pushed % self.n
        ending = self._ending
        for name in d:
            if name != "rewards" and name not in ending:
                out[name].copy_(d[name][oldest])
        out["rewards"].zero_()
        out["discount"].fill_(1.0)
        alive = self._alive.fill_(True)  # is step k still in the episode that the transition started in?
        weight = self._weight
        for k in range(self.n):
            r = (oldest + k) % self.n
            out["rewards"].addcmul_(torch.mul(out["discount"], alive, out=weight), d["rewards"][r])
            for name in ending:
                mask = alive.view(-1, *[1] * (d[name].dim() - 2))
                torch.where(mask, d[name][r], out[name], out=out[name])
            out["discount"].mul_(weight.copy_(alive).mul_(self.gamma - 1.0).add_(1.0))  # gamma while alive, else 1
            torch.logical_or(d["terminated"][r], d["truncated"][r], out=self._ended)
            alive.logical_and_(self._ended.logical_not_())
        out["discount"].mul_(out["terminated"].logical_not())
        return out

    def state_dict(self) -> dict:
        return {"pushed": self.pushed, "data": {name: v.clone() for name, v in self.data.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.pushed = state["pushed"]
        for name, value in state["data"].items():
            self.data[name].copy_(value)


def lambda_returns(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_values: torch.Tensor,
    next_valid: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """TD(lambda) targets over ``[B, L]`` episodes (time on dim 1), computed backwards:

        G_t = r_t + gamma (1 - terminated_t) [(1 - lambda) V_{t+1} + lambda G_{t+1}],

    with ``next_values[:, t] = V_{t+1}``, and ``G_{t+1}`` replaced by ``V_{t+1}`` where step ``t + 1`` is not part of
    the episode (``next_valid`` false: the episode ended at ``t``), so a truncated episode bootstraps from the value of
    its final observation. ``lam = 0`` gives one-step targets, ``lam = 1`` Monte Carlo returns bootstrapped at the end.
    """
    returns = torch.empty_like(rewards)
    following = next_values[:, -1]
    for t in range(rewards.shape[1] - 1, -1, -1):
        bootstrap = torch.where(next_valid[:, t], (1 - lam) * next_values[:, t] + lam * following, next_values[:, t])
        following = rewards[:, t] + gamma * (~terminated[:, t]) * bootstrap
        returns[:, t] = following
    return returns


class EpisodeBuffer:
    """Whole episodes on the device, for recurrent learners (QMIX): ``[episodes, max_steps + 1, ...]`` per field,
    sampled as batches of episodes.

    Each environment writes its running episode straight into its own ring of slots, one row per step: no staging, no
    host sync. Row ``t`` of an episode holds step ``t``'s fields (``filled`` true); ``add``'s ``next_<field>`` values
    (``next_obs`` and, say, ``next_global_state``) go to row ``t + 1``, so the row after an episode's last step holds
    the observation it ended in (the bootstrap of a truncated episode). When an episode ends, the environment moves to
    its next slot, overwriting the oldest of its episodes. Episodes are sampled uniformly among the completed ones.
    """

    def __init__(self, capacity: int, num_envs: int, max_steps: int, spec: Spec, device: torch.device):
        """``spec``: the per-step fields (``obs``, ``actions``, ``rewards``, ``terminated`` and extras), each with its
        shape for one environment."""
        # One slot per environment is always the episode in progress; at least one more holds a completed episode.
        self.slots = max(-(-capacity // num_envs), 2)
        self.num_envs, self.max_steps, self.device = num_envs, max_steps, device
        spec = {**spec, "filled": ((), torch.bool)}
        check_fits_in_memory(
            _spec_bytes(self.slots * (max_steps + 1), num_envs, spec), device, "the episode buffer", "buffer_episodes"
        )
        self.data = {
            name: torch.zeros((self.slots * num_envs, max_steps + 1, *shape), dtype=dtype, device=device)
            for name, (shape, dtype) in spec.items()
        }
        self.t = torch.zeros(num_envs, dtype=torch.int64, device=device)  # the step of each running episode
        self.slot = torch.zeros(num_envs, dtype=torch.int64, device=device)  # the slot it is written into
        self.completed = torch.zeros(num_envs, dtype=torch.int64, device=device)  # episodes finished per env
        self.env_index = torch.arange(num_envs, device=device)

    @property
    def fields(self) -> set[str]:
        """The names ``add`` takes."""
        names = set(self.data) - {"filled"}
        return names | {f"next_{name}" for name in names}

    def add(self, obs, actions, reward, terminated, truncated, next_obs, **fields) -> None:
        rows = self.slot * self.num_envs + self.env_index
        step = {"obs": obs, "actions": actions, "rewards": reward, "terminated": terminated, "filled": True}
        following = {"obs": next_obs}
        for name, value in fields.items():
            if name.startswith("next_"):
                following[name[5:]] = value
            else:
                step[name] = value
        for name, value in step.items():
            self.data[name][rows, self.t] = value
        for name, value in following.items():
            self.data[name][rows, self.t + 1] = value
        done = terminated | truncated
        self.t.add_(1).mul_(~done)
        self.completed.add_(done)
        self.slot.copy_(torch.where(done, (self.slot + 1) % self.slots, self.slot))
        new_rows = self.slot * self.num_envs + self.env_index
        self.data["filled"][new_rows] &= (~done).unsqueeze(1)  # a new episode starts empty

    @property
    def episodes(self) -> int:
        """Completed episodes held (a host sync)."""
        return int(self.completed.clamp(max=self.slots - 1).sum())

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """``batch_size`` completed episodes, uniformly with replacement, as ``[B, L + 1, ...]`` fields cropped to the
        longest of them (``L`` steps)."""
        held = self.completed.clamp(max=self.slots - 1)
        env = torch.multinomial(held.float(), batch_size, replacement=True)
        back = (torch.rand(batch_size, device=self.device) * held[env]).long()  # 0: the newest completed episode
        rows = ((self.slot[env] - 1 - back) % self.slots) * self.num_envs + env
        filled = self.data["filled"][rows]
        length = int(filled.sum(1).max())
        return {name: value[rows, : length + 1] for name, value in self.data.items()}

    def state_dict(self) -> dict:
        return {"data": self.data, "t": self.t, "slot": self.slot, "completed": self.completed}

    def load_state_dict(self, state: dict) -> None:
        for name, value in state["data"].items():
            self.data[name].copy_(value)
        for name in ("t", "slot", "completed"):
            getattr(self, name).copy_(state[name])
