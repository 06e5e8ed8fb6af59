"""bench/bench.py's tables. Each takes a measure.Bench and the rows it is to print, prints its table
and returns True when Kiln (or a peer) failed on a row: that row says why, the others still print."""
from dataclasses import replace

import flops
from cases import BF16_ROWS, BF16_TARGET_ROWS, MATMUL_ROWS, RECOMPUTE, SCALING, THREADS_ROWS, quick
from common import THREADS, WAIT_POLICIES, KilnError, header, median
from measure import PeerError, case_args, kiln_run_ms, ort_ms, torch_measure

MATMUL_N = 2048
MATMUL_RUNS = 10
TARGET_SPEEDUP, TARGET_RSS, TARGET_PEAK, TARGET_ORT, TARGET_THREADS = 2.0, 0.8, 0.75, 1.0, 1.8


def _head(name, case):
    return f"{name:<13} {case.batch:>5} {case.size:>7}"


def _ms(value):
    return f"{value:.2f}"


# ------------------------------------------------------------------------------ 2. matmul peak

def peak_table(bench, quick):
    """sgemm GFLOP/s of an N x N @ N x N float32 product at THREADS threads: PyTorch under each wait
    policy (torch.matmul in a worker) and Kiln (`kiln run` on a one-node MatMul model, --repeat).
    Returns (peak GFLOP/s, failed)."""
    runs = 2 if quick else MATMUL_RUNS
    gflop = 2 * MATMUL_N ** 3 / 1e9
    print(header(f"matmul peak: {MATMUL_N}x{MATMUL_N} @ {MATMUL_N}x{MATMUL_N} float32, mean of {runs} products "
                 "after one warm-up", bench.rounds))
    path, feeds = bench.matmul_model(MATMUL_N)
    sides = {f"PyTorch ({p})": lambda p=p: torch_measure("matmul", [MATMUL_N, "--runs", runs], p)["mean_ms"]
             for p in WAIT_POLICIES}
    sides["Kiln"] = lambda: kiln_run_ms(bench.kiln, path, feeds, runs)
    times, errors = _alternate(sides, bench.rounds)
    print(f"{'side':<20} {'ms':>9} {'GFLOP/s':>9}")
    rates = {}
    for side, values in times.items():
        if side in errors:
            print(f"{side:<20} {'-':>9} {'-':>9}  {'failed: ' if side == 'Kiln' else ''}{errors[side]}")
            continue
        rates[side] = gflop / (median(values) / 1000)
        print(f"{side:<20} {median(values):>9.1f} {rates[side]:>9.1f}")
    peak = max(rates.values(), default=float("nan"))
    print(f"peak (the largest): {peak:.1f} GFLOP/s")
    return peak, bool(errors)


def _alternate(sides, rounds):
    """Runs each of {side: measure} once per round, in order: ({side: [values]}, {side: error}); a
    side that failed is not run again."""
    times, errors = {side: [] for side in sides}, {}
    for _ in range(rounds):
        for side, measure in sides.items():
            if side in errors:
                continue
            try:
                times[side].append(measure())
            except (KilnError, PeerError) as e:
                errors[side] = str(e)
    return times, errors


def matmul_efficiency_table(bench, peak, names):
    """Achieved matmul GFLOP/s of a full training step: 3 x the forward graph's MatMul/Gemm FLOPs
    (backward costs about twice the forward) / the step time, and as a share of the peak."""
    rows = [n for n in MATMUL_ROWS if n in names]
    if not rows:
        return False
    print(header(f"achieved matmul throughput of a full training step: 3 x forward MatMul/Gemm FLOPs / step time, "
                 f"% of the {peak:.1f} GFLOP/s peak (target {TARGET_PEAK:.0%} for Kiln)", bench.rounds))
    print(f"{'model':<13} {'batch':>5} {'size':>7} {'fwd GFLOP':>10} {'Kiln ms':>9} {'GFLOP/s':>8} {'% peak':>7} "
          f"{'PyTorch ms':>11} {'GFLOP/s':>8} {'% peak':>7}")
    failed = False
    for name in rows:
        case = bench.case(name)
        gflop = bench.forward_flops(case) / 1e9
        try:
            t_ms = min(bench.torch_train_ms(case)[0].values())
            peer = f"{t_ms:>11.2f} {3 * gflop / (t_ms / 1000):>8.1f} {3 * gflop / (t_ms / 1000) / peak:>7.0%}"
        except PeerError as e:
            peer, failed = f"  {e}", True
        try:
            k_ms = bench.kiln_train_ms(case)
            rate = 3 * gflop / (k_ms / 1000)
            print(f"{_head(name, case)} {gflop:>10.2f} {k_ms:>9.2f} {rate:>8.1f} {rate / peak:>7.0%} {peer}")
        except KilnError as e:
            print(f"{_head(name, case)} {gflop:>10.2f} {'-':>9} {'-':>8} {'-':>7} {peer}  failed: {e}")
            failed = True
    return failed


