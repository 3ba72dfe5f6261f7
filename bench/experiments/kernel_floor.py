"""Where the time goes on small and mid GEMMs: the kernels each call launches and their device durations,
ours (gemm_ladder.linear) against cuBLAS (F.linear), from torch.profiler (CUPTI), plus the per-call GPU
time of 50 calls back to back in a CUDA graph (no host) and triton's do_bench (L2 flushed).

    python3 bench/experiments/kernel_floor.py      # on the H200; writes $OUT/floor.json

Run at dd7709e (bench/results/logs/2026-12-04_kernel_floor_dd7709e.json, from this script before it
recorded suite.meta: the GPU's name only; its clocks are in logs/2026-12-04_device_floor_suite_shapes_dd7709e.log):
one kernel a call on both sides
(cuBLAS adds a memset at 4096^3); ours 1.45-2.0x cuBLAS's kernel time at 333-1576 rows, where cuBLAS runs 64-row tiles (its kernel names)."""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from suite import meta, require_gpu  # noqa: E402

require_gpu(__file__)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import gemm_ladder  # noqa: E402

SHAPES = [(1,768,768),(64,768,768),(128,1024,1024),(197,1024,1024),(512,768,768),(512,1024,4096),
          (1023,768,3072),(1576,1024,4096),(333,3072,3072),(4096,4096,4096)]
out = []
torch.manual_seed(0)
for M,N,K in SHAPES:
    x = torch.randn(M,K,device='cuda',dtype=torch.bfloat16); w = torch.randn(N,K,device='cuda',dtype=torch.bfloat16)/K**0.5
    fns = {'ours': lambda: gemm_ladder.linear(x,w), 'cublas': lambda: F.linear(x,w)}
    ref = (x.double()@w.double().t())
    row = {'M':M,'N':N,'K':K,'explain':str(gemm_ladder.explain(x,w.t())).split('\n')[2:5]}
    for name,fn in fns.items():
        y = fn(); torch.cuda.synchronize()
        row[name+'_err'] = float(((y.double()-ref).abs().max()/ref.abs().max()))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20): fn()
            torch.cuda.synchronize()
        ks = collections.defaultdict(list)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                ks[e.name].append(e.device_time if hasattr(e,'device_time') else e.cuda_time)
        row[name+'_kernels'] = {k[:70]:(len(v), round(sum(v)/len(v),2)) for k,v in ks.items()}
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn(); fn()
        torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
        try:
            with torch.cuda.graph(g):
                for _ in range(50): fn()
            g.replay(); torch.cuda.synchronize()
            e0,e1 = torch.cuda.Event(enable_timing=True),torch.cuda.Event(enable_timing=True)
            ts=[]
            for _ in range(5):
                e0.record(); g.replay(); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1)*1000/50)
            row[name+'_graph_us'] = round(min(ts),2)
        except Exception as ex:
            row[name+'_graph_us'] = f'fail {ex}'[:200]
        row[name+'_dobench_us'] = round(do_bench(fn, warmup=25, rep=100)*1000,2)
    print(json.dumps(row), flush=True)
    out.append(row)
json.dump({'meta': meta(), 'gpu': torch.cuda.get_device_name(), 'rows': out},
          open(os.path.join(os.environ.get('OUT', '.'), 'floor.json'), 'w'), indent=1)
