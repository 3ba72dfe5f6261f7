"""Grouped GEMM for mixture-of-experts layers: validation and the direct calls (no torch op boundary).

:func:`grouped_mm_direct` follows ``torch._grouped_mm``'s semantics for the cases the library kernel
(:mod:`gemm_ladder.library.grouped`) computes:

* 2-D x 3-D: a (R, K), b (E, K, N), offs (E,) int32 cumulative row ends on a's device: group e's rows
  ``a[offs[e-1]:offs[e]] @ b[e]`` into out (R, N). ``b[e]`` K-major (``w.transpose(-2, -1)`` of an
  ``nn.Linear``-layout (E, N, K) weight) or N-major (an (E, K, N) row-major tensor) per group. Rows past
  ``offs[E-1]`` are not written (as torch._grouped_mm).
* 3-D x 3-D (batched): a (E, M, K), b (E, K, N), offs None: out (E, M, N), the same kernel over a viewed
  as (E x M, K) with offs M, 2M, ... made on the device (a copy of a first when its batches are not
  stacked rows: a.reshape).

* 2-D x 2-D (grouped along K, the weight gradient): a (M, total K) with stride(0) == 1 (x.t() of a
  row-major x), b (total K, N) row-major, offs (E,): out (E, M, N), out[e] = a[:, K_e] @ b[K_e, :] over
  group e's range K_e = offs[e-1]..offs[e]; an empty group's out[e] is zeros. Other layouts:
  NotSupportedError.

* 3-D x 2-D (grouped along N): a (E, M, K), b (K, total N), offs (E,) cumulative ends along N: out (M, total N)
  with out[:, N_e] = a[e] @ b[:, N_e] over group e's columns N_e = offs[e-1]..offs[e]; columns past
  ``offs[E-1]`` are not written (as torch._grouped_mm's rows past it). Computed as its transpose, the 2-D x 3-D
  case on ``b.t()`` (rows grouped by offs) and ``a.transpose(-2, -1)`` (:func:`along_n_operands`), so the
  result is the kernel's (total N, M) output transposed: a column-major (M, total N) view, where torch's is
  row-major (the same values; ``.contiguous()`` gives rows). An operand whose transpose breaks the kernel's
  stride rules is copied to an aligned pitch first (``explain_grouped_mm``'s ``copies`` names it).

Errors, raised before any launch: GemmTypeError (a non-tensor), GemmInputError (dtype, device, shape,
stride, alignment, offs), NotSupportedError (a case the kernel does not compute).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor

from gemm_ladder.contract import DTYPES
from gemm_ladder.dispatch.validate import check_activation
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError, OutsideDomainError
from gemm_ladder.library.activations import activation as _activation
from gemm_ladder.library.grouped import MAX_GROUPS, choose_cluster, choose_ring, choose_tail, grad_w_bn, grouped_gemm
from gemm_ladder.library.kernel import GROUP_K, GROUP_M, GROUP_M_MASKED, extents_refusal
from gemm_ladder.library.operand import TMA_ALIGN_BYTES

_ALIGN_ELEMS = TMA_ALIGN_BYTES // 2


def _tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise GemmTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def out_dtype_of(a: torch.Tensor, out_dtype) -> torch.dtype:
    """The result dtype: a's (None), or torch.float32; anything else is refused."""
    if out_dtype is None:
        return a.dtype
    if not isinstance(out_dtype, torch.dtype):
        raise GemmTypeError(f"out_dtype must be a torch.dtype or None, got {type(out_dtype).__name__}")
    if out_dtype not in (a.dtype, torch.float32):
        raise GemmInputError(f"out_dtype {out_dtype}: the grouped kernel writes {a.dtype} or torch.float32")
    return out_dtype


def b_major_of(b: torch.Tensor, name: str = "b") -> str:
    """'k' when each b[e] (K, N) is K-major (stride(-2) == 1, the transpose of an (E, N, K) weight),
    'mn' when it is N-major (stride(-1) == 1; so is a single row of K with stride(-1) == 1, whatever its other
    strides); GemmInputError otherwise, naming b as ``name`` (see :func:`check_grouped_mm`'s ``names``)."""
    _, k, n = b.shape
    if k == 1 and (n <= 1 or b.stride(2) == 1):  # one row of K: N-major, whose pitch is never stepped over
        return "mn"
    if k <= 1 or b.stride(1) == 1:
        if n > 1 and b.stride(2) < k:
            raise GemmInputError(f"{name} has strides {tuple(b.stride())}: {name}[e] columns overlap")
        return "k"
    if n <= 1 or b.stride(2) == 1:
        return "mn"
    raise GemmInputError(f"{name} has strides {tuple(b.stride())}: each {name}[e] (K, N) must be K-major (stride(1) "
                         "== 1, w.transpose(-2, -1) of an (E, N, K) weight) or N-major (stride(2) == 1)")


