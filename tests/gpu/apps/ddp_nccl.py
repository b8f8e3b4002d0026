"""PyTorch DistributedDataParallel over NCCL on every GPU of the machine (issue 19, item 3): one
process per GPU (torch.multiprocessing), a small MLP trained for a few steps on each rank's fixed
batch, gradients all-reduced by NCCL. Rank 0 prints every loss as a float's hex and a digest of the
final weights, so two runs compare exactly. Exits 77 with fewer than 2 GPUs or without NCCL.
    python3 ddp_nccl.py [STEPS]"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, steps, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 256, generator=g).cuda()
    y = torch.randint(0, 10, (64,), generator=g).cuda()
    pause = float(os.environ.get("DDP_STEP_SLEEP", "0"))  # seconds a step: room for a checkpoint
    t_first = None  # DDP_TIMES=1: the mean step time after a warm-up, on stderr
    for step in range(steps):
        if step == min(10, steps - 1):
            torch.cuda.synchronize()
            t_first = time.perf_counter()
        if pause:
            torch.cuda.synchronize()
            time.sleep(pause)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        # every rank's loss, summed over the ranks: the all-reduce is exercised outside DDP too
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step} loss {total.item().hex()}", flush=True)
    torch.cuda.synchronize()
    if rank == 0 and os.environ.get("DDP_TIMES") == "1" and steps > 11:
        ms = (time.perf_counter() - t_first) * 1000 / (steps - 10)
        print(f"ddp_nccl: step time {ms:.3f} ms (steps 10 to {steps})", file=sys.stderr, flush=True)
    w = torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum().item()
    if rank == 0:
        print(f"weights {w.hex()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if torch.cuda.device_count() < 2 or not dist.is_nccl_available():
        print("ddp_nccl: skipped: needs 2 GPUs and NCCL", file=sys.stderr)
        sys.exit(77)
    world = torch.cuda.device_count()
    mp.spawn(rank_main, args=(world, steps, 29500 + os.getpid() % 1000), nprocs=world)
    print("ddp_nccl: done", flush=True)
