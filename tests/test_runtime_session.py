"""``ipuxl.runtime.Session`` (the seed's Model Runtime "Sessions" chapter): configuration
(launch policies, device waiting, tensor-data predicates), verification, anchors and
callbacks, user handlers and predicates, program groups, queues, stop/unload/reload.

Every run is checked against a NumPy model of the program, and against the outputs and
weights of the ``ipuxl.Session`` the package was saved from, bit for bit."""

from __future__ import annotations

import datetime
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.runtime.session as runtime_session
from ipuxl.runtime import (
    AnchorCallbackPolicy,
    CallbackInfo,
    Device,
    DeviceManager,
    DeviceWaitConfig,
    DeviceWaitStrategy,
    LaunchPolicy,
    Model,
    ModelRunner,
    NoDeviceAvailable,
    PackageVersionMismatch,
    PopefDataUsagePolicy,
    ProgramFlow,
    QueueDisconnected,
    Session,
    SessionConfig,
    predicate_factory,
)
from ipuxl.runtime.model import package_hash
from ipuxl.runtime.package import read_package, write_package

SLOTS = 3  # num_host_transfers
STEPS = 2  # Main runs the reference Session made
W0 = np.arange(4, dtype=np.float32)
W_USER = np.array([-1.5, 0.25, 8.0, 3.0], np.float32)
XS = np.random.default_rng(7).normal(size=(STEPS, SLOTS, 4)).astype(np.float32)
IMMEDIATE = SessionConfig(LaunchPolicy.Immediate)
EMPTY, USER, SKIP = (AnchorCallbackPolicy.BIND_EMPTY_CB, AnchorCallbackPolicy.BIND_USER_CB,
                     AnchorCallbackPolicy.SKIP_CB)
USE_USER, USE_POPEF = (PopefDataUsagePolicy.USE_USER_DATA,
                       PopefDataUsagePolicy.USE_POPEF_DATA_IF_ANY)


def _program():
    """Per host transfer: ``w += x`` in place, then ``y = 2 * w``."""
    ir = popxl.Ir()
    ir.num_host_transfers = SLOTS
    with ir.main_graph:
        w = popxl.variable(W0, name="w")
        x = popxl.h2d_stream((4,), popxl.float32, "x")
        y = popxl.d2h_stream((4,), popxl.float32, "y")
        with popxl.in_sequence():
            for _ in range(SLOTS):
                w2 = ops.var_updates.accumulate_(w, ops.host_load(x))
                ops.host_store(y, w2 * 2)
    return ir, w, x, y


def numpy_steps(w0, steps):
    """The NumPy model: the ``y`` of each step (``[SLOTS, 4]``) and the final ``w``."""
    w, outputs = np.array(w0, np.float32), []
    for step in steps:
        ys = []
        for x in step:
            w = w + x
            ys.append(w * np.float32(2))
        outputs.append(np.stack(ys))
    return outputs, w


def with_versions(source, target, **versions):
    """Copy the package ``source`` to ``target`` as if saved with other ``versions``."""
    package = read_package(source)
    metadata = dict(package.metadata)
    metadata["versions"] = {**metadata["versions"], **versions}
    saved = {key: metadata["versions"][key] for key in ("ipuxl", "jax", "jaxlib")}
    metadata["package_hash"] = package_hash(saved)
    blobs = {name: package.blob(name) for name in package.blob_names()}
    write_package(target, metadata, blobs)
    return target


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The packages of ``_program`` and what ``ipuxl.Session`` computed with them."""
    folder = tmp_path_factory.mktemp("runtime_session")
    ir, w, x, y = _program()
    step, exported, no_weights = (folder / "step.ipuxl", folder / "exported.ipuxl",
                                  folder / "no_weights.ipuxl")
    with popxl.Session(ir, "cpu") as session:
        session.save(step)  # w's data: W0 (nothing ran yet)
        outputs = [session.run({x: XS[i]})[y] for i in range(STEPS)]
        final_w = session.get_tensor_data(w)
    popxl.export(ir, exported)
    popxl.export(ir, no_weights, weights=False)
    other = with_versions(step, folder / "other_jax.ipuxl", jax="0.0.0-other")
    return SimpleNamespace(step=step, exported=exported, no_weights=no_weights, other=other,
                           folder=folder, outputs=outputs, w=final_w)


class Host:
    """User memory behind the anchors: ``x`` from ``inputs`` (one row per transfer),
    ``y`` and ``save/w`` appended to ``outputs`` and ``saved``."""

    def __init__(self, steps=XS, weights=None):
        self.rows = iter(np.asarray(steps).reshape(-1, 4))
        self.weights = weights
        self.outputs, self.saved, self.events = [], [], []

    def x(self, buffer):
        self.events.append(("x", buffer.shape, buffer.dtype, buffer.flags.writeable))
        buffer[...] = next(self.rows)

    def y(self, buffer):
        self.events.append(("y", buffer.shape, buffer.dtype, buffer.flags.writeable))
        self.outputs.append(buffer.copy())

    def w(self, buffer):
        buffer[...] = self.weights

    def save(self, buffer):
        self.saved.append(buffer.copy())

    def connect(self, session, save=True):
        session.setCallbackForAnchor("x", self.x)
        session.setCallbackForAnchor("y", self.y)
        if save:
            session.setCallbackForAnchor("save/w", self.save)
        if self.weights is not None:
            session.setCallbackForAnchor("w", self.w)
        return self

    def steps(self):
        return list(np.stack(self.outputs).reshape(-1, SLOTS, 4))


def names(anchors):
    return [a.name() for a in anchors]


@pytest.fixture
def one_ipu(monkeypatch):
    """A fixed pool of one virtual IPU per JAX device: Model Runtime's exclusive IPUs."""
    monkeypatch.setenv("IPUXL_RUNTIME_IPUS_PER_DEVICE", "1")


