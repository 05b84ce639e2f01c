#!/usr/bin/python3
"""The PyTorch side of the cross-check against PyTorch's own DDP.

  pytorch_ddp.py run DIR --mode MODE --dtype DTYPE   write the case, train it with PyTorch's DDP
  pytorch_ddp.py compare DIR                         compare with what ddp_side wrote

`run` writes the case into DIR: manifest.txt (settings, then one line per
parameter: "param NAME DIM..." in parameters() order), init.bin (initial
parameters, concatenated in that order), x.bin [steps, micro, world*batch, 16],
y.bin [steps, micro, world*batch, 4] and branch.bin [steps, micro, world]
(1: that rank's forward uses the branch), all raw little-endian in DTYPE. Then
it trains `world` ranks (torch.multiprocessing, Gloo, one thread each) and
each rank writes torch_rank<R>.bin: its parameters after every step,
[steps, total] in DTYPE; and it trains the same case in one process without
DDP (every shard's loss / world) into local.bin. ddp_side (C++) reads the same
case and writes ddp_rank<R>.bin in the same layout.

`compare` checks every parameter of every rank, after every step, relative to
the parameter's largest magnitude, against PyTorch's DDP rank 0 and against
the one-process run, and exits 1 above the tolerance (1e-5). Where PyTorch's
DDP is known to be wrong (KNOWN_PYTORCH_DIFFERENCES) only ddp is gated, and
PyTorch's divergence is printed.

Modes (rank r uses rows [r*batch, (r+1)*batch) of each micro-batch):
  plain        1 micro-batch per step, every parameter used
  no_sync      3 micro-batches per step: 2 under no_sync(), then a synchronized one
  find_unused  find_unused_parameters=True; the branch is unused on rank 0 only,
               on rank 1 only, and on both ranks, in different steps
  no_sync_find_unused  both: the branch used only in accumulated micro-batches
               in some steps, only in the synchronized one in others
  hook_fp16, hook_powersgd_r1, hook_powersgd_r2, hook_batched_powersgd_r1
               plain, with a communication hook registered on both sides
               (PyTorch's own from torch.distributed.algorithms.ddp_comm_hooks,
               ddp's from ddp/hooks.h): fp16_compress_hook, or powerSGD_hook /
               batched_powerSGD_hook with PowerSGDState(matrix_approximation_rank=R,
               start_powerSGD_iter=2, error feedback, warm start, random_seed=0).
               HOOK_STEPS steps, one bucket on both sides (bucket_cap_mb 25; the
               model is 11 KiB in float32). Each rank also writes its averaged
               gradients after every step (torch_grad_rank<R>.bin / ddp_grad_rank<R>.bin)
               and rank 0 the parameters of every bucket the hook saw
               (torch_buckets.txt / ddp_buckets.txt). `compare` then gates
               parameters and gradients against PyTorch's DDP rank 0 at the hook's
               tolerance (HOOK_TOLERANCES), requires the same buckets once
               rebuilt (iteration 1 on: before, PyTorch 1.13 lists a bucket's
               parameters in model order and ddp in reverse; without the rebuild,
               i.e. with find_unused_parameters, PowerSGD's results then differ),
               prints the differences per step, and reports the one-process run
               (no compression) for information only. hook_batched_powersgd_r1
               fails on PyTorch 1.13's side (see HOOK_TOLERANCES): no ctest.

The case itself (settings per mode, the model, the files) is reference_case.py's.
"""
import argparse
import contextlib
import datetime
import gc
import os
import socket
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
    assert dist.is_available() and dist.is_gloo_available()
except (ImportError, AssertionError):
    print(f"SKIP: {sys.executable} cannot import torch with torch.distributed over Gloo "
          "(install python3-torch)")
    sys.exit(77)  # crosscheck.sh's skip

# PyTorch >= 2.4 starts TCPStore on libuv by default; Debian's builds (13's
# 2.6) have no libuv and refuse. The classic server is in every version (1.13
# ignores the variable); ddp does the same (src/compat/torch_compat.cpp).
os.environ.setdefault("USE_LIBUV", "0")

from reference_case import DTYPES, HOOK_TOLERANCES, MODES, TOLERANCE, WORLD, initial_net, \
    load_case, read_raw, write_case, write_raw  # noqa: E402


