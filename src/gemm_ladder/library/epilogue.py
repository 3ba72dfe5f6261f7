"""Fused epilogues: your own elementwise function of the fp32 accumulator, compiled into the library
kernels and applied before the one rounding to the output dtype.

An :class:`Epilogue` is a CUDA C++ function body over

* ``acc`` (float): the fp32 accumulator of output element (``row``, ``col``), the sum over K;
* ``row``, ``col`` (int): the output element's place in the (M, N) output (the caller's coordinates,
  whichever orientation the dispatcher runs the product in);
* one float per declared input, already loaded for this element: a ``"row"`` vector's element
  ``row``, a ``"col"`` vector's element ``col``, a ``"tile"``'s element (``row``, ``col``), a
  ``"scalar"``'s value (inputs of any of bf16, fp16 or fp32 are converted to fp32);

returning the float that is rounded once to the output dtype. A body without ``return`` and ``;``
is an expression. Example (a per-row scale times a clamp, written with comparisons so that a NaN stays
NaN, as torch.clamp keeps it: fmaxf(NaN, lo) is lo, which the gate catches; examples/scale_clamp.py)::

    ep = Epilogue(cuda="const float v = acc * scale; return v < lo ? lo : (v > hi ? hi : v);",
                  inputs={"scale": "row", "lo": "scalar", "hi": "scalar"},
                  reference=lambda acc, scale, lo, hi: (acc * scale).clamp(lo, hi))

``reference(acc, **inputs)`` is the same function in PyTorch: ``acc`` a float64 (M, N) tensor, a row
vector given as float64 (M, 1), a column vector as (1, N), a tile as (M, N), a scalar as a Python
float; it returns the (M, N) result. The correctness gate compares the kernel with it
(gates/epilogue.py). The generated source (the body, the inputs' kinds and dtypes, the orientation)
is part of the build, so of the JIT cache key.

How the kernels apply it (kernels/include/gemm_ladder/fused_epilogue.cuh): the accumulators are held
in pairs of neighbours along a row or a column of the output; for each pair the generated
``gl_epilogue_pair`` loads each input's two elements (one 4- or 8-byte load when the input's two
elements are adjacent and aligned, decided per call and compiled in; else one load each), then calls
the function on both. The loads are branch-free and stay inside the inputs: an element outside the
output reads the input's first element instead (pair and vector loads: a select on the offset) or
nothing (single loads: a guarded load), and is never stored. Offsets are 32-bit ints unless an
input spans 2^31 elements (then 64-bit, also compiled in). The inputs are read straight from global
memory by the consumer threads; no shared memory, no barrier (the design's plan says so:
design/epilogue.py). The general kernel also prefetches each contiguous tile input (a residual) into L2
8 K iterations before the tile's epilogue reads it (at the tile's start when its K loop is shorter;
sm90_gemm.cu's kPrefetchAhead; ``EpilogueCall.prefetch_runs``, ``gl_epilogue_prefetch``): a hint, which
orders nothing.
"""

from __future__ import annotations

import ctypes
import keyword
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from gemm_ladder.contract import GemmInputError
from gemm_ladder.errors import EpilogueCompileError, EpilogueError  # noqa: F401 - the public classes (re-exported here)
from gemm_ladder.library.activations import ACTIVATIONS

#: Input kinds: a vector over the output's rows (M), one over its columns (N), a tile of the output's
#: shape, a scalar.
KINDS = ("row", "col", "tile", "scalar")
#: Tensor inputs (vectors and tiles) and scalars an epilogue may declare: fused_epilogue.cuh's kEpiMaxInputs.
MAX_TENSOR_INPUTS = 8
MAX_SCALARS = 8
#: How far past the output's last row or column a kernel's coordinates may run (its tiles are at most
#: 256 wide: sm90_gemm's BN, small_m's bucket), for the offset-width rule (EpilogueCall.wide_offsets).
COORD_SLACK = 256
#: Element types of tensor inputs, and their code in fused_epilogue.cuh's EpiDtype.
INPUT_DTYPES = {torch.bfloat16: "kEpiBf16", torch.float16: "kEpiFp16", torch.float32: "kEpiFp32"}

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: C++ keywords and names the generated code or the CUDA headers use, which an input may not shadow.
_CXX_RESERVED = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t class compl
const constexpr const_cast continue decltype default delete do double dynamic_cast else enum explicit
export extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
nullptr operator or or_eq private protected public register reinterpret_cast return short signed sizeof
static static_assert static_cast struct switch template this thread_local throw true try typedef typeid
typename union unsigned using virtual void volatile wchar_t while xor xor_eq half nv_bfloat16 float2
float4 int2 int4 uint32_t uint64_t size_t min max abs gl
""".split())
#: Names that are the accumulator and the coordinates.
_BUILTIN_NAMES = ("acc", "row", "col")
#: gemm_ladder.linear's own parameters: an input of that name could not be passed as a keyword.
LINEAR_PARAMETERS = ("x", "w", "bias", "activation", "residual", "alpha", "beta", "out_dtype", "epilogue")


def _same_device(a: torch.device, b: torch.device) -> bool:
    """torch.device("cuda") names the current CUDA device: it is the same device as "cuda:N" for that N."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.index == b.index:
        return True
    if a.type == "cuda":
        current = torch.cuda.current_device()
        return (current if a.index is None else a.index) == (current if b.index is None else b.index)
    return False