def hold_all(model):
    """Acquire every virtual IPU ``model`` can run on (a busy machine; needs a fixed
    pool, such as ``one_ipu``'s)."""
    held = []
    while True:
        try:
            held.append(DeviceManager().getDevice(model))
        except NoDeviceAvailable:
            return held


def release(devices):
    for device in devices:
        device.detach()


def release_later(devices, seconds):
    timer = threading.Timer(seconds, release, (devices,))
    timer.start()
    return timer


# ----------------------------------------------------------------------------- config
def test_session_config_defaults():
    config = SessionConfig()
    assert config.policy is LaunchPolicy.Deferred
    assert config.wait_config.strategy is DeviceWaitStrategy.NO_WAIT
    assert config.check_package_hash is True and config.pred_tensor_data is None


def test_config_must_be_a_session_config(built):
    with pytest.raises(TypeError, match=r"^config must be a SessionConfig; got dict\."):
        Session(built.step, {"policy": LaunchPolicy.Immediate})


def test_immediate_binds_and_owns_its_device(built, one_ipu):
    with Session(built.step, IMMEDIATE) as session:
        device = session.device
        assert isinstance(device, Device) and device.isAttached()
        with pytest.raises(NoDeviceAvailable, match=r"held by another Session or Device\."):
            DeviceManager().getDevice(session.model)
        host = Host().connect(session)
        session.runLoadPrograms()
        for _ in range(STEPS):
            session.runMainPrograms()
        session.runSavePrograms()
    assert not device.isAttached()  # close() gave it back
    release([DeviceManager().getDevice(session.model)])
    expected, w = numpy_steps(W0, XS)
    np.testing.assert_array_equal(host.steps(), expected)
    np.testing.assert_array_equal(host.steps(), built.outputs)  # bit for bit
    np.testing.assert_array_equal(host.saved, [w])
    np.testing.assert_array_equal(host.saved[0], built.w)


def test_deferred_needs_bind_to_device(built, one_ipu):
    session = Session(built.step)
    assert session.device is None
    Host().connect(session)
    for run in (session.runLoadPrograms, session.runMainPrograms, session.runSavePrograms):
        with pytest.raises(RuntimeError, match=r"^Cannot run program \d: the session is not "
                                               r"bound to a device\. Bind it with"):
            run()
    device = DeviceManager().getDevice(session.model)
    try:
        session.bindToDevice(device)
        assert session.device is device
        host = Host().connect(session)
        session.runLoadPrograms()
        session.runMainPrograms()
        session.close()
        # Deferred: the user owns the device; closing the session does not release it.
        assert device.isAttached()
        with pytest.raises(NoDeviceAvailable, match=r"held by another Session"):
            DeviceManager().getDevice(session.model)
    finally:
        device.detach()
    np.testing.assert_array_equal(host.steps(), built.outputs[:1])


def test_bind_to_device_checks_its_argument(built):
    session = Session(built.step)
    with pytest.raises(TypeError, match=r"^bindToDevice takes a Device .*; got str\."):
        session.bindToDevice("cpu")
    device = DeviceManager().getDevice(session.model)
    device.detach()
    with pytest.raises(RuntimeError, match=r"^Device\(.*, detached\) was detached"):
        session.bindToDevice(device)
    assert session.device is None


def test_session_takes_a_model_a_path_or_a_list_of_one_path(built):
    for source in (Model(built.step), built.step, str(built.step), [built.step]):
        with Session(source, IMMEDIATE) as session:
            host = Host().connect(session)
            session.runPrograms([0, 1])
        np.testing.assert_array_equal(host.steps(), built.outputs[:1])
    with pytest.raises(ValueError, match=r"one path; got 2 paths"):
        Session([built.step, built.exported])
    with pytest.raises(TypeError, match=r"^A Session takes a Model, .*; got int\."):
        Session(3)


def test_immediate_constructor_that_fails_gives_the_device_back(built, one_ipu, monkeypatch):
    def no_engine(*args, **kwargs):
        raise RuntimeError("compile failed")

    monkeypatch.setattr(runtime_session, "Engine", no_engine)
    with pytest.raises(RuntimeError, match=r"^compile failed$") as caught:
        Session(built.step, IMMEDIATE)
    # Free at once (NO_WAIT), while the error and its traceback (which hold the
    # half-made Session) are still alive, as in a program that keeps the error.
    release([DeviceManager().getDevice(Model(built.step))])
    assert caught.value.__traceback__ is not None


# ----------------------------------------------------------------------------- waiting
def test_no_wait_raises_at_once_when_the_device_is_busy(built, one_ipu):
    held = hold_all(Model(built.step))
    assert held
    try:
        started = time.monotonic()
        with pytest.raises(NoDeviceAvailable, match=r"is held by another Session or Device\. "
                                                    r"Close the other Session"):
            Session(built.step, SessionConfig(LaunchPolicy.Immediate, wait_config=(
                DeviceWaitConfig(DeviceWaitStrategy.NO_WAIT, timeout=5, sleepTime=5))))
        assert time.monotonic() - started < 1
    finally:
        release(held)


