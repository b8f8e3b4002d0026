"""JAX as a user runs it (issue 13): a jit-compiled MLP trained for a few steps with a fixed key and
batch (XLA: cuBLAS, fusions, and on Hopper kernels that may use TMA). Prints every loss as a float's
hex, so two runs can be compared exactly. Exits 77 when JAX or a GPU is missing.

XLA's autotuner picks each GEMM's kernel by timing the candidates, so which kernel (and so which
rounding) a run gets depends on the machine's load: measured on the H100, a run under the layer chose
others than the native runs and its losses differed in the last bits. Autotuning is off here, so that
the result is the program's, not the timer's."""
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()

try:
    import jax
    import jax.numpy as jnp
    if not any(d.platform == "gpu" for d in jax.devices()):
        raise RuntimeError("no GPU device")
except Exception as e:
    print(f"jax_mlp: skipped: {e}", file=sys.stderr)
    sys.exit(77)

key = jax.random.PRNGKey(0)
k1, k2, k3, k4 = jax.random.split(key, 4)
params = {"w1": jax.random.normal(k1, (256, 512)) * 0.05, "b1": jnp.zeros(512),
          "w2": jax.random.normal(k2, (512, 10)) * 0.05, "b2": jnp.zeros(10)}
x = jax.random.normal(k3, (128, 256))
y = jax.nn.one_hot(jax.random.randint(k4, (128,), 0, 10), 10)


def loss_fn(p, x, y):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


@jax.jit
def step(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), loss


for i in range(30):
    params, loss = step(params, x, y)
    print(f"step {i} loss {float(loss).hex()}", flush=True)
print("jax_mlp: done")
