"""What the on-policy agents (PPO, BPO, FixPO, PROPS, FPO, PolicyFlow) share: values and GAE advantages from a rollout
with truncation bootstrapping, reward scaling by the running spread of the discounted return, the PPO-clip surrogate,
the loop of epochs over shuffled minibatches, and ``OnPolicyAgent``, the frame around each one's own networks and
loss, with the Gaussian or categorical policy that all but the flow agents act with."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import gymnasium as gym
import torch
from torch import nn

from rl_suite import distributed
from rl_suite.agent import Agent
from rl_suite.buffers import RolloutBuffer, gae, transition_spec
from rl_suite.config import ConfigError, setting
from rl_suite.deploy.inference import MLPInference
from rl_suite.networks import ACTIVATIONS, ActionScaler, ReturnScale, RunningNorm, mlp, policy_head
from rl_suite.optim import finite_or_warn, gradient_step


@torch.no_grad()
def advantages_and_returns(
    d: dict[str, torch.Tensor],
    critic: nn.Module,
    obs: torch.Tensor,
    next_obs_normalizer: Callable[[torch.Tensor], torch.Tensor],
    rewards: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    next_obs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(values, advantages, returns)``, each ``[T, N]``, for rollout fields ``d`` and its normalised ``obs``.

    V(s'_t) is V(s_{t+1}) unless the episode ended at t: only truncated steps (and the last one) need their final
    observation valued (terminated ones are not bootstrapped). The final observations are ``d["next_obs"]``, raw, or
    ``next_obs`` (an asymmetric critic's, ``d["next_critic_obs"]``).
    """
    next_obs = d["next_obs"] if next_obs is None else next_obs
    values = critic(obs).squeeze(-1)
    next_values = torch.cat((values[1:], values[:1]))
    needs = d["truncated"].clone()
    needs[-1] = True
    t, env = needs.nonzero(as_tuple=True)
    next_values[t, env] = critic(next_obs_normalizer(next_obs[t, env])).squeeze(-1)
    done = d["terminated"] | d["truncated"]
    advantages, returns = gae(rewards, values, next_values, d["terminated"], done, gamma, gae_lambda)
    return values, advantages, returns


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip: float, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """PPO's objective as a loss: ``-E[min(rho A, clip(rho, 1 - eps, 1 + eps) A)]``. ``ratio`` may have trailing
    dimensions beyond ``advantages`` (FPO's per-sample ratios); advantages broadcast over them. ``weights`` (shaped
    like ``ratio``) turn the mean into a weighted one: MAPPO's death masking gives dead agents' samples weight 0."""
    advantages = advantages.view(*advantages.shape, *[1] * (ratio.dim() - advantages.dim()))
    loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip))
    return loss.mean() if weights is None else weighted_mean(loss, weights)


def value_loss(value: torch.Tensor, returns: torch.Tensor, old_value: torch.Tensor, clip: float | None) -> torch.Tensor:
    """``0.5 E[(V(s) - R)^2]``; with ``clip``, the larger of that and the loss of V moved at most ``clip`` from its
    prediction when the rollout was collected (``old_value``), as PPO's reference implementation clips it."""
    loss = (value - returns).square()
    if clip is not None:
        clipped = old_value + (value - old_value).clamp(-clip, clip)
        loss = torch.max(loss, (clipped - returns).square())
    return 0.5 * loss.mean()


def weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (x * weights).sum() / weights.sum().clamp_min(1.0)


def normalized(advantages: torch.Tensor) -> torch.Tensor:
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def check_minibatches(who: str, count: int, n_steps: int, num_envs: int) -> None:
    """Refuse ``count`` minibatches that do not divide a rollout's ``n_steps * num_envs`` samples (``minibatches``
    would drop the remainder, and more minibatches than samples make one-sample gradient steps)."""
    samples = n_steps * num_envs
    if samples % count:
        raise ConfigError(
            f"{who}: minibatches={count} must divide the rollout's n_steps * num_envs = {n_steps} * {num_envs} = "
            f"{samples:,} samples"
        )


