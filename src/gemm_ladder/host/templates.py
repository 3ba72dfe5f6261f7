"""Launch templates: a library kernel's bound launch turned into what the compiled host path
(``launch.cpp``) patches and launches per call.

A :class:`~gemm_ladder.library.bound.BoundLaunch` made by ``LibraryGemm.bind`` or ``SmallMGemm.bind``
holds the kernel's arguments packed for one set of addresses, and its ``roles`` say what each
argument is. :func:`template_from_bound` lays those arguments out in one buffer, each at its
alignment (a ``CUtensorMap`` at 64 bytes, as cuTensorMapEncodeTiled requires of its output), and
records what changes per call: each tensor map's encode arguments less its global address and the
tensor it is over, each pointer's tensor, the EpilogueParams' pointer slots (bias, residual) and
scalar slots (alpha, beta, written as fp32), and the split workspace's two pointers. The bytes are
the bound launch's own (the same code binds both paths), so the layout has one source of truth.

Tensors are named by where the op gets them: :data:`SOURCES` (the first operand, the second, the
output, the bias, the residual, and scaled_mm's two scales). The bf16 kernels' operands "A", "B",
"C" map to them through the route's orientation (:func:`operand_sources`); the fp8 kernel's roles
name the op's tensors themselves (:data:`FP8_SOURCES`).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from gemm_ladder.library.epilogue import EpilogueParams

#: The op's tensors, by index: what launch.cpp's Source enum numbers (the grouped ops' offs and w_up last).
SOURCES = ("a", "b", "out", "bias", "residual", "scale_a", "scale_b", "scale_a_padded", "offs", "w_up")
#: scaled_mm's tensors as library/fp8.py's launch_args roles name them, to their SOURCES index
#: ("scale_a_padded": blockwise scale_a copied per call into the buffer the template's pad_scale_a gives).
FP8_SOURCES = {name: SOURCES.index(name) for name in ("a", "b", "out", "bias", "scale_a", "scale_b", "scale_a_padded")}
#: The grouped kernel's tensors as library/grouped.py's GroupedArgs roles name them (x and w along M, a and b along
#: K: the op's first and second tensor), to their SOURCES index.
GROUPED_SOURCES = {"x": 0, "w": 1, "a": 0, "b": 1, "out": 2, "bias": 3, "offs": 8, "w_up": 9}
#: swiglu's tensors as library/swiglu.py's and library/swiglu_small_m.py's roles name them, to their SOURCES index.
SWIGLU_SOURCES = {"x": 0, "w_gate": 1, "out": 2, "w_up": 9}
#: Bytes of a CUtensorMap and its alignment (cuda.h: CU_TENSOR_MAP_NUM_QWORDS = 16, alignas(64)).
TENSOR_MAP_BYTES, TENSOR_MAP_ALIGN = 128, 64
#: The EpilogueParams' slot names of linear's built-in epilogue (library/epilogue.py linear_epilogue)
#: and the op's tensor or scalar each one is.
EPILOGUE_TENSORS = {"gl_bias_": "bias", "gl_residual_": "residual"}
EPILOGUE_SCALARS = {"gl_alpha_": 0, "gl_beta_": 1}
#: cuda.h's CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION.
CLUSTER_ATTRIBUTE = 4


class TemplateError(RuntimeError):
    """A bound launch cannot be made a template (an argument whose role is unknown)."""


@dataclass
class LaunchTemplate:
    """What launch.cpp reads (by attribute name) to launch one signature.

    ``function``: the CUfunction handle; ``grid``, ``threads``, ``dynamic_smem``, ``cluster``: the
    launch configuration; ``buffer``: the packed arguments; ``arg_offsets``: each argument's offset
    in it; ``maps``: (offset, source, data type, rank, dims, strides, box, element strides,
    interleave, swizzle, L2 promotion, OOB fill) as ints; ``pointers``: (offset, source);
    ``scalars``: (offset, 0 alpha / 1 beta); ``partials``/``counters``: (offset, fp32 floats /
    int32 counters) or None; ``out_shape`` and ``out_dtype`` (a torch.dtype) of the output;
    ``pad_scale_a``: (rows, pitch) of the zeroed fp32 buffer scaled_mm's blockwise scale_a is copied
    into per call, transposed (K-block-major), before the launch, or None.
    """

    function: int
    grid: tuple[int, int, int]
    threads: int
    dynamic_smem: int
    cluster: int
    buffer: bytes
    arg_offsets: list[int]
    maps: list[tuple] = field(default_factory=list)
    pointers: list[tuple[int, int]] = field(default_factory=list)
    scalars: list[tuple[int, int]] = field(default_factory=list)
    partials: tuple[int, int] | None = None
    counters: tuple[int, int] | None = None
    out_shape: tuple[int, ...] = ()
    out_dtype: object = None
    cluster_attr: int = CLUSTER_ATTRIBUTE
    pad_scale_a: tuple[int, int] | None = None


def operand_sources(transposed: bool) -> dict[str, int]:
    """The op's tensor (an index into :data:`SOURCES`) behind the kernel's operand "A", "B", "C": a
    route that writes D^T = B A^T into c.T reads the second operand as A (dispatch.calls.bind_route)."""
    return {"A": 1 if transposed else 0, "B": 0 if transposed else 1, "C": 2}


_MAP_ENUMS = ("tensorDataType", "interleave", "swizzle", "l2Promotion", "oobFill")
_ENUM_TYPES = {"tensorDataType": "CUtensorMapDataType", "interleave": "CUtensorMapInterleave",
               "swizzle": "CUtensorMapSwizzle", "l2Promotion": "CUtensorMapL2promotion",
               "oobFill": "CUtensorMapFloatOOBfill"}


def enum_value(key: str, name: str) -> int:
    """The driver's number for a tensor-map enum named as TensorMapSpec.encode_kwargs names it."""
    from cuda.bindings import driver

    return int(getattr(getattr(driver, _ENUM_TYPES[key]), name))


