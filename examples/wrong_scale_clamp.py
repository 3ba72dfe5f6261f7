"""A deliberately wrong fused epilogue: examples/scale_clamp.py with the clamp written as
fminf(fmaxf(v, lo), hi). On finite values it is right; but fmaxf(NaN, lo) returns lo, so a NaN in the
product comes out as lo where torch.clamp (the reference) keeps it NaN. The gate's non-finite check
catches it:

    gemm-ladder gate --epilogue examples/wrong_scale_clamp.py:epilogue     # exit 1 on a GPU
"""

import torch

import gemm_ladder

epilogue = gemm_ladder.Epilogue(
    name="wrong_scale_clamp",
    cuda="fminf(fmaxf(acc * scale, lo), hi)",
    inputs={"scale": "row", "lo": "scalar", "hi": "scalar"},
    reference=lambda acc, scale, lo, hi: torch.clamp(acc * scale, lo, hi),
    examples={"lo": -2.0, "hi": 2.0},
)