def minibatches(samples: dict[str, torch.Tensor], count: int, device) -> Iterator[dict[str, torch.Tensor]]:
    """One epoch: the samples shuffled (one gather per field) and cut into ``count`` equal slices."""
    size = next(iter(samples.values())).shape[0]
    batch = max(size // count, 1)
    order = torch.randperm(size, device=device)
    shuffled = {k: v[order] for k, v in samples.items()}
    for start in range(0, size - batch + 1, batch):
        yield {k: v[start : start + batch] for k, v in shuffled.items()}


def train_epochs(
    samples: dict[str, torch.Tensor],
    epochs: int,
    count: int,
    device,
    step: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor] | None],
    stop: Callable[[dict[str, torch.Tensor], int], bool] | None = None,
) -> dict[str, torch.Tensor]:
    """``epochs`` passes of ``step`` over ``count`` shuffled minibatches of ``samples``; ``step`` makes one gradient
    step and returns its detached metrics, or ``None`` if it skipped the minibatch. ``stop(totals, steps)``, asked
    after each epoch, ends the passes early. Returns the metrics averaged over the steps made."""
    totals: dict[str, torch.Tensor] = {}
    steps = 0
    for _ in range(epochs):
        for mb in minibatches(samples, count, device):
            metrics = step(mb)
            if metrics is None:
                continue
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            steps += 1
        if stop is not None and steps and stop(totals, steps):
            break
    return {key: value / max(steps, 1) for key, value in totals.items()}


def adapt_lr(lr: float, kl: float, target: float) -> float:
    """rsl_rl's and rl_games' rule: divide the learning rate by 1.5 when the KL is over twice the target, multiply
    it by 1.5 when under half, within [1e-5, 1e-2]."""
    if kl > 2 * target:
        return max(lr / 1.5, 1e-5)
    if kl < target / 2:
        return min(lr * 1.5, 1e-2)
    return lr


@dataclasses.dataclass(frozen=True)
class OnPolicyConfig:
    """The settings that PPO, FPO and PolicyFlow share: the rollout, the epochs of minibatches over it, discounting
    and GAE, the clipped surrogate, the gradient step, the networks' shape and the normalisers. An agent's config
    derives from this one and adds its own fields; it redeclares a field here only to change its default."""

    n_steps: int = setting(32, at_least=1)
    """Rollout length T: steps per environment collected each iteration."""
    epochs: int = setting(10, at_least=1)
    """Passes over each rollout."""
    minibatches: int = setting(4, at_least=1)
    """Minibatches per epoch (the rollout's T * N samples are shuffled and split)."""
    lr: float = setting(3e-4, at_least=0)
    """Learning rate of the one optimiser (the start value where a schedule or a KL rule moves it); 0 holds the
    networks still."""
    gamma: float = setting(0.99, at_least=0, at_most=1)
    """Discount factor."""
    gae_lambda: float = setting(0.95, at_least=0, at_most=1)
    """GAE's lambda: 0 is one-step TD, 1 is Monte Carlo."""
    clip_range: float = setting(0.2, above=0)
    """epsilon of the clipped surrogate."""
    vf_coef: float = setting(0.5, at_least=0)
    """Weight of the value loss."""
    max_grad_norm: float = setting(0.5, at_least=0)
    """Clip the global gradient norm to this; 0 for none."""
    normalize_advantages: bool = True
    """Standardise advantages within each minibatch."""
    hidden: tuple[int, ...] = setting((64, 64), at_least=1)
    """Hidden layer widths of the actor (a flow policy's velocity network) and of the critic, separate networks."""
    activation: str = setting("tanh", choices=tuple(ACTIVATIONS))
    """Activation of the hidden layers: tanh, relu, elu or silu."""
    normalize_obs: bool = True
    """Normalise observations with running statistics kept in the policy."""
    critic_observation: bool = False
    """Asymmetric actor-critic: the critic sees the env's privileged observation (``info["critic_obs"]``, with its own
    normaliser) instead of the policy's. Needs an env that offers one (``critic_observation_space``); the exported
    policy is unchanged, since it holds only the actor."""
    scale_rewards: bool = False
    """Divide rewards by a running standard deviation of the discounted return (as CleanRL's and SB3's reward
    normalisation do); helps tasks whose rewards are large or all negative, such as Pendulum."""
    action_bounds: str = setting("scale", choices=ActionScaler.MODES)
    """How a ``Box``'s finite bounds apply to the policy's actions: ``scale`` maps ``[-1, 1]`` onto them (clipping
    first); ``clip`` takes the action as the env's own and clips it to them, for spaces whose zero means something (a
    legged robot's offsets from its default pose, whose bounds are its joint ranges: agents/hyperparams/ppo.yaml)."""