def _arg_bytes(arg) -> tuple[bytes, int]:
    """(bytes, alignment) of one argument as PreparedLaunch passes it: a CUtensorMap by its storage
    (``getPtr()``), a ctypes value by its own."""
    if hasattr(arg, "getPtr"):
        return ctypes.string_at(int(arg.getPtr()), TENSOR_MAP_BYTES), TENSOR_MAP_ALIGN
    return ctypes.string_at(ctypes.addressof(arg), ctypes.sizeof(arg)), ctypes.alignment(arg)


def pack(args: list) -> tuple[bytes, list[int]]:
    """The arguments laid out in one buffer, each at its alignment: (buffer, offsets)."""
    buf = bytearray()
    offsets = []
    for arg in args:
        data, align = _arg_bytes(arg)
        buf += bytes(-len(buf) % align)
        offsets.append(len(buf))
        buf += data
    return bytes(buf), offsets


def template_from_bound(bound, *, transposed: bool = False, epilogue=None, out_shape: tuple[int, ...],
                        out_dtype, enum=enum_value, sources: dict | None = None) -> LaunchTemplate:
    """The :class:`LaunchTemplate` of ``bound`` (a BoundLaunch with ``roles``; its PreparedLaunch's
    arguments, configuration and kernel). ``transposed``: the route's orientation; ``epilogue``: the
    Epilogue it was bound with (linear's built-in one) or None; ``enum(key, name)``: the driver's
    number of a tensor-map enum (injectable for tests without cuda-python); ``sources``: what the
    roles' tensor names are (default: the bf16 kernels' operands, :func:`operand_sources`). Raises
    TemplateError for a bound launch without roles or with an argument it cannot place (a role of a
    tensor not in ``sources``: one made per call)."""
    roles = bound.roles
    prepared = bound.prepared
    args = prepared.args
    if roles is None or len(roles) != len(args):
        raise TemplateError(f"bound launch with {len(args)} arguments and roles {roles!r}")
    buf, offsets = pack(args)
    sources = operand_sources(transposed) if sources is None else sources

    def source(name) -> int:
        if name not in sources:
            raise TemplateError(f"an argument over {name!r}, which is not one of the op's tensors")
        return sources[name]

    t = LaunchTemplate(function=int(prepared.kernel.function), grid=_grid(prepared), threads=prepared.kernel.threads,
                       dynamic_smem=prepared.kernel.dynamic_smem, cluster=prepared.kernel.cluster, buffer=buf,
                       arg_offsets=offsets, out_shape=tuple(out_shape), out_dtype=out_dtype)
    for role, offset, arg in zip(roles, offsets, args):
        kind = role[0]
        if kind == "map":
            kw = role[2]
            rank = kw["tensorRank"]
            t.maps.append((offset, source(role[1]), enum("tensorDataType", kw["tensorDataType"]), rank,
                           [int(v) for v in kw["globalDim"]], [int(v) for v in kw["globalStrides"]],
                           [int(v) for v in kw["boxDim"]], [int(v) for v in kw["elementStrides"]],
                           *(enum(k, kw[k]) for k in _MAP_ENUMS[1:])))
        elif kind == "ptr":
            t.pointers.append((offset, source(role[1])))
        elif kind == "partials":
            t.partials = (offset, bound.workspace[0]) if bound.workspace else None
        elif kind == "counters":
            t.counters = (offset, bound.workspace[1]) if bound.workspace else None
        elif kind == "epilogue":
            _epilogue_patches(t, offset, epilogue)
        elif kind != "value":
            raise TemplateError(f"argument role {role!r}")
    return t


def _epilogue_patches(t: LaunchTemplate, offset: int, epilogue) -> None:
    """The EpilogueParams' per-call slots: its tensor inputs' pointers and its scalars (alpha, beta)."""
    if epilogue is None:
        raise TemplateError("an EpilogueParams argument without the epilogue it was bound with")
    ptr0 = offset + EpilogueParams.ptr.offset
    scalar0 = offset + EpilogueParams.scalar.offset
    for slot, name in enumerate(epilogue.tensor_inputs):
        if name not in EPILOGUE_TENSORS:
            raise TemplateError(f"epilogue input {name!r} is not linear's (a user Epilogue runs in Python)")
        t.pointers.append((ptr0 + 8 * slot, SOURCES.index(EPILOGUE_TENSORS[name])))
    for slot, name in enumerate(epilogue.scalar_inputs):
        if name not in EPILOGUE_SCALARS:
            raise TemplateError(f"epilogue scalar {name!r} is not linear's")
        t.scalars.append((scalar0 + 4 * slot, EPILOGUE_SCALARS[name]))


def _grid(prepared) -> tuple[int, int, int]:
    cfg = prepared._config
    return (int(cfg.gridDimX), int(cfg.gridDimY), int(cfg.gridDimZ))


__all__ = ["FP8_SOURCES", "GROUPED_SOURCES", "LaunchTemplate", "SOURCES", "SWIGLU_SOURCES", "TemplateError", "operand_sources", "pack", "template_from_bound"]