def _root(name: str) -> str:
    """The argument an operand's name in messages is made from: ``w`` of ``w.transpose(-2, -1)`` (what a device,
    dtype or address rule names: the transpose has w's)."""
    return name.split(".", 1)[0]


#: The devices the public grouped functions take: CUDA, and meta (their ops' fake implementations).
PUBLIC_DEVICES = ("cuda", "meta")


def check_grouped_mm(a, b, offs, out_dtype=None, *, device_types: tuple[str, ...] = ("cuda",),
                     names: tuple[str, str] = ("a", "b")) -> tuple[str, torch.dtype]:
    """Validate a grouped_mm call; returns (case, result dtype), case '2d3d', '3d3d' or '2d2d'. Raises as the
    module docstring says; checks no value of offs on the device (no device-to-host copy). ``device_types``:
    the devices a and b may be on: CUDA for a launch; the public functions also take "meta" (their ops'
    fake implementations give the result's shape and dtype). ``names``: what the messages call a and b, the
    caller's own arguments (grouped_linear's ``("x", "w.transpose(-2, -1)")``: shapes and strides are the
    transpose's, devices, dtypes and addresses w's)."""
    an, bn = names
    a, b = _tensor(_root(an), a), _tensor(_root(bn), b)
    if offs is not None:
        offs = _tensor("offs", offs)
    if a.dtype not in DTYPES.values():
        raise GemmInputError(f"{_root(an)}: dtype {a.dtype}, the grouped kernel takes "
                             f"{', '.join(str(d) for d in DTYPES.values())}")
    if b.dtype != a.dtype:
        raise GemmInputError(f"{_root(an)} and {_root(bn)} must share one dtype: got {a.dtype} and {b.dtype}")
    dt = out_dtype_of(a, out_dtype)
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise GemmInputError(f"{an} and {bn} must be 2-D or 3-D, got {a.dim()}-D and {b.dim()}-D")
    if a.dim() == 2 and b.dim() == 2:
        return _check_grouped_k(a, b, offs, device_types, names), dt
    if a.dim() == 3 and b.dim() == 2:
        return _check_grouped_n(a, b, offs, device_types, names), dt
    if a.shape[-1] != b.shape[-2]:
        raise GemmInputError(f"{an} {tuple(a.shape)} and {bn} {tuple(b.shape)}: contraction dimensions {a.shape[-1]} "
                             f"and {b.shape[-2]} differ")
    groups = b.shape[0]
    if groups > MAX_GROUPS:
        raise NotSupportedError(f"E = {groups} groups: the grouped kernel takes at most {MAX_GROUPS}")
    dev = a.device
    if a.dim() == 2:
        if offs is None:
            raise GemmInputError(f"offs is required for a 2-D {an}: int32 cumulative row ends, one per group of {bn}")
        _check_offs(offs, groups, dev, _root(an))
        rows = a.shape[0]
        case = "2d3d"
    else:
        if offs is not None:
            raise GemmInputError(f"offs must be None for a 3-D {an} and a 3-D {bn} (batched)")
        if a.shape[0] != groups:
            raise GemmInputError(f"{an} {tuple(a.shape)} and {bn} {tuple(b.shape)}: batch sizes differ")
        rows = a.shape[0] * a.shape[1]
        case = "3d3d"
    _check_device(a, b, device_types, names)
    k, n = b.shape[1], b.shape[2]
    if refusal := extents_refusal({"rows": rows, "N": n, "K": k}, empty_ok=True):
        raise OutsideDomainError(refusal)  # empty_ok: only an extent past the 32-bit limit
    # Each compared on its own: Python's min() over a dynamic row count would bound it by N and K.
    if rows == 0 or n == 0 or k == 0:  # nothing is loaded (an empty or zero result): no tensor map, no stride rule
        return case, dt
    if a.shape[-1] > 1 and a.stride(-1) != 1:
        raise GemmInputError(f"{an} has strides {tuple(a.stride())}: its rows must be contiguous (stride(-1) == 1)")
    if a.dim() == 2 and a.shape[0] > 1 and a.stride(0) % _ALIGN_ELEMS:
        raise GemmInputError(f"{an}: row pitch {a.stride(0)} elements is not a multiple of 16 bytes (a TMA tensor map)")
    if a.dim() == 3 and rows > 1 and k % _ALIGN_ELEMS:
        raise GemmInputError(f"{an}: K = {k} elements per row is not a multiple of 16 bytes (a TMA tensor map over "
                             "its E x M rows)")
    e = a.element_size()
    w_pitch, w_group = weight_strides(b, b_major_of(b, bn))
    if (w_pitch * e) % TMA_ALIGN_BYTES or (w_group * e) % TMA_ALIGN_BYTES:
        raise GemmInputError(f"{bn}: strides {tuple(b.stride())} must be multiples of 16 bytes (a TMA tensor map): "
                             f"K (K-major) or N (N-major) a multiple of {_ALIGN_ELEMS}")
    _check_bases(a, b, names=names)
    return case, dt


