"""@ipuxl.jit quickstart: model functions written with PopXL ops, called like jax.jit.

1. A layer: NumPy in, JAX arrays out; the Ir built for the arguments' shapes is printed.
2. A training step: ipuxl.value_and_grad builds the gradient graph with
   popxl.transforms.autodiff; a few lines of plain Python train a small regression.
3. State: variables the function creates stay on the device between calls.
4. The same layer on the IPU model: its memory and cycle estimate.

Run:  python examples/jit_quickstart.py
"""

import numpy as np

import ipuxl
import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.popart as popart

rng = np.random.default_rng(0)


# 1. A layer.
@ipuxl.jit
def layer(x, w, b):
    return ops.gelu(x @ w + b)


x = rng.standard_normal((8, 4)).astype(np.float32)
w = rng.standard_normal((4, 3)).astype(np.float32)
b = np.zeros(3, np.float32)
y = layer(x, w, b)
print(f"layer(x, w, b): {type(y).__name__} {y.shape}, first row "
      f"{[round(float(v), 3) for v in y[0]]}")
print(layer.lower(x, w, b).ir)
print()


# 2. A training step: fit y = x @ true_w with gradient descent.
def loss(params, x, y):
    error = x @ params["w"] + params["b"] - y
    return ops.mean(error * error)


true_w = np.array([[2.0], [-1.0], [0.5]], np.float32)
xs = rng.standard_normal((256, 3)).astype(np.float32)
ys = xs @ true_w + 0.3
params = {"w": np.zeros((3, 1), np.float32), "b": np.zeros(1, np.float32)}
step = ipuxl.value_and_grad(loss)
for i in range(200):
    value, grads = step(params, xs, ys)
    params = {k: params[k] - 0.1 * np.asarray(grads[k]) for k in params}
    if i % 50 == 0:
        print(f"step {i:3d}: loss {float(value):.5f}")
print(f"learnt w = {np.round(params['w'].ravel(), 3)}, b = {np.round(params['b'], 3)} "
      f"(traced {step.trace_count} time)")
print()


# 3. State: a running mean of everything seen, kept on the device.
@ipuxl.jit
def running_mean(batch):
    total = popxl.variable(np.zeros(3, np.float32), name="total")
    count = popxl.variable(np.float32(0), name="count")
    total = ops.var_updates.accumulate_(total, ops.sum(batch, axis=0))
    count = ops.var_updates.accumulate_(count, popxl.constant(np.float32(batch.shape[0])))
    return total / count


for _ in range(3):
    mean = running_mean(rng.normal(5.0, 1.0, (100, 3)).astype(np.float32))
print(f"running mean after 300 samples: {[round(float(v), 2) for v in mean]}; "
      f"count = {running_mean.variables['count']}")
print()

# 4. The IPU model: does the layer fit on an IPU, and how long does a call take? (A full
# GC200, asked for explicitly; "ipu_model" is the same unless IPUXL_IPU_MODEL_TILES says.)
gc200 = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 1472})
on_ipu = ipuxl.jit(lambda x, w, b: ops.gelu(x @ w + b), device=gc200)
big_x = rng.standard_normal((1024, 1024)).astype(np.float32)
big_w = rng.standard_normal((1024, 1024)).astype(np.float32)
on_ipu(big_x, big_w, np.zeros(1024, np.float32))
report = on_ipu.report(big_x, big_w, np.zeros(1024, np.float32))
print(report.summary().splitlines()[1])
print(f"fits: {report.fits}; peak tile {report.peak_tile.bytes:,} bytes; "
      f"{report.cycles:,} cycles per call (est.)")
