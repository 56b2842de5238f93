"""Opt-in: make inductor's CPU code round as eager's kernels do, so that compiled and eager runs are bitwise equal."""

from __future__ import annotations

import functools
import warnings

import torch

CHECKED_ON = "2.13"
"""The torch version whose private inductor internals this module replaces, and on which equality was checked."""


def enable_exact_cpu_numerics() -> None:
    """Make every later ``torch.compile`` in this process produce CPU code that is bitwise equal to eager: the
    collector asks for it with ``RunConfig.compile_exact`` (``rl-suite train --compile compile --compile-exact``).

    It changes the whole process, not one compilation, and it relies on private torch internals
    (``torch._inductor.lowering.lowerings``, ``torch._dynamo.config.enable_dynamo_decompositions``) that were
    written against and checked on torch 2.13 only; on another version it warns once. It is installed once and
    stays for the life of the process:

    - some of inductor's lowerings are replaced, for CPU tensors only (CUDA keeps inductor's own; see below);
    - dynamo's rewrite of ``addcmul_`` is turned off (below);
    - inductor's on-disk FX graph cache is turned off: its key does not know about the replaced lowerings, so it
      could hand this process kernels compiled without them, or hand other processes kernels compiled with them.

    What differs otherwise (torch 2.13, x86 AVX2, measured on 1000 float32 normals; 1 ulp is 6e-8 near 1):
    - transcendental functions (sin, cos, exp, log, log1p, tanh, ...): eager calls MKL's vector math library,
      inductor its own vectorised versions: up to 1-2 ulp apart (exp: 3.8e-6 absolute on values near 30, 8% of
      elements; cos 31%; sin 11%). These now call the eager kernels from the compiled code (they no longer fuse
      with their neighbours);
    - ``add``/``sub`` with ``alpha``: eager computes ``fma(b, alpha, a)``, inductor ``a + alpha * b`` (1 ulp, 2%);
    - ``addcmul``: eager computes ``fma(value * t1, t2, self)``, inductor ``self + value * t1 * t2`` (up to 2 ulp,
      6-25%); and dynamo rewrites the in-place ``addcmul_`` as ``fma(t1 * t2, value, self)`` (eager CUDA's order),
      which this turns off (``torch._dynamo.config.enable_dynamo_decompositions``) so that the addcmul reaches the
      lowering installed here. On CUDA, inductor's own addcmul lowering computes the same fma.
    - ``remainder`` (and ``fmod``): eager computes ``fmod`` and corrects the sign, inductor ``a - b * floor(a / b)``:
      half of the values in [-50, 50] differ by an ulp of the dividend (Pendulum's angle normalisation).
      These call the eager kernels too.
    Division by a constant, lerp, the integer hashing of the random streams, the MLPs' matmuls (extern calls to the
    same BLAS) and short reductions (a categorical policy's logsumexp) agree already; long reductions may be summed
    in another order, so a graph with them may still differ (tests/test_compiled.py says where equality holds).
    Random ops need no change here: rl_suite.compiled compiles with ``fallback_random``, so they call the eager
    kernels and draw the same numbers in every mode.
    """
    _install()


@functools.cache
def _install() -> None:
    if not torch.__version__.startswith(f"{CHECKED_ON}."):
        warnings.warn(
            f"compile_exact replaces private inductor internals and was checked on torch {CHECKED_ON} only; with "
            f"torch {torch.__version__} compiled runs may not equal eager ones bitwise",
            stacklevel=3,
        )
    import sympy
    from torch._inductor import config as inductor_config
    from torch._inductor import ir
    from torch._inductor import lowering as L  # noqa: N812
    from torch._inductor.virtualized import ops

    aten = torch.ops.aten
    torch._dynamo.config.enable_dynamo_decompositions = False
    inductor_config.fx_graph_cache = False

    def on_cpu(*args) -> bool:
        nodes = [a for a in args if isinstance(a, ir.IRNode)]
        return bool(nodes) and all((d := n.get_device()) is not None and d.type == "cpu" for n in nodes)

    def floating(node) -> bool:
        return node.get_dtype().is_floating_point

    transcendental = (aten.sin, aten.cos, aten.tan, aten.exp, aten.expm1, aten.log, aten.log1p, aten.log2)
    transcendental += (aten.tanh, aten.sigmoid, aten.atan, aten.atan2, aten.asin, aten.acos, aten.pow, aten.erf)
    for packet in (*transcendental, aten.remainder, aten.fmod):
        for name in packet.overloads():
            op = getattr(packet, name)
            original = L.lowerings.get(op)
            if original is None or name.endswith("out") or name.endswith("_"):
                continue
            eager = L.fallback_handler(op, add_to_fallback_set=False)

            def lowering(*args, _original=original, _eager=eager, **kwargs):
                return (_eager if on_cpu(*args) else _original)(*args, **kwargs)

            L.lowerings[op] = lowering

    for op, sign in ((aten.add.Tensor, 1), (aten.sub.Tensor, -1)):
        original = L.lowerings[op]

        def add_with_alpha(a, b, *, alpha=None, _original=original, _sign=sign):
            if alpha is not None and alpha != 1 and on_cpu(a, b) and floating(a) and floating(b):
                return L._add_with_alpha_fma(a, b, _sign * alpha)
            return _original(a, b, alpha=alpha)

        L.lowerings[op] = add_with_alpha

    original_addcmul = L.lowerings[aten.addcmul.default]

    def addcmul(self, tensor1, tensor2, *, value=1):
        nodes = (self, tensor1, tensor2)
        if not (on_cpu(*nodes) and all(isinstance(n, ir.IRNode) and floating(n) for n in nodes)) or isinstance(
            value, sympy.Basic
        ):
            return original_addcmul(self, tensor1, tensor2, value=value)
        dtype = self.get_dtype()
        if any(n.get_dtype() != dtype for n in nodes):
            return original_addcmul(self, tensor1, tensor2, value=value)
        nodes = L.broadcast_tensors(*nodes)
        loaders = [n.make_loader() for n in nodes]

        def inner(index):
            s, a, b = (load(index) for load in loaders)
            return ops.fma(ops.mul(ops.constant(value, dtype), a), b, s)

        return L.Pointwise.create(device=self.get_device(), dtype=dtype, inner_fn=inner, ranges=nodes[0].get_size())

    L.lowerings[aten.addcmul.default] = addcmul