def test_wait_with_timeout_raises_after_the_timeout(built, one_ipu):
    held = hold_all(Model(built.step))
    wait = DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT, timeout=0.3,
                            sleepTime=0.05)
    try:
        started = time.monotonic()
        with pytest.raises(NoDeviceAvailable, match=r"held by another Session or Device for "
                                                    r"0\.[3-9] s\."):
            Session(built.step, SessionConfig(LaunchPolicy.Immediate, wait_config=wait))
        assert 0.3 <= time.monotonic() - started < 2
    finally:
        release(held)


@pytest.mark.parametrize("wait", [
    DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT, timeout=10, sleepTime=0.02),
    DeviceWaitConfig(DeviceWaitStrategy.WAIT_FOREVER, sleepTime=0.02),
], ids=["timeout", "forever"])
def test_waiting_succeeds_when_the_device_is_released(built, one_ipu, wait):
    timer = release_later(hold_all(Model(built.step)), 0.2)
    try:
        started = time.monotonic()
        with Session(built.step, SessionConfig(LaunchPolicy.Immediate,
                                               wait_config=wait)) as session:
            waited = time.monotonic() - started
            host = Host().connect(session)
            session.runPrograms([0, 1])
    finally:
        timer.join()
    assert 0.15 <= waited < 5
    np.testing.assert_array_equal(host.steps(), built.outputs[:1])


def test_invalid_wait_configs_raise():
    with pytest.raises(ValueError, match=r"^DeviceWaitConfig\.timeout must be a number of "
                                         r"seconds of at least 0 .*; got -1\."):
        DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT, timeout=-1)
    with pytest.raises(ValueError, match=r"^DeviceWaitConfig\.sleepTime .*; got -0\.5\."):
        DeviceWaitConfig(sleepTime=-0.5)
    with pytest.raises(ValueError, match=r"^DeviceWaitConfig\.timeout .*; got '5'\."):
        DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT, timeout="5")
    with pytest.raises(TypeError, match=r"^DeviceWaitConfig\.strategy must be a "
                                        r"DeviceWaitStrategy; got 'WAIT_FOREVER'\."):
        DeviceWaitConfig("WAIT_FOREVER")
    config = DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT,
                              datetime.timedelta(seconds=5), datetime.timedelta(seconds=1))
    assert (config.timeout, config.sleepTime) == (5.0, 1.0)


# ----------------------------------------------------------------------------- verification
def test_a_package_from_another_jax_is_refused_unless_unchecked(built):
    with pytest.raises(PackageVersionMismatch, match=r"saved by another version: jax "
                                                     r"0\.0\.0-other \(running .*\)\..*"
                                                     r"check_package_hash=False"):
        Session(built.other, IMMEDIATE)
    assert issubclass(PackageVersionMismatch, RuntimeError)
    release([DeviceManager().getDevice(Model(built.other))])  # nothing was acquired
    config = SessionConfig(LaunchPolicy.Immediate, check_package_hash=False)
    with Session(built.other, config) as session:
        host = Host().connect(session)
        session.runPrograms([0, 1, 1, 2])
    np.testing.assert_array_equal(host.steps(), built.outputs)
    np.testing.assert_array_equal(host.saved, [built.w])


def test_a_rewritten_package_with_the_same_versions_is_accepted(built):
    """The control of the test above: ``with_versions`` alone breaks nothing."""
    same = with_versions(built.step, built.folder / "same.ipuxl")
    with Session(same, IMMEDIATE) as session:
        Host().connect(session)
        session.runPrograms([0, 1])


def test_a_replicated_package_is_refused_and_model_runner_runs_it(tmp_path):
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, name="x")
        y = popxl.d2h_stream((3,), popxl.float32, name="y")
        ops.host_store(y, ops.host_load(x) + 1)
    path = tmp_path / "replicated.ipuxl"
    with popxl.Session(ir, "ipu_model") as session:
        session.save(path)
    with pytest.raises(RuntimeError, match=r"Session does not run replicated models: .* "
                                           r"replication factor 2, and a Session serves one "
                                           r"replica\. Use ipuxl\.runtime\.ModelRunner"):
        Session(path, IMMEDIATE)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with ModelRunner(path) as runner:  # the device was not kept
        np.testing.assert_array_equal(runner.execute({"x": data})["y"], data + 1)


def _remote_program():
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=2)
        popxl.remote_variable(np.array([5, 6], np.float32), buffer, 1, name="rv")
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        ops.remote_store(buffer, 0, ops.remote_load(buffer, 1) + ops.host_load(x))
        ops.host_store(y, ops.remote_load(buffer, 0))
    return ir


def test_remote_buffers_need_tensor_data(tmp_path):
    ir = _remote_program()
    popxl.export(ir, tmp_path / "without.ipuxl", weights=False)
    popxl.export(ir, tmp_path / "with.ipuxl")
    with pytest.raises(RuntimeError, match=r"has remote-buffer anchors without tensor data: "
                                           r"remote_buffer_\d+\. .*weights=True"):
        Session(tmp_path / "without.ipuxl", IMMEDIATE)
    # With its data, the remote buffer is loaded from the package with no user callback.
    with Session(tmp_path / "with.ipuxl", IMMEDIATE) as session:
        assert names(session.getUserInputAnchors()) == ["x"]
        outputs = []
        session.setCallbackForAnchor("x", lambda buffer: buffer.__setitem__(..., [1, -1]))
        session.setCallbackForAnchor("y", lambda buffer: outputs.append(buffer.copy()))
        session.runPrograms([0, 1])
    np.testing.assert_array_equal(outputs, [[6, 5]])


