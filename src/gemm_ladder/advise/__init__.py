"""Where a kernel stands on the ladder, its next step or the stop, and each level's acceptance criteria.

The method followed is the GEMM optimization ladder's (the Agent Skill mirage-project/b200-gemm-optimization-ladder,
https://skillmd.com/skills/mirage-project/b200-gemm-optimization-ladder, distilled from "Modern GPU Programming for
MLSys", https://mlc.ai/modern-gpu-programming-for-mlsys/): nine levels, gates at each, a stopping rule, and an answer
in five parts (conclusion; evidence or assumptions; contract, table or timeline; minimal validation; risks and
fallback). Called "the method" in this package.
"""
