"""Networks shared by the agents: MLP bodies, action distributions and their heads, action scaling and running
observation normalisation.

The distributions are small classes over their parameters, without torch.distributions' argument validation: they
sit on the hot path of every rollout step and every minibatch.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from rl_suite import distributed
from rl_suite.buffers import running_returns

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, activation: str = "tanh", out_gain: float = 1.0):
    """A multi-layer perceptron with orthogonal initialisation: gain sqrt(2) in the body, ``out_gain`` at the end
    (small for policy outputs, so the first policy is close to uniform)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    layers, size = [], in_dim
    for width in hidden:
        layers += [_init(nn.Linear(size, width), math.sqrt(2)), ACTIVATIONS[activation]()]
        size = width
    layers.append(_init(nn.Linear(size, out_dim), out_gain))
    return nn.Sequential(*layers)


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class EnsembleLinear(nn.Module):
    """``members`` independent linear layers as one batched matmul: ``[members, B, in] -> [members, B, out]``."""

    input_axis = 1  # of the weights, [members, in, out] (rl_suite.checkpoint.warm_start zeroes new inputs' weights)

    def __init__(self, members: int, in_features: int, out_features: int, gain: float):
        super().__init__()
        layers = [_init(nn.Linear(in_features, out_features), gain) for _ in range(members)]
        self.weight = nn.Parameter(torch.stack([layer.weight.T for layer in layers]).contiguous())
        self.bias = nn.Parameter(torch.stack([layer.bias for layer in layers]).unsqueeze(1))

    def forward(self, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        if frozen:  # the same values, but no gradient flows to the parameters
            return torch.baddbmm(self.bias.detach(), x, self.weight.detach())
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """Layer normalisation with each member's own gain and shift: ``[members, B, width]``."""

    def __init__(self, members: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, 1, width))
        self.bias = nn.Parameter(torch.zeros(members, 1, width))

    def forward(self, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        weight, bias = (self.weight.detach(), self.bias.detach()) if frozen else (self.weight, self.bias)
        return torch.addcmul(bias, F.layer_norm(x, x.shape[-1:]), weight)


class EnsembleMLP(nn.Module):
    """``members`` MLPs of the same shape evaluated together, e.g. SAC's twin critics: one batched matmul per layer
    instead of one per member. Input ``[B, in]`` (shared) or ``[members, B, in]``; output ``[members, B, out]``.
    With ``layer_norm``, each hidden layer's output is layer-normalised before its nonlinearity (FastTD3's and
    DroQ's critics: features of bounded scale, which keep many updates per transition stable)."""

    def __init__(
        self,
        members: int,
        in_dim: int,
        hidden: tuple[int, ...],
        out_dim: int,
        activation: str = "relu",
        layer_norm: bool = False,
    ):
        super().__init__()
        sizes = [in_dim, *hidden]
        self.members = members
        self.hidden = nn.ModuleList(
            EnsembleLinear(members, a, b, math.sqrt(2)) for a, b in zip(sizes, sizes[1:], strict=False)
        )
        self.norms = nn.ModuleList(EnsembleLayerNorm(members, b) for b in hidden) if layer_norm else None
        self.out = EnsembleLinear(members, sizes[-1], out_dim, 1.0)
        self.activation = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """With ``frozen``, gradients reach the input but not the parameters (SAC's actor loss through the critics)."""
        if x.dim() == 2:
            x = x.expand(self.members, *x.shape)
        for i, layer in enumerate(self.hidden):
            x = layer(x, frozen)
            if self.norms is not None:
                x = self.norms[i](x, frozen)
            x = self.activation(x)
        return self.out(x, frozen)


class RunningNorm(nn.Module):
    """Observation normalisation with running statistics: ``clip((x - mean) / sqrt(var + eps))``.

    The statistics are buffers, so they are saved with the policy and travel into exported graphs. They are
    merged batch by batch with the parallel formula of Chan et al., in float64. Under torchrun each ``update``
    merges every rank's batch (see ``rl_suite.distributed.merge_moments``), so all ranks hold the statistics of the
    concatenated data.
    """

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.sqrt(self.var + self.eps).to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / std).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the statistics of a batch ``[..., *shape]``. An empty batch (MAPPO's alive agents when none is alive)
        changes nothing; under torchrun its rank still joins the merge, contributing a count of 0."""
        batch = x.reshape(-1, *self.mean.shape).to(torch.float64)
        count = batch.shape[0]  # from the shape: no host sync
        if count > 0:
            mean, var = batch.mean(0), batch.var(0, unbiased=False)
        elif distributed.world_size() == 1:
            return
        else:  # the other ranks wait in the all-gather for this one; zero moments with a count of 0 weigh nothing
            mean, var = torch.zeros_like(self.mean), torch.zeros_like(self.var)
        if distributed.world_size() > 1:
            count, mean, var = distributed.merge_moments(count, mean, var)
        # Chan et al.'s merge with the batch's weight w = n_b / (n_a + n_b): w = 0 (every rank empty) keeps the
        # statistics as they are, where dividing by the total count would make them 0 / 0.
        total = self.count + count
        weight = count / total.clamp(min=1.0)
        delta = mean - self.mean
        self.var.copy_(self.var * (1 - weight) + var * weight + delta.square() * weight * (1 - weight))
        self.mean.add_(delta * weight)
        self.count.copy_(total)


class ReturnScale(nn.Module):
    """The scale rewards are divided by: the standard deviation of the discounted return G <- gamma G (1 - done) + r,
    tracked per environment across rollouts (CleanRL's and SB3's reward normalisation), and with ``v_max`` at least
    max|G| / v_max (FlashSAC's, so that returns of the scaled rewards fit a critic's support [-v_max, v_max]).

    The statistics are buffers, saved with the agent; the running returns ``running`` ``[N]`` are per-environment
    state that the agent checkpoints with its counters (``None`` until the first rewards are observed)."""

    def __init__(self, gamma: float, v_max: float | None = None, eps: float = 1e-8):
        super().__init__()
        self.gamma, self.v_max, self.eps = gamma, v_max, eps
        self.stats = RunningNorm(())
        self.register_buffer("largest", torch.zeros((), dtype=torch.float64))  # max |G| seen
        self.running: torch.Tensor | None = None

    @torch.no_grad()
    def observe(self, rewards: torch.Tensor, done: torch.Tensor) -> None:
        """Fold ``[T, N]`` rewards (oldest first) and their steps' ``done`` into the running returns, and every step's
        return into the statistics."""
        if self.running is None:
            self.running = torch.zeros_like(rewards[0])
        seen, self.running = running_returns(self.running, rewards, done, self.gamma)
        self.stats.update(seen)
        if self.v_max is not None:
            torch.maximum(self.largest, seen.abs().max().double(), out=self.largest)

    def forward(self) -> torch.Tensor:
        scale = torch.sqrt(self.stats.var + self.eps)
        if self.v_max is not None:
            scale = torch.maximum(scale, self.largest / self.v_max)
        return scale.float()


class TwinCritic(nn.Module):
    """Q_1(s, a) and Q_2(s, a), with actions in the policy's [-1, 1] space, evaluated together: ``[2, B]``; or, with
    ``atoms > 1``, the logits of two categorical return distributions over a fixed support, ``[2, B, atoms]``."""

    inputs_end_with_action = True  # so observation terms added at the end land mid-input (rl_suite.checkpoint)

    def __init__(self, obs_dim: int, act_dim: int, hidden, activation, atoms: int = 1, layer_norm: bool = False):
        super().__init__()
        self.atoms = atoms
        self.net = EnsembleMLP(2, obs_dim + act_dim, hidden, atoms, activation, layer_norm)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        out = self.net(torch.cat((obs, action), -1), frozen)
        return out.squeeze(-1) if self.atoms == 1 else out


def scale_action(
    action: torch.Tensor, center: torch.Tensor, half_range: torch.Tensor, bounded: torch.Tensor, clip: bool
) -> torch.Tensor:
    """``ActionScaler``'s map, shared with the exported policies' frozen copy (``FrozenScale``): with ``clip`` the
    action itself clipped to ``center +- half_range``, else ``[-1, 1]`` mapped onto it; unbounded dimensions pass."""
    if clip:
        clipped = torch.maximum(torch.minimum(action, center + half_range), center - half_range)
        return torch.where(bounded, clipped, action)
    return center + half_range * torch.where(bounded, action.clamp(-1.0, 1.0), action)


class ActionScaler(nn.Module):
    """Maps policy actions to a ``Box``, and back.

    ``mode="scale"``: actions in ``[-1, 1]`` map affinely onto each bounded dimension's ``[low, high]`` (clipped
    first), as a squashed policy's must; unbounded dimensions pass through unchanged. ``mode="clip"``: the policy's
    action is the env's own, clipped to the bounds (stable-baselines3's and rsl_rl's Gaussian policies), for spaces
    whose zero means something, such as a legged robot's joint offsets from its default pose."""

    MODES = ("scale", "clip")

    def __init__(self, space: gym.spaces.Box, mode: str = "scale"):
        super().__init__()
        if mode not in self.MODES:
            raise ValueError(f"action_bounds must be one of {self.MODES}, got {mode!r}")
        low, high = torch.as_tensor(space.low, dtype=torch.float32), torch.as_tensor(space.high, dtype=torch.float32)
        bounded = torch.isfinite(low) & torch.isfinite(high)
        self.clip = mode == "clip"
        self.register_buffer("center", torch.where(bounded, (high + low) / 2, 0.0))
        self.register_buffer("half_range", torch.where(bounded, (high - low) / 2, 1.0))
        self.register_buffer("bounded", bounded)

    def forward(self, action: torch.Tensor) -> torch.Tensor:
        return scale_action(action, self.center, self.half_range, self.bounded, self.clip)

    def unscale(self, env_action: torch.Tensor) -> torch.Tensor:
        if self.clip:
            return env_action
        return (env_action - self.center) / self.half_range