# ----------------------------------------------------------------------------- anchors
def test_anchor_getters(built):
    session = Session(built.step)
    assert names(session.getInputAnchors()) == ["w", "x"]
    assert names(session.getUserInputAnchors()) == ["x"]  # w is served by its data
    assert names(session.getUserOutputAnchors()) == ["save/w", "y"]
    x = session.getInputAnchors()[1]
    assert x.tensorInfo().shape() == (4,) and x.tensorInfo().sizeInBytes() == 16
    user_w = SessionConfig(pred_tensor_data=lambda anchor: USE_USER)
    assert names(Session(built.step, user_w).getUserInputAnchors()) == ["w", "x"]
    assert names(Session(built.no_weights).getUserInputAnchors()) == ["w", "x"]


def test_anchors_not_connected_to_callbacks(built):
    with Session(built.step, IMMEDIATE) as session:
        assert names(session.anchorsNotConnectedToCallbacks()) == ["save/w", "x", "y"]
        with pytest.raises(RuntimeError, match=r"^These anchors have no callback: 'save/w', "
                                               r"'x', 'y'\. Give each one"):
            session.errorIfAnchorsAreNotConnectedToCallbacks()
        session.setCallbackForAnchor("x", print)
        assert names(session.anchorsNotConnectedToCallbacks()) == ["save/w", "y"]
        Host().connect(session)
        assert session.anchorsNotConnectedToCallbacks() == []
        session.errorIfAnchorsAreNotConnectedToCallbacks()


def test_callbacks_run_once_per_transfer_in_slot_order_with_writable_views(built):
    with Session(built.step, IMMEDIATE) as session:
        host = Host().connect(session)
        session.runLoadPrograms()
        session.runMainPrograms()
        step = [name for name, *_ in host.events]
        assert step == ["x"] * SLOTS + ["y"] * SLOTS
        assert {tuple(event[1:]) for event in host.events} == {
            ((4,), np.dtype("float32"), True)}
        session.runMainPrograms()
        session.runSavePrograms()
    assert len(host.events) == 2 * 2 * SLOTS
    np.testing.assert_array_equal(host.steps(), built.outputs)
    np.testing.assert_array_equal(host.steps(), numpy_steps(W0, XS)[0])
    np.testing.assert_array_equal(host.saved, [built.w])


def test_set_callback_for_anchor_checks_its_arguments(built):
    session = Session(built.step)
    with pytest.raises(KeyError, match=r"The package has no anchor 'z'; its anchors are "
                                       r"\['save/w', 'w', 'x', 'y'\]"):
        session.setCallbackForAnchor("z", print)
    with pytest.raises(TypeError, match=r"^The callback for anchor 'x' must be callable; "
                                        r"got ndarray\."):
        session.setCallbackForAnchor("x", np.zeros(4))
    assert names(session.anchorsNotConnectedToCallbacks()) == ["save/w", "x", "y"]


def test_an_input_callback_that_raises_leaves_the_device_state_unchanged(built):
    def broken(buffer):
        raise ValueError("no data")

    with Session(built.step, IMMEDIATE) as session:
        host = Host().connect(session)
        session.runLoadPrograms()
        session.runMainPrograms()
        session.setCallbackForAnchor("x", broken)
        with pytest.raises(RuntimeError, match=r"^The callback of anchor 'x' raised "
                                               r"ValueError\('no data'\); the Main program "
                                               r"did not run \(the device state is "
                                               r"unchanged\)\.$"):
            session.runMainPrograms()
        session.setCallbackForAnchor("w", broken)
        with pytest.raises(RuntimeError, match=r"^The callback of anchor 'w' raised .*the "
                                               r"Load program did not run"):
            session.runLoadPrograms()  # the state after step 1 stays
        session.setCallbackForAnchor("x", host.x)
        session.runMainPrograms()
        session.runSavePrograms()
    np.testing.assert_array_equal(host.steps(), built.outputs)
    np.testing.assert_array_equal(host.saved, [built.w])


def test_an_output_callback_that_raises_says_the_program_ran(built):
    def broken(buffer):
        raise OSError("disk full")

    with Session(built.step, IMMEDIATE) as session:
        host = Host().connect(session)
        session.setCallbackForAnchor("y", broken)
        session.runLoadPrograms()
        with pytest.raises(RuntimeError, match=r"^The callback of anchor 'y' raised OSError"
                                               r"\('disk full'\); the Main program had run "
                                               r"\(the device state is updated\)\.$"):
            session.runMainPrograms()
        session.runSavePrograms()
    np.testing.assert_array_equal(host.saved, [numpy_steps(W0, XS[:1])[1]])


def test_main_before_load_raises(built):
    with Session(built.step, IMMEDIATE) as session:
        Host().connect(session)
        with pytest.raises(RuntimeError, match=r"^Cannot run the Main programs: the state "
                                               r"\(weights\) is not on the device\. Run the "
                                               r"Load programs first"):
            session.runMainPrograms()
        with pytest.raises(RuntimeError, match=r"^The Load programs have not run"):
            session.runSavePrograms()


