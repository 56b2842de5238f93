"""Networks whose norms stay bounded, after FlashSAC (arXiv 2604.04539): linear layers whose weight rows are kept at
unit norm, batch and RMS normalisation, and inverted residual blocks, each as an ensemble of ``members`` networks
side by side (``[E, B, features]``: twin critics in one batched matmul).

Each bounded layer has ``project()``, which puts its norms back after an optimiser step: unit rows for the linear
layers, and sqrt(features) for a normalisation's scale (jointly with its shift, for batch normalisation). Batch
normalisation takes ``training`` as an argument, so that one network can run on batch statistics in one call and on
running ones in the next without switching modes.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class UnitLinear(nn.Module):
    """``members`` linear maps without bias (unless ``bias``: an output layer's, never projected), ``[E, B, in] ->
    [E, B, out]``; weights ``[E, out, in]`` start orthogonal with unit rows, which ``project`` restores."""

    input_axis = 2  # of the weights (rl_suite.checkpoint.warm_start zeroes new inputs' weights)

    def __init__(self, members: int, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        weight = torch.empty(members, out_features, in_features)
        for member in weight:
            nn.init.orthogonal_(member)
        self.weight = nn.Parameter(F.normalize(weight, dim=-1))
        self.bias = nn.Parameter(torch.zeros(members, 1, out_features)) if bias else None

    def forward(self, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        weight = self.weight.detach() if frozen else self.weight
        out = torch.matmul(x, weight.transpose(1, 2))
        if self.bias is None:
            return out
        return out + (self.bias.detach() if frozen else self.bias)

    @torch.no_grad()
    def project(self) -> None:
        self.weight.copy_(F.normalize(self.weight, dim=-1))


class BatchNorm(nn.Module):
    """Batch normalisation of ``[E, B, F]`` over the batch, per member: in training the batch's statistics (moving
    the running ones by ``momentum``), otherwise the running ones. ``project`` sets ``|[scale; shift]|`` to sqrt(F)."""

    def __init__(self, members: int, features: int, momentum: float = 0.01, eps: float = 1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(members, 1, features))
        self.bias = nn.Parameter(torch.zeros(members, 1, features))
        self.register_buffer("running_mean", torch.zeros(members, 1, features))
        self.register_buffer("running_var", torch.ones(members, 1, features))

    def forward(self, x: torch.Tensor, training: bool, frozen: bool = False) -> torch.Tensor:
        weight, bias = (self.weight.detach(), self.bias.detach()) if frozen else (self.weight, self.bias)
        if not training:  # an affine map: x * scale + shift, both [E, 1, F]
            scale = weight * torch.rsqrt(self.running_var + self.eps)
            return torch.addcmul(bias - self.running_mean * scale, x, scale)
        # The variance as the mean of squared deviations: on the CPU, Tensor.var over the batch dimension took
        # about 14 times as long (1.6 ms against 0.11 ms on [2, 512, 256], one thread).
        mean = x.mean(1, keepdim=True)
        centred = x - mean
        var = centred.square().mean(1, keepdim=True)
        with torch.no_grad():
            n = x.shape[1]
            self.running_mean.lerp_(mean.expand_as(self.running_mean), self.momentum)
            self.running_var.lerp_((var * (n / max(n - 1, 1))).expand_as(self.running_var), self.momentum)
        return centred * (weight * torch.rsqrt(var + self.eps)) + bias

    @torch.no_grad()
    def project(self) -> None:
        norm = torch.cat((self.weight, self.bias), -1).norm(dim=-1, keepdim=True)
        scale = math.sqrt(self.weight.shape[-1]) / norm.clamp(min=1e-12)
        self.weight.mul_(scale)
        self.bias.mul_(scale)


class RMSNorm(nn.Module):
    """``x / rms(x) * scale`` over the features, per member; ``project`` sets ``|scale|`` to sqrt(F)."""

    def __init__(self, members: int, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(members, 1, features))

    def forward(self, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        weight = self.weight.detach() if frozen else self.weight
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * weight

    @torch.no_grad()
    def project(self) -> None:
        self.weight.mul_(math.sqrt(self.weight.shape[-1]) / self.weight.norm(dim=-1, keepdim=True).clamp(min=1e-12))


class InvertedResidual(nn.Module):
    """``x + ReLU(BN(W2 ReLU(BN(W1 x))))``, W1 widening the stream ``expansion`` times and W2 narrowing it back."""

    def __init__(self, members: int, width: int, expansion: int = 4, batch_norm: bool = True, residual: bool = True):
        super().__init__()
        self.widen = UnitLinear(members, width, width * expansion)
        self.narrow = UnitLinear(members, width * expansion, width)
        norms = [BatchNorm(members, width * expansion), BatchNorm(members, width)] if batch_norm else None
        self.norms = nn.ModuleList(norms) if norms else None
        self.residual = residual

    def forward(self, x: torch.Tensor, training: bool, frozen: bool = False) -> torch.Tensor:
        h = self.widen(x, frozen)
        if self.norms is not None:
            h = self.norms[0](h, training, frozen)
        h = self.narrow(F.relu(h), frozen)
        if self.norms is not None:
            h = self.norms[1](h, training, frozen)
        h = F.relu(h)
        return x + h if self.residual else h


class ResidualNet(nn.Module):
    """Batch-normalised input, a linear map to ``width``, ``blocks`` inverted residual blocks (``expansion``,
    ``batch_norm``, ``residual``: ``InvertedResidual``'s), RMS normalisation (``rms_norm``) and a linear head with a
    bias: ``[E, B, in] -> [E, B, out]``. ``training=None`` follows the module's mode."""

    def __init__(
        self,
        members: int,
        in_features: int,
        out_features: int,
        width: int,
        blocks: int,
        expansion: int = 4,
        batch_norm: bool = True,
        residual: bool = True,
        rms_norm: bool = True,
    ):
        super().__init__()
        self.input_norm = BatchNorm(members, in_features)
        self.embed = UnitLinear(members, in_features, width)
        self.blocks = nn.ModuleList(
            InvertedResidual(members, width, expansion, batch_norm, residual) for _ in range(blocks)
        )
        self.output_norm = RMSNorm(members, width) if rms_norm else None
        self.head = UnitLinear(members, width, out_features, bias=True)

    def forward(self, x: torch.Tensor, training: bool | None = None, frozen: bool = False) -> torch.Tensor:
        training = self.training if training is None else training
        h = self.embed(self.input_norm(x, training, frozen), frozen)
        for block in self.blocks:
            h = block(h, training, frozen)
        if self.output_norm is not None:
            h = self.output_norm(h, frozen)
        return self.head(h, frozen)

    @torch.no_grad()
    def project(self) -> None:
        for layer in self.modules():
            if isinstance(layer, (UnitLinear, BatchNorm, RMSNorm)):
                layer.project()


class OneMember(nn.Module):
    """A one-member ``ResidualNet`` on ``[B, in]`` (a policy, and its exported copy)."""

    def __init__(self, net: ResidualNet):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, training: bool | None = None) -> torch.Tensor:
        return self.net(x.unsqueeze(0), training).squeeze(0)
