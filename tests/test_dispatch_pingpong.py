"""When the route takes the general kernel's ping-pong builds (dispatch/pingpong.py), on meta tensors
(the H200 assumed). The 128-row rule first: K <= 1024, N a multiple of 192, A and B K-major and at least 1.5
tiles of 128 x 192 per SM take the 128-row build, whatever the epilogue. Else a fused GELU at K <= 1024 and
M >= 1000 with enough 64-row tiles takes the 64-row build, in one CTA per cluster, at the width whose wave fill
times its measured rate is best; no activation, another activation, a long K, too few tiles, a kernel other
than the cooperative TMA-store build, the small-M table's pick or a transposed output keep the route. explain
says which and why (with the ping-pong build's grid), and rejects an unknown activation before deciding. CPU
only."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder.contract import GemmInputError
from gemm_ladder.dispatch import pingpong as P

BF16 = torch.bfloat16


def explained(m: int, n: int, k: int, activation: str | None, *, w_row_major: bool = True) -> dict:
    x = torch.empty(m, k, dtype=BF16, device="meta")
    b = torch.empty(n, k, dtype=BF16, device="meta").T if w_row_major else torch.empty(k, n, dtype=BF16, device="meta")
    return gemm_ladder.explain(x, b, activation=activation).to_dict()


@pytest.mark.parametrize("m,n,k,act,bn", [
    (12608, 4096, 1024, "gelu", 256),       # ViT-L fc1: whole waves at 256
    (16384, 4096, 1024, "gelu", 256),       # BERT-large fc1: 192 fills more, but 256's tiles run faster
    (1023, 3072, 768, "gelu_tanh", 192),    # 192 tiles of 256 leave 27% of a wave idle; 256 of 192 fill it
    (4096, 768, 768, "gelu", 192),          # 128 tiles of 128 x 192: too few for the 128-row rule
    (1576, 4096, 1024, "gelu", 192),
])
def test_a_fused_gelu_at_short_k_takes_pingpong(m, n, k, act, bn):
    e = explained(m, n, k, act)
    assert e["kind"] == "general" and e["kernel"]["consumers"] == "ping-pong"
    assert e["tile"] == [64, bn, 64] and e["cluster"] == 1 and e["split"] == "none"
    why = e["heuristic"]["consumer_schedule"]
    assert f"fused {act}" in why and f"K = {k}" in why and "dispatch/pingpong.py" in why
    assert "ping-pong rule" in e["heuristic"]["rule"]
    assert e["plan"]["plan"]["problem"]["schedule"] == "pingpong"


@pytest.mark.parametrize("m,n,k,act", [
    (12608, 4096, 1024, None),      # plain, N not a multiple of 192: the 64-row build measured slower (126 vs 120 us)
    (12608, 4096, 1024, "relu"),    # an activation not measured
    (12608, 4096, 4096, "gelu"),    # long K: the 64-row tile's extra loads cost more than the epilogue
    (1023, 3072, 1088, "gelu"),     # K just past MAX_K
    (256, 1024, 1024, "gelu"),      # 4 x 4 tiles of 64 x 256 for 132 SMs
])
def test_everything_else_keeps_the_cooperative_route(m, n, k, act):
    e = explained(m, n, k, act)
    assert e["kernel"].get("consumers") != "ping-pong" and "consumer_schedule" not in (e["heuristic"] or {})


def test_other_kernels_and_orientations_keep_their_route():
    """The register-store build (N = 4095: rows not whole 16-byte chunks; a float32 output), the small-M
    table's pick (M = 256 with a wide N: no ping-pong shape was measured below M = 1023), and a
    column-major out= (the kernel writes D^T: a swapped epilogue, not measured)."""
    assert "consumer_schedule" not in explained(4096, 4095, 1024, "gelu")["heuristic"]
    x = torch.empty(4096, 1024, dtype=BF16, device="meta")
    w = torch.empty(4096, 1024, dtype=BF16, device="meta")
    fp32 = gemm_ladder.explain(x, w.T, out_dtype=torch.float32, activation="gelu").to_dict()
    assert "consumer_schedule" not in fp32["heuristic"] and fp32["output"]["output_path"] != "TMA store"
    assert "consumer_schedule" not in explained(256, 16384, 1024, "gelu")["heuristic"]
    col = torch.empty(4096, 4096, dtype=BF16, device="meta").T  # column-major (M, N) out
    e = gemm_ladder.explain(x, w.T, out=col, activation="gelu").to_dict()
    assert e["orientation"] != "direct" and "consumer_schedule" not in e["heuristic"]


@pytest.mark.parametrize("m,n,k,act", [
    (12608, 3072, 1024, None),          # ViT-L qkv: 1584 tiles
    (1576, 3072, 1024, None),           # ViT-L qkv at 1576 rows: 208 tiles, 1.58 a SM
    (8192, 3072, 768, "gelu_tanh"),     # GPT-2 c_fc: before the 64-row rule, which also holds
    (1576, 3072, 1024, "silu"),         # any epilogue
    (6336, 768, 768, None),             # 50 x 4 = 200 tiles >= 1.5 x 132
    (12672, 384, 1024, None),           # 99 x 2 = 198 tiles: exactly 1.5 a SM
    (1576, 3072, 768, None),            # K at WIDE_MIN_K, M at WIDE_MIN_M
])
def test_the_128_row_rule_takes_the_128_row_build(m, n, k, act):
    e = explained(m, n, k, act)
    assert e["kind"] == "general" and e["kernel"]["consumers"] == "ping-pong"
    assert e["tile"] == [128, 192, 64] and e["cluster"] == 1 and e["split"] == "none"
    why = e["heuristic"]["consumer_schedule"]
    assert "128 x 192" in why and f"K = {k}" in why and "dispatch/pingpong.py" in why
    assert e["plan"]["plan"]["problem"]["schedule"] == "pingpong"


@pytest.mark.parametrize("m,n,k", [
    (6208, 768, 768),       # 49 x 4 = 196 tiles < 198
    (1576, 3072, 1088),     # K past WIDE_MAX_K
    (1576, 3072, 1025),     # K just past it
    (1576, 3072, 704),      # K short of WIDE_MIN_K (its wins were at 768-1024)
    (1575, 3072, 1024),     # M short of WIDE_MIN_M (208 tiles all the same)
    (1024, 50304, 768),     # GPT-2's padded vocabulary at 1024 rows: 2096 tiles, but no such M was measured
    (12608, 3136, 1024),    # N not a multiple of 192
    (1023, 2304, 768),      # 96 tiles: a CTA would hold one, its twin consumer idle
])
def test_the_128_row_rule_refuses_outside_its_measurements(m, n, k):
    e = explained(m, n, k, None)
    assert e["tile"][0] != 128 or e["kernel"]["consumers"] != "ping-pong"
    assert "128 x 192" not in str((e["heuristic"] or {}).get("consumer_schedule"))


def test_the_128_row_rule_wants_a_k_major_weight():
    e = explained(12608, 3072, 1024, None, w_row_major=False)  # an MN-major B: the rule's build is K-major only
    assert e["kernel"]["consumers"] == "cooperative"


def test_the_128_row_rule_wants_a_k_major_x():
    """A column-major x (an MN-major A read in place): the rule's build reads a K-major A only."""
    x = torch.empty(1024, 1576, dtype=BF16, device="meta").T
    w = torch.empty(3072, 1024, dtype=BF16, device="meta")
    e = gemm_ladder.explain(x, w.T).to_dict()
    assert e["kernel"]["consumers"] == "cooperative" and "consumer_schedule" not in (e["heuristic"] or {})