# -------------------------------------------------------------------------- 1. full training step

def full_table(bench, names):
    """Forward, loss, backward, AdamW and zero grad: Kiln (kiln-train-steps) and PyTorch under both
    wait policies, alternating by round; the median step time and the largest peak RSS."""
    print(header("full training step: forward, loss, backward, AdamW, zero grad (step ms: mean of N steps after "
                 "warm-up; speedup = best PyTorch / Kiln)", bench.rounds))
    print(f"{'model':<13} {'batch':>5} {'size':>7} {'N':>3} {'Kiln ms':>9} {'PyTorch ms':>11} {'PyTorch ms':>11} "
          f"{'speedup':>8} {'Kiln RSS':>9} {'PyTorch RSS':>12} {'RSS ratio':>10}")
    print(f"{'':<41} {'(default)':>11} {'(PASSIVE)':>11} {f'(>={TARGET_SPEEDUP:.1f}x)':>8} {'MB':>9} {'MB':>12} "
          f"{f'(<={TARGET_RSS})':>10}")
    failed = False
    for name in names:
        case = bench.case(name)
        failed |= _full_row(bench, name, case)
    return failed


def _full_row(bench, name, case):
    head = f"{_head(name, case)} {case.steps:>3}"
    try:
        t_ms, t_mb = bench.torch_train_ms(case)
        peer = f"{t_ms['default']:>11.2f} {t_ms['PASSIVE']:>11.2f}"
    except PeerError as e:
        print(f"{head} {'-':>9} {'-':>11} {'-':>11}  {e}")
        return True
    try:
        k_ms = bench.kiln_train_ms(case)
    except KilnError as e:
        print(f"{head} {'-':>9} {peer} {'-':>8} {'-':>9} {t_mb:>12.0f} {'-':>10}  failed: {e}")
        return True
    k_mb = max(r["peak_rss_kb"] for r in bench.kiln_train[(case, THREADS)]) / 1024
    speedup = min(t_ms.values()) / k_ms
    print(f"{head} {k_ms:>9.2f} {peer} {f'{speedup:.2f}x':>8} {k_mb:>9.0f} {t_mb:>12.0f} {k_mb / t_mb:>10.2f}",
          flush=True)
    return False


# ---------------------------------------------------------------------------- 3. forward vs ORT

def forward_table(bench, names):
    """The eval-mode inference graph: `kiln run --repeat N`, onnxruntime-node (bench/ort_time.js)
    and PyTorch's no_grad forward under both wait policies (the faster counts), by round."""
    print(header("forward pass (inference graph, opset 17): mean of N runs after warm-up; "
                 f"speedup = ORT / Kiln (target >= {TARGET_ORT:.1f})", bench.rounds))
    print(f"{'model':<13} {'batch':>5} {'size':>7} {'N':>3} {'Kiln ms':>9} {'ORT ms':>9} {'PyTorch ms':>11} "
          f"{'vs ORT':>7}")
    failed = False
    for name in names:
        failed |= _forward_row(bench, name, bench.case(name))
    return failed