def test_running_a_program_with_an_unconnected_anchor_names_it(built):
    with Session(built.step, IMMEDIATE) as session:
        session.runLoadPrograms()  # w is served by the package's data
        session.setCallbackForAnchor("x", print)
        with pytest.raises(RuntimeError, match=r"^These anchors of program 1 \(Main \(one "
                                               r"step\)\) have no callback: 'y'\."):
            session.runMainPrograms()
        with pytest.raises(RuntimeError, match=r"^These anchors of program 2 \(Save .*\) "
                                               r"have no callback: 'save/w'\."):
            session.runSavePrograms()


# ----------------------------------------------------------------------------- tensor data
def test_use_user_data_makes_load_anchors_user_anchors(built):
    flow = Model(built.step).metadata.programFlow()
    pred = predicate_factory.predProgramFlowLoad(flow, USE_USER, USE_POPEF)
    config = SessionConfig(LaunchPolicy.Immediate, pred_tensor_data=pred)
    with Session(built.step, config) as session:
        assert names(session.getUserInputAnchors()) == ["w", "x"]
        with pytest.raises(RuntimeError, match=r"^These anchors of program 0 \(Load .*\) have "
                                               r"no callback: 'w'\."):
            session.runLoadPrograms()
        host = Host(weights=W_USER).connect(session)
        session.runPrograms([0, 1, 1, 2])
    expected, w = numpy_steps(W_USER, XS)
    np.testing.assert_array_equal(host.steps(), expected)
    np.testing.assert_array_equal(host.saved, [w])


def test_pred_tensor_data_must_return_a_data_usage_policy(built):
    for policy in ("USE_USER_DATA", USER):
        config = SessionConfig(pred_tensor_data=lambda anchor, policy=policy: policy)
        with pytest.raises(TypeError, match=r"^SessionConfig\.pred_tensor_data must return a "
                                            r"PopefDataUsagePolicy; for anchor 'w' it "
                                            r"returned"):
            Session(built.step, config)


def test_a_package_without_weights_takes_them_from_callbacks(built):
    """pred_tensor_data is asked about anchors with data only: here, none."""
    config = SessionConfig(LaunchPolicy.Immediate, pred_tensor_data=lambda anchor: None)
    with Session(built.no_weights, config) as session:
        with pytest.raises(RuntimeError, match=r"have no callback: 'w'\."):
            session.runLoadPrograms()
        host = Host(weights=W_USER).connect(session)
        session.runPrograms([0, 1, 2])
    expected, w = numpy_steps(W_USER, XS[:1])
    np.testing.assert_array_equal(host.steps(), expected)
    np.testing.assert_array_equal(host.saved, [w])


# ----------------------------------------------------------------------------- handlers
class Factory:
    """A CallbackFactory that records the anchors it was asked for."""

    def __init__(self, host):
        self.host, self.asked = host, []

    def __call__(self, info):
        assert isinstance(info, CallbackInfo)
        self.asked.append(info.anchor.name())
        return {"x": self.host.x, "y": self.host.y, "w": self.host.w,
                "save/w": self.host.save}[info.anchor.name()]


def test_handlers_load_the_executable_if_needed(built):
    """Model Runtime's rule: setUserInputHandler/setUserOutputHandler load the executable
    if needed. Before the first binding they only keep the callbacks."""
    device = DeviceManager().getDevice(Model(built.step))
    try:
        session = Session(built.step)  # Deferred: never bound
        host = Host(steps=np.stack([XS[0]] * 3))  # three Loads, each followed by XS[0]
        session.setUserInputHandler(Factory(host))
        session.setUserOutputHandler(Factory(host))
        assert session.anchorsNotConnectedToCallbacks() == []
        with pytest.raises(RuntimeError, match=r"^Cannot run program 0: the session is not "
                                               r"bound to a device"):
            session.runLoadPrograms()
        session.bindToDevice(device)
        session.runPrograms([0, 1])
        session.stop()
        with pytest.raises(RuntimeError, match=r"^Cannot run program 0: the session was "
                                               r"stopped"):
            session.runLoadPrograms()
        session.setUserOutputHandler(Factory(host), skip_connected=False)  # loads it again
        session.runPrograms([0, 1])
        session.unloadFromDevice()  # runs the Save programs
        session.setUserInputHandler(Factory(host), skip_connected=False)  # loads it again
        session.runPrograms([0, 1, 2])
        session.close()
    finally:
        device.detach()
    want, want_w = numpy_steps(W0, XS[:1])
    for got in host.steps():  # every Load restarts from the package's w
        np.testing.assert_array_equal(got, want[0])
    assert len(host.steps()) == 3
    np.testing.assert_array_equal(host.saved, [want_w] * 2)


def test_default_input_handler_binds_the_user_anchors(built):
    with Session(built.step, IMMEDIATE) as session:
        host = Host()
        inputs = Factory(host)
        session.setUserInputHandler(inputs)
        assert inputs.asked == ["x"]  # w keeps the package's data
        assert names(session.getUserInputAnchors()) == ["x"]
        outputs = Factory(host)
        session.setUserOutputHandler(outputs)
        assert outputs.asked == ["save/w", "y"]
        session.runPrograms([0, 1, 1, 2])
    np.testing.assert_array_equal(host.steps(), built.outputs)
    np.testing.assert_array_equal(host.saved, [built.w])


