"""Scaling table of the structure passes: ops vs seconds, on synthetic NN-like DAGs.

    NUMBA_NUM_THREADS=1 python bench/structure_table.py                 # 1e4 .. 1e6 ops
    NUMBA_NUM_THREADS=1 python bench/structure_table.py --sizes 10000,100000 --nx-sizes 10000

Per size: the graph is built untimed (:func:`hdp.zoo.synth.random_module`), then each pass runs
``--repeat`` times; the table shows the first run (which also pays for first-touch memory) and the
best run, plus µs per op of the best run (flat when growth is linear). ``coarsen`` is rules (a) +
(b); ``coarsen→256`` adds the multilevel step; ``features kernels`` is the Numba part of
``features`` alone (the rest is per-op Python and writing the dense n x 168 float32 matrix). The networkx rows time a straightforward networkx
implementation of rules (a) + (b) (tests/test_coarsen.py) against hdp's pass on the same graph.
Kernel compile and cache-load times are measured in fresh subprocesses with an empty and a warm
numba cache directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hdp.passes.coarsen import CoarsenPass  # noqa: E402
from hdp.passes.features import FeaturesPass  # noqa: E402
from hdp.zoo.synth import random_module  # noqa: E402

_FIRST_CALL = """
import time
t0 = time.perf_counter()
from hdp.passes.coarsen import CoarsenPass
from hdp.passes.features import FeaturesPass
from hdp.zoo.synth import random_module
m = random_module(500, seed=0)
t1 = time.perf_counter()
FeaturesPass().run(m)
t2 = time.perf_counter()
CoarsenPass(groups=10).run(m)
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def timed(fn, *args) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def first_call_times() -> tuple[list[float], list[float]]:
    """(cold, warm): [import, features, coarsen] seconds of a first call in a fresh process."""
    with tempfile.TemporaryDirectory() as cache_dir:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT))
        runs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout
            runs.append([float(x) for x in out.split()])
    return runs[0], runs[1]


def nx_reference():
    spec = importlib.util.spec_from_file_location("_coarsen_reference", ROOT / "tests" / "test_coarsen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.nx_coarsen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,30000,100000,300000,1000000")
    ap.add_argument("--nx-sizes", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quality-size", type=int, default=100_000, help="0 skips the cut table")
    ap.add_argument("--no-compile", action="store_true", help="skip the compile-time subprocesses")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    nx_sizes = [int(s) for s in args.nx_sizes.split(",") if s]

    print(f"NUMBA_NUM_THREADS={os.environ.get('NUMBA_NUM_THREADS', '(unset)')}  "
          f"repeat={args.repeat}  python {sys.version.split()[0]}")
    if not args.no_compile:
        cold, warm = first_call_times()
        print("\nfirst call in a fresh process, 500-op graph (seconds): "
              "import | features | coarsen (groups=10)")
        print(f"  empty numba cache (compile):  {cold[0]:.2f} | {cold[1]:.2f} | {cold[2]:.2f}")
        print(f"  warm numba cache (load):      {warm[0]:.2f} | {warm[1]:.2f} | {warm[2]:.2f}")

    m = random_module(1000, seed=0)  # compile / load kernels before timing
    FeaturesPass().run(m)
    CoarsenPass(groups=10).run(m)

    passes = [("coarsen", CoarsenPass()), ("coarsen→256", CoarsenPass(groups=256)),
              ("features", FeaturesPass()), ("features kernels", _feature_kernels)]
    print("\n| ops | edges | build (untimed) | pass | first s | best s | µs/op | result |")
    print("|---:|---:|---:|---|---:|---:|---:|---|")
    for n in sizes:
        t_build, m = timed(random_module, n, 0)
        for name, p in passes:
            runs = [timed(getattr(p, "run", p), m) for _ in range(args.repeat)]
            best = min(t for t, _ in runs)
            out = runs[0][1]
            res = (f"{out.coarse.n_groups} groups" if getattr(out, "coarse", None) is not None
                   else f"{len(out.features.legend)} columns" if hasattr(out, "features")
                   else "undirected CSR, fractal, depths")
            print(f"| {n:,} | {m.graph.n_edges:,} | {t_build:.2f} s | {name} | {runs[0][0]:.3f} | "
                  f"{best:.3f} | {best / n * 1e6:.2f} | {res} |", flush=True)
        del m

    if nx_sizes:
        ref = nx_reference()
        print("\n| ops | hdp coarsen (a+b) best s | networkx same rules s | ratio | same groups |")
        print("|---:|---:|---:|---:|---|")
        for n in nx_sizes:
            m = random_module(n, 0)
            best = min(timed(CoarsenPass().run, m)[0] for _ in range(args.repeat))
            t_nx, (groups, _) = timed(ref, m.graph, "paper")
            go = CoarsenPass().run(m).coarse.group_of.numpy()
            same = _same_partition(go, [groups[u] for u in range(n)])
            print(f"| {n:,} | {best:.4f} | {t_nx:.2f} | {t_nx / best:.0f}x | {same} |", flush=True)

    if args.quality_size:
        quality(args.quality_size)


def quality(n: int) -> None:
    """Bytes crossing groups after ``groups=G`` against cutting the stored (topological) op order
    into G equal intervals, which is also acyclic."""
    import numpy as np

    from hdp.passes.coarsen import build_coarse, graph_arrays

    m = random_module(n, 0)
    arrays = graph_arrays(m.graph)
    total = int(m.graph.edge_bytes.numpy().sum())
    print(f"\n{n:,} ops, {total / 1e9:.1f} GB over all edges; bytes crossing groups (each tensor "
          "once per consumer group):")
    print("| groups | hdp coarsen GB | largest / mean group | equal intervals of the op order GB |")
    print("|---:|---:|---:|---:|")
    for g in (256, 64, 16):
        c = CoarsenPass(groups=g).run(m).coarse
        naive = build_coarse(m, arrays, (np.arange(n) * g // n).astype(np.int32), g)
        mc = c.member_count.numpy()
        print(f"| {g} | {c.edge_bytes.numpy().sum() / 1e9:.3f} | {mc.max() / mc.mean():.2f} | "
              f"{naive.edge_bytes.numpy().sum() / 1e9:.3f} |", flush=True)


def _feature_kernels(m):
    """The Numba part of ``features`` alone (no Python per-op loops, no matrix assembly)."""
    from hdp.passes import _kernels as K

    p = FeaturesPass()
    ip, ix = m.graph.indptr.numpy(), m.graph.indices.numpy()
    uptr, uidx = K.undirected_csr(ip, ix)
    K.fractal_dimension(uptr, uidx, p.radius, p.ball_cap)
    return K.longest_path_depths(ip, ix)


def _same_partition(a, b) -> bool:
    pairs = set(zip((int(x) for x in a), b))
    return len(pairs) == len(set(int(x) for x in a)) == len(set(b))


if __name__ == "__main__":
    main()
