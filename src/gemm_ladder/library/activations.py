"""The activations ``gemm_ladder.linear`` fuses, one entry each: forward, derivative and reference.

Each :class:`Activation` holds what every layer needs of it:

* ``cuda``: the CUDA expression the epilogue generator (library/epilogue.py's ``linear_epilogue``)
  emits, with ``{x}`` standing for the fp32 pre-activation ``alpha * acc + bias``. The built-in ones
  call a device function of ``kernels/include/gemm_ladder/fused_epilogue.cuh`` (which says how each is
  computed and how far from exact it is); a new one may call another there or be written inline.
* ``reference``: the same function in PyTorch (``F.relu``, ``F.gelu``, ...), which the correctness
  gate and the tests compare the kernels with (in float64) and the fake kernels follow.
* ``derivative``: ``(grad, z) -> grad * act'(z)``, by torch's own backward kernel of ``reference``
  (aten's ``*_backward``), which the op's autograd formula applies (ops.py).
* ``torch``: what it is in PyTorch's words, for docstrings and error messages.

Adding an activation is one entry of :data:`ACTIVATIONS` (and, when its ``cuda`` calls a new device
function, that function in fused_epilogue.cuh). tests/test_activations.py checks every entry: the
derivative against ``torch.autograd`` of the reference on a dense grid; the generated CUDA compiles
(and, on a GPU, tests/test_activations_gpu.py runs it over a dense grid against the reference).

Imports only torch: library/epilogue.py, ops.py and the gates all read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Activation:
    """One activation: its name, CUDA expression (``{x}`` the fp32 pre-activation), PyTorch reference,
    derivative ``(grad, z) -> grad * act'(z)`` and a description in PyTorch's terms."""

    name: str
    cuda: str
    reference: Callable[[torch.Tensor], torch.Tensor]
    derivative: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    torch: str

    def cuda_of(self, x: str) -> str:
        """The CUDA expression applied to the expression ``x`` (parenthesised as given)."""
        return self.cuda.format(x=x)


ACTIVATIONS: dict[str, Activation] = {a.name: a for a in (
    Activation("relu", "gl::act_relu({x})", torch.relu,
               lambda g, z: torch.ops.aten.threshold_backward(g, z, 0), "F.relu"),
    Activation("gelu", "gl::act_gelu({x})", lambda v: F.gelu(v),
               lambda g, z: torch.ops.aten.gelu_backward(g, z, approximate="none"), "F.gelu (erf)"),
    Activation("gelu_tanh", "gl::act_gelu_tanh({x})", lambda v: F.gelu(v, approximate="tanh"),
               lambda g, z: torch.ops.aten.gelu_backward(g, z, approximate="tanh"), 'F.gelu(approximate="tanh")'),
    Activation("silu", "gl::act_silu({x})", F.silu,
               lambda g, z: torch.ops.aten.silu_backward(g, z), "F.silu"),
)}

#: name -> derivative, the table ops.py's autograd formula reads.
DERIVATIVES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    name: a.derivative for name, a in ACTIVATIONS.items()}


def activation(name: str) -> Activation:
    """The entry for ``name``; raises ValueError naming the known ones."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"activation={name!r}: use one of {', '.join(ACTIVATIONS)} or None") from None


__all__ = ["ACTIVATIONS", "Activation", "DERIVATIVES", "activation"]
