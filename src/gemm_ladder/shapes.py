"""Named shape sets (M, N, K) for the gates and benchmarks.

- ``square``: the usual cubes.
- ``llm``: M = 4096 tokens against the (N, K) of Llama-3-8B and Llama-3-70B linear layers
  (q/o projection, k/v projection, MLP up/gate and down), as in those models' configs.
- ``edge``: tails in M, N and K around the 128x128x64 tile, K = 1, K = BK, K = BK + 1, M or N = 1,
  empty dimensions; small enough to check in milliseconds.
- ``unaligned``: odd sizes whose rows are not 16-byte aligned.
"""

from __future__ import annotations

Shape = tuple[int, int, int]

SHAPE_SETS: dict[str, list[Shape]] = {
    "square": [(s, s, s) for s in (1024, 2048, 4096, 8192)],
    "llm": [
        (4096, 4096, 4096),  # Llama-3-8B q_proj / o_proj
        (4096, 1024, 4096),  # Llama-3-8B k_proj / v_proj (8 KV heads x 128)
        (4096, 14336, 4096),  # Llama-3-8B gate_proj / up_proj
        (4096, 4096, 14336),  # Llama-3-8B down_proj
        (4096, 8192, 8192),  # Llama-3-70B q_proj / o_proj
        (4096, 28672, 8192),  # Llama-3-70B gate_proj / up_proj
        (4096, 8192, 28672),  # Llama-3-70B down_proj
    ],
    "edge": [
        (128, 128, 64),  # exactly one tile, K = BK
        (128, 128, 1),  # K = 1
        (128, 128, 8),  # K smaller than BK, 16-byte rows
        (128, 128, 65),  # K = BK + 1 (unaligned rows)
        (128, 128, 72),  # K = BK + 8
        (1, 128, 64),  # M = 1
        (128, 1, 64),  # N = 1
        (1, 1, 1),
        (7, 8, 9),
        (17, 24, 40),
        (64, 128, 128),  # half a tile in M
        (128, 64, 64),  # half a tile in N
        (127, 120, 128),
        (129, 128, 64),  # one row past a tile
        (128, 136, 64),  # N tail of 8
        (200, 264, 192),  # tails in M and N, three K tiles
        (300, 200, 1000),  # K tail of 40
        (513, 520, 520),
        (333, 328, 4096),  # long K
        (1000, 1000, 1000),
        (2048, 2056, 136),
        (0, 128, 64),  # empty M
        (128, 0, 64),  # empty N
        (128, 128, 0),  # empty K: zeros
    ],
    "unaligned": [(4097, 4095, 4093), (1023, 1025, 1027), (255, 257, 129)],
}


#: The ``llm`` shapes ``gemm-ladder climb`` times by default on a GPU, beside ``square``: Llama-3-8B's MLP
#: gate/up and down projections and Llama-3-70B's gate/up (4096^3, its q/o projection, is in ``square``).
CLIMB_LLM: list[Shape] = [(4096, 14336, 4096), (4096, 4096, 14336), (4096, 28672, 8192)]


def default_climb_shapes(gpu: bool) -> list[tuple[str, Shape]]:
    """What ``gemm-ladder climb`` runs without ``--shapes``: on a GPU the ``edge`` set (checked), ``square``
    (1024^3 and 2048^3 checked, 4096^3 and 8192^3 timed) and :data:`CLIMB_LLM` (timed), so that the ladder's
    performance gate and stopping rule have timed shapes to judge (about two minutes on an H200);
    without a GPU the ``edge`` set alone (nothing can be timed there)."""
    if not gpu:
        return parse_shape_sets("edge")
    return parse_shape_sets("edge,square") + [("llm", s) for s in CLIMB_LLM]


def parse_shape_sets(spec: str) -> list[tuple[str, Shape]]:
    """'edge,square' -> [(set_name, (M, N, K)), ...] in order; raises ValueError on an unknown name.

    An item of the form ``MxNxK`` is taken as a single shape in a set named 'custom'.
    """
    out: list[tuple[str, Shape]] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in SHAPE_SETS:
            out.extend((item, s) for s in SHAPE_SETS[item])
        else:
            out.append(("custom", parse_shape(item)))
    if not out:
        raise ValueError(f"no shapes in {spec!r}: use {', '.join(SHAPE_SETS)} or MxNxK")
    return out


def parse_shape(text: str) -> Shape:
    """'MxNxK' -> (M, N, K); raises ValueError unless three non-negative integers."""
    parts = text.lower().split("x")
    try:
        m, n, k = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"{text!r} is neither a shape set ({', '.join(SHAPE_SETS)}) nor MxNxK") from None
    if min(m, n, k) < 0:
        raise ValueError(f"{text!r}: dimensions must be non-negative")
    return (m, n, k)


def gemm_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of one GEMM: 2*M*N*K (one multiply and one add per term)."""
    return 2 * m * n * k


def gemm_min_bytes(m: int, n: int, k: int, elem_bytes: int = 2) -> int:
    """Fewest bytes a GEMM moves through device memory: read a and b once, write c once."""
    return elem_bytes * (m * k + n * k + m * n)