def test_program_flow_predicates_choose_the_anchors(built):
    with Session(built.step, IMMEDIATE) as session:
        flow = session.model.metadata.programFlow()
        host = Host()
        factory = Factory(host)
        save_empty = predicate_factory.predProgramFlowSave(flow, EMPTY, SKIP)
        session.setUserOutputHandler(factory, save_empty)
        assert factory.asked == []
        assert names(session.anchorsNotConnectedToCallbacks()) == ["x", "y"]
        session.setUserInputHandler(factory, predicate_factory.predProgramFlowMain(
            flow, USER, SKIP))
        session.setUserOutputHandler(factory, predicate_factory.predProgramFlowMain(
            flow, USER, SKIP))
        assert factory.asked == ["x", "y"]
        session.setUserInputHandler(factory, predicate_factory.predProgramFlowLoad(
            flow, SKIP, USER))  # w: SKIP_CB; x: BIND_USER_CB, but x is connected already
        assert factory.asked == ["x", "y"]
        session.runPrograms([0, 1, 2])  # save/w's empty callback takes the data
    np.testing.assert_array_equal(host.steps(), built.outputs[:1])
    assert host.saved == []


def test_pred_program_not_assigned(built):
    with Session(built.step, IMMEDIATE) as session:
        flow = session.model.metadata.programFlow()
        factory = Factory(Host())
        session.setUserOutputHandler(factory, predicate_factory.predProgramNotAssigned(
            flow, USER, SKIP))
        assert factory.asked == []  # every anchor belongs to a program of the flow
        no_save = ProgramFlow({"load": flow.load(), "main": flow.main(), "save": []})
        session.setUserOutputHandler(factory, predicate_factory.predProgramNotAssigned(
            no_save, USER, SKIP))
        assert factory.asked == ["save/w"]
        assert names(session.anchorsNotConnectedToCallbacks()) == ["x", "y"]


def test_skip_connected(built):
    with Session(built.step, IMMEDIATE) as session:
        first, second = Host(), Host()
        first.connect(session)
        factory = Factory(second)
        only_y = predicate_factory.predAnchorNames(["y"], USER, SKIP)
        session.setUserOutputHandler(factory, only_y)  # skip_connected=True
        assert factory.asked == []
        session.runPrograms([0, 1])
        session.setUserOutputHandler(factory, only_y, skip_connected=False)
        assert factory.asked == ["y"]
        session.runMainPrograms()
    np.testing.assert_array_equal(first.steps(), built.outputs[:1])
    np.testing.assert_array_equal(second.outputs, built.outputs[1])


@pytest.mark.parametrize("policy, weights", [(USER, W_USER), (EMPTY, np.zeros(4))],
                         ids=["user", "empty"])
def test_bind_policies_override_the_package_data(built, policy, weights):
    with Session(built.step, IMMEDIATE) as session:
        host = Host(weights=W_USER)
        factory = Factory(host)
        session.setUserInputHandler(factory, predicate_factory.predAnchorNames(
            ["w"], policy, SKIP))
        assert factory.asked == (["w"] if policy is USER else [])
        assert names(session.getUserInputAnchors()) == ["w", "x"]
        session.setUserInputHandler(factory)  # x only: w is connected
        assert factory.asked == (["w", "x"] if policy is USER else ["x"])
        session.setUserOutputHandler(factory)
        session.runPrograms([0, 1, 2])
    expected, w = numpy_steps(weights, XS[:1])
    np.testing.assert_array_equal(host.steps(), expected)
    np.testing.assert_array_equal(host.saved, [w])


def test_a_predicate_of_the_wrong_type_raises_and_binds_nothing(built):
    with Session(built.step, IMMEDIATE) as session:
        factory = Factory(Host())
        wrong = lambda anchor: USER if anchor.name() == "w" else USE_USER  # noqa: E731
        with pytest.raises(TypeError, match=r"^A handler's predicate must return an "
                                            r"AnchorCallbackPolicy; for anchor 'x' it "
                                            r"returned <PopefDataUsagePolicy\.USE_USER_DATA"):
            session.setUserInputHandler(factory, wrong)
        assert names(session.getUserInputAnchors()) == ["x"]  # w kept the package's data
        assert names(session.anchorsNotConnectedToCallbacks()) == ["save/w", "x", "y"]
        with pytest.raises(TypeError, match=r"^The callback factory returned None for anchor "
                                            r"'x'; it must return a callable\."):
            session.setUserInputHandler(lambda info: None)


def test_predicate_factory_policies():
    flow = ProgramFlow({"load": [0], "main": [1], "save": [2]})
    model_w = SimpleNamespace(programs=lambda: [0], name=lambda: "w")
    model_x = SimpleNamespace(programs=lambda: [1], name=lambda: "x")
    load = predicate_factory.predProgramFlowLoad(flow, USE_USER, USE_POPEF)
    assert (load(model_w), load(model_x)) == (USE_USER, USE_POPEF)
    by_name = predicate_factory.predAnchorNames({"x"}, EMPTY, SKIP)
    assert (by_name(model_w), by_name(model_x)) == (SKIP, EMPTY)
    with pytest.raises(TypeError, match=r"^A predicate's accept and reject policies must both "
                                        r"be AnchorCallbackPolicy or both "
                                        r"PopefDataUsagePolicy values"):
        predicate_factory.predProgramFlowMain(flow, USER, USE_POPEF)
    with pytest.raises(TypeError, match=r"got 'accept' and 'reject'"):
        predicate_factory.predAnchorNames(["x"], "accept", "reject")


