"""torch.distributed (gloo) all-reduce bus bandwidth, the baseline for
weft_comm_bench. Same sizes, iteration counts and output format:
    torch <bytes> <iters> <seconds per op> <bus GB/s>
Run one process per rank with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set
(weft-run does that)."""
import os
import sys
import time

import torch
import torch.distributed as dist

SERIAL = os.environ.get("WEFT_BENCH_TORCH_SERIAL") == "1"


def main():
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    dist.init_process_group("gloo", init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    buf = torch.ones(max_bytes // 4, dtype=torch.float32)
    size = 1024
    while size <= max_bytes:
        t = buf[: size // 4]
        iters = max(5, min(1000, (256 << 20) // size))
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        if SERIAL:
            # One collective at a time, like weft's FIFO comm thread.
            for _ in range(iters):
                dist.all_reduce(t)
        else:
            # torch's ProcessGroupGloo runs up to 2 collectives concurrently.
            works = [dist.all_reduce(t, async_op=True) for _ in range(iters)]
            for w in works:
                w.wait()
        secs = (time.perf_counter() - t0) / iters
        busbw = 2.0 * (n - 1) / n * size / secs / 1e9
        if rank == 0:
            print(f"{'torch-serial' if SERIAL else 'torch'} {size} {iters} {secs:.9f} {busbw:.4f}", flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
