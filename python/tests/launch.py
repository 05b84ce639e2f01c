"""Runs a test file's ranks as processes, with env:// as torchrun sets it.

A test file calls main(body, ...) at its end: run directly, it launches
`world_size` copies of itself and checks them; as a rank (RANK set), it runs
body(rank, world_size) after importing ddp_torch.
"""

import os
import socket
import subprocess
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, world_size, env=None, timeout=240, args=()):
    """Starts the ranks of `script`; returns [(returncode, output)] by rank."""
    port = free_port()
    procs = []
    for rank in range(world_size):
        rank_env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                        LOCAL_WORLD_SIZE=str(world_size), OMP_NUM_THREADS="1")
        rank_env.update(env or {})
        procs.append(subprocess.Popen([sys.executable, script, *args], env=rank_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    results = []
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            out, _ = proc.communicate()
            raise AssertionError(f"rank {rank} of {script} did not finish in {timeout} s:\n{out}")
        results.append((proc.returncode, out))
    return results


def check_all_passed(script, world_size, results):
    failed = [(r, code, out) for r, (code, out) in enumerate(results) if code != 0]
    for r, code, out in failed:
        print(f"--- rank {r} of {world_size} exited {code}:\n{out}")
    if failed:
        sys.exit(f"{os.path.basename(script)}: {len(failed)} of {world_size} ranks failed")


def main(body, script, world_sizes=(2,), env=None):
    """The test file's entry: a rank runs body; the driver launches them."""
    if "RANK" in os.environ:
        import ddp_torch  # noqa: F401  registers "ddp"
        body(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        return
    for world_size in world_sizes:
        results = launch(script, world_size, env)
        check_all_passed(script, world_size, results)
        print(f"{os.path.basename(script)}: {world_size} ranks passed")
