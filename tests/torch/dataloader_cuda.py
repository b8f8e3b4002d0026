"""A DataLoader whose worker processes make CUDA tensors (spawn context), passed to the training
process by CUDA IPC (torch.multiprocessing: cudaIpcGetMemHandle and an interprocess event in the worker,
cudaIpcOpenMemHandle and a stream wait in the trainer), with batches prefetched ahead. Each batch is made
from its own seed on the GPU, so a run's losses depend only on the model: rank-free, order-fixed
(DataLoader keeps the order). Prints every step's loss as a float's hex and the final weights' digest:
natively, under crcuda and after a checkpoint of the process tree (trainer and workers) the lines must
be equal (tests/gpu/dataloader-cr.sh).

usage: dataloader_cuda.py [STEPS]      DL_STEP_SLEEP: seconds a step (default 0.005)
DL_BATCH_DEVICE=cpu: the workers make the batches on the CPU (other numbers than the GPU's draw: a run
compares with a run of the same setting), which reach the trainer through shared memory (PyTorch's
file_descriptor strategy: unlinked /dev/shm files whose descriptors go over unix sockets), and the
trainer moves them to the GPU: DataLoader's common case. DL_CONTEXT=fork (with DL_BATCH_DEVICE=cpu): the
workers forked from the trainer once CUDA is set up (DataLoader's default on Linux), not spawned.
"""

import os
import sys
import time

import torch


class Batches(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if os.environ.get("DL_BATCH_DEVICE") == "cpu":
            g = torch.Generator().manual_seed(1000 + i)
            x = torch.randn(256, 64, generator=g)
        else:
            g = torch.Generator(device="cuda").manual_seed(1000 + i)
            x = torch.randn(256, 64, device="cuda", generator=g)
        y = (x.sum(1) > 0).long()
        return x, y


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    pause = float(os.environ.get("DL_STEP_SLEEP", "0.005"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = torch.utils.data.DataLoader(Batches(steps), batch_size=None, num_workers=2,
                                         multiprocessing_context=os.environ.get("DL_CONTEXT", "spawn"), prefetch_factor=4)
    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(), y.cuda()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item().hex()}", flush=True)
        if pause:
            time.sleep(pause)
    w = torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum().item()
    print(f"weights {w.hex()}", flush=True)
    print("dataloader: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
