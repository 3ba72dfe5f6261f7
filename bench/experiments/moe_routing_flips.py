"""How far apart two correct computations of a randomly initialised MoE model land when their routers choose
differently (issue 24: bench/moe_models.py compares ours with transformers' ``grouped_mm`` side, and Mixtral's rows
were 2-10e-2 apart where Qwen3-MoE's were under 1.1e-2).

On the CPU, no GPU needed: bench/moe_models.py's model (transformers 5.x, its config and seed 0 weights, two layers)
with transformers' ``eager`` experts, run in bf16 and in fp32 on the same one-token decode inputs (bench/moe_models.py's
token draws). Per input: the relative Frobenius error of the bf16 last hidden states against fp32's, how many tokens'
top-k choices differ between the two in each layer, and the error over the tokens routed alike in every layer.

    python bench/experiments/moe_routing_flips.py [--model mixtral] [--batch 128] [--seeds 2,3] [-o FILE]

Needs transformers >= 5 (else one line, exit 2); about 3 minutes on two CPU cores for Mixtral. Writes
``DATE_moe_routing_flips_COMMIT.json`` (``$OUT`` or bench/results/): ``rows: [{model, batch, seed, rel_err,
flipped_per_layer, rel_err_routed_alike}]``.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from suite import add_output_argument, require_transformers, save  # noqa: E402


def run(name: str, batch: int, seeds: list[int]) -> list[dict]:
    import transformers

    from moe_models import MODELS, agreement, rel_err, routed

    cls, kw = MODELS[name]
    torch.manual_seed(0)  # bench/moe_models.py build()'s weights
    model = transformers.AutoModel.from_config(copy.deepcopy(getattr(transformers, cls)(**kw)),
                                               experts_implementation="eager", dtype=torch.bfloat16).eval()
    inputs = {s: torch.randint(0, kw["vocab_size"], (batch, 1), generator=torch.Generator().manual_seed(s))
              for s in seeds}
    out = {}
    for precision in ("bf16", "fp32"):
        if precision == "fp32":
            model = model.float()
        for s, ids in inputs.items():
            with torch.no_grad():  # the routers' top-k picks recorded by moe_models.routed's hooks
                hidden, picks = routed(model, ids)
            out[precision, s] = hidden.float(), picks
    rows = []
    for s in seeds:
        (a, ra), (c, rc) = out["bf16", s], out["fp32", s]
        agree = agreement(a, c, ra, rc)
        rows.append({"model": name, "batch": batch, "seed": s, "rel_err": rel_err(a, c),
                     "flipped_per_layer": agree["routing_flips"], "rel_err_routed_alike": agree["rel_err_routed_alike"]})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mixtral", help="a model of bench/moe_models.py (default mixtral)")
    p.add_argument("--batch", type=int, default=128, help="sequences of one token (default 128)")
    p.add_argument("--seeds", default="2,3", help="token draws, comma-separated (default 2,3)")
    add_output_argument(p)
    args = p.parse_args()
    from moe_models import MODELS

    try:
        seeds = [int(s) for s in args.seeds.split(",")]
        if args.model not in MODELS or args.batch < 1:
            raise ValueError
    except ValueError:
        print(f"moe_routing_flips.py: --model {args.model!r} --batch {args.batch} --seeds {args.seeds!r}: a model of "
              f"{', '.join(MODELS)}, a positive batch, comma-separated integer seeds", file=sys.stderr)
        return 2
    require_transformers(__file__)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = run(args.model, args.batch, seeds)
    for r in rows:
        alike = r["rel_err_routed_alike"]
        print(f"{r['model']} {r['batch']}x1 seed {r['seed']}: bf16 vs fp32 {r['rel_err']:.3e}; tokens whose top-k "
              f"differ per layer {r['flipped_per_layer']}; over the tokens routed alike "
              f"{'none alike' if alike is None else f'{alike:.3e}'}")
    save({"rows": rows}, "moe_routing_flips", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
