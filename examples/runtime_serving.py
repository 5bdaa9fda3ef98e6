"""Save a trained program as a package and serve it with ``ipuxl.runtime`` (docs/runtime.md).

1. Build a small linear model with ipuxl and train it for a few runs: each Main run takes
   two batches (``num_host_transfers = 2``) and updates the weight ``w`` after each one.
2. Save it twice: with its trained weight, and without (``weights=False``).
3. Run the original Session on three more runs of data: the reference results.
4. Serve the package three ways, each starting from the saved weight, and check that the
   results match the reference bit for bit:

   * ``ModelRunner``: ``execute``, ``executeAsync`` and ``save``;
   * the low-level ``Session``: a ``CallbackFactory`` bound with predicates;
   * the low-level ``Session`` on the package without weights: the weight from a
     callback, the batches from a ``QueueManager`` fed by a producer thread.

Run:  python examples/runtime_serving.py
"""

import atexit
import os
import shutil
import tempfile
import threading

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.runtime import (
    AnchorCallbackPolicy,
    DeviceManager,
    DeviceWaitConfig,
    DeviceWaitStrategy,
    LaunchPolicy,
    Model,
    ModelRunner,
    QueueDisconnected,
    Session,
    SessionConfig,
    predicate_factory,
)

BATCH, FEATURES, TRANSFERS, LEARNING_RATE = 4, 3, 2, 0.05

# ---------------------------------------------------------------- 1. build and train
ir = popxl.Ir()
ir.num_host_transfers = TRANSFERS
with ir.main_graph, popxl.in_sequence():
    x_stream = popxl.h2d_stream((BATCH, FEATURES), popxl.float32, name="x")
    target_stream = popxl.h2d_stream((BATCH,), popxl.float32, name="target")
    w = popxl.variable(np.zeros(FEATURES, np.float32), name="w")
    prediction_stream = popxl.d2h_stream((BATCH,), popxl.float32, name="prediction")
    loss_stream = popxl.d2h_stream((), popxl.float32, name="loss")
    for _ in range(TRANSFERS):  # one SGD step per host transfer
        x = ops.host_load(x_stream)
        target = ops.host_load(target_stream)
        prediction = x @ w
        error = prediction - target
        ops.host_store(prediction_stream, prediction)
        ops.host_store(loss_stream, ops.mean(error * error))
        gradient = (ops.transpose(x) @ error) * (2.0 / BATCH)
        ops.var_updates.accumulate_(w, gradient, f=-LEARNING_RATE)

rng = np.random.default_rng(0)
true_w = np.float32([2.0, -1.0, 0.5])


def batches() -> dict[str, np.ndarray]:
    """One Main run of data, in the host layout [num_host_transfers, *stream shape]."""
    x = rng.normal(size=(TRANSFERS, BATCH, FEATURES)).astype(np.float32)
    return {"x": x, "target": x @ true_w}


folder = tempfile.mkdtemp()
atexit.register(shutil.rmtree, folder, ignore_errors=True)
path = os.path.join(folder, "linear.ipuxl")
path_no_weights = os.path.join(folder, "linear_no_weights.ipuxl")

session = popxl.Session(ir, "cpu")
streams = {"x": x_stream, "target": target_stream}
new_data = [batches() for _ in range(3)]
with session:
    for _ in range(20):
        outputs = session.run({streams[k]: v for k, v in batches().items()})
    print(f"after training: loss {outputs[loss_stream][-1]:.4f}, "
          f"w = {np.round(session.get_tensor_data(w), 3)}")

    # ------------------------------------------------------------------ 2. save
    session.save(path)  # the trained w (read from the device) is the package's data
    session.save(path_no_weights, weights=False)
    saved_w = session.get_tensor_data(w).copy()

    # ---------------------------------------------------- 3. the reference results
    reference = []
    for data in new_data:
        outputs = session.run({streams[k]: v for k, v in data.items()})
        reference.append({"prediction": outputs[prediction_stream],
                          "loss": outputs[loss_stream]})
    reference_w = session.get_tensor_data(w).copy()

print(f"saved {os.path.basename(path)}: {os.path.getsize(path):,} bytes")
model = Model(path)
print("anchors:", ", ".join(a.name() for a in model.metadata.anchors()))


def check(results: list[dict[str, np.ndarray]], final_w: np.ndarray, how: str) -> None:
    for got, expected in zip(results, reference, strict=True):
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name])
    np.testing.assert_array_equal(final_w, reference_w)
    print(f"{how}: same results as the original Session")


# ------------------------------------------------------------------ 4a. ModelRunner
with ModelRunner(path) as runner:
    transfers = runner.model.metadata.numHostTransfers()
    print("ModelRunner inputs:", [(a.name(), (transfers, *a.tensorInfo().shape()))
                                  for a in runner.getExecuteInputs()])
    results = [runner.execute(new_data[0])]
    futures = [runner.executeAsync(data) for data in new_data[1:]]  # run in order
    results += [future.result() for future in futures]
    check(results, runner.save()["w"], "ModelRunner")