def check_grouped_bias(bias, a: torch.Tensor, b: torch.Tensor, case: str) -> None:
    """``grouped_linear``'s bias rule, for a checked (a, b) of ``case``: None, or an (E, N) tensor of a's dtype
    on a's device, with b (E, K, N) grouped along M (not along K or N). Raises GemmTypeError for a non-tensor,
    GemmInputError for the rest."""
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor):
        raise GemmTypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
    if case in ("2d2d", "3d2d"):
        raise GemmInputError(f"bias is not taken by grouped_mm grouped along {'K' if case == '2d2d' else 'N'}")
    want = (b.shape[0], b.shape[2])
    if tuple(bias.shape) != want or bias.dtype != a.dtype or bias.device != a.device:
        raise GemmInputError(f"bias: {want} {a.dtype} on {a.device} expected, got {bias.dtype} {tuple(bias.shape)} "
                             f"on {bias.device}")


def _pointers_known(*ts: torch.Tensor) -> bool:
    """False while torch.compile traces (fake and functional tensors have no address; AOT autograd traces a
    backward outside dynamo's compiling flag): the op's kernel checks the addresses again at run time, before
    its launch."""
    return not torch.compiler.is_compiling() and not any(
        isinstance(t, (FakeTensor, FunctionalTensor)) or torch._is_functional_tensor(t) or t.device.type == "meta"
        for t in ts)


def _check_bases(*named: torch.Tensor, names: tuple[str, ...] = ("a", "b")) -> None:
    if not _pointers_known(*named):
        return
    for name, t in zip(map(_root, names), named):
        if t.numel() and t.data_ptr() % TMA_ALIGN_BYTES:
            raise GemmInputError(f"{name}: base address {t.data_ptr():#x} is not 16-byte aligned (a TMA tensor map)")


def group_of_rows(offs: torch.Tensor, rows: int) -> torch.Tensor:
    """Each row's group (int64, on offs' device; E for rows past offs[E-1]), by a search of offs on the
    device: no device-to-host copy."""
    return torch.searchsorted(offs, torch.arange(rows, device=offs.device, dtype=torch.int32), right=True)


def _check_grouped_k(a: torch.Tensor, b: torch.Tensor, offs, device_types: tuple[str, ...] = ("cuda",),
                     names: tuple[str, str] = ("a", "b")) -> str:
    """The 2-D x 2-D case (grouped along K): a (M, total K) with stride(0) == 1, b (total K, N) with
    stride(1) == 1 (the backward's x^T / grad_y^T and grad_y / x: rows of row-major tensors)."""
    an, bn = names
    m, total_k = a.shape
    if b.shape[0] != total_k:
        raise GemmInputError(f"{an} {tuple(a.shape)} and {bn} {tuple(b.shape)}: contraction dimensions {total_k} and "
                             f"{b.shape[0]} differ")
    n = b.shape[1]
    if offs is None:
        raise GemmInputError(f"offs is required for a 2-D {an} and a 2-D {bn}: int32 cumulative ends along K")
    _check_offs(offs, offs.numel() if offs.dim() == 1 else -1, a.device, _root(an))
    if offs.numel() > MAX_GROUPS:
        raise NotSupportedError(f"E = {offs.numel()} groups: the grouped kernel takes at most {MAX_GROUPS}")
    _check_device(a, b, device_types, names)
    if refusal := extents_refusal({"M": m, "N": n, "total K": total_k}, empty_ok=True):
        raise OutsideDomainError(refusal)  # empty_ok: only an extent past the 32-bit limit
    if (m > 1 and a.stride(0) != 1) or (n > 1 and b.stride(1) != 1):
        raise NotSupportedError(f"grouped along K, the kernel reads {an} (M, K) with stride(0) == 1 (x.t() of a "
                                f"row-major x) and {bn} (K, N) with stride(1) == 1 (row-major): got {an} strides "
                                f"{tuple(a.stride())}, {bn} strides {tuple(b.stride())}")
    if m == 0 or n == 0 or total_k == 0:
        return "2d2d"
    e = a.element_size()
    for name, t, pitch in ((an, a, a.stride(1) if total_k > 1 else 0), (bn, b, b.stride(0) if total_k > 1 else 0)):
        if (pitch * e) % TMA_ALIGN_BYTES:
            raise GemmInputError(f"{name}: pitch {pitch * e} bytes along K must be a multiple of 16 (a TMA tensor map)")
    _check_bases(a, b, names=names)
    return "2d2d"


