"""A small transformer language model for crcuda's random-instant checkpoint/restart stress (issue 14).

Embedding, 4 encoder layers, a linear head, AdamW; each step draws a batch of token ids with
torch.randint on a CUDA generator, prints "step N loss <float.hex()>" (loss.item()), and sleeps
--sleep seconds. Seeds and deterministic algorithms make two runs print the same lines bit for bit, so
tests/stress/cr-stress.sh can compare a run checkpointed at random instants with an uninterrupted one.
"""
import argparse
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.nn as nn
import torch.nn.functional as F


class LM(nn.Module):
    def __init__(self, vocab, dim, heads, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--sleep", type=float, default=0.25)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()

    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    model = LM(a.vocab, a.dim, 4, 4).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed + 1)
    for step in range(1, a.steps + 1):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=gen)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item().hex()}", flush=True)
        time.sleep(a.sleep)
    with torch.no_grad():
        total = sum(float(t.double().sum()) for t in model.parameters())
    print(f"params_sum {total.hex()}", flush=True)


if __name__ == "__main__":
    main()