class OnPolicyAgent(Agent):
    """The frame that the on-policy agents share around their own networks and losses.

    ``__init__`` builds what none of them chooses: the observation normaliser (``normalize_obs``), the statistics of
    the discounted return that reward scaling divides by (``scale_rewards``), the current learning rate and the count
    of skipped updates. The agent's own ``__init__`` then builds its actor, ``self.critic`` and ``self.scaler`` (PPO,
    BPO, FixPO and PROPS with ``build_policy``, whose Gaussian or categorical actor the default ``make_buffer``,
    ``act`` and ``inference_policy`` serve; the flow agents build their own and replace those three), and hands them
    with its optimiser to ``register``. Its ``update`` calls ``rollout_targets`` (or ``policy_samples``), then
    ``train_epochs`` with ``minibatch_step`` on its loss, then ``finish_update``. Its ``Config`` derives from
    ``OnPolicyConfig``.
    """

    def __init__(
        self, observation_space, action_space, config=None, device="cpu", critic_observation_space=None, **overrides
    ):
        overrides["critic_observation_space"] = critic_observation_space
        super().__init__(observation_space, action_space, config, device, **overrides)
        c = self.config
        self.normalizer = RunningNorm(observation_space.shape) if c.normalize_obs else nn.Identity()
        self.critic_observation_space = self.privileged_critic_space()
        if self.critic_observation_space is not None:
            shape = self.critic_observation_space.shape
            self.critic_normalizer = RunningNorm(shape) if c.normalize_obs else nn.Identity()
        self.critic_obs_dim = (self.critic_observation_space or observation_space).shape[0]
        self.return_scale = ReturnScale(c.gamma)  # what rewards are divided by, with scale_rewards
        self.lr = c.lr  # the current learning rate (schedules and adaptive KL rules move it)
        self.skipped_updates = 0

    def register(self, policy: dict[str, nn.Module], optimizer: type[torch.optim.Optimizer], **settings) -> None:
        """Register the normaliser, the ``policy`` modules (in order), ``self.critic``, ``self.scaler`` and the return
        statistics for checkpoints, move them to the device, and make the one ``optimizer(parameters, **settings)``
        over the policy's and the critic's parameters."""
        others = {"critic": self.critic, "scaler": self.scaler, "return_scale": self.return_scale}
        if self.critic_observation_space is not None:
            others["critic_normalizer"] = self.critic_normalizer
        self.modules = {"normalizer": self.normalizer, **policy, **others}
        for module in self.modules.values():
            module.to(self.device)
        self.parameters = [p for module in (*policy.values(), self.critic) for p in module.parameters()]
        self.optimizer = optimizer(self.parameters, **settings)
        self.optimizers = {"optimizer": self.optimizer}

    policy_conditions: tuple[str, ...] = ()
    """Rollout fields besides the observation that the actor's distribution is conditioned on (``policy``)."""

    def build_policy(self, init_log_std: float, actor: nn.Module | None = None) -> None:
        """The networks of PPO, BPO, FixPO and PROPS (not yet registered): ``policy_head``'s actor, a Gaussian with a
        learned, state-independent log standard deviation starting at ``init_log_std`` (``Box``) or a categorical
        (``Discrete``), unless ``actor`` is given in its place; an MLP critic; and the scaler from the Gaussian's
        unbounded actions to the space's bounds."""
        c = self.config
        self.continuous = isinstance(self.action_space, gym.spaces.Box)
        obs_dim = self.observation_space.shape[0]
        if actor is None:
            actor = policy_head(self.action_space, obs_dim, c.hidden, c.activation, init_log_std)
        self.actor = actor
        self.critic = mlp(self.critic_obs_dim, c.hidden, 1, c.activation, out_gain=1.0)
        self.scaler = ActionScaler(self.action_space, c.action_bounds) if self.continuous else nn.Identity()

    def rollout_spec(self) -> dict:
        """The fields ``build_policy``'s actor stores per step: the transition, the Gaussian's unclipped actions
        (``policy_action``), whose log-probabilities the update needs, and the critic's own observations if it has
        them."""
        extras = {"policy_action": (self.action_space.shape, torch.float32)} if self.continuous else {}
        extras.update(self.critic_fields())
        action_dtype = torch.float32 if self.continuous else torch.int64
        return transition_spec(self.observation_space.shape, self.action_space.shape, action_dtype, extras)

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> RolloutBuffer:
        """A rollout of ``n_steps`` of ``rollout_spec``'s fields."""
        if hasattr(self.config, "minibatches"):  # a config of its own may lack the field (CONTRIBUTING.md)
            check_minibatches(self.name, self.config.minibatches, self.config.n_steps, num_envs)
        return RolloutBuffer(self.config.n_steps, num_envs, self.rollout_spec(), self.device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        pi = self.actor(self.normalizer(obs))
        if deterministic:
            return self.scaler(pi.mode()), {}
        action = pi.sample()
        return self.scaler(action), ({"policy_action": action} if self.continuous else {})

    def inference_policy(self) -> MLPInference:
        """``build_policy``'s actor for export: the Gaussian's mean through the action scaler (``Box``), or the argmax
        of the logits (``Discrete``)."""
        scaler = self.scaler if self.continuous else None
        return MLPInference(self.observation_space, self.action_space, self.normalizer, self.actor.net, scaler)

    def scaled_rewards(self, d: dict[str, torch.Tensor]) -> torch.Tensor:
        """The rollout ``d``'s rewards divided by the return scale, after its returns joined the statistics (``d`` is
        the rollout after the last one observed)."""
        self.return_scale.observe(d["rewards"], d["terminated"] | d["truncated"])
        return d["rewards"] / self.return_scale()

    def policy_samples(
        self, d: dict[str, torch.Tensor], rewards: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """The rollout fields ``d`` of ``build_policy``'s actor as flat samples for ``train_epochs``: normalised
        observations, the actions (the Gaussian's unclipped ones), their log-probabilities under the policy that
        acted (it has not changed since, so a batched pass recomputes what acting would have stored), values,
        GAE advantages and returns (``rollout_targets``, of ``rewards`` where given), and the critic's observations
        if it has its own."""
        actions = d["policy_action"] if self.continuous else d["actions"]
        obs, values, advantages, returns, critic_samples = self.rollout_targets(d, rewards)
        samples = {"obs": obs.flatten(0, 1), **{name: d[name].flatten(0, 1) for name in self.policy_conditions}}
        with torch.no_grad():
            log_prob = self.policy(samples).log_prob(actions.flatten(0, 1))
        return {
            **samples,
            "actions": actions.flatten(0, 1),
            "log_prob": log_prob,
            "value": values.flatten(),
            "advantages": advantages.flatten(),
            "returns": returns.flatten(),
            **critic_samples,
        }

    def policy(self, samples: dict[str, torch.Tensor], actor: nn.Module | None = None):
        """The action distribution of ``actor`` (by default the current one) at the samples' normalised
        observations, given their ``policy_conditions``."""
        actor = self.actor if actor is None else actor
        return actor(samples["obs"], *(samples[name] for name in self.policy_conditions))

    def critic_fields(self) -> dict:
        """The rollout fields an asymmetric critic adds (``make_buffer``'s extras): its observations before and after
        each step."""
        if self.critic_observation_space is None:
            return {}
        shape = (tuple(self.critic_observation_space.shape), torch.float32)
        return {"critic_obs": shape, "next_critic_obs": shape}

    def value(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        """V of a minibatch: of its critic observations where the critic has its own, else of its observations."""
        return self.critic(mb["critic_obs"] if "critic_obs" in mb else mb["obs"]).squeeze(-1)

    @property
    def steps_per_iteration(self) -> int:
        return self.config.n_steps

    @torch.no_grad()
    def rollout_targets(
        self, d: dict[str, torch.Tensor], rewards: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``(obs, values, advantages, returns, critic_samples)`` of the rollout fields ``d``, each ``[T, N, ...]``: the
        observations normalised, and the rewards scaled first if ``scale_rewards``. ``critic_samples`` is what the
        agent adds to its minibatch samples for ``value``: ``{"critic_obs": [T * N, ...]}`` normalised, with an
        asymmetric critic, else nothing. ``rewards``, if given, replace ``d``'s (already scaled: PROPS scales a history
        of rollouts by the statistics of the newest)."""
        c = self.config
        if rewards is None:
            rewards = self.scaled_rewards(d) if c.scale_rewards else d["rewards"]
        obs = self.normalizer(d["obs"])
        if self.critic_observation_space is None:
            values, advantages, returns = advantages_and_returns(
                d, self.critic, obs, self.normalizer, rewards, c.gamma, c.gae_lambda
            )
            return obs, values, advantages, returns, {}
        critic_obs = self.critic_normalizer(d["critic_obs"])
        values, advantages, returns = advantages_and_returns(
            d, self.critic, critic_obs, self.critic_normalizer, rewards, c.gamma, c.gae_lambda, d["next_critic_obs"]
        )
        return obs, values, advantages, returns, {"critic_obs": critic_obs.flatten(0, 1)}

    def minibatch_step(
        self, losses: dict[str, torch.Tensor], adapt_to_kl: float | None = None
    ) -> dict[str, torch.Tensor] | None:
        """One gradient step on ``losses["loss"]`` at the current learning rate; returns the detached losses, or
        ``None`` (counted in ``skipped_updates``) when the loss is not finite. With ``adapt_to_kl`` the learning rate
        then follows ``losses["approx_kl"]`` (averaged over the ranks) towards it (``adapt_lr``)."""
        if not finite_or_warn(losses["loss"], type(self).__name__):
            self.skipped_updates += 1
            return None
        gradient_step(self.optimizer, losses["loss"], self.parameters, self.config.max_grad_norm, lr=self.lr)
        if adapt_to_kl is not None:
            self.lr = adapt_lr(self.lr, distributed.mean(losses["approx_kl"]), adapt_to_kl)
        return {key: value.detach() for key, value in losses.items()}

    def finish_update(self, buffer: RolloutBuffer) -> None:
        """The normaliser learns from the rollout only after the epochs, so that log-probabilities stayed consistent
        during them; the rollout is then emptied."""
        if self.config.normalize_obs:
            self.normalizer.update(buffer.data["obs"])
            if self.critic_observation_space is not None:
                self.critic_normalizer.update(buffer.data["critic_obs"])
        buffer.clear()

    def counters(self):
        return {
            "lr": self.lr,
            "skipped_updates": self.skipped_updates,
            "discounted_return": self.return_scale.running,
        }

    def load_counters(self, counters) -> None:
        # FPO's checkpoints from before it kept a learning rate lack "lr": its learning rate never moves.
        self.lr, self.skipped_updates = counters.get("lr", self.config.lr), counters["skipped_updates"]
        self.return_scale.running = counters["discounted_return"]