def _check_grouped_n(a: torch.Tensor, b: torch.Tensor, offs, device_types: tuple[str, ...] = ("cuda",),
                     names: tuple[str, str] = ("a", "b")) -> str:
    """The 3-D x 2-D case (grouped along N): a (E, M, K), b (K, total N), offs (E,). Any strides: the launch
    reads the transposes, copied where they break the kernel's rules (:func:`along_n_operands`)."""
    an, bn = names
    groups, m, k = a.shape
    if b.shape[0] != k:
        raise GemmInputError(f"{an} {tuple(a.shape)} and {bn} {tuple(b.shape)}: contraction dimensions {k} and "
                             f"{b.shape[0]} differ")
    if offs is None:
        raise GemmInputError(f"offs is required for a 3-D {an} and a 2-D {bn}: int32 cumulative ends along N, one "
                             f"per batch of {an}")
    _check_offs(offs, groups, a.device, _root(an))
    if groups > MAX_GROUPS:
        raise NotSupportedError(f"E = {groups} groups: the grouped kernel takes at most {MAX_GROUPS}")
    _check_device(a, b, device_types, names)
    if refusal := extents_refusal({"M": m, "total N": b.shape[1], "K": k}, empty_ok=True):
        raise OutsideDomainError(refusal)  # empty_ok: only an extent past the 32-bit limit
    return "3d2d"


