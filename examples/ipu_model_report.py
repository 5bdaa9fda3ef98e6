"""Will it fit on an IPU, and how long will a step take? The IPU model answers.

The MNIST training program of ``mnist_mlp.py`` (an MLP with Adam, 8 steps per run) is
estimated three ways:

1. on a full Mk2 GC200 (1472 tiles, the default of ``Session(ir, "ipu_model")``; here
   asked for explicitly, so ``IPUXL_IPU_MODEL_TILES`` does not change it): it fits;
2. on PopXL's own 4-tile IPU model, as ``popart.DeviceManager().createIpuModelDevice``
   gives: it does not, and the error says where the memory goes;
3. on the 4-tile model again with ``allow_out_of_memory=True``: the Session is built and
   its report kept, but it will not run.

Then the report of the full chip is written as JSON, CSV, an HTML memory plot and a
Perfetto trace (open ``trace.json`` in ui.perfetto.dev).

Run:  python examples/ipu_model_report.py [OUTPUT_DIR]
"""

import sys
import tempfile
from pathlib import Path

import mnist_mlp

import ipuxl as popxl
import ipuxl.popart as popart

program = mnist_mlp.build_training_program(hidden=256, batch_size=64, steps_per_run=8,
                                           optimizer=mnist_mlp.Adam(), seed=0)

# 1. The full chip: a Session on the IPU model estimates before it compiles.
manager = popart.DeviceManager()
gc200 = manager.createIpuModelDevice({"numIPUs": 1, "tilesPerIPU": 1472, "ipuVersion": "ipu2"})
session = popxl.Session(program.ir, gc200)
report = session.report
print(report.summary())
print()
print(f"Fits on a GC200: {report.fits}; peak tile {report.peak_tile.tile} with "
      f"{report.peak_tile.bytes:,} bytes; {report.cycles:,} cycles per run (est.)")

# 2. PopXL's 4-tile model: the same program does not fit.
small = manager.createIpuModelDevice({"numIPUs": 1})
try:
    popxl.Session(program.ir, small)
except popart.OutOfMemoryException as error:
    print()
    print("On the 4-tile model:")
    print("\n".join(str(error).splitlines()[:1] + str(error).splitlines()[3:12]))

# 3. Keep the report of a program that does not fit, without running it.
kept = popxl.Session(program.ir, small, allow_out_of_memory=True)
print()
print(f"4-tile model with allow_out_of_memory=True: {len(kept.report.tiles_over)} of 4 tiles "
      f"over budget, worst {kept.report.peak_tile.bytes:,} bytes")

# The reports of the full chip, in every format.
out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="ipuxl_"))
out.mkdir(parents=True, exist_ok=True)
report.to_json(out / "report.json")
report.to_csv(out / "memory.csv")
report.plot_memory(out / "memory.html")
report.plot_liveness(out / "liveness.html")
report.to_perfetto(out / "trace.json")
print(f"Reports written to {out}: " + ", ".join(sorted(p.name for p in out.iterdir())))
