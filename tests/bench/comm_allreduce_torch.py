"""torch.distributed (gloo) bus bandwidth, the baseline for weft_comm_bench.
Same sizes, iteration counts and output format:
    torch <op> <bytes> <iters> <seconds per op> <bus GB/s>
Usage: comm_allreduce_torch.py [MAX_BYTES] [all_reduce|reduce_scatter|all_gather]
torch 1.13's gloo backend has no reduce_scatter: that op is measured as what a
torch gloo user has to run instead, an all-reduce of the full buffer, reported
with the reduce-scatter bus factor ((n-1)/n), so the ratio is the speed-up of
getting the reduced shard. all_gather gathers into views of one output buffer.
Run one process per rank with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set
(weft-run does that). WEFT_BENCH_TORCH_SERIAL=1: one collective at a time."""
import os
import sys
import time

import torch
import torch.distributed as dist

SERIAL = os.environ.get("WEFT_BENCH_TORCH_SERIAL") == "1"


def main():
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    op = sys.argv[2] if len(sys.argv) > 2 else "all_reduce"
    dist.init_process_group("gloo", init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    buf = torch.ones(max_bytes // 4, dtype=torch.float32)
    size = 1024
    while size <= max_bytes:
        count = size // 4 // n * n
        full = buf[:count]
        shards = list(full.chunk(n))
        mine = torch.ones(count // n, dtype=torch.float32)

        def issue(async_op):
            if op == "all_gather":
                return dist.all_gather(shards, mine, async_op=async_op)
            return dist.all_reduce(full, async_op=async_op)

        iters = max(5, min(1000, (256 << 20) // size))
        for _ in range(2):
            issue(False)
        dist.barrier()
        t0 = time.perf_counter()
        if SERIAL:
            for _ in range(iters):
                issue(False)
        else:
            # torch's ProcessGroupGloo runs up to 2 collectives concurrently.
            works = [issue(True) for _ in range(iters)]
            for w in works:
                w.wait()
        secs = (time.perf_counter() - t0) / iters
        factor = (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n
        busbw = factor * count * 4 / secs / 1e9
        if rank == 0:
            name = "torch-serial" if SERIAL else "torch"
            print(f"{name} {op} {size} {iters} {secs:.9f} {busbw:.4f}", flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