def aligned_elems(n: int) -> int:
    """``n`` elements of a 2-byte dtype rounded up to a whole number of 16-byte units (a TMA pitch's)."""
    return -(-n // _ALIGN_ELEMS) * _ALIGN_ELEMS


def padded_pitch(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in the first columns of a buffer whose last dimension is rounded up to 8 elements (16
    bytes of a 2-byte dtype): the same extent, every pitch a multiple of 16 bytes and a 16-byte aligned base (the
    extra columns are never read: a tensor map's extent is the view's)."""
    c = t.shape[-1]
    buf = t.new_empty((*t.shape[:-1], aligned_elems(c)))
    buf[..., :c] = t
    return buf[..., :c]


def base_aligned(t: torch.Tensor) -> bool:
    """Whether ``t`` starts on a 16-byte boundary: its address where known, else (while tracing, on meta
    tensors) its offset into its storage, whose own base the allocator aligns."""
    if not t.numel():
        return True
    if _pointers_known(t):
        return t.data_ptr() % TMA_ALIGN_BYTES == 0
    return (t.storage_offset() * t.element_size()) % TMA_ALIGN_BYTES == 0


def pitch_fits(t: torch.Tensor) -> bool:
    """Whether ``t``'s rows are what the kernel reads in place: the last dimension contiguous, every other stride
    (of an extent above 1) a multiple of 16 bytes and past the extent inside it (no two rows overlap), an aligned
    base (:func:`base_aligned`)."""
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        return False
    span = t.shape[-1]  # elements one index of the dimension above covers
    for size, stride in reversed(list(zip(t.shape[:-1], t.stride()[:-1]))):
        if size > 1:
            if stride % _ALIGN_ELEMS or stride < span:
                return False
            span = stride * (size - 1) + span
    return base_aligned(t)


def with_aligned_pitch(t: torch.Tensor) -> torch.Tensor:
    """``t`` where :func:`pitch_fits`, else :func:`padded_pitch`'s copy of it."""
    return t if pitch_fits(t) else padded_pitch(t)


def weight_strides(t: torch.Tensor, major: str) -> tuple[int, int]:
    """(pitch, batch stride) in elements that a weight ``t`` (E, K, N) of ``major`` ('k' or 'mn') has its tensor map
    step over: 0 along an extent of 1, which is never stepped over."""
    e, k, n = t.shape
    pitch = (t.stride(2) if n > 1 else 0) if major == "k" else (t.stride(1) if k > 1 else 0)
    return pitch, t.stride(0) if e > 1 else 0


def weight_fits(t: torch.Tensor) -> bool:
    """Whether ``t`` (E, K, N) is a weight the kernel reads in place: each t[e] K- or N-major with a pitch and a
    batch stride of 16-byte multiples (:func:`weight_strides`), an aligned base."""
    try:
        major = b_major_of(t)
    except GemmInputError:
        return False
    pitch, batch = weight_strides(t, major)
    return pitch % _ALIGN_ELEMS == 0 and batch % _ALIGN_ELEMS == 0 and base_aligned(t)


#: What :func:`along_n_copies` says of each operand it copies.
COPY_B = "b (its transpose's rows to a 16-byte pitch)"
COPY_A = "a (its rows to a 16-byte pitch)"


def along_n_copies(a: torch.Tensor, b: torch.Tensor) -> tuple[str, ...]:
    """The operands a 3-D x 2-D call copies before its transpose's launch (:func:`along_n_operands`): b where
    ``b.t()``'s rows are not what the kernel reads in place (:func:`pitch_fits`; b column-major, ``w.t()`` of a
    row-major (total N, K) weight, is), a where ``a.transpose(-2, -1)`` is not a weight it reads in place (a with
    contiguous rows or columns of 16-byte pitches is). Decided on metadata alone: nothing is copied here."""
    return tuple(name for name, copied in ((COPY_B, not pitch_fits(b.t())),
                                           (COPY_A, not weight_fits(a.transpose(-2, -1)))) if copied)


def along_n_operands(a: torch.Tensor, b: torch.Tensor,
                     copies: tuple[str, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
    """A 3-D x 2-D call's operands as the 2-D x 3-D call of its transpose: ``(b.t() (total N, K), a.transpose(-2,
    -1) (E, K, M), copies)``, so that grouped_mm(a, b, offs) = grouped_mm(b.t(), a.transpose(-2, -1), offs).t().
    Each is the view itself, or where ``copies`` (default :func:`along_n_copies`'s) names it a copy to a 16-byte
    pitch (:func:`padded_pitch`)."""
    copies = along_n_copies(a, b) if copies is None else copies
    rows = padded_pitch(b.t()) if COPY_B in copies else b.t()
    weights = (padded_pitch(a) if COPY_A in copies else a).transpose(-2, -1)
    return rows, weights, copies


def _check_device(a: torch.Tensor, b: torch.Tensor, device_types: tuple[str, ...] = ("cuda",),
                  names: tuple[str, str] = ("a", "b")) -> None:
    if a.device.type not in device_types or b.device != a.device:
        where = "one CUDA device" if "meta" not in device_types else \
            "one CUDA device (or both meta tensors, which describe a call without running it)"
        raise GemmInputError(f"{_root(names[0])} and {_root(names[1])} must be on {where}: got {a.device} and "
                             f"{b.device}")


def _check_offs(offs, groups: int, device, name: str = "a") -> None:
    """offs (or the masked layout's counts) an int32 (groups,) contiguous tensor on ``name``'s ``device``."""
    if offs.dtype != torch.int32 or offs.dim() != 1 or offs.numel() != groups:
        raise GemmInputError(f"offs: an int32 tensor of shape ({groups},) expected, got {offs.dtype} "
                             f"{tuple(offs.shape)}")
    if offs.device != device:
        raise GemmInputError(f"offs must be on {name}'s device {device}, got {offs.device}")
    if not offs.is_contiguous():
        raise GemmInputError(f"offs must be contiguous, got strides {tuple(offs.stride())}")


def _check_call(a, b, offs, out_dtype, bias, activation) -> tuple[str, torch.dtype]:
    """A direct call's checks: the activation's name, :func:`check_grouped_mm` (returns its case and result dtype),
    and no bias or activation grouped along K."""
    check_activation(activation)
    case, dt = check_grouped_mm(a, b, offs, out_dtype)
    if case in ("2d2d", "3d2d") and (bias is not None or activation is not None):
        along = "K" if case == "2d2d" else "N"
        raise GemmInputError(f"bias and activation are not taken by grouped_mm grouped along {along}")
    return case, dt


def grouped_mm_direct(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *, out_dtype=None,
                      bias: torch.Tensor | None = None, bn: int | None = None,
                      cluster: int | None = None, ring: int | None = None, tail: bool | None = None,
                      activation: str | None = None) -> torch.Tensor:
    """``torch._grouped_mm(a, b, offs)`` on the library's grouped kernel (module docstring: cases,
    layouts, errors), on torch's current stream, without the op boundary (no autograd).

    ``bias``: (E, N) in a's dtype, added per group (grouped_linear). ``bn``: the tile width (128 or
    256; default by N: choose_bn, and library/grouped.py's grad_w_bn grouped along K). ``cluster``: CTAs per cluster of the build (1, or 2: pairs of M tiles sharing
    the weight tile; default library/grouped.py's choose_cluster, the measured rule); ValueError for
    another value. ``ring``: the output's panel buffers per consumer (library/grouped.py RINGS; default
    library/grouped.py's choose_ring, the measured rule: 4 for the BN 256 weight gradient, BN / 64 for an N-major
    weight grouped along M, else 1);
    ValueError where the build has no such ring. ``tail``: the stream-K tail build (grouped along M: the
    last partial wave of tiles split by K over every cluster, decided on the device; default
    library/grouped.py's choose_tail); ValueError grouped along K. ``activation``: a name of
    library/activations.py ACTIVATIONS applied in the epilogue after the bias (out = act(a @ b + bias) in fp32,
    rounded once; grouped along M); GemmTypeError for a non-string, GemmInputError for an unknown name or one
    grouped along K."""
    case, dt = _check_call(a, b, offs, out_dtype, bias, activation)
    if case == "3d2d":  # the transpose of a 2-D x 3-D call: its (total N, M) output, transposed
        rows, weights, _ = along_n_operands(a, b)
        return grouped_mm_direct(rows, weights, offs, out_dtype=dt, bn=bn, cluster=cluster, ring=ring,
                                 tail=tail).t()
    if case == "2d2d":
        (m, total_k), n, groups = a.shape, b.shape[1], offs.numel()
        out = torch.empty((groups, m, n), dtype=dt, device=a.device)
        if min(m, n, groups) == 0:
            return out
        if total_k == 0:
            return out.zero_()
        grouped_build(bn or grad_w_bn(n), "mn", total_k, GROUP_K, dt == torch.float32, False, cluster,
                      ring, tail)[0].launch_k(a, b, offs, out)
        return out
    groups, k, n = b.shape
    if case == "3d3d":
        m = a.shape[1]
        out = torch.empty((groups, m, n), dtype=dt, device=a.device)
        if m == 0 or n == 0:
            return out
        x = a.reshape(groups * m, k)
        offs = torch.arange(1, groups + 1, dtype=torch.int32, device=a.device) * m
        _launch(x, b, offs, out.view(groups * m, n), bias, bn, cluster=cluster, ring=ring, tail=tail,
                activation=activation)
        return out
    out = torch.empty((a.shape[0], n), dtype=dt, device=a.device)
    _launch(a, b, offs, out, bias, bn, cluster=cluster, ring=ring, tail=tail, activation=activation)
    return out


def grouped_mm_masked_direct(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor, *, out_dtype=None,
                             bn: int | None = None, cluster: int | None = None) -> torch.Tensor:
    """The masked layout of decode: a (E, M_max, K), b (E, K, N) (each b[e] K- or N-major), counts (E,)
    int32 on a's device, the valid rows of each a[e]. Returns out (E, M_max, N) with
    out[e, :counts[e]] = a[e, :counts[e]] @ b[e]; rows past a count are not written (a count is clamped
    to [0, M_max]); an expert with no row costs no tile. The counts stay on the device (one launch and
    one CUDA graph for every routing). ``bn``, ``cluster``: the build, as :func:`grouped_mm_direct`'s.
    Raises as :func:`check_grouped_mm` for the 3-D x 3-D case, and GemmInputError for counts of another
    dtype, shape or device."""
    a, b, counts = _tensor("a", a), _tensor("b", b), _tensor("counts", counts)
    if a.dim() != 3:
        raise GemmInputError(f"a must be (E, M_max, K) for the masked layout, got {a.dim()}-D")
    _, dt = check_grouped_mm(a, b, None, out_dtype)
    _check_offs(counts, b.shape[0], a.device)
    groups, m_max, k = a.shape
    n = b.shape[2]
    out = torch.empty((groups, m_max, n), dtype=dt, device=a.device)
    if min(groups, m_max, n) == 0:
        return out
    if k == 0:
        return out.zero_()
    _launch(a.reshape(groups * m_max, k), b, counts, out.view(groups * m_max, n), None, bn, masked=True,
            cluster=cluster)
    return out


def choose_bn(n: int, rows: int, groups: int) -> int:
    """The tile width a grouped-along-M call takes by default (N columns, R rows, E groups). Measured
    (docs/grouped.md): 256 won on Qwen3's N = 1536 prefill; decode kept at 128."""
    return 256 if n >= 2048 or (n >= 1024 and rows >= 64 * groups) else 128


def _launch(x, b, offs, out, bias, bn, masked: bool = False, cluster: int | None = None,
            ring: int | None = None, tail: bool | None = None, activation: str | None = None) -> None:
    rows, k = x.shape
    groups, _, n = b.shape
    if rows == 0 or n == 0 or groups == 0:
        if groups == 0 and rows and n:
            out.zero_()  # no group owns a row; zeros rather than uninitialised memory
        return
    bias = _checked_bias(bias, x, groups, n)
    if k == 0:  # an empty sum: zeros (plus the bias, then the activation) in every grouped row
        out.zero_()
        if bias is not None or activation is not None:  # no device-to-host copy: each row's group by a search of offs
            group = group_of_rows(offs, rows)
            z = (torch.zeros((groups, n), dtype=torch.float32, device=out.device) if bias is None else bias.float())
            if activation is not None:
                z = _activation(activation).reference(z)
            rows_z = z[group.clamp_max(groups - 1)].to(out.dtype)
            out.copy_(torch.where((group < groups)[:, None], rows_z, torch.zeros_like(rows_z)))
        return
    kernel = _kernel_for(x, b, out, bias, bn, masked, cluster, ring, tail, activation)
    kernel.launch(x, b.transpose(1, 2), offs, out, bias)


def _checked_bias(bias, x: torch.Tensor, groups: int, n: int) -> torch.Tensor | None:
    """``bias`` (None, or an (E, N) tensor of x's dtype on its device) made contiguous; GemmTypeError,
    GemmInputError otherwise."""
    if bias is None:
        return None
    bias = _tensor("bias", bias)
    if bias.dtype != x.dtype or tuple(bias.shape) != (groups, n) or bias.device != x.device:
        raise GemmInputError(f"bias: ({groups}, {n}) {x.dtype} on {x.device} expected, got {bias.dtype} "
                             f"{tuple(bias.shape)} on {bias.device}")
    return bias.contiguous()


def _kernel_for(x, b, out, bias, bn, masked=False, cluster=None, ring=None, tail=None, activation=None):
    """The build a grouped-along-M launch of x (R, K) and b (E, K, N) into out runs (:func:`grouped_build`, the
    tile width by :func:`choose_bn` unless ``bn`` is given)."""
    groups, _, n = b.shape
    grouping = GROUP_M_MASKED if masked else GROUP_M
    if bn is None:
        bn = choose_bn(n, x.shape[0], groups)
    kernel, _ = grouped_build(bn, b_major_of(b), x.shape[1], grouping, out.dtype == torch.float32, bias is not None,
                              cluster, ring, tail, activation)
    return kernel


def bind_grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, *, out_dtype=None,
                 bias: torch.Tensor | None = None, activation: str | None = None):
    """The one launch :func:`grouped_mm_direct` makes for these arguments, bound to them and to a new output, as
    ``(library/bound.py BoundLaunch, out)`` (what the compiled host path makes its launch template from,
    gemm_ladder/host), or None where the call is not one launch that reads and writes its tensors in place: a
    batched (3-D) a, which gets its offs made per call; an empty problem or K = 0; a bias that is not contiguous
    (copied per call). The same checks, decisions and errors as the call."""
    case, dt = _check_call(a, b, offs, out_dtype, bias, activation)
    if case == "2d2d":
        (m, total_k), n, groups = a.shape, b.shape[1], offs.numel()
        if min(m, n, groups, total_k) == 0:
            return None
        out = torch.empty((groups, m, n), dtype=dt, device=a.device)
        kernel = grouped_build(grad_w_bn(n), "mn", total_k, GROUP_K, dt == torch.float32, False, None)[0]
        return kernel.bind_k(a, b, offs, out), out
    if case != "2d3d":
        return None
    (rows, k), (groups, _, n) = a.shape, b.shape
    if min(rows, n, groups, k) == 0:
        return None
    if bias is not None and _checked_bias(bias, a, groups, n) is not bias:  # a copy: a new address each call
        return None
    out = torch.empty((rows, n), dtype=dt, device=a.device)
    kernel = _kernel_for(a, b, out, bias, None, activation=activation)
    return kernel.bind(a, b.transpose(1, 2), offs, out, bias), out


def grouped_build(bn: int, major: str, k: int, grouping: str, out_fp32: bool, bias: bool, cluster: int | None,
                  ring: int | None = None, tail: bool | None = None, activation: str | None = None):
    """The grouped build a call runs, and why its cluster size: ``cluster`` as given, else library/grouped.py's
    choose_cluster for the contraction length ``k`` (along K: the total K), the weight's major and the
    grouping; ``ring`` the output's panel buffers per consumer as given, else library/grouped.py's
    choose_ring for that cluster (4 for the BN 256 weight gradient, BN / 64 for the input gradient on one CTA, else
    C_RING); ``tail`` (the stream-K tail build) as given, else library/grouped.py's choose_tail; ``activation``
    (fused after the bias) on a build that has it: one CTA where the rule's pair would carry a bias at BN 256 (not
    built: it spilled); the ring and tail rules give it the plain ring and no tail. The launches, :func:`explain_grouped_mm`
    and ``explain_grouped_swiglu`` all ask here, so they cannot disagree."""
    why = f"cluster = {cluster} asked for"
    if cluster is None:
        cluster, why = choose_cluster(k, major, grouping)
        if activation is not None and bias and bn == 256 and cluster == 2:
            cluster, why = 1, f"one CTA (an activation with a bias at BN 256 is not built on a pair: it spilled); the rule: {why}"
    if ring is None:
        ring, _ = choose_ring(bn, grouping, out_fp32, bias, major, cluster, activation)
    if tail is None:
        tail, _ = choose_tail(grouping, activation)
    return grouped_gemm(bn, major, out_fp32, bias, grouping == GROUP_K, grouping == GROUP_M_MASKED,
                        cluster=cluster, ring=ring, tail=tail, activation=activation), why


def explain_grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *, out_dtype=None,
                       bias: torch.Tensor | None = None, masked: bool = False, activation: str | None = None) -> dict:
    """What :func:`grouped_mm_direct` (``grouped_mm``; ``grouped_linear`` with ``bias`` and, for a call with no
    backward, ``activation`` fused in the epilogue) or, with
    ``masked``, :func:`grouped_mm_masked_direct` (``offs`` then the counts) runs on these tensors, without
    running it, as a dict: ``case`` ('2d3d', '3d3d', '2d2d', '3d2d' or 'masked'), ``grouped_along`` ('M', 'K' or
    'N': a 3-D x 2-D call runs as the 2-D x 3-D call of its transpose, whose build, tile and rules the rest
    describe), ``copies`` (the operands copied to an aligned pitch first, by name and why; empty for none),
    ``kernel`` (the build's name), ``source``, ``tile`` [BM, BN, BK], ``b_major``, ``out_dtype``,
    ``cluster`` (1 or 2) and ``cluster_reason`` (library/grouped.py choose_cluster: the rule and the
    measurement behind it), ``ring`` (the output's panel buffers per consumer) and ``ring_reason``
    (library/grouped.py choose_ring), ``store`` ("tma" or "registers") and ``store_reason`` (library/grouped.py
    store_rule, for the new output the call makes), ``tail`` (the stream-K tail build) and ``tail_reason``
    (library/grouped.py choose_tail), ``activation`` (the name fused after the bias, or None). An empty problem
    still names the build a non-empty one would run. CUDA or meta tensors (shapes, strides and dtypes only); raises
    what the call raises for bad input, GemmTypeError for a non-string activation, and GemmInputError for one
    grouped along K, on the masked layout or not in library/activations.py ACTIVATIONS."""
    return planned_build(a, b, offs, out_dtype=out_dtype, bias=bias, masked=masked, activation=activation)[1]


def planned_build(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *, out_dtype=None,
                  bias: torch.Tensor | None = None, masked: bool = False, activation: str | None = None):
    """(the library/grouped.py build the call runs, :func:`explain_grouped_mm`'s dict): one decision for the
    explanation and for ``gemm_ladder.precompile``, which builds it ahead. Same arguments and errors as
    :func:`explain_grouped_mm`."""
    from gemm_ladder.library.grouped import BK, BM, SOURCE, store_rule

    devices = ("cuda", "meta")
    if not isinstance(masked, bool):
        raise GemmTypeError(f"masked must be a bool, got {type(masked).__name__}")
    if masked:
        a, b = _tensor("a", a), _tensor("b", b)
        if a.dim() != 3:
            raise GemmInputError(f"a must be (E, M_max, K) for the masked layout, got {a.dim()}-D")
        case, dt = check_grouped_mm(a, b, None, out_dtype, device_types=devices)
        case = "masked"
    else:
        case, dt = check_grouped_mm(a, b, offs, out_dtype, device_types=devices)
    check_grouped_bias(bias, a, b, case)
    check_activation(activation)
    if activation is not None:
        if case in ("2d2d", "3d2d", "masked"):
            raise GemmInputError(f"activation={activation!r}: fused grouped along M only (grouped_linear), not {case}")
    copies: tuple[str, ...] = ()
    if case == "3d2d":  # the transposed 2-D x 3-D call it runs: its operands made on meta stand-ins (no copy here)
        copies = along_n_copies(a, b)
        meta = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in (a, b)]
        a, b, _ = along_n_operands(*meta, copies)
    if case == "2d2d":
        (m, total_k), n = a.shape, b.shape[1]
        bn, major, k, grouping = grad_w_bn(n), "mn", total_k, GROUP_K
    else:
        groups, k, n = b.shape
        rows = a.shape[0] if a.dim() == 2 else a.shape[0] * a.shape[1]
        bn, major, grouping = choose_bn(n, rows, groups), b_major_of(b), GROUP_M_MASKED if masked else GROUP_M
    build, why = grouped_build(bn, major, k, grouping, dt == torch.float32, bias is not None, None,
                               activation=activation)
    store, store_why = store_rule(build, n, dt.itemsize)
    _, ring_why = choose_ring(bn, grouping, dt == torch.float32, bias is not None, major, build.cluster, activation)
    _, tail_why = choose_tail(grouping, activation)
    along = "K" if grouping == GROUP_K else "N" if case == "3d2d" else "M"
    return build, {"case": case, "grouped_along": along, "copies": copies, "kernel": build.name,
                   "source": SOURCE, "tile": [BM, bn, BK], "b_major": major, "out_dtype": str(dt).replace("torch.", ""),
                   "cluster": build.cluster, "cluster_reason": why, "ring": build.ring, "ring_reason": ring_why,
                   "store": store, "store_reason": store_why, "tail": build.tail, "tail_reason": tail_why,
                   "activation": activation}


__all__ = ["COPY_A", "COPY_B", "aligned_elems", "along_n_copies", "along_n_operands", "b_major_of", "base_aligned", "bind_grouped", "check_grouped_bias", "check_grouped_mm", "choose_bn", "explain_grouped_mm", "group_of_rows", "grouped_build", "grouped_mm_masked_direct", "grouped_mm_direct", "out_dtype_of", "padded_pitch", "pitch_fits", "planned_build", "weight_fits", "weight_strides", "with_aligned_pitch"]
