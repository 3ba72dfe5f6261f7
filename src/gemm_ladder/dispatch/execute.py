"""Run a route on real tensors: repack the operands that need it (one launch for both), launch the
kernel, copy an output workspace back. Workspaces come from torch's caching allocator on the current
stream, which is the stream every launch here uses, so their memory is reused only in stream order."""

from __future__ import annotations

import torch

from gemm_ladder.dispatch.route import OperandPath, Route, c_target, in_place_view
from gemm_ladder.library.epilogue import EpilogueCall
from gemm_ladder.library.kernel import BINDS, Operands
from gemm_ladder.library.operand import OperandView
from gemm_ladder.library.repack import REPACK, Copy2D


def _prepare(path: OperandPath, x: torch.Tensor, jobs: list[Copy2D]) -> OperandView:
    """The view the kernel reads of operand ``x`` (rows, K): ``x`` itself, or a new workspace whose
    copy job is appended to ``jobs``."""
    if path.workspace is None:
        v = in_place_view(x)
        assert v is not None and (v.major, v.ld) == (path.major, path.ld), "route and operand disagree"
        return v
    ws = torch.empty(path.workspace, dtype=x.dtype, device=x.device)
    jobs.append(Copy2D.between(x if path.major == "k" else x.T, ws))  # storage order: rows of the workspace
    return OperandView(ws, path.rows, path.k, path.workspace[1], path.major)


def run(route: Route, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, epilogue: EpilogueCall | None = None,
        scales: torch.Tensor | None = None) -> None:
    """``c = epilogue(a @ b)`` by ``route`` (from :func:`gemm_ladder.dispatch.decide` on these tensors'
    metadata). ``epilogue``: bound to c's (M, N) coordinates; the kernel gets it oriented as the route
    runs (D^T into c.T: swapped), so it always sees the caller's rows and columns. ``scales``: where a
    quantized (e4m3) output's 1 x 128 scales go (library/gemm.py's ``scales_refusal`` says the layout)."""
    if route.c_path.transposed:
        xa, xb = b.T, a
    else:
        xa, xb = a, b.T
    jobs: list[Copy2D] = []
    va = _prepare(route.a_path, xa, jobs)
    vb = _prepare(route.b_path, xb, jobs)
    if jobs:
        REPACK.launch(jobs, a.device)
    target = c_target(c, route.c_path.transposed)
    ep = epilogue.oriented(route.c_path.transposed) if epilogue is not None else None
    out = target if route.c_path.workspace is None else (
        torch.empty(route.c_path.workspace, dtype=c.dtype, device=c.device)[:, :target.shape[1]])
    launch(route, Operands(va, vb, out, ep, () if scales is None else (scales,)))
    if out is not target:
        REPACK.launch([Copy2D.between(out, target)], c.device)


def launch(route: Route, problem: Operands) -> None:
    """Launch ``route``'s build on ``problem`` (the kernel's views and output) through its family: the
    bound launch kept in library/kernel.py's bind cache by (config, options, addresses, layouts, stream),
    bound anew where it has none (outside a graph capture; an epilogue's launch is bound per call)."""
    family, config, options = route.family, route.config, route.options
    c = problem.c
    key = None
    if problem.epilogue is None and c.is_cuda and not torch.cuda.is_current_stream_capturing():
        key = BINDS.key(config, problem, options, torch.cuda.current_stream(c.device).cuda_stream)
    family.launch(BINDS.get_or_bind(key, lambda: family.bind(config, problem, **dict(options))))