# ----------------------------------------------------------------------------- programs
def test_run_programs_is_the_groups_in_turn(built):
    results = []
    for run in ([lambda s: s.runPrograms([0, 1, 1, 2])],
                [lambda s: s.runLoadPrograms(), lambda s: s.runMainPrograms(),
                 lambda s: s.runMainPrograms(), lambda s: s.runSavePrograms()],
                [lambda s: s.runPrograms(np.array([0, 1])), lambda s: s.runPrograms((1, 2))]):
        with Session(built.exported, IMMEDIATE) as session:
            host = Host().connect(session)
            for part in run:
                part(session)
        results.append(host)
    expected, w = numpy_steps(W0, XS)
    for host in results:
        np.testing.assert_array_equal(host.steps(), expected)
        np.testing.assert_array_equal(host.steps(), built.outputs)
        np.testing.assert_array_equal(host.saved, [built.w])
        np.testing.assert_array_equal(host.saved, [w])


@pytest.mark.parametrize("numbers, bad", [
    ([3], r"\[3\]"), ([0, -1], r"\[-1\]"), (["1"], r"\['1'\]"), ([True], r"\[True\]"),
    ([1.0], r"\[1\.0\]"),
])
def test_bad_program_numbers_raise_before_anything_runs(built, numbers, bad):
    with Session(built.step, IMMEDIATE) as session:
        host = Host().connect(session)
        with pytest.raises(ValueError, match=rf"^The package has programs \[0, 1, 2\] \(0: "
                                             rf"Load .*\); got {bad}\.$"):
            session.runPrograms(numbers)
        with pytest.raises(RuntimeError, match=r"Run the Load programs first"):
            session.runMainPrograms()  # the Load of [0, -1] did not run
    assert host.events == []