def _forward_row(bench, name, case):
    path, feeds = bench.inference(case)
    sides = {"kiln": lambda: kiln_run_ms(bench.kiln, path, feeds, case.runs),
             "ort": lambda: ort_ms(path, feeds, case.runs)}
    for policy in WAIT_POLICIES:
        sides[policy] = lambda p=policy: torch_measure("forward", case_args(case), p)["mean_ms"]
    times, errors = _alternate(sides, bench.rounds)
    ms = {side: median(values) for side, values in times.items()}
    col = {side: "-" if side in errors else _ms(ms[side]) for side in sides}
    torch_ms = min(ms[p] for p in WAIT_POLICIES) if not any(p in errors for p in WAIT_POLICIES) else None
    vs = f"{ms['ort'] / ms['kiln']:.2f}x" if not {"kiln", "ort"} & set(errors) else "-"
    line = (f"{_head(name, case)} {case.runs:>3} {col['kiln']:>9} {col['ort']:>9} "
            f"{_ms(torch_ms) if torch_ms else '-':>11} {vs:>7}")
    notes = [f"failed: {errors['kiln']}" if "kiln" in errors else ""]
    notes += list(dict.fromkeys(errors[s] for s in errors if s != "kiln"))
    print(line + "".join(f"  {n}" for n in notes if n), flush=True)
    return bool(errors)


# ------------------------------------------------------------------------------------ 4. scaling

def scaling_table(bench, names):
    """Kiln's full training step at growing sizes, its time ratio to the first size next to the
    ratio of forward MatMul/Gemm/Conv FLOPs: time should grow no faster than the work."""
    series = [n for n in SCALING if n in names]
    if not series:
        return False
    print(header("scaling: Kiln full training step against forward MatMul/Gemm/Conv FLOPs (ratios to the "
                 "first row)", bench.rounds))
    print(f"{'model':<13} {'batch':>5} {'size':>7} {'N':>3} {'fwd GFLOP':>10} {'Kiln ms':>9} {'time ratio':>11} "
          f"{'FLOP ratio':>11}")
    failed = False
    for name in series:
        first_ms = first_flops = None
        for i, case in enumerate(bench.sizes(name)):
            work = bench.forward_flops(case, flops.MATMUL_OPS + flops.CONV_OPS)
            first_flops = first_flops or work
            head = f"{_head(name, case)} {case.steps:>3} {work / 1e9:>10.2f}"
            try:
                k_ms = bench.kiln_train_ms(case)
            except KilnError as e:
                print(f"{head} {'-':>9} {'-':>11} {work / first_flops:>11.2f}  failed: {e}")
                failed = True
                continue
            first_ms = k_ms if i == 0 else first_ms  # no time ratios when the first size failed
            ratio = _ratio(k_ms, first_ms)
            print(f"{head} {k_ms:>9.2f} {ratio:>11} {work / first_flops:>11.2f}", flush=True)
    return failed


def _ratio(value, reference):
    return f"{value / reference:.2f}" if reference else "-"


# ------------------------------------------------------------------------------------ 5. threads

def threads_table(bench, names):
    """Kiln's full training step at 1 and at THREADS threads."""
    rows = [n for n in THREADS_ROWS if n in names]
    if not rows:
        return False
    print(header(f"threads: Kiln full training step at 1 and {THREADS} threads (target speedup >= "
                 f"{TARGET_THREADS})", bench.rounds))
    print(f"{'model':<13} {'batch':>5} {'size':>7} {'N':>3} {'1 thread ms':>12} {f'{THREADS} threads ms':>13} "
          f"{'speedup':>8}")
    failed = False
    for name in rows:
        case = bench.case(name)
        try:
            one, many = bench.kiln_train_ms(case, 1), bench.kiln_train_ms(case, THREADS)
            print(f"{_head(name, case)} {case.steps:>3} {one:>12.2f} {many:>13.2f} {f'{one / many:.2f}x':>8}")
        except KilnError as e:
            print(f"{_head(name, case)} {case.steps:>3} {'-':>12} {'-':>13} {'-':>8}  failed: {e}")
            failed = True
    return failed



# ------------------------------------------------------------------------ 6. gradient checkpointing

TARGET_MEMORY_CUT, TARGET_RECOMPUTE_TIME = 0.40, 1.35


