"""PyTorch training with CUDA graphs, for crcuda's GPU tests (issue 11).

--mode capture: the whole training step (forward, backward, Adam step with capturable=True) captured
once with torch.cuda.graph on static tensors and replayed each step (PyTorch's "whole network
capture" recipe). --mode compile: torch.compile(mode="reduce-overhead"), which captures CUDA graphs
itself. Fixed seeds and data drawn on the GPU from a seeded generator, so two runs print the same
losses bit for bit: one line per step, "step N loss <float.hex()>".
"""
import argparse
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.nn as nn


def model_and_data(batch, dim, steps):
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, 4 * dim), nn.GELU(),
                          nn.Linear(4 * dim, 10)).cuda()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(42)
    xs = torch.randn(steps, batch, dim, device="cuda", generator=gen)
    ys = torch.randint(0, 10, (steps, batch), device="cuda", generator=gen)
    return model, xs, ys


def run_capture(args):
    model, xs, ys = model_and_data(args.batch, args.dim, args.steps)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
    loss_fn = nn.CrossEntropyLoss()
    static_x = torch.zeros_like(xs[0])
    static_y = torch.zeros_like(ys[0])

    # Warm-up on a side stream, as the recipe asks (allocator pools, cuBLAS workspaces).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(static_x), static_y).backward()
    torch.cuda.current_stream().wait_stream(side)
    # The warm-up steps did not step the optimiser: the weights are the seeded ones.
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = loss_fn(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    t0 = None
    for step in range(args.steps):
        if step == args.steps // 5:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        static_x.copy_(xs[step])
        static_y.copy_(ys[step])
        graph.replay()
        print("step %d loss %s" % (step, static_loss.item().hex()), flush=True)
        if args.sleep:
            time.sleep(args.sleep)
    if t0 is not None and not args.sleep:
        n = args.steps - args.steps // 5
        print("step_time_ms %.4f" % ((time.perf_counter() - t0) * 1000 / n), flush=True)


def run_compile(args):
    model, xs, ys = model_and_data(args.batch, args.dim, args.steps)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()

    @torch.compile(mode="reduce-overhead")
    def forward_loss(x, y):
        return loss_fn(model(x), y)

    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = forward_loss(xs[step], ys[step])
        loss.backward()
        opt.step()
        print("step %d loss %s" % (step, loss.item().hex()), flush=True)
        if args.sleep:
            time.sleep(args.sleep)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("capture", "compile"), default="capture")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--sleep", type=float, default=0, help="seconds between steps (checkpoint tests)")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    (run_capture if args.mode == "capture" else run_compile)(args)


if __name__ == "__main__":
    main()