class Epilogue:
    """A fused epilogue: CUDA body, declared inputs and a PyTorch reference (see the module docstring).

    Args:
        cuda: the body of ``float f(float acc, int row, int col, float <input>...)``, or one expression.
        reference: ``reference(acc, **inputs) -> Tensor`` in PyTorch (float64 in the gate).
        inputs: ``{name: kind}`` in the order the function takes them; kind one of :data:`KINDS`. At
            most :data:`MAX_TENSOR_INPUTS` vectors and tiles and :data:`MAX_SCALARS` scalars. Names are
            C identifiers, not C++ keywords, not ``acc``/``row``/``col``, not starting with ``gl_`` or
            ``__``, and not one of :data:`LINEAR_PARAMETERS` (they are passed to ``linear`` as keywords).
        name: a label for messages and plans.
        examples: values of scalar inputs the gate uses (default 1.0 each), e.g. ``{"lo": -2.0, "hi": 2.0}``.

    Raises EpilogueError naming the rule. The CUDA itself is checked by nvcc when first built
    (:meth:`compile_check` builds it alone, in about a second); EpilogueCompileError carries nvcc's message.
    """

    def __init__(self, cuda: str, reference: Callable[..., torch.Tensor], inputs: Mapping[str, str] | None = None,
                 *, name: str = "epilogue", examples: Mapping[str, float] | None = None):
        if not isinstance(cuda, str) or not cuda.strip():
            raise EpilogueError("cuda must be a non-empty string: the body of float f(float acc, int row, int col, ...)")
        if not callable(reference):
            raise EpilogueError(f"reference must be callable (reference(acc, **inputs) -> Tensor), got {type(reference).__name__}")
        inputs = dict(inputs or {})
        for n, kind in inputs.items():
            if not isinstance(n, str) or not _IDENT.match(n):
                raise EpilogueError(f"input name {n!r} is not a C identifier")
            if keyword.iskeyword(n) or n in _CXX_RESERVED or n in _BUILTIN_NAMES or n.startswith(("gl_", "__")):
                raise EpilogueError(f"input name {n!r} is reserved (C++ keywords, acc, row, col, gl_*, __*)")
            if n in LINEAR_PARAMETERS:
                raise EpilogueError(f"input name {n!r} is a parameter of gemm_ladder.linear; choose another")
            if kind not in KINDS:
                raise EpilogueError(f"input {n!r} has kind {kind!r}; use one of {', '.join(KINDS)}")
        tensors = [n for n, k in inputs.items() if k != "scalar"]
        scalars = [n for n, k in inputs.items() if k == "scalar"]
        if len(tensors) > MAX_TENSOR_INPUTS or len(scalars) > MAX_SCALARS:
            raise EpilogueError(f"{len(tensors)} vector/tile inputs and {len(scalars)} scalars: at most "
                                f"{MAX_TENSOR_INPUTS} and {MAX_SCALARS} (the kernel argument's slots)")
        examples = dict(examples or {})
        for n, v in examples.items():
            if inputs.get(n) != "scalar" or isinstance(v, bool) or not isinstance(v, (int, float)):
                raise EpilogueError(f"examples[{n!r}]: examples give numbers for declared scalar inputs only")
        self.cuda = cuda
        self.reference = reference
        self.inputs = inputs
        self.name = str(name)
        self.examples = examples
        self.mma_vector = None  # linear's twins only (linear_epilogue): the column vector the kernel's MMA adds
        self.mma_twin = None  # linear's only: this epilogue with its bias left to the kernel's MMA

    def __repr__(self) -> str:
        return f"Epilogue({self.name!r}, inputs={self.inputs})"

    # --- the code -------------------------------------------------------------------------------
    @property
    def tensor_inputs(self) -> list[str]:
        return [n for n, k in self.inputs.items() if k != "scalar"]

    @property
    def scalar_inputs(self) -> list[str]:
        return [n for n, k in self.inputs.items() if k == "scalar"]

    def body(self) -> str:
        """The function body, an expression made a return statement."""
        text = self.cuda.strip()
        if "return" not in text and ";" not in text:
            return f"return ({text});"
        return text

    def source(self, dtypes: Mapping[str, torch.dtype], swap: bool, *, wide: bool = True,
               pairs: Mapping[str, tuple[bool, bool]] | None = None,
               prefetch: Mapping[str, str] | None = None) -> str:
        """The generated C++ for this epilogue with tensor inputs of ``dtypes`` and the orientation
        ``swap`` (the kernel's output is the transpose of the caller's): ``GL_EPILOGUE``,
        ``GL_EPI_SWAP``, the user's function, ``gl::gl_epilogue_pair`` and ``gl::gl_epilogue_prefetch``.
        Included in the translation unit before the kernel source (library/gemm.py, library/small_m.py).

        ``wide``: element offsets in 64 bits; False (32-bit offsets, one multiply-add each) only where
        every input's largest element offset is below 2^31 (:meth:`EpilogueCall.source` decides).
        ``pairs``: per tensor input, whether its two elements of a pair along an output row, and along
        a column, are one aligned 4- or 8-byte load (:func:`pair_loads`); absent: one load each.
        ``prefetch``: per tile input, ``"cols"`` (stride 1 along the output's columns) or ``"rows"``
        (along its rows): the general kernel prefetches the input's runs that way into L2 8 K iterations
        before each tile's epilogue (:meth:`EpilogueCall.prefetch_runs`, fused_epilogue.cuh's epi_prefetch_runs);
        absent: no prefetch. All three are compile-time in the generated code (constants, no branch)
        and so part of the build's key. Raises EpilogueError for a prefetch of a non-tile input or
        another direction."""
        pairs = dict(pairs or {})
        prefetch = dict(prefetch or {})
        for n, how in prefetch.items():
            if self.inputs.get(n) != "tile" or how not in ("rows", "cols"):
                raise EpilogueError(f"prefetch[{n!r}] = {how!r}: only tile inputs are prefetched, along 'rows' or 'cols'")
        params = ", ".join(["float acc", "int row", "int col", *(f"float {n}" for n in self.inputs)])
        mma = [f"#define GL_BIAS_MMA_SLOT {self.tensor_inputs.index(self.mma_vector)}  // added by the kernel's MMA"
               ] if self.mma_vector is not None else []
        lines = [f"// fused epilogue {self.name!r}: inputs {self.inputs}",
                 "#define GL_EPILOGUE 1", f"#define GL_EPI_SWAP {int(bool(swap))}", *mma,
                 '#include "gemm_ladder/fused_epilogue.cuh"', "namespace gl {",
                 f"__device__ __forceinline__ float gl_user_epilogue({params}) {{",
                 '#line 1 "epilogue"', self.body(), "}",
                 "#line 1000000 \"generated epilogue code\"",
                 "template <bool kAlongCols>",
                 "__device__ __forceinline__ void gl_epilogue_pair(float& gl_x0, float& gl_x1, int gl_r, int gl_c, "
                 "int gl_rows, int gl_cols, const EpilogueParams& gl_p) {",
                 f"  using gl_off = {'long long' if wide else 'EpiNarrowOff'};  // element offsets",
                 "  const int gl_r1 = kAlongCols ? gl_r : gl_r + 1, gl_c1 = kAlongCols ? gl_c + 1 : gl_c;",
                 "  // Masks: an element outside the output is not read (predicated loads, 0, no branch). A vector's",
                 "  // element is masked by its own coordinate only, so the loads of one row's (or one column's)",
                 "  // pairs are one load the compiler can share.",
                 "  const bool gl_row0 = gl_r < gl_rows, gl_row1 = gl_r1 < gl_rows;",
                 "  const bool gl_col0 = gl_c < gl_cols, gl_col1 = gl_c1 < gl_cols;",
                 "  const bool gl_in0 = gl_row0 && gl_col0, gl_in1 = gl_row1 && gl_col1;"]
        for slot, n in enumerate(self.tensor_inputs):
            dt = INPUT_DTYPES[dtypes[n]]
            kind = self.inputs[n]
            if n == self.mma_vector:  # the kernel adds it (bias_stage.cuh): not loaded, not in the function
                lines.append(f"  const float gl_{n}_0 = 0.f, gl_{n}_1 = 0.f;  // {kind} input, slot {slot}: by the MMA")
                continue
            pc, pr = pairs.get(n, (False, False))
            pc, pr = bool(pc), bool(pr)
            lines += [f"  float gl_{n}_0, gl_{n}_1;  // {kind} input, slot {slot}",
                      f"  constexpr bool gl_{n}_pair = kAlongCols ? {str(pc).lower()} : {str(pr).lower()};",
                      # a pair load's stride along the pair is 1 (the host checked): a constant
                      f"  const gl_off gl_{n}_sr = !kAlongCols && gl_{n}_pair ? gl_off(1) : gl_off(gl_p.stride_row[{slot}]);",
                      f"  const gl_off gl_{n}_sc = kAlongCols && gl_{n}_pair ? gl_off(1) : gl_off(gl_p.stride_col[{slot}]);"]
            terms = []
            if kind != "col":
                terms.append(f"gl_off(gl_r) * gl_{n}_sr")
            if kind != "row":
                terms.append(f"gl_off(gl_c) * gl_{n}_sc")
            off = " + ".join(terms)
            same = {"row": "kAlongCols", "col": "!kAlongCols"}.get(kind)
            m0, m1 = {"row": ("gl_row0", "gl_row1"), "col": ("gl_col0", "gl_col1")}.get(kind, ("gl_in0", "gl_in1"))
            pair = (f"epi_load_pair<{dt}, gl_{n}_pair, gl_off>(gl_p.ptr[{slot}], {off}, kAlongCols ? gl_{n}_sc : "
                    f"gl_{n}_sr, {m0}, {m1}, gl_{n}_0, gl_{n}_1);")
            if same is None:
                lines.append(f"  {pair}")
            else:  # the pair shares this vector's element when it runs across the vector's direction
                lines += [f"  if constexpr ({same}) {{",
                          f"    gl_{n}_0 = epi_load<{dt}, gl_off>(gl_p.ptr[{slot}], {off}, {m0});",
                          f"    gl_{n}_1 = gl_{n}_0;",
                          "  } else {", f"    {pair}", "  }"]
        args0, args1 = [], []
        scalar_slot = {n: i for i, n in enumerate(self.scalar_inputs)}
        for n, kind in self.inputs.items():
            if kind == "scalar":
                args0.append(f"gl_p.scalar[{scalar_slot[n]}]")
                args1.append(f"gl_p.scalar[{scalar_slot[n]}]")
            else:
                args0.append(f"gl_{n}_0")
                args1.append(f"gl_{n}_1")
        lines.append("  gl_x0 = gl_user_epilogue(" + ", ".join(["gl_x0", "gl_r", "gl_c", *args0]) + ");")
        lines.append("  gl_x1 = gl_user_epilogue(" + ", ".join(["gl_x1", "gl_r1", "gl_c1", *args1]) + ");")
        lines.append("}")
        lines += ["// L2 prefetch of the tile inputs over output rows gl_r0 + [0, kRows), columns gl_c0 + [0, kCols),",
                  "// by kThreads threads (gl_t: this one), each input along its contiguous direction.",
                  "template <int kRows, int kCols, int kThreads>",
                  "__device__ __forceinline__ void gl_epilogue_prefetch(int gl_r0, int gl_c0, int gl_rows, int gl_cols, "
                  "int gl_t, const EpilogueParams& gl_p) {"]
        slots = {n: i for i, n in enumerate(self.tensor_inputs)}
        for n, how in prefetch.items():
            dt, slot = INPUT_DTYPES[dtypes[n]], slots[n]
            if how == "cols":  # a run per output row: kRows runs of kCols elements, rows stride_row apart
                lines.append(f"  epi_prefetch_runs<{dt}, kRows, kCols, kThreads>(gl_p.ptr[{slot}], gl_p.stride_row[{slot}], "
                             "gl_r0, gl_c0, gl_rows, gl_cols, gl_t);  // " + n)
            else:  # a run per output column
                lines.append(f"  epi_prefetch_runs<{dt}, kCols, kRows, kThreads>(gl_p.ptr[{slot}], gl_p.stride_col[{slot}], "
                             "gl_c0, gl_r0, gl_cols, gl_rows, gl_t);  // " + n)
        if not prefetch:
            lines.append("  (void)gl_r0, (void)gl_c0, (void)gl_rows, (void)gl_cols, (void)gl_t, (void)gl_p;  // nothing to prefetch")
        lines += ["}", "}  // namespace gl", ""]
        return "\n".join(lines)

    def compile_check(self, dtypes: Mapping[str, torch.dtype] | None = None, arch: str = "sm_90a") -> None:
        """Compile the epilogue alone (a tiny kernel calling it), so a CUDA error surfaces before the
        GEMM is built. ``dtypes`` default to bf16 for every tensor input. Raises EpilogueCompileError
        with nvcc's message (the user's body is file "epilogue", its first line line 1)."""
        from gemm_ladder.runtime.compiler import CompileError, compile_kernel

        dtypes = dict(dtypes or {n: torch.bfloat16 for n in self.tensor_inputs})
        tu = ("#define GL_DTYPE_BF16 1\n" + self.source(dtypes, swap=False)
              + '#include "gemm_ladder/fused_epilogue_pair.cuh"\n'
              + 'extern "C" __global__ void gl_epilogue_check(float* out, const __grid_constant__ gl::EpilogueParams p) {\n'
              + "  float x0 = out[0], x1 = out[1];\n"
              + "  gl::epilogue_pair<true>(x0, x1, threadIdx.x, blockIdx.x, 7, 9, p);\n"
              + "  gl::epilogue_pair<false>(x0, x1, blockIdx.x, threadIdx.x, 7, 9, p);\n"
              + "  out[0] = x0; out[1] = x1;\n}\n")
        try:
            compile_kernel(tu, "gl_epilogue_check", arch=arch)
        except CompileError as exc:
            raise EpilogueCompileError(f"epilogue {self.name!r}: {_compiler_name()} rejected its CUDA",
                                       compiler_message(exc.log)) from None

    # --- one call ----------------------------------------------------------------------------------
    def bind(self, values: Mapping[str, Any], rows: int, cols: int, device: torch.device, *,
             check_grad: bool = True) -> "EpilogueCall":
        """This epilogue with its inputs for one (rows x cols) output on ``device``: every declared input
        given, no other; a row vector 1-D of ``rows`` elements, a column vector of ``cols``, a tile
        (rows, cols) with any strides (a broadcast stride 0 included); tensors bf16, fp16 or fp32 on
        ``device``; scalars Python ints or floats (rounded to fp32). Reads metadata only (CPU, meta or
        CUDA tensors). ``check_grad``: refuse a tensor input requiring grad under grad mode (a user
        epilogue has no backward; the registered linear op's kernel passes False: its autograd formula
        covers the built-in epilogue). Raises EpilogueError (a ValueError) naming the input and the rule."""
        missing = [n for n in self.inputs if n not in values]
        extra = [n for n in values if n not in self.inputs]
        if missing or extra:
            raise EpilogueError(f"epilogue {self.name!r} takes inputs {list(self.inputs)}: "
                                + (f"missing {missing}" if missing else "") + ("; " if missing and extra else "")
                                + (f"unexpected {extra}" if extra else ""))
        tensors, scalars, dtypes = [], [], {}
        for n, kind in self.inputs.items():
            v = values[n]
            if kind == "scalar":
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise EpilogueError(f"{n}: a scalar input must be a Python int or float, got {type(v).__name__}")
                scalars.append(float(v))
                continue
            if not isinstance(v, torch.Tensor):
                raise EpilogueError(f"{n}: a {kind} input must be a torch.Tensor, got {type(v).__name__}")
            if v.dtype not in INPUT_DTYPES:
                raise EpilogueError(f"{n} has dtype {v.dtype}: inputs are torch.bfloat16, torch.float16 or torch.float32")
            if not _same_device(v.device, device):
                raise EpilogueError(f"{n} is on {v.device}; the output is on {device}")
            if check_grad and v.requires_grad and torch.is_grad_enabled():
                raise EpilogueError(f"{n} requires grad: a user epilogue has no backward; detach it or use torch.no_grad()")
            want = {"row": (rows,), "col": (cols,), "tile": (rows, cols)}[kind]
            if tuple(v.shape) != want:
                what = {"row": "a 1-D vector of the output's rows", "col": "a 1-D vector of the output's columns",
                        "tile": "a tile of the output's shape"}[kind]
                raise EpilogueError(f"{n} has shape {tuple(v.shape)}: {what} is {want}")
            if kind == "row":
                strides = (v.stride(0), 0)
            elif kind == "col":
                strides = (0, v.stride(0))
            else:
                strides = (v.stride(0), v.stride(1))
            tensors.append((v, strides))
            dtypes[n] = v.dtype
        return EpilogueCall(self, tuple(tensors), tuple(scalars), tuple(dtypes.items()), rows, cols)