def recompute_table(bench, names):
    """Kiln's full training step with and without gradient checkpointing (`kiln artifacts
    --recompute`): step time, the training plan's activation arena and the process's peak RSS."""
    rows = [n for n in RECOMPUTE if n in names]
    if not rows:
        return False
    print(header(f"gradient checkpointing: Kiln full training step with and without recompute (targets: "
                 f"arena and RSS >= {TARGET_MEMORY_CUT:.0%} smaller, time <= {TARGET_RECOMPUTE_TIME}x)",
                 bench.rounds))
    print(f"{'model':<13} {'batch':>5} {'size':>7} {'N':>3} {'ms':>8} {'recompute ms':>13} {'time':>6} "
          f"{'arena MiB':>10} {'recompute':>10} {'cut':>6} {'RSS MiB':>8} {'recompute':>10} {'cut':>6}")
    failed = False
    for name in rows:
        case = quick(RECOMPUTE[name]) if bench.quick else RECOMPUTE[name]
        recomputed = replace(case, recompute=True)
        try:
            ms, rc_ms = bench.kiln_train_ms(case), bench.kiln_train_ms(recomputed)
            (arena, rss), (rc_arena, rc_rss) = bench.kiln_train_memory(case), bench.kiln_train_memory(recomputed)
            print(f"{_head(name, case)} {case.steps:>3} {ms:>8.2f} {rc_ms:>13.2f} {f'{rc_ms / ms:.2f}x':>6} "
                  f"{arena:>10.1f} {rc_arena:>10.1f} {f'{1 - rc_arena / arena:.0%}':>6} {rss:>8.0f} {rc_rss:>10.0f} "
                  f"{f'{1 - rc_rss / rss:.0%}':>6}", flush=True)
        except KilnError as e:
            print(f"{_head(name, case)} {case.steps:>3} {'-':>8}  failed: {e}")
            failed = True
    return failed


# ------------------------------------------------------------------------ 7. mixed precision

TARGET_BF16_SPEEDUP = 1.5  # on CPUs with AVX512-BF16 only


def bf16_table(bench, names, compute_path):
    """Kiln's full training step in float32 and with bf16 mixed precision (`kiln artifacts
    --mixed-precision bf16`), and how this machine runs bfloat16 products (`kiln ops`); beside them
    PyTorch's step in float32 and under its own bf16 autocast (the faster wait policy of each), and
    Kiln's bf16 step against both."""
    rows = [n for n in BF16_ROWS if n in names]
    if not rows:
        return False
    native = not compute_path.startswith("float32")
    target = (f"targets: bf16 >= {TARGET_BF16_SPEEDUP}x faster than Kiln's float32 and >= {TARGET_SPEEDUP:.1f}x "
              f"PyTorch's float32 on {', '.join(BF16_TARGET_ROWS)}" if native else "no target: products emulated")
    print(header(f"bf16 mixed precision: full training step, float32 and bf16 ({target}; bfloat16 products: "
                 f"{compute_path})", bench.rounds))
    print(f"{'model':<13} {'batch':>5} {'size':>7} {'N':>3} {'fp32 ms':>8} {'bf16 ms':>8} {'speedup':>8} "
          f"{'PyTorch ms':>11} {'PyTorch ms':>11} {'bf16 vs':>8} {'bf16 vs':>8}")
    print(f"{'':<59} {'(fp32)':>11} {'(autocast)':>11} {'PyTorch':>8} {'autocast':>8}")
    failed = False
    for name in rows:
        case = bench.case(name)
        head = f"{_head(name, case)} {case.steps:>3}"
        try:
            ms, low_ms = bench.kiln_train_ms(case), bench.kiln_train_ms(replace(case, bf16=True))
        except KilnError as e:
            print(f"{head} {'-':>8}  failed: {e}")
            failed = True
            continue
        kiln = f"{head} {ms:>8.2f} {low_ms:>8.2f} {f'{ms / low_ms:.2f}x':>8}"
        try:
            peer = min(bench.torch_train_ms(case)[0].values())
            peer_low = min(bench.torch_train_ms(replace(case, bf16=True))[0].values())
        except PeerError as e:
            print(f"{kiln} {'-':>11} {'-':>11}  {e}")
            failed = True
            continue
        print(f"{kiln} {peer:>11.2f} {peer_low:>11.2f} {f'{peer / low_ms:.2f}x':>8} {f'{peer_low / low_ms:.2f}x':>8}",
              flush=True)
    return failed