print(f"last losses: {[float(r['loss'][-1]) for r in results]}")

# --------------------------------------- 4b. Session with a CallbackFactory and predicates
session_b = Session(path)  # LaunchPolicy.Deferred: we acquire and bind the device
device = DeviceManager().getDevice(session_b.model)
session_b.bindToDevice(device)
flow = session_b.model.metadata.programFlow()
print("user input anchors:", [a.name() for a in session_b.getUserInputAnchors()])

current: dict[str, np.ndarray] = {}  # the run's inputs, by anchor name
received: dict[str, list[np.ndarray]] = {}  # every transfer out, by anchor name


def factory(info):
    """A CallbackFactory: one callback per anchor, called once per transfer."""
    name = info.anchor.name()
    if info.anchor.isInput():
        slot = 0

        def fill(buffer: np.ndarray) -> None:  # a writable view of one transfer's buffer
            nonlocal slot
            buffer[...] = current[name][slot]
            slot = (slot + 1) % TRANSFERS

        return fill

    def take(buffer: np.ndarray) -> None:  # copy: the buffer belongs to the runtime
        received.setdefault(name, []).append(buffer.copy())

    return take


session_b.setUserInputHandler(factory, predicate_factory.predProgramFlowMain(
    flow, AnchorCallbackPolicy.BIND_USER_CB, AnchorCallbackPolicy.SKIP_CB))
session_b.setUserOutputHandler(factory, predicate_factory.predProgramFlowMain(
    flow, AnchorCallbackPolicy.BIND_USER_CB, AnchorCallbackPolicy.SKIP_CB))
session_b.setUserOutputHandler(factory, predicate_factory.predProgramFlowSave(
    flow, AnchorCallbackPolicy.BIND_USER_CB, AnchorCallbackPolicy.SKIP_CB))
session_b.errorIfAnchorsAreNotConnectedToCallbacks()

session_b.runLoadPrograms()  # w from the package's tensor data
for data in new_data:
    current.update(data)
    session_b.runMainPrograms()
session_b.runSavePrograms()  # w comes back through the anchor save/w
results = [{name: np.stack(received[name][run * TRANSFERS:(run + 1) * TRANSFERS])
            for name in ("prediction", "loss")} for run in range(len(new_data))]
check(results, received["save/w"][-1], "Session + CallbackFactory")
session_b.close()
device.detach()  # Deferred: the device we acquired is ours to give back

# -------------------- 4c. Session on the package without weights, fed by a QueueManager
config = SessionConfig(
    policy=LaunchPolicy.Immediate,  # acquire the device and load here
    wait_config=DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT, timeout=5,
                                 sleepTime=0.1),
)
session_c = Session(path_no_weights, config)
print("user input anchors without weights:",
      [a.name() for a in session_c.getUserInputAnchors()])


def load_w(buffer: np.ndarray) -> None:
    buffer[...] = saved_w


session_c.setCallbackForAnchor("w", load_w)
queues = session_c.createQueueManager()  # a queue per Main anchor: x, target, prediction, loss
saved = {}
session_c.setCallbackForAnchor("save/w", lambda buffer: saved.update(w=buffer.copy()))


def producer() -> None:
    """Feed the input queues, one transfer per entry, while the worker runs."""
    for data in new_data:
        for slot in range(TRANSFERS):
            queues.inputQueue("x").enqueue(data["x"][slot])
            queues.inputQueue("target").enqueue(data["target"][slot])


# The memory the outputs land in: [run, transfer, *shape]; each entry is a view of one
# transfer (`losses[run, slot, ...]` is a writable 0-d view, `losses[run, slot]` a copy).
predictions = np.zeros((len(new_data), TRANSFERS, BATCH), np.float32)
losses = np.zeros((len(new_data), TRANSFERS), np.float32)
output_futures = [queues.outputQueue("prediction").enqueue(predictions[run, slot])
                  for run in range(len(new_data)) for slot in range(TRANSFERS)]
output_futures += [queues.outputQueue("loss").enqueue(losses[run, slot, ...])
                   for run in range(len(new_data)) for slot in range(TRANSFERS)]

thread = threading.Thread(target=producer)
thread.start()
session_c.runLoadPrograms()  # w from load_w
for _ in new_data:
    session_c.runMainPrograms()  # each transfer waits for its queue's next entry
thread.join()
for future in output_futures:
    future.result()  # the array, filled
session_c.runSavePrograms()
check([{"prediction": predictions[run], "loss": losses[run]} for run in range(len(new_data))],
      saved["w"], "Session + QueueManager")

# stop() disconnects the queues: an entry not taken fails, a waiting program raises.
extra = queues.inputQueue("x").enqueue(new_data[0]["x"][0])
session_c.stop()
try:
    extra.result()
except QueueDisconnected as error:
    print(f"after stop(): {type(error).__name__}")
session_c.close()  # Immediate: the session gives its device back
