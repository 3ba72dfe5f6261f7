"""Library kernels: the top of the ladder carried to every case it does not cover yet (operand
layouts, strides TMA cannot describe, small M, fused epilogues), each a named kernel file planned by
the designer and gated like a level. The dispatcher and the public API sit above this package."""