def compiler_message(log: str) -> str:
    """nvcc's diagnostics about the user's body first (file "epilogue"), else the whole log, trimmed."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    mine = [ln for ln in lines if ln.lstrip().startswith("epilogue(") or '"epilogue"' in ln]
    keep = mine or lines
    return "\n".join(keep[:20])


def compile_with_epilogue(build: Callable[[], Any], call: "EpilogueCall | None"):
    """``build()``, with nvcc's rejection of an epilogue's CUDA raised as EpilogueCompileError (the
    user's lines first) rather than a kernel's CompileError."""
    from gemm_ladder.runtime.compiler import CompileError

    if call is None:
        return build()
    try:
        return build()
    except CompileError as exc:
        raise EpilogueCompileError(f"epilogue {call.epilogue.name!r}: {_compiler_name()} rejected its CUDA",
                                   compiler_message(exc.log)) from None


def _compiler_name() -> str:
    """The compiler that rejected a build, as messages name it: nvcc or NVRTC (runtime.compiler's choice)."""
    from gemm_ladder.runtime.compiler import compiler_choice

    try:
        return {"nvcc": "nvcc", "nvrtc": "NVRTC"}[compiler_choice()]
    except Exception:  # noqa: BLE001 - naming it is a courtesy; the compiler's own message follows
        return "the kernel compiler"


class EpilogueParams(ctypes.Structure):
    """fused_epilogue.cuh's ``EpilogueParams``: the kernel argument holding an epilogue's inputs."""

    _fields_ = [("ptr", ctypes.c_void_p * MAX_TENSOR_INPUTS), ("stride_row", ctypes.c_longlong * MAX_TENSOR_INPUTS),
                ("stride_col", ctypes.c_longlong * MAX_TENSOR_INPUTS), ("scalar", ctypes.c_float * MAX_SCALARS),
                ("pair_ok", ctypes.c_int), ("pad_", ctypes.c_int)]


@dataclass(frozen=True, eq=False)
class EpilogueCall:
    """An epilogue bound to one call's inputs (:meth:`Epilogue.bind`), in the output's coordinates.

    ``tensors``: (tensor, (stride_row, stride_col)) per vector/tile input in slot order; ``scalars``
    per scalar input; ``dtypes``: (name, dtype) of the tensor inputs; ``rows`` x ``cols``: the output.
    ``swap``: set by the dispatcher (:meth:`oriented`) when the kernel writes the output transposed.
    """

    epilogue: Epilogue
    tensors: tuple
    scalars: tuple[float, ...]
    dtypes: tuple
    rows: int
    cols: int
    swap: bool = False

    def oriented(self, swap: bool) -> "EpilogueCall":
        return EpilogueCall(self.epilogue, self.tensors, self.scalars, self.dtypes, self.rows, self.cols, bool(swap))

    def source(self) -> str:
        """The generated code of this call's build (part of its JIT cache key)."""
        return self.epilogue.source(dict(self.dtypes), self.swap, wide=self.wide_offsets(), pairs=self.pair_loads(),
                                    prefetch=self.prefetch_runs())

    def wide_offsets(self) -> bool:
        """Whether an input's offsets need 64 bits: the largest the kernels compute, (rows - 1 + s)
        |stride_row| + (cols - 1 + s) |stride_col| with s = :data:`COORD_SLACK` (a tile's coordinates run
        past the output by less than a tile before the masks drop them), reaches 2^31. Every other
        build computes them in 32-bit ints (one multiply-add each, no overflow)."""
        s = COORD_SLACK
        return any((self.rows - 1 + s) * abs(sr) + (self.cols - 1 + s) * abs(sc) >= 2 ** 31
                   for _, (sr, sc) in self.tensors)

    def pair_loads(self) -> dict[str, tuple[bool, bool]]:
        """Per tensor input (name): whether its two elements of a pair along an output row, and along an
        output column, can be one load of twice the element size: stride 1 that way, the other stride
        even (every pair then starts aligned: pairs start at even coordinates), the base aligned to
        the pair's bytes, and the output's extent that way even (a pair is wholly inside or wholly
        outside, so one mask covers it)."""
        out = {}
        names = [n for n in self.epilogue.tensor_inputs]
        for n, (t, (sr, sc)) in zip(names, self.tensors):
            size = 2 * t.element_size()
            aligned = t.data_ptr() % size == 0
            out[n] = (sc == 1 and sr % 2 == 0 and aligned and self.cols % 2 == 0,
                      sr == 1 and sc % 2 == 0 and aligned and self.rows % 2 == 0)
        return out

    def prefetch_runs(self) -> dict[str, str]:
        """Per tile input (name) that the general kernel prefetches into L2 8 K iterations before each
        tile's end: the output direction along which its elements are contiguous, ``"cols"`` (stride 1 along a row of
        the output: a row-major residual) or ``"rows"`` (stride 1 down a column: a column-major one),
        so that each run of a consumer's slice is a few 128-byte line prefetches. Not prefetched:
        vectors (a tile's worth is BN or 128 elements, in L2 after the first tile that reads them), a
        tile with no unit stride (no contiguous run: a prefetch per element would cost what the loads
        do), and a broadcast one (the other stride 0: every run is the same bytes)."""
        out = {}
        names = [n for n in self.epilogue.tensor_inputs]
        for n, (_, (sr, sc)) in zip(names, self.tensors):
            if self.epilogue.inputs[n] != "tile":
                continue
            if sc == 1 and sr != 0:
                out[n] = "cols"
            elif sr == 1 and sc != 0:
                out[n] = "rows"
        return out

    def params(self, pair_along_cols: bool) -> EpilogueParams:
        """The kernel argument. ``pair_along_cols``: whether the kernel's accumulator pairs are neighbours
        along an output row (a tile's pair is read with one load when its two elements are adjacent
        and aligned: stride 1 that way, the other stride even, the base aligned to the pair's bytes)."""
        p = EpilogueParams()
        pair_ok = 0
        for slot, (t, (sr, sc)) in enumerate(self.tensors):
            p.ptr[slot] = t.data_ptr() if t.device.type == "cuda" else 0
            p.stride_row[slot], p.stride_col[slot] = sr, sc
            step, other = (sc, sr) if pair_along_cols else (sr, sc)
            size = 2 * t.element_size()
            if step == 1 and other % 2 == 0 and t.data_ptr() % size == 0:
                pair_ok |= 1 << slot
        for i, s in enumerate(self.scalars):
            p.scalar[i] = s
        p.pair_ok = pair_ok
        return p

    def reference(self, acc: torch.Tensor) -> torch.Tensor:
        """The epilogue's reference on ``acc`` (rows, cols): inputs in acc's dtype (float64 in the
        gates), vectors shaped to broadcast ((rows, 1), (1, cols))."""
        kwargs = {}
        tensors = iter(self.tensors)
        scalars = iter(self.scalars)
        for n, kind in self.epilogue.inputs.items():
            if kind == "scalar":
                kwargs[n] = next(scalars)
                continue
            t = next(tensors)[0].to(acc.dtype)
            kwargs[n] = t.view(-1, 1) if kind == "row" else t.view(1, -1) if kind == "col" else t
        return self.epilogue.reference(acc, **kwargs)

    def load_plan(self, tile: tuple[int, int] = (128, 256), out_bytes: int = 2):
        """The designer's plan of this call's extra loads on a (BM, BN) output tile (design/epilogue.py)."""
        from gemm_ladder.design.epilogue import plan_epilogue_loads

        tensors = iter(self.tensors)
        inputs = [(n, k, 4 if k == "scalar" else next(tensors)[0].element_size()) for n, k in self.epilogue.inputs.items()]
        return plan_epilogue_loads(inputs, tile, out_bytes, prefetch=self.prefetch_runs())

    def describe(self) -> dict:
        """What the call loads, for ``explain`` and the design plan: per input its kind, dtype, strides."""
        out = []
        tensors = iter(self.tensors)
        for n, kind in self.epilogue.inputs.items():
            if kind == "scalar":
                out.append({"name": n, "kind": kind})
            else:
                t, (sr, sc) = next(tensors)
                out.append({"name": n, "kind": kind, "dtype": str(t.dtype).replace("torch.", ""),
                            "element_bytes": t.element_size(), "strides": [sr, sc],
                            "l2_prefetch": self.prefetch_runs().get(n)})
        return {"name": self.epilogue.name, "orientation": "swapped" if self.swap else "direct", "inputs": out}


# --- the built-in epilogue of gemm_ladder.linear ------------------------------------------------------

_LINEAR_EPILOGUES: dict[tuple, Epilogue] = {}


def linear_epilogue(*, bias: bool, activation: str | None, residual: bool, alpha: bool) -> Epilogue | None:
    """The epilogue of ``linear``: ``activation(alpha * acc + bias) + beta * residual``, in that order,
    in fp32, as one :class:`Epilogue` (the same mechanism as a user's): a column vector ``bias``, a tile
    ``residual`` with scalar ``beta``, a scalar ``alpha`` (taken only when ``alpha`` is True: alpha = 1
    needs no multiply). None when there is nothing to fuse. One object per combination (cached)."""
    if activation is not None and activation not in ACTIVATIONS:
        raise EpilogueError(f"activation={activation!r}: use one of {', '.join(ACTIVATIONS)} or None")
    key = (bias, activation, residual, alpha)
    if not any((bias, activation, residual, alpha)):
        return None
    ep = _LINEAR_EPILOGUES.get(key)
    if ep is not None:
        return ep
    inputs: dict[str, str] = {}
    if alpha:
        inputs["gl_alpha_"] = "scalar"
    if bias:
        inputs["gl_bias_"] = "col"
    if residual:
        inputs["gl_residual_"] = "tile"
        inputs["gl_beta_"] = "scalar"
    act = ACTIVATIONS[activation].reference if activation else None

    def reference(acc, gl_alpha_=1.0, gl_bias_=None, gl_residual_=None, gl_beta_=1.0):
        out = acc * gl_alpha_ if alpha else acc
        if gl_bias_ is not None:
            out = out + gl_bias_
        if act is not None:
            out = act(out)
        if gl_residual_ is not None:
            out = out + gl_beta_ * gl_residual_
        return out

    name = "+".join(p for p, on in (("alpha", alpha), ("bias", bias), (activation or "", activation),
                                    ("residual", residual)) if on)

    def make(cuda: str, label: str, mma_vector: str | None) -> Epilogue:
        ep = Epilogue.__new__(Epilogue)  # its input names use the reserved gl_ prefix, which users may not
        ep.cuda, ep.reference, ep.inputs, ep.name, ep.examples = cuda, reference, inputs, label, {}
        ep.mma_vector = mma_vector
        ep.mma_twin = None
        return ep

    ep = make(_linear_cuda(bias, activation, residual, alpha), f"linear:{name}", None)
    # The same epilogue with the bias left to the kernel's MMA (bias_stage.cuh): the function without it,
    # the input kept in its slot (the kernel reads its address there), the reference unchanged. Not with
    # alpha: the MMA adds the bias to the unscaled sum.
    ep.mma_twin = make(_linear_cuda(False, activation, residual, alpha), f"linear:{name} (bias by MMA)",
                       "gl_bias_") if bias and not alpha else None
    _LINEAR_EPILOGUES[key] = ep
    return ep


def _linear_cuda(bias: bool, activation: str | None, residual: bool, alpha: bool) -> str:
    """linear's epilogue function as one expression: ``activation(alpha * acc + bias) + beta * residual``, each
    term only where asked."""
    v = "gl_alpha_ * acc" if alpha else "acc"
    if bias:
        v += " + gl_bias_"
    if activation is not None:
        v = ACTIVATIONS[activation].cuda_of(v)
    if residual:
        v += " + gl_beta_ * gl_residual_"
    return v


__all__ = ["ACTIVATIONS", "Epilogue", "EpilogueCall", "EpilogueCompileError", "EpilogueError", "EpilogueParams",
           "KINDS", "compile_with_epilogue", "linear_epilogue"]