class RecurrentMLP(nn.Module):
    """An MLP body, an optional GRU (``gru_size > 0``) and a linear head: the agent networks of MAPPO and QMIX.

    ``forward(x, h)`` is one step (``x [B, in]``, ``h [B, gru_size]``, ``None`` without a GRU) and returns
    ``(out, h')``. ``unroll(x, h0, starts)`` runs a sequence ``x [L, B, in]`` from ``h0``, zeroing the hidden state
    before the steps where ``starts [L, B]`` marks a new episode; it returns the outputs ``[L, B, out]`` and the hidden
    state after each step ``[L, B, gru_size]``, equal to what stepping one at a time gives.
    """

    def __init__(
        self, in_dim: int, hidden: tuple[int, ...], out_dim: int, activation: str, gru_size: int = 0, gain=1.0
    ):
        super().__init__()
        body = mlp(in_dim, hidden[:-1], hidden[-1], activation, out_gain=math.sqrt(2))
        self.body = nn.Sequential(*body, ACTIVATIONS[activation]())
        self.gru = nn.GRU(hidden[-1], gru_size) if gru_size > 0 else None
        self.head = _init(nn.Linear(gru_size or hidden[-1], out_dim), gain)

    @property
    def recurrent(self) -> bool:
        return self.gru is not None

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        features = self.body(x)
        if self.gru is None:
            return self.head(features), None
        _, h = self.gru(features.unsqueeze(0), h.unsqueeze(0))
        return self.head(h[0]), h[0]

    def unroll(
        self, x: torch.Tensor, h0: torch.Tensor | None = None, starts: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        features = self.body(x)
        if self.gru is None:
            return self.head(features), None
        if starts is None:  # no episode starts inside: one fused call
            hiddens, _ = self.gru(features, h0.unsqueeze(0))
        else:
            keep = (~starts).to(features.dtype).unsqueeze(-1)
            hiddens, h = [], h0
            for t in range(features.shape[0]):
                _, h = self.gru(features[t : t + 1], (h * keep[t]).unsqueeze(0))
                h = h[0]
                hiddens.append(h)
            hiddens = torch.stack(hiddens)
        return self.head(hiddens), hiddens


class Categorical:
    """A categorical distribution over ``logits[..., n]``."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits - logits.logsumexp(-1, keepdim=True)

    def sample(self) -> torch.Tensor:
        # torch.multinomial's own draw for one sample, argmax(p / q) with q ~ Exp(1), without its input checks, which
        # read values on the host: no sync, capturable in CUDA graphs, and the same samples from the same RNG state.
        probs = self.logits.exp()
        return (probs / torch.empty_like(probs).exponential_()).argmax(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    def kl(self, other: Categorical) -> torch.Tensor:
        """KL(self || other) per distribution: sum_a p(a) (log p(a) - log q(a))."""
        return (self.logits.exp() * (self.logits - other.logits)).sum(-1)


class DiagGaussian:
    """A Gaussian with diagonal covariance; log-probabilities and entropies sum over the action dimensions."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor):
        self.mean, self.log_std = mean, log_std.expand_as(mean)

    def sample(self) -> torch.Tensor:
        return self.mean + self.log_std.exp() * torch.randn_like(self.mean)

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        z = (action - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        """KL(self || other) per distribution, summed over the dimensions: log(s2 / s1) + (s1^2 + (m1 - m2)^2) /
        (2 s2^2) - 1/2 each."""
        variance_ratio = torch.exp(2 * (self.log_std - other.log_std))
        gap = (self.mean - other.mean) * torch.exp(-other.log_std)
        return (other.log_std - self.log_std + 0.5 * (variance_ratio + gap.square()) - 0.5).sum(-1)


class TanhGaussian:
    """``tanh(u)`` with ``u`` Gaussian: actions in ``(-1, 1)``, with the change-of-variables correction in the
    log-probability (Haarnoja et al., 2018, appendix C), written stably as ``2 (log 2 - u - softplus(-2 u))``."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor):
        self.mean, self.log_std = mean, log_std

    def rsample_with_log_prob(self, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample and its log-probability, from standard normal ``noise`` (drawn if not given:
        FlashSAC passes noise it holds for several steps)."""
        noise = torch.randn_like(self.mean) if noise is None else noise
        u = self.mean + self.log_std.exp() * noise
        log_prob = -0.5 * noise.square() - self.log_std - 0.5 * math.log(2 * math.pi)
        log_prob = log_prob - 2 * (math.log(2) - u - F.softplus(-2 * u))
        return torch.tanh(u), log_prob.sum(-1)

    def mode(self) -> torch.Tensor:
        return torch.tanh(self.mean)


def policy_head(action_space: gym.Space, in_dim: int, hidden: tuple[int, ...], activation: str, init_log_std: float):
    """The actor of an on-policy agent for ``action_space``: an MLP to categorical logits (``Discrete``) or to a
    Gaussian mean with a learned, state-independent log standard deviation (``Box``)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalPolicy(mlp(in_dim, hidden, int(action_space.n), activation, out_gain=0.01))
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return GaussianPolicy(mlp(in_dim, hidden, action_space.shape[0], activation, out_gain=0.01), init_log_std)
    raise ValueError(f"no policy for action space {action_space}: use Discrete or a 1-D Box")


class CategoricalPolicy(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, features: torch.Tensor) -> Categorical:
        return Categorical(self.net(features))


class GaussianPolicy(nn.Module):
    def __init__(self, net: nn.Module, init_log_std: float):
        super().__init__()
        self.net = net
        self.log_std = nn.Parameter(torch.full((net[-1].out_features,), float(init_log_std)))

    def forward(self, features: torch.Tensor) -> DiagGaussian:
        return DiagGaussian(self.net(features), self.log_std)


class TanhGaussianPolicy(nn.Module):
    """SAC's actor: an MLP to the mean and a state-dependent log standard deviation, clamped to
    ``[log_std_min, log_std_max]``."""

    def __init__(
        self,
        in_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        activation: str = "relu",
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
    ):
        super().__init__()
        self.net = mlp(in_dim, hidden, 2 * act_dim, activation, out_gain=0.01)
        self.log_std_min, self.log_std_max = log_std_min, log_std_max

    def forward(self, features: torch.Tensor) -> TanhGaussian:
        mean, log_std = self.net(features).chunk(2, dim=-1)
        return TanhGaussian(mean, log_std.clamp(self.log_std_min, self.log_std_max))


class FlowPolicy(nn.Module):
    """A flow-matching policy: a velocity field ``v(s, x_t, t)`` that carries Gaussian noise (``t = 1``) to actions
    (``t = 0``) along the straight path ``x_t = t eps + (1 - t) a``, whose true velocity is ``eps - a``.

    - ``sample``: Euler steps from ``x_1 = noise`` to ``x_0``, the action (``steps`` of them; 10 by default). With
      fixed noise it is deterministic; zero noise gives the evaluation action.
    - ``cfm_loss``: the conditional flow-matching loss of actions at ``(eps, t)`` pairs, one value per pair, in
      FPO's two forms: ``"u"`` (velocity error) or ``"eps"`` (the error of the noise that the predicted velocity
      implies, ``(1 - t)^2`` times the velocity error; FPO's default).
    The network sees the observation, the noisy action and a sinusoidal embedding of ``t``; its output is scaled
    by ``output_scale`` so that the first policies move slowly. ``zero_init`` initialises it as the PolicyFlow paper
    does (Yang et al., 2026, Sec. 5.4: Glorot weights, the last layer zeroed), so that the first flow is the identity
    and the first actions are the noise itself; otherwise ``mlp``'s orthogonal initialisation.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        activation: str = "silu",
        steps: int = 10,
        time_embed_dim: int = 8,
        output_scale: float = 0.25,
        zero_init: bool = False,
    ):
        super().__init__()
        if time_embed_dim % 2 or steps < 1:
            raise ValueError(f"need an even time_embed_dim and steps >= 1, got {time_embed_dim} and {steps}")
        self.act_dim, self.steps, self.output_scale = act_dim, steps, output_scale
        self.net = mlp(obs_dim + act_dim + time_embed_dim, hidden, act_dim, activation)
        if zero_init:
            linears = [layer for layer in self.net if isinstance(layer, nn.Linear)]
            for layer in linears:
                nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(linears[-1].weight)  # the biases are zero already
        self.register_buffer("frequencies", 2.0 ** torch.arange(time_embed_dim // 2), persistent=False)

    def velocity(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``v(s, x_t, t)`` for ``obs [..., O]``, ``x [..., A]`` and ``t [..., 1]``."""
        scaled = t * self.frequencies
        features = torch.cat((obs, x, torch.cos(scaled), torch.sin(scaled)), -1)
        return self.net(features) * self.output_scale

    def schedule(self, steps: int | None = None) -> torch.Tensor:
        """The Euler steps' times, from 1 down to 0: ``[steps + 1]``."""
        return torch.linspace(1.0, 0.0, (steps or self.steps) + 1, device=self.frequencies.device)

    def sample(self, obs: torch.Tensor, noise: torch.Tensor, steps: int | None = None) -> torch.Tensor:
        times = self.schedule(steps)
        x = noise
        for k in range(times.shape[0] - 1):
            t = times[k].expand(*x.shape[:-1], 1)
            x = x + (times[k + 1] - times[k]) * self.velocity(obs, x, t)
        return x

    def cfm_loss(
        self, obs: torch.Tensor, action: torch.Tensor, eps: torch.Tensor, t: torch.Tensor, mode: str = "eps"
    ) -> torch.Tensor:
        """Losses ``[B, S]`` of actions ``[B, A]`` at ``S`` pairs: ``eps [B, S, A]``, ``t [B, S]``."""
        t = t.unsqueeze(-1)
        action = action.unsqueeze(-2)
        x_t = t * eps + (1.0 - t) * action
        v = self.velocity(obs.unsqueeze(-2).expand(*eps.shape[:-1], obs.shape[-1]), x_t, t)
        if mode == "u":
            return (v - (eps - action)).square().mean(-1)
        if mode == "eps":
            implied_eps = x_t + (1.0 - t) * v  # x_0 = x_t - t v, then x_1 = x_0 + v
            return (eps - implied_eps).square().mean(-1)
        raise ValueError(f"unknown flow-matching loss mode {mode!r}; choose 'u' or 'eps'")


class NoisyFlowPolicy(nn.Module):
    """A flow policy with Gaussian exploration around its end point, a = phi(z; s) + n with z ~ N(0, I) carried by
    ``FlowPolicy``'s sampler and n ~ N(0, diag sigma^2), sigma learned and state-independent: PolicyFlow's policy.

    Given z the action is Gaussian, so ``forward(obs, z)`` returns that ``DiagGaussian``, whose log-probabilities
    and KLs are exact. Two such policies draw z alike, so the KL of their joint distributions of (z, a) at a state is
    the mean over z of these conditional KLs, and by the chain rule of KL it bounds the KL of their action
    distributions from above: a bound on the conditional KL holds for the actions too."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], activation: str, init_log_std: float,
                 steps: int = 10, time_embed_dim: int = 8, output_scale: float = 0.25):  # fmt: skip
        super().__init__()
        self.flow = FlowPolicy(obs_dim, act_dim, hidden, activation, steps, time_embed_dim, output_scale)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> DiagGaussian:
        """The action's distribution at ``obs`` given the flow's ``noise`` (z), differentiable through the flow."""
        return DiagGaussian(self.flow.sample(obs, noise), self.log_std.clamp(-5.0, 2.0))
