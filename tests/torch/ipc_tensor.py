"""A CUDA tensor passed between processes by torch.multiprocessing (CUDA IPC: cudaIpcGetMemHandle and
an interprocess event in the producer, cudaIpcOpenMemHandle and a stream wait in the consumer), as
DataLoader workers and producer/consumer jobs do. The consumer reads the tensor (its digest), writes
into it in place, and the producer reads the consumer's write through its own tensor. Also a tensor
that is a view at an offset inside a larger allocation, and one made by the consumer and sent back.
Prints lines that must be the same natively and under crcuda (tests/gpu/ipc.sh compares them).

usage: ipc_tensor.py
"""

import hashlib
import sys

import torch
import torch.multiprocessing as mp


def digest(t):
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def consumer(inbox, outbox):
    whole, view = inbox.get()
    outbox.put(("consumer read", digest(whole), digest(view)))
    with torch.no_grad():
        whole.mul_(3).add_(1)  # in place: the producer's memory
        view.fill_(-2.5)
    torch.cuda.synchronize()
    made = torch.linspace(-1, 1, 4099, device="cuda", dtype=torch.float64).cos()
    outbox.put(("consumer wrote", digest(made)))
    outbox.put(("tensor", made))
    # The producer has read the sent tensor before this process lets it go.
    inbox.get()


def main():
    mp.set_start_method("spawn")
    torch.manual_seed(1234)
    whole = torch.randn(1 << 20, device="cuda")
    base = torch.arange(100000, device="cuda", dtype=torch.float32).sin()
    view = base[3000:7000]  # an offset inside its allocation
    print("producer made", digest(whole), digest(view))
    inbox, outbox = mp.Queue(), mp.Queue()
    p = mp.Process(target=consumer, args=(inbox, outbox))
    p.start()
    inbox.put((whole, view))
    read = outbox.get()
    print(*read)
    wrote = outbox.get()
    print(*wrote)
    _, made = outbox.get()
    print("producer got the consumer's tensor", digest(made))
    del made
    torch.cuda.synchronize()
    print("producer sees the consumer's writes", digest(whole), digest(base))
    inbox.put("done")
    p.join(60)
    print("consumer exit", p.exitcode)
    return 0 if p.exitcode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
