"""ONNX inference: ipuxl against onnxruntime (CPU), side by side in one process.

Models:

* ``mlp``: an MLP 784-2048-2048-10 (MatMul + Add + Relu), batch 32, float32;
* ``transformer``: one pre-LayerNorm transformer encoder block, batch 8, sequence 128,
  d_model 256, 4 heads, MLP 1024: LayerNormalization, MatMul/Add projections,
  Reshape/Transpose to heads, scaled Softmax attention, Erf-based GELU, residual Adds;
* the bundled "real" models of ONNX's backend test suite
  (``onnx/backend/test/data/light/light_*.onnx``: resnet50, alexnet, vgg19, densenet121,
  inception v1/v2, shufflenet, squeezenet, zfnet512). A model ipuxl cannot import yet is
  skipped with the importer's reason.

The first two are built with ``onnx.helper`` (random weights, seed 0) and saved to a
temporary folder, so both sides load the same file.

Per model, rows (ratio = ipuxl / onnxruntime; below 1 means ipuxl is faster):

* **first run**: load and import the file, compile, and the first result on the host:
  ``model_to_ir(path)`` + ``popxl.Session(ir, "cpu")`` + ``session.run`` (ipuxl's
  executable cache and JAX's caches emptied first) against
  ``onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])`` +
  ``sess.run`` (its default graph optimisations). The best of a few samples.
* **steady latency**: one ``session.run({stream: x})`` against ``sess.run(None, {name:
  x})`` on the same host array, after a warm-up, in interleaved rounds (A, B, B, A, ...);
  each side's median, and the median of the per-round ratios; each block of calls starts
  after a 20 ms rest, so the other side's spinning worker threads are idle. Targets:
  <= 1.0 on ``mlp`` and ``transformer``.

Before timing, both sides' outputs are compared (the largest difference relative to the
largest magnitude of onnxruntime's output); a model whose outputs disagree is reported.

``--profile`` adds, per model, where ipuxl's steady time goes: the compiled XLA
executable called directly (no Session: the program's own time), ipuxl with the
float initializers imported as constants instead of variables, and ipuxl with every
variable stored as the model stores it (``IPUXL_STORAGE_LAYOUTS=0``: no ``[N, K]`` dense
weights or HWIO kernels, see ``ipuxl/storage_layout.py``), and ipuxl compiled with XLA's
default options (``IPUXL_XLA_OPTIONS=0``: YNNPACK's convolutions kept, see
``ipuxl/xla_options.py``).

``--device gpu`` runs both on the GPU instead: ipuxl's Session on JAX's first GPU (a
``jax.Device`` as the Session's device), onnxruntime with its ``CUDAExecutionProvider``
(``onnxruntime-gpu``; the script says so and exits 0 when either is missing). Every call
still takes its input from and returns its outputs to the host, on both sides.

Both runtimes use their default thread pools (XLA: Eigen over every core; onnxruntime:
one intra-op thread per physical core). ``onnxruntime`` is a benchmark-only dependency
(``pip install 'ipuxl[bench]'``); without it the script says so and exits 0.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/onnx_inference.py [--quick] [--profile]
        [--models mlp,transformer,resnet50,...] [--device cpu|gpu]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from _measure import format_seconds, interleaved_samples, paired_ratio

TARGETS = {"mlp": 1.0, "mlp_gemm": 1.0, "transformer": 1.0}
# Seconds of rest before each timed block: both runtimes' worker threads spin-wait after
# a call and would take the cores from the side timed next.
SETTLE = 0.02


# ------------------------------------------------------------------------------ models
def build_mlp(batch: int = 32, sizes: tuple[int, ...] = (784, 2048, 2048, 10)) -> Any:
    """An MLP as an exporter writes it: ``relu(x @ W + b)`` per layer, none after the
    last."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    value = "x"
    layers = len(sizes) - 1
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        b = (0.01 * rng.standard_normal(fan_out)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("MatMul", [value, f"w{i}"], [f"mm{i}"], name=f"mm{i}"))
        out = f"h{i}" if i < layers - 1 else "y"
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"],
                                      [f"pre{i}" if i < layers - 1 else out], name=f"add{i}"))
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [f"pre{i}"], [out], name=f"relu{i}"))
        value = out
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build_mlp_gemm(batch: int = 32, sizes: tuple[int, ...] = (784, 2048, 2048, 10)) -> Any:
    """The same MLP as PyTorch exports ``nn.Linear``: ``Gemm(x, W, b, transB=1)`` with
    ``W`` stored ``[out, in]``, then Relu."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    value = "x"
    layers = len(sizes) - 1
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        b = (0.01 * rng.standard_normal(fan_out)).astype(np.float32)
        inits += [numpy_helper.from_array(np.ascontiguousarray(w.T), f"w{i}"),
                  numpy_helper.from_array(b, f"b{i}")]
        out = f"h{i}" if i < layers - 1 else "y"
        gemm = f"pre{i}" if i < layers - 1 else out
        nodes.append(helper.make_node("Gemm", [value, f"w{i}", f"b{i}"], [gemm],
                                      name=f"gemm{i}", transB=1))
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [gemm], [out], name=f"relu{i}"))
        value = out
    graph = helper.make_graph(
        nodes, "mlp_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build_transformer(batch: int = 8, seq: int = 128, d_model: int = 256, heads: int = 4,
                      hidden: int = 1024) -> Any:
    """A pre-LayerNorm encoder block, as PyTorch's exporter writes one at opset 17:
    ``x + attn(ln1(x))`` then ``+ mlp(ln2(.))`` with an Erf-based GELU."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    head = d_model // heads
    nodes: list[Any] = []
    inits: list[Any] = []

    def weight(name: str, shape: tuple[int, ...], scale: float) -> str:
        inits.append(numpy_helper.from_array(
            (scale * rng.standard_normal(shape)).astype(np.float32), name))
        return name

    def const(name: str, values: Any, dtype: Any = np.int64) -> str:
        inits.append(numpy_helper.from_array(np.asarray(values, dtype), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def layer_norm(x: str, name: str) -> str:
        gamma = const(f"{name}.gamma", np.ones(d_model), np.float32)
        beta = const(f"{name}.beta", np.zeros(d_model), np.float32)
        return node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)

    def linear(x: str, name: str, fan_in: int, fan_out: int) -> str:
        w = weight(f"{name}.weight", (fan_in, fan_out), 1 / np.sqrt(fan_in))
        b = weight(f"{name}.bias", (fan_out,), 0.01)
        return node("Add", [node("MatMul", [x, w], f"{name}.mm"), b], name)

    split = const("heads_shape", [batch, seq, heads, head])
    merge = const("model_shape", [batch, seq, d_model])
    h = layer_norm("x", "ln1")
    q, k, v = (linear(h, n, d_model, d_model) for n in ("q", "k", "v"))
    q = node("Transpose", [node("Reshape", [q, split], "q.split")], "q.heads", perm=[0, 2, 1, 3])
    k = node("Transpose", [node("Reshape", [k, split], "k.split")], "k.heads", perm=[0, 2, 3, 1])
    v = node("Transpose", [node("Reshape", [v, split], "v.split")], "v.heads", perm=[0, 2, 1, 3])
    scale = const("scale", 1 / np.sqrt(head), np.float32)
    scores = node("Mul", [node("MatMul", [q, k], "scores.raw"), scale], "scores")
    probs = node("Softmax", [scores], "probs", axis=-1)
    context = node("Transpose", [node("MatMul", [probs, v], "context.heads")],
                   "context.t", perm=[0, 2, 1, 3])
    context = node("Reshape", [context, merge], "context")
    x1 = node("Add", ["x", linear(context, "proj", d_model, d_model)], "x1")
    h = linear(layer_norm(x1, "ln2"), "fc1", d_model, hidden)
    # GELU(h) = 0.5 h (1 + erf(h / sqrt(2))), as torch.onnx exports nn.GELU().
    sqrt2 = const("sqrt2", np.sqrt(2.0), np.float32)
    one = const("one", 1.0, np.float32)
    half = const("half", 0.5, np.float32)
    erf = node("Erf", [node("Div", [h, sqrt2], "gelu.div")], "gelu.erf")
    gelu = node("Mul", [node("Mul", [h, node("Add", [erf, one], "gelu.add")], "gelu.mul")
                        , half], "gelu")
    node("Add", [x1, linear(gelu, "fc2", hidden, d_model)], "y")
    shape = [batch, seq, d_model]
    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def light_models() -> dict[str, str]:
    """``{name: path}`` of the "real" models bundled with the installed onnx."""
    import onnx

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    paths = sorted(glob.glob(os.path.join(folder, "light_*.onnx")))
    return {os.path.basename(p)[len("light_"):-len(".onnx")]: p for p in paths}


def input_arrays(path: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs (standard normal floats) for the graph inputs that are not
    initializers; symbolic dimensions are 1."""
    import onnx
    from onnx import helper

    model = onnx.load(path, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    arrays = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        tensor = info.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        arrays[info.name] = rng.standard_normal(shape).astype(dtype)
    return arrays


# ------------------------------------------------------------------------------- sides
def clear_compilation_caches() -> None:
    """Forget every compiled program, so the next ipuxl Session really compiles."""
    import jax

    jax.clear_caches()
    if "ipuxl.executable_cache" in sys.modules:
        sys.modules["ipuxl.executable_cache"].EXECUTABLES.clear()


@dataclass
class IpuxlSide:
    """A model imported into ipuxl and compiled in a ``cpu`` Session."""

    path: str
    constants: bool = False
    stored_layouts: bool = True  # False: IPUXL_STORAGE_LAYOUTS=0 for this Session
    xla_options: bool = True  # False: IPUXL_XLA_OPTIONS=0 (XLA's default options)
    device: Any = "cpu"  # or a jax.Device (--device gpu)
    session: Any = None
    program: Any = None
    feed: dict[Any, np.ndarray] = field(default_factory=dict)

    def open(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Import, compile and run once; the outputs by ONNX name."""
        import ipuxl
        from ipuxl.onnx import model_to_ir
        from ipuxl.onnx.model_ir import initializer_arrays, is_weight

        known = None
        if self.constants:
            import onnx

            arrays = initializer_arrays(onnx.load(self.path).graph)
            known = {n: a for n, a in arrays.items() if is_weight(a)}
        self.program = model_to_ir(self.path, known_inputs=known,
                                   input_shapes={n: a.shape for n, a in inputs.items()})
        switches = {"IPUXL_STORAGE_LAYOUTS": self.stored_layouts,
                    "IPUXL_XLA_OPTIONS": self.xla_options}
        previous = {name: os.environ.get(name) for name in switches}
        os.environ.update({name: "1" if on else "0" for name, on in switches.items()})
        try:
            self.session = ipuxl.Session(self.program.ir, self.device,
                                         weights_to_host_on_exit=False)
        finally:
            for name, value in previous.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value
        self.session.__enter__()
        self.feed = {self.program.inputs[n]: a for n, a in inputs.items()}
        results = self.session.run(self.feed)
        return {n: results[s] for n, s in self.program.outputs.items()}

    def run(self) -> Any:
        return self.session.run(self.feed)

    def raw_call(self) -> Callable[[], Any]:
        """The compiled executable called directly with the Session's device state: the
        program's own time, without the Session's checks, copies and bookkeeping."""
        session = self.session
        call, state, constants = session._call, session._device_state, session._device_constants
        arrays = [self.feed[layout.stream] for layout in session._input_layouts]

        def run() -> Any:
            results = call(*state, *constants, *arrays)
            results[0].block_until_ready()
            return results

        return run

    def close(self) -> None:
        if self.session is not None:
            self.session.__exit__(None, None, None)
            self.session = None


@dataclass
class OrtSide:
    """The model in an onnxruntime InferenceSession (CPU provider unless told)."""

    path: str
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    session: Any = None
    feed: dict[str, np.ndarray] = field(default_factory=dict)

    def open(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: not the light models' unused inputs
        self.session = onnxruntime.InferenceSession(self.path, options,
                                                    providers=list(self.providers))
        self.feed = dict(inputs)
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(None, self.feed)))

    def run(self) -> Any:
        return self.session.run(None, self.feed)

    def close(self) -> None:
        self.session = None


# ------------------------------------------------------------------------ measurements
@dataclass(frozen=True)
class Placement:
    """Where each side runs: ipuxl's Session device and onnxruntime's providers."""

    device: Any = "cpu"
    providers: tuple[str, ...] = ("CPUExecutionProvider",)

    def ipuxl(self, path: str, **options: Any) -> IpuxlSide:
        return IpuxlSide(path, device=self.device, **options)

    def ort(self, path: str) -> OrtSide:
        return OrtSide(path, providers=self.providers)


@dataclass
class Result:
    """One model's row of the table."""

    name: str
    skipped: str | None = None
    first: dict[str, float] = field(default_factory=dict)
    steady: dict[str, float] = field(default_factory=dict)
    ratio: float = float("nan")
    first_ratio: float = float("nan")
    error: float = float("nan")
    profile: dict[str, float] = field(default_factory=dict)


def import_problem(path: str, inputs: dict[str, np.ndarray]) -> str | None:
    """Why ipuxl cannot import ``path`` (None when it can): the importer's message."""
    from ipuxl.onnx import OnnxImportError, model_to_ir

    try:
        model_to_ir(path, input_shapes={n: a.shape for n, a in inputs.items()})
    except OnnxImportError as error:
        return str(error)
    except Exception as error:  # an importer bug: report it as the reason, and go on
        return f"{type(error).__name__}: {error}"
    return None


def relative_error(mine: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> float:
    """The largest |difference| over the largest |value| of onnxruntime's outputs."""
    worst = 0.0
    for name, ref in theirs.items():
        ref = np.asarray(ref, np.float64)
        got = np.asarray(mine[name], np.float64).reshape(ref.shape)
        scale = max(float(np.max(np.abs(ref))), 1e-30) if ref.size else 1.0
        worst = max(worst, float(np.max(np.abs(got - ref))) / scale if ref.size else 0.0)
    return worst


def first_runs(path: str, inputs: dict[str, np.ndarray], samples: int,
               placement: Placement) -> dict[str, float]:
    """The best of ``samples`` first runs (load + import/compile + first result) per side,
    the sides alternating."""
    times: dict[str, list[float]] = {"ipuxl": [], "onnxruntime": []}
    for i in range(samples):
        order = ["ipuxl", "onnxruntime"] if i % 2 == 0 else ["onnxruntime", "ipuxl"]
        for name in order:
            side = placement.ipuxl(path) if name == "ipuxl" else placement.ort(path)
            clear_compilation_caches()
            start = time.perf_counter()
            side.open(inputs)
            times[name].append(time.perf_counter() - start)
            side.close()
    return {name: min(values) for name, values in times.items()}


def warm_up(run: Callable[[], Any], seconds: float = 0.5, calls: int = 20) -> None:
    """Run ``calls`` times or for ``seconds``, whichever ends first (after at least two
    runs): thread pools started, memory allocated, caches filled."""
    start = time.perf_counter()
    for index in range(calls):
        run()
        if index >= 1 and time.perf_counter() - start > seconds:
            break


def calls_for(run: Callable[[], Any], budget: float = 0.05) -> int:
    """Calls per sample so that a sample takes about ``budget`` seconds."""
    start = time.perf_counter()
    run()
    once = time.perf_counter() - start
    return max(1, min(200, int(budget / max(once, 1e-6))))


def measure(name: str, path: str, rounds: int, first_samples: int, profile: bool,
            placement: Placement) -> Result:
    """First-run and steady rows for one model (skipped with the reason when ipuxl cannot
    import it)."""
    result = Result(name)
    inputs = input_arrays(path)
    problem = import_problem(path, inputs)
    if problem is not None:
        result.skipped = problem
        return result
    result.first = first_runs(path, inputs, first_samples, placement)
    result.first_ratio = result.first["ipuxl"] / result.first["onnxruntime"]
    mine, theirs = placement.ipuxl(path), placement.ort(path)
    try:
        result.error = relative_error(mine.open(inputs), theirs.open(inputs))
        warm_up(mine.run)
        warm_up(theirs.run)
        calls = calls_for(theirs.run)
        samples = interleaved_samples({"ipuxl": mine.run, "onnxruntime": theirs.run},
                                      rounds, calls, settle=SETTLE)
        result.steady = {k: statistics.median(v) for k, v in samples.items()}
        result.ratio = paired_ratio(samples["ipuxl"], samples["onnxruntime"])
        if profile:
            result.profile = profile_ipuxl(path, inputs, mine, theirs, rounds, calls,
                                           placement)
    finally:
        mine.close()
        theirs.close()
    return result


def profile_ipuxl(path: str, inputs: dict[str, np.ndarray], mine: IpuxlSide, theirs: OrtSide,
                  rounds: int, calls: int, placement: Placement) -> dict[str, float]:
    """Where ipuxl's steady time goes: ratios to onnxruntime of the Session run, the bare
    executable, the Session with the weights imported as constants, and the Session with
    every weight stored as the model stores it (no storage layouts)."""
    extra = {"constants": placement.ipuxl(path, constants=True),
             "as stored": placement.ipuxl(path, stored_layouts=False),
             "xla defaults": placement.ipuxl(path, xla_options=False)}
    for side in extra.values():
        side.open(inputs)
    sides = {"session": mine.run, "executable": mine.raw_call(), "onnxruntime": theirs.run,
             **{name: side.run for name, side in extra.items()}}
    for side in sides.values():
        warm_up(side)
    samples = interleaved_samples(sides, rounds, calls, settle=SETTLE)
    for side in extra.values():
        side.close()
    ort = samples["onnxruntime"]
    out = {f"{k} / ort": paired_ratio(v, ort) for k, v in samples.items() if k != "onnxruntime"}
    out.update({f"{k} median": statistics.median(v) for k, v in samples.items()})
    return out


# ------------------------------------------------------------------------------ report
def print_row(result: Result) -> None:
    if result.skipped:
        reason = " ".join(result.skipped.split())
        print(f"{result.name:<14} skipped: {reason[:300]}{'...' if len(reason) > 300 else ''}",
              flush=True)
        return
    target = TARGETS.get(result.name)
    verdict = ""
    if target is not None:
        verdict = f"target <= {target:.1f}: {'PASS' if result.ratio <= target else 'FAIL'}"
    print(f"{result.name:<14} "
          f"{format_seconds(result.first['ipuxl']):>9} {format_seconds(result.first['onnxruntime']):>9}"
          f" {result.first_ratio:6.2f}x   "
          f"{format_seconds(result.steady['ipuxl']):>9} "
          f"{format_seconds(result.steady['onnxruntime']):>9} {result.ratio:6.2f}x   "
          f"{result.error:8.1e}  {verdict}", flush=True)
    if result.profile:
        p = result.profile
        print(f"{'':<14} profile: Session {format_seconds(p['session median'])} "
              f"({p['session / ort']:.2f}x), bare executable "
              f"{format_seconds(p['executable median'])} ({p['executable / ort']:.2f}x), "
              f"weights as constants {format_seconds(p['constants median'])} "
              f"({p['constants / ort']:.2f}x)", end="", flush=True)
        print(f", no storage layouts {format_seconds(p['as stored median'])} "
              f"({p['as stored / ort']:.2f}x), XLA's default options "
              f"{format_seconds(p['xla defaults median'])} ({p['xla defaults / ort']:.2f}x)",
              flush=True)


def gpu_placement(onnxruntime: Any) -> Placement | None:
    """ipuxl on JAX's first GPU against onnxruntime's CUDA provider; None (and why, on
    stdout) when either is missing."""
    import jax

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if hasattr(onnxruntime, "preload_dlls"):  # CUDA and cuDNN from NVIDIA's pip packages
        onnxruntime.preload_dlls()
    available = onnxruntime.get_available_providers()
    if not gpus or "CUDAExecutionProvider" not in available:
        print(f"--device gpu needs a GPU that JAX sees (it sees {jax.devices()}) and "
              f"onnxruntime-gpu (providers: {available}). Nothing measured.")
        return None
    return Placement(gpus[0], ("CUDAExecutionProvider", "CPUExecutionProvider"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a short run)")
    parser.add_argument("--profile", action="store_true",
                        help="also time ipuxl's bare executable and weights-as-constants")
    parser.add_argument("--models", default=None,
                        help="comma-separated names (default: all): mlp, transformer, and "
                             "the light_* model names (resnet50, vgg19, ...)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="gpu: ipuxl on JAX's first GPU against onnxruntime's "
                             "CUDAExecutionProvider")
    options = parser.parse_args()
    try:
        import onnx
        import onnxruntime
    except ImportError as error:
        print(f"onnx_inference.py needs onnx and onnxruntime ({error}); onnxruntime is a "
              "benchmark-only dependency: pip install 'ipuxl[bench]'. Nothing measured.")
        return 0
    import jax

    placement = gpu_placement(onnxruntime) if options.device == "gpu" else Placement()
    if placement is None:
        return 0
    rounds, first_samples = (5, 1) if options.quick else (15, 3)
    where = getattr(placement.device, "device_kind", "cpu")
    print(f"onnxruntime {onnxruntime.__version__} ({placement.providers[0]}), onnx "
          f"{onnx.__version__}, jax {jax.__version__}, {os.cpu_count()} CPUs; ipuxl on "
          f"{where}; {rounds} rounds")
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for name, build in (("mlp", build_mlp), ("mlp_gemm", build_mlp_gemm),
                            ("transformer", build_transformer)):
            paths[name] = os.path.join(folder, f"{name}.onnx")
            model = build()
            model.ir_version = 10  # what onnxruntime 1.17 and newer all load (opset 17)
            onnx.save(model, paths[name])
        paths.update(light_models())
        wanted = options.models.split(",") if options.models else list(paths)
        unknown = [n for n in wanted if n not in paths]
        if unknown:
            parser.error(f"unknown model(s) {unknown}; the models are {list(paths)}")
        print(f"{'model':<14} {'first run (load+compile+run)':^29}   "
              f"{'steady latency (median)':^29}   {'rel.err':>8}")
        print(f"{'':<14} {'ipuxl':>9} {'ort':>9} {'ratio':>7}   {'ipuxl':>9} {'ort':>9} "
              f"{'ratio':>7}")
        results = []
        for name in wanted:
            big = name in ("vgg19", "zfnet512", "bvlc_alexnet", "resnet50", "densenet121")
            result = measure(name, paths[name], max(3, rounds // 3) if big else rounds,
                             first_samples, options.profile, placement)
            print_row(result)
            results.append(result)
    missed = [r.name for r in results if not r.skipped and r.name in TARGETS
              and not r.ratio <= TARGETS[r.name]]
    skipped = [r.name for r in results if r.skipped]
    print(f"\nmeasured {len(results) - len(skipped)} model(s), skipped {len(skipped)}"
          f"{': ' + ', '.join(skipped) if skipped else ''}; steady-latency targets missed: "
          f"{', '.join(missed) if missed else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
