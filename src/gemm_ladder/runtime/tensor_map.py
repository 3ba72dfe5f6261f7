"""Encode a designer's tensor-map spec into a driver ``CUtensorMap`` (cuTensorMapEncodeTiled).

The designer (:mod:`gemm_ladder.design.tensor_maps`) decides every argument and validates it; this
module only turns enum names into ``cuda.bindings.driver`` enums and calls the driver.
"""

from __future__ import annotations

from gemm_ladder.runtime.module import _driver, check

_ENUMS = {
    "tensorDataType": "CUtensorMapDataType",
    "interleave": "CUtensorMapInterleave",
    "swizzle": "CUtensorMapSwizzle",
    "l2Promotion": "CUtensorMapL2promotion",
    "oobFill": "CUtensorMapFloatOOBfill",
}


def encode_tiled(kwargs: dict):
    """``cuTensorMapEncodeTiled(**kwargs)`` -> ``CUtensorMap``; kwargs from ``TensorMapSpec.encode_kwargs``.

    Raises CudaError if the driver refuses the map (CUDA_ERROR_INVALID_VALUE names no rule: the
    designer's validation is what names them).
    """
    drv = _driver()
    enum = {k: getattr(getattr(drv, t), kwargs[k]) for k, t in _ENUMS.items()}
    return check(
        drv.cuTensorMapEncodeTiled(
            enum["tensorDataType"],
            kwargs["tensorRank"],
            kwargs["globalAddress"],
            [drv.cuuint64_t(v) for v in kwargs["globalDim"]],
            [drv.cuuint64_t(v) for v in kwargs["globalStrides"]],
            [drv.cuuint32_t(v) for v in kwargs["boxDim"]],
            [drv.cuuint32_t(v) for v in kwargs["elementStrides"]],
            enum["interleave"],
            enum["swizzle"],
            enum["l2Promotion"],
            enum["oobFill"],
        ),
        "cuTensorMapEncodeTiled",
    )