# ----------------------------------------------------------------------------- queues
def test_queues_feed_a_worker_from_several_producers(built):
    steps = 4
    data = np.random.default_rng(3).normal(size=(steps, SLOTS, 4)).astype(np.float32)
    errors, inputs_done, filled = [], [], []
    with Session(built.step, IMMEDIATE) as session:
        queues = session.createQueueManager()
        assert session.createQueueManager() is queues
        assert list(queues.inputs) == ["x"] and list(queues.outputs) == ["y"]
        assert names(session.anchorsNotConnectedToCallbacks()) == ["save/w"]
        session.runLoadPrograms()

        def guarded(function):
            def run():
                try:
                    function()
                except BaseException as error:  # reported by the main thread
                    errors.append(error)
            return threading.Thread(target=run)

        def worker():
            for _ in range(steps):
                session.runMainPrograms()

        def produce_inputs():
            for row in data.reshape(-1, 4):
                inputs_done.append(queues.inputQueue("x").enqueue(row.copy()))
                time.sleep(0.002)

        def produce_outputs():
            for _ in range(steps * SLOTS):
                filled.append(queues.outputQueue("y").enqueue(np.full(4, np.nan,
                                                                      np.float32)))
                time.sleep(0.003)

        threads = [guarded(f) for f in (worker, produce_inputs, produce_outputs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        assert queues.inputQueue("x").empty() and queues.outputQueue("y").size() == 0
    assert all(future.result(timeout=0) is None for future in inputs_done)
    results = np.stack([future.result(timeout=0) for future in filled])
    np.testing.assert_array_equal(results.reshape(steps, SLOTS, 4),
                                  numpy_steps(W0, data)[0])


def test_enqueue_checks_the_arrays(built):
    with Session(built.step, IMMEDIATE) as session:
        queues = session.createQueueManager()
        x, y = queues.inputQueue("x"), queues.outputQueue("y")
        with pytest.raises(ValueError, match=r"^The queue of anchor 'x' takes arrays of one "
                                             r"transfer, float32\[4\]; got float32\[3, 4\]\."):
            x.enqueue(np.zeros((3, 4), np.float32))
        with pytest.raises(ValueError, match=r"float32\[4\]; got float64\[4\]\.$"):
            y.enqueue(np.zeros(4))
        with pytest.raises(TypeError, match=r"^The queue of anchor 'x' takes NumPy arrays; "
                                            r"got list\."):
            x.enqueue([0.0] * 4)
        readonly = np.zeros(4, np.float32)
        readonly.flags.writeable = False
        with pytest.raises(ValueError, match=r"needs writable arrays to fill; this one is "
                                             r"read-only\."):
            y.enqueue(readonly)
        with pytest.raises(KeyError, match=r"No input queue for anchor 'w'; the input queues "
                                           r"are \['x'\]"):
            queues.inputQueue("w")
        assert x.empty() and y.empty()


def test_stop_disconnects_the_queues_until_reload(built):
    outcome = []
    with Session(built.step, IMMEDIATE) as session:
        queues = session.createQueueManager()
        session.runLoadPrograms()

        def worker():
            try:
                session.runMainPrograms()
            except RuntimeError as error:
                outcome.append(error)

        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        queues.inputQueue("x").enqueue(XS[0, 0].copy()).result(timeout=10)
        # The worker now waits for the second transfer of x.
        pending = queues.outputQueue("y").enqueue(np.zeros(4, np.float32))
        session.stop()
        thread.join(timeout=10)
        if thread.is_alive():  # free the worker (it holds the session), then fail
            queues.disconnect()
            thread.join(timeout=10)
            pytest.fail("stop() left the worker waiting on its queue")
        assert len(outcome) == 1 and isinstance(outcome[0].__cause__, QueueDisconnected)
        assert "The session was stopped while the program waited for anchor 'x'" in str(
            outcome[0])
        with pytest.raises(QueueDisconnected, match=r"before this entry was used"):
            pending.result(timeout=0)
        with pytest.raises(QueueDisconnected, match=r"^The queue of anchor 'x' is "
                                                    r"disconnected"):
            queues.inputQueue("x").enqueue(XS[0, 0].copy())
        for run in (session.runLoadPrograms, session.runMainPrograms):
            with pytest.raises(RuntimeError, match=r"the session was stopped, which leaves "
                                                   r"the device in an undefined state\. Call "
                                                   r"reload\(\) first\."):
                run()
        session.reload()
        # The stopped queues no longer serve the stream anchors ...
        assert {"x", "y"} <= {a.name() for a in session.anchorsNotConnectedToCallbacks()}
        with pytest.raises(RuntimeError, match=r"anchors of program 1 .* have no callback: "
                                               r"'x', 'y'"):
            session.runMainPrograms()
        session.setCallbackForAnchor("x", lambda buffer: None)
        session.setCallbackForAnchor("y", lambda buffer: None)
        with pytest.raises(RuntimeError, match=r"Run the Load programs first"):
            session.runMainPrograms()
        session.runLoadPrograms()
        fresh = session.createQueueManager()
        assert fresh is not queues
        for row in XS[0]:
            fresh.inputQueue("x").enqueue(row)
        outputs = [fresh.outputQueue("y").enqueue(np.empty(4, np.float32))
                   for _ in range(SLOTS)]
        session.runMainPrograms()
    np.testing.assert_array_equal([f.result(timeout=0) for f in outputs], built.outputs[0])


# ----------------------------------------------------------------------------- stop, unload
def test_stop_on_an_unbound_session_does_nothing(built):
    session = Session(built.step)
    session.stop()
    with pytest.raises(RuntimeError, match=r"^reload: the session was never bound"):
        session.reload()
    with pytest.raises(RuntimeError, match=r"^Cannot run program 0: the session is not "
                                           r"bound"):  # not "stopped"
        session.runLoadPrograms()


def test_unload_from_device_needs_a_bound_session(built):
    session = Session(built.step)
    with pytest.raises(RuntimeError, match=r"^unloadFromDevice: the session is not bound to a "
                                           r"device"):
        session.unloadFromDevice()
    with Session(built.step, IMMEDIATE) as bound:
        bound.unloadFromDevice()
        assert bound.device is None
        with pytest.raises(RuntimeError, match=r"^unloadFromDevice: the session is not "
                                               r"bound"):
            bound.unloadFromDevice()


def test_unload_runs_the_save_programs_after_main_runs(built):
    with Session(built.step, IMMEDIATE) as session:
        host = Host(np.stack([XS[0], XS[0]])).connect(session)
        session.runLoadPrograms()
        session.unloadFromDevice()  # no Main ran: nothing to save
        assert host.saved == []
        session.reload()
        session.runPrograms([0, 1])
        session.unloadFromDevice()
        np.testing.assert_array_equal(host.saved, [numpy_steps(W0, XS[:1])[1]])
        with pytest.raises(RuntimeError, match=r"^Cannot run program 1: the session is not "
                                               r"bound"):
            session.runMainPrograms()
        session.reload()
        with pytest.raises(RuntimeError, match=r"Run the Load programs first"):
            session.runMainPrograms()
        session.runPrograms([0, 1])  # the package's weights again
    assert len(host.saved) == 1  # close() does not save
    np.testing.assert_array_equal(host.steps(), [built.outputs[0], built.outputs[0]])


def test_unload_without_save_callbacks_skips_the_save(built):
    with Session(built.step, IMMEDIATE) as session:
        host = Host(np.stack([XS[0], XS[0]])).connect(session, save=False)
        session.runPrograms([0, 1])
        session.unloadFromDevice()
        assert session.device is None
        session.setCallbackForAnchor("save/w", host.save)
        session.reload()
        session.runPrograms([0, 1, 2])
    np.testing.assert_array_equal(host.saved, [numpy_steps(W0, XS[:1])[1]])


def test_bind_to_the_same_device_again(built):
    session = Session(built.step)
    device = DeviceManager().getDevice(session.model)
    try:
        session.bindToDevice(device)
        host = Host(np.stack([XS[0], XS[0]])).connect(session)
        session.runPrograms([0, 1])
        session.bindToDevice(device)  # runs the Save programs first
        np.testing.assert_array_equal(host.saved, [numpy_steps(W0, XS[:1])[1]])
        assert session.device is device
        with pytest.raises(RuntimeError, match=r"Run the Load programs first"):
            session.runMainPrograms()
        session.runPrograms([0, 1])
        session.close()
    finally:
        device.detach()
    np.testing.assert_array_equal(host.steps(), [built.outputs[0], built.outputs[0]])
