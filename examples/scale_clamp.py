"""A fused epilogue written by hand: each output row scaled by its own factor, then clamped.

    out[i, j] = clamp(scale[i] * (x @ w.T)[i, j], lo, hi)

computed inside gemm-ladder's top kernel on the fp32 accumulators, rounded once. Use it with

    y = gemm_ladder.linear(x, w, epilogue=epilogue, scale=s, lo=-2.0, hi=2.0)

and gate it (the kernel against the reference below, in float64):

    gemm-ladder gate --epilogue examples/scale_clamp.py:epilogue

The clamp is written with comparisons, not fminf/fmaxf: fmaxf(NaN, lo) is lo, while torch.clamp keeps
NaN, and the gate checks where NaN lands (examples/wrong_scale_clamp.py is the fminf/fmaxf version).
"""

import torch

import gemm_ladder

epilogue = gemm_ladder.Epilogue(
    name="scale_clamp",
    cuda="""
        const float v = acc * scale;         // acc: the fp32 sum over K; scale: this row's factor
        return v < lo ? lo : (v > hi ? hi : v);  // NaN compares false both times: it stays NaN
    """,
    inputs={"scale": "row", "lo": "scalar", "hi": "scalar"},
    reference=lambda acc, scale, lo, hi: torch.clamp(acc * scale, lo, hi),
    examples={"lo": -2.0, "hi": 2.0},
)