def test_the_route_search_lists_the_128_row_build():
    """class_configs (what precompile and the AOT set build) holds the build the rule hands a plain call."""
    from gemm_ladder.dispatch import decide
    from gemm_ladder.dispatch.route import class_configs

    x = torch.empty(12608, 1024, dtype=BF16, device="meta")
    w = torch.empty(3072, 1024, dtype=BF16, device="meta")
    route = decide(x, w.T, torch.empty(12608, 3072, dtype=BF16, device="meta"), given=False)
    assert route.config.pingpong and route.config in class_configs("large", "bf16", (256, 192, 128, 64), "k", "k")


def test_explain_gives_the_pingpong_builds_grid():
    e = explained(8192, 3072, 768, "gelu_tanh")
    assert e["grid"] == e["plan"]["plan"]["schedule"]["grid"] == [132, 1, 1]


def test_the_mm_route_is_unchanged_by_the_rule():
    plain = explained(12608, 4096, 1024, None)
    assert plain["tile"][0] == 128 and plain["kernel"]["consumers"] == "cooperative"


def test_an_mn_major_weight_keeps_bn_256():
    """x @ W with W (K, N) row-major is an MN-major B, which BN 192 is not built for."""
    e = explained(1023, 3072, 768, "gelu_tanh", w_row_major=False)
    assert e["kernel"]["consumers"] == "ping-pong" and e["tile"] == [64, 256, 64]


def test_wave_fill_and_width_choice():
    assert P.wave_fill(1023, 3072, 256, 132) == pytest.approx(192 / 264)
    assert P.wave_fill(1023, 3072, 192, 132) == pytest.approx(256 / 264)
    assert P.wave_fill(12608, 4096, 256, 132) == pytest.approx(3152 / 3168)
    assert P.WIDTH_RATE[256] == 1.0 > P.WIDTH_RATE[192]


@pytest.mark.parametrize("bad,exc", [("swish", GemmInputError), (3, TypeError)])
def test_explain_rejects_an_unknown_activation(bad, exc):
    x = torch.empty(64, 64, dtype=BF16, device="meta")
    with pytest.raises(exc):
        gemm_ladder.explain(x, x, activation=bad)
