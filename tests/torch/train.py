"""A small, deterministic PyTorch training run for crcuda's GPU tests (issues 5 and 6).

A CNN + MLP + attention model trained with AdamW on synthetic data for --steps steps, with fixed seeds
and deterministic algorithms, so two runs give the same loss sequence bit for bit. Prints one line per
step, "step N loss <float.hex()>", and at the end "step_time_ms <mean of steps after warm-up>".

--ready-at N --ready-file F --go-file G: after step N, write F and wait until G exists (a test
checkpoints the process there; the restored run must print the same losses as an uninterrupted one).
--pause-every K (with --ready-file F --go-file G): the same after every K-th step, with F.N and G.N
(a test takes a checkpoint at each: incremental ones after the first).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, channels=32, dim=128, heads=4, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.proj = nn.Linear(channels, dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # B, C, 16, 16
        tokens = self.proj(x.flatten(2).transpose(1, 2))  # B, 256, dim
        a, _ = self.attn(tokens, tokens, tokens, need_weights=False)
        tokens = self.norm(tokens + a)
        tokens = tokens + self.mlp(tokens)
        return self.head(tokens.mean(dim=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ready-at", type=int, default=-1)
    p.add_argument("--ready-file")
    p.add_argument("--go-file")
    p.add_argument("--pause-every", type=int, default=0)
    p.add_argument("--step-times", action="store_true", help='print "step_ms N MS" after each step')
    p.add_argument("--no-cudnn", action="store_true", help="diagnostics: convolutions without cuDNN")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.no_cudnn:
        torch.backends.cudnn.enabled = False
    dev = torch.device("cuda")

    gen = torch.Generator().manual_seed(args.seed)
    data = torch.randn(16, args.batch, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 10, (16, args.batch), generator=gen)
    data, labels = data.to(dev), labels.to(dev)

    model = Net().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    times = []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        i = step % data.shape[0]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data[i]), labels[i])
        loss.backward()
        opt.step()
        value = loss.item()  # synchronises: the step is done
        times.append(time.perf_counter() - t0)
        print(f"step {step} loss {value.hex()}", flush=True)
        if args.step_times:
            print(f"step_ms {step} {1000 * times[-1]:.3f}", flush=True)
        if args.ready_file and (step == args.ready_at or (args.pause_every and step % args.pause_every == 0)):
            suffix = "" if step == args.ready_at else f".{step}"
            ready, go = args.ready_file + suffix, args.go_file and args.go_file + suffix
            with open(ready + ".tmp", "w") as f:
                f.write(f"ready {step}\n")
            os.rename(ready + ".tmp", ready)
            while go and not os.path.exists(go):
                time.sleep(0.01)
    warm = times[min(20, len(times) - 1):]
    print(f"step_time_ms {1000 * sum(warm) / len(warm):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