def train_one_process(directory):
    """What DDP must compute, without DDP: every rank's shard in one process,
    each loss divided by the number of ranks. Writes local.bin."""
    case = load_case(directory)
    s, world, batch = case["settings"], case["world"], case["batch"]
    net = initial_net(case)
    opt = torch.optim.SGD(net.parameters(), lr=float(s["lr"]), momentum=float(s["momentum"]))
    snapshots = []
    for step in range(case["steps"]):
        opt.zero_grad(set_to_none=False)
        for m in range(case["micro"]):
            for r in range(world):
                rows = slice(r * batch, (r + 1) * batch)
                out = net(case["x"][step, m, rows], bool(case["branch"][step, m, r]))
                (F.mse_loss(out, case["y"][step, m, rows]) / world).backward()
        opt.step()
        snapshots.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
    write_raw(os.path.join(directory, "local.bin"), torch.stack(snapshots))


def register_hook(model, settings, names, log, step_of):
    """Registers the mode's communication hook (PyTorch's own), wrapped so that
    it logs the parameters of every bucket it sees into `log`."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as powersgd
    hook = settings["hook"]
    if hook == "fp16":
        state, function = dist.group.WORLD, default_hooks.fp16_compress_hook
    else:
        state = powersgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=int(settings["powersgd_rank"]),
            start_powerSGD_iter=int(settings["start_powerSGD_iter"]), use_error_feedback=True,
            warm_start=True, random_seed=0)
        function = powersgd.powerSGD_hook if hook == "powersgd" else powersgd.batched_powerSGD_hook

    def logged(state, bucket):  # DDP wants the argument named `bucket`
        log.append(f"step {step_of[0]} bucket {bucket.index()} last {int(bucket.is_last())}: "
                   + " ".join(names[p.data_ptr()] for p in bucket.parameters()))
        return function(state, bucket)

    model.register_comm_hook(state, logged)


def worker(rank, directory, port):
    torch.set_num_threads(1)
    case = load_case(directory)
    s, world, batch = case["settings"], case["world"], case["batch"]
    hook = s.get("hook", "none")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    net = initial_net(case)
    model = torch.nn.parallel.DistributedDataParallel(
        net, find_unused_parameters=bool(int(s["find_unused"])),
        bucket_cap_mb=float(s["bucket_cap_mb"]))
    bucket_log, step_of = [], [0]
    if hook != "none":
        names = {p.data_ptr(): name for name, p in net.named_parameters()}
        register_hook(model, s, names, bucket_log, step_of)
    opt = torch.optim.SGD(model.parameters(), lr=float(s["lr"]), momentum=float(s["momentum"]))
    rows = slice(rank * batch, (rank + 1) * batch)
    snapshots, gradients = [], []
    for step in range(case["steps"]):
        step_of[0] = step
        opt.zero_grad(set_to_none=False)  # libtorch 1.13's zero_grad() zeroes too
        for m in range(case["micro"]):
            last = m + 1 == case["micro"]
            with contextlib.nullcontext() if last else model.no_sync():
                out = model(case["x"][step, m, rows], bool(case["branch"][step, m, rank]))
                F.mse_loss(out, case["y"][step, m, rows]).backward()
        if hook != "none":
            gradients.append(torch.cat([p.grad.detach().reshape(-1) for p in net.parameters()]))
        opt.step()
        snapshots.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
    write_raw(os.path.join(directory, f"torch_rank{rank}.bin"), torch.stack(snapshots))
    if hook != "none":
        write_raw(os.path.join(directory, f"torch_grad_rank{rank}.bin"), torch.stack(gradients))
        if rank == 0:
            with open(os.path.join(directory, "torch_buckets.txt"), "w") as f:
                f.write("".join(line + "\n" for line in bucket_log))
    # Tear down here, on this thread. With a Python hook registered, leaving
    # it to the interpreter's exit aborted or hung one run in three (PyTorch
    # 1.13): the garbage collector ran on a Gloo worker thread ("terminate
    # called without an active exception"), or exit waited forever.
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args):
    write_case(args.dir, args.mode, args.dtype)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(worker, args=(args.dir, free_port()), nprocs=WORLD, join=True)
    train_one_process(args.dir)
    print(f"pytorch {torch.__version__}: {WORLD} ranks of PyTorch's DDP (gloo), mode {args.mode}, "
          f"{args.dtype}, {load_case(args.dir)['steps']} steps: done")


# Modes where PyTorch's own DDP is known to be wrong: ddp is checked against
# one process only there, and PyTorch's divergence is reported, not gated.
KNOWN_PYTORCH_DIFFERENCES = {
    "no_sync_find_unused":
        "PyTorch 1.13's DDP does not reduce the gradients of parameters used only under no_sync() "
        "when find_unused_parameters=True (pytorch/pytorch#69031, fixed in 2.4 by #124193): its "
        "ranks diverge",
}


def step_differences(case, got, ref, step):
    """Per parameter: its difference at `step`, relative to its largest
    magnitude in `ref` (inf for NaN)."""
    out, offset = [], 0
    for name, shape in case["params"]:
        n = torch.Size(shape).numel()
        a, b = got[step, offset:offset + n], ref[step, offset:offset + n]
        offset += n
        diff = (a - b).abs().max().item() / max(b.abs().max().item(), 1e-12)
        out.append((float("inf") if diff != diff else diff, name))
    return out


def max_relative_difference(case, got, ref, tolerance=TOLERANCE):
    """Largest difference over steps and parameters, relative to the parameter's
    largest magnitude; with where it is and the first step above the tolerance."""
    worst, where, first_bad = 0.0, "", None
    for step in range(case["steps"]):
        for diff, name in step_differences(case, got, ref, step):
            if diff > tolerance and first_bad is None:
                first_bad = f"step {step} {name}"
            if diff > worst:
                worst, where = diff, f"step {step} {name}"
    return worst, where, first_bad


def compare_hook(case, directory):
    """Hook modes: ddp's hook against PyTorch's own, parameters and averaged
    gradients after every step; the same bucket assignment on both sides."""
    s, steps, total, world = case["settings"], case["steps"], case["total"], case["world"]
    hook, dtype = s["hook"], s["dtype"]
    tolerance = HOOK_TOLERANCES[hook][dtype]
    start = int(s["start_powerSGD_iter"])
    read = lambda name: read_raw(os.path.join(directory, name), case["dtype"], [steps, total]).double()
    params = {f"{side} rank {r}": read(f"{prefix}_rank{r}.bin")
              for side, prefix in (("PyTorch", "torch"), ("ddp", "ddp")) for r in range(world)}
    grads = {f"{side} rank {r}": read(f"{prefix}_grad_rank{r}.bin")
             for side, prefix in (("PyTorch", "torch"), ("ddp", "ddp")) for r in range(world)}
    local = read("local.bin")
    reference = "PyTorch rank 0"
    others = [label for label in params if label != reference]
    what = hook if hook == "fp16" else f"{hook}, matrix_approximation_rank {s['powersgd_rank']}, " \
                                       f"start_powerSGD_iter {start}"
    print(f"mode {s['mode']} ({what}), {dtype} on both sides, {world} ranks, {steps} steps")
    failed = False

    # The same buckets, with the same parameters in the same order, once
    # rebuilt (from iteration 1 on: what PowerSGD's state is keyed on). In
    # iteration 0 PyTorch 1.13 lists a bucket's parameters in model order and
    # ddp in reverse (gradient-ready) order: reported, not gated (the hooks
    # here only allreduce element-wise in that iteration).
    logs = {}
    for side in ("torch", "ddp"):
        with open(os.path.join(directory, f"{side}_buckets.txt")) as f:
            logs[side] = [line.split(" ", 2) for line in f.read().splitlines()]
    rebuilt = {side: [rest for _, step, rest in lines if int(step) >= 1] for side, lines in logs.items()}
    if not rebuilt["torch"] or rebuilt["torch"] != rebuilt["ddp"]:
        print("  MISMATCH: after the rebuild, the hooks saw different buckets "
              "(step, index, is_last, parameters):")
        for side, lines in logs.items():
            print(f"    {side}:")
            for line in lines:
                print(f"      {' '.join(line)}")
        failed = True
    else:
        distinct = sorted(set(rebuilt["torch"]))
        print(f"  buckets from iteration 1 on: the same on both sides ({len(rebuilt['torch'])} hook "
              f"calls): " + "; ".join(distinct))
    first = {side: [rest for _, step, rest in lines if int(step) == 0] for side, lines in logs.items()}
    if first["torch"] != first["ddp"]:
        print("  note (not gated): iteration 0, before the rebuild, differs:")
        for side in ("torch", "ddp"):
            for rest in first[side]:
                print(f"    {side:5} step 0 {rest}")

    print(f"  max relative difference against {reference} (per tensor, relative to its largest "
          f"magnitude), by step:")
    header = "".join(f"{label:>16}" for label in others)
    print(f"  {'step':>4} {'hook':>10} |{'parameters':^{16 * len(others)}}|{'gradients':^{16 * len(others)}}|"
          f" {'one process':>12}")
    print(f"  {'':>4} {'':>10} |{header}|{header}| {'(params)':>12}")
    worst = {}
    for step in range(steps):
        kind = "fp16" if hook == "fp16" else ("vanilla" if step < start else "compressed")
        cells = []
        for table, runs in (("parameters", params), ("gradients", grads)):
            for label in others:
                diffs = step_differences(case, runs[label], runs[reference], step)
                diff, name = max(diffs)
                cells.append(f"{diff:16.3g}")
                if diff > worst.get((table, label), (-1.0, ""))[0]:
                    worst[(table, label)] = (diff, f"step {step} {name}")
            cells.append("|")
        off, _ = max(step_differences(case, params[reference], local, step))
        print(f"  {step:>4} {kind:>10} |{''.join(cells)} {off:12.3g}")
    for (table, label), (diff, where) in sorted(worst.items()):
        if diff > tolerance:
            print(f"  MISMATCH: {label} {table}: {diff:.3g} at {where} (tolerance {tolerance:g})")
            failed = True
    deviation = max_relative_difference(case, params[reference], local, 0)[0]
    print(f"  PyTorch with the hook against one process without it (not gated): up to {deviation:.3g}")
    if deviation <= tolerance:
        print("  the hook changed nothing measurable: the case tests nothing")
        failed = True
    moved = (params[reference][-1] - case["init"].double()).abs().max().item()
    if moved == 0:
        print("  parameters never moved: the case tests nothing")
        failed = True
    print(f"{'FAIL' if failed else 'PASS'} (tolerance {tolerance:g} relative)")
    return 1 if failed else 0


def compare(args):
    case = load_case(args.dir)
    if case["settings"].get("hook", "none") != "none":
        return compare_hook(case, args.dir)
    mode, steps, total, world = case["settings"]["mode"], case["steps"], case["total"], case["world"]
    read = lambda name: read_raw(os.path.join(args.dir, name), case["dtype"], [steps, total]).double()
    runs = {}
    for r in range(world):
        runs[f"PyTorch DDP rank {r}"] = read(f"torch_rank{r}.bin")
    for r in range(world):
        runs[f"ddp rank {r}"] = read(f"ddp_rank{r}.bin")
    references = {"PyTorch DDP rank 0": runs["PyTorch DDP rank 0"], "one process": read("local.bin")}
    known = KNOWN_PYTORCH_DIFFERENCES.get(mode)
    moved = (references["one process"][-1] - case["init"].double()).abs().max().item()
    print(f"mode {mode}, {case['settings']['dtype']} on both sides, {world} ranks, {steps} steps "
          f"(parameters moved up to {moved:.3g} from init)")
    print("max relative difference over all steps and parameters, against:")
    print(f"  {'':20} {'PyTorch DDP rank 0':>20} {'one process (no DDP)':>22}")
    failed, notes = False, []
    for label, got in runs.items():
        cells = []
        for ref_label, ref in references.items():
            if ref is runs[label]:
                cells.append("-")
                continue
            worst, where, first_bad = max_relative_difference(case, got, ref)
            cells.append(f"{worst:.3g}")
            # Gate: ddp against everything; PyTorch against itself and one
            # process, except where PyTorch is known to be wrong.
            gated = label.startswith("ddp") or not known
            if ref_label.startswith("PyTorch") and known:
                gated = False
            if first_bad is not None:
                verdict = "MISMATCH" if gated else "known PyTorch difference, not gated"
                notes.append(f"  {label} vs {ref_label}: first above {TOLERANCE:g} at {first_bad}, "
                             f"worst {worst:.3g} at {where} -> {verdict}")
                failed |= gated
        print(f"  {label:20} {cells[0]:>20} {cells[1]:>22}")
    for note in notes:
        print(note)
    if known:
        pytorch_differs = any(n.lstrip().startswith("PyTorch") for n in notes)
        print(f"  note: {known}" if pytorch_differs else
              f"  note: PyTorch {torch.__version__} agrees here; the known difference was: {known}")
    if moved == 0:
        print("  parameters never moved: the case tests nothing")
        failed = True
    print(f"{'FAIL' if failed else 'PASS'} (tolerance {TOLERANCE:g} relative)")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("dir")
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
    p = sub.add_parser("compare")
    p.add_argument("dir")
    args = parser.parse_args()
    if args.command == "run":
        run(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
