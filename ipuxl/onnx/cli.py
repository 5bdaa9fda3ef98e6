"""``python -m ipuxl onnx MODEL.onnx``: will this ONNX model import, fit and run?

The command imports the model with :func:`ipuxl.onnx.model_to_ir` and then

1. prints the imported Ir (``print(ir)``; long ones are cut after ``--ir-lines`` lines,
   with a note saying how many were left out);
2. prints the IPU model's memory and cycle summary (:func:`ipuxl.sim.estimate` for
   ``--tiles`` tiles per IPU, the full chip by default). A program that does not fit
   gets the out-of-memory report and a line saying so, and still runs;
3. runs the model once in an :class:`ipuxl.Session` (``--device cpu``, or ``ipu_model``:
   the same numerics, through the IPU model's Session) on random inputs of the graph
   inputs' shapes and dtypes (floats from a standard normal distribution, integers in
   ``--int-range``, booleans at random), and prints each output's name, shape, dtype and
   a few statistics;
4. prints the time taken to import, estimate, compile, and run (first and second run).

Compiled programs are kept on disk, so the next run of the same model (same shapes, same
device) loads its executable instead of compiling: in ``POPXL_CACHE_DIR`` when it is set,
else in the user's cache folder (``$XDG_CACHE_HOME/ipuxl`` or ``~/.cache/ipuxl``, at most
``IPUXL_CACHE_MAX_BYTES``, 2 GiB by default; ``IPUXL_CACHE=0`` turns it off). See
:mod:`ipuxl.cache_folder`. The ``cache:`` line of the run says which folder was used.

Symbolic input dimensions take their sizes from ``--shape NAME=D0,D1,...``; any left
without one are set to 1 (with a note). A model with operators or attributes ipuxl cannot
import gets the importer's error, which lists all of them with their node names, on
stderr and exit status 2 (as does any other import error).

Example::

    python -m ipuxl onnx model.onnx --shape input=1,3,224,224 --tiles 1472 --seed 0
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["main", "build_parser", "random_inputs", "input_specs", "describe_array"]

#: Exit status for a model that cannot be imported (unsupported operators and the like).
EXIT_IMPORT_ERROR = 2


DESCRIPTION = ("Import an ONNX model into ipuxl, print its Ir and the IPU model's memory "
               "summary, and run it once on random inputs.")
EPILOG = ("Exit status: 0 when the model ran, 2 when it cannot be imported (unsupported "
          "operators are listed, with their node names).")


def build_parser(prog: str = "python -m ipuxl onnx") -> argparse.ArgumentParser:
    """The command's argument parser."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the command's arguments to ``parser``."""
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument(
        "--shape", action="append", default=[], metavar="NAME=D0,D1,...",
        help="the shape of graph input NAME (for symbolic dimensions; repeatable)")
    parser.add_argument(
        "--device", choices=("cpu", "ipu_model"), default="cpu",
        help="run in a Session on 'cpu' (default) or on the IPU model 'ipu_model' (same "
             "numerics; a program that does not fit still runs)")
    parser.add_argument(
        "--tiles", type=int, default=None, metavar="N",
        help="tiles per IPU for the memory estimate (default: IPUXL_IPU_MODEL_TILES or the "
             "full 1472-tile chip)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument(
        "--int-range", default="0,2", metavar="LO,HI",
        help="integer inputs are drawn from [LO, HI) (default 0,2: valid indices for any "
             "axis of size 2 or more)")
    parser.add_argument(
        "--ir-lines", type=int, default=200, metavar="N",
        help="print at most N lines of the Ir (default 200; 0 prints all of it)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command.

    Args:
        argv: the arguments after ``onnx`` (``sys.argv[1:]`` if None).

    Returns:
        0 when the model ran; 2 when it could not be imported.
    """
    parser = build_parser()
    options = parser.parse_args(argv)
    return run(options, parser)


def run(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the command for parsed ``options`` (``parser`` reports usage errors)."""
    try:
        import onnx  # noqa: F401 - only to fail early with a clear message
    except ImportError:
        parser.exit(1, "ipuxl onnx needs the onnx package: pip install 'ipuxl[onnx]'\n")
    from ipuxl import cache_folder
    from ipuxl.onnx.importer import OnnxImportError, load_model

    try:  # the cache settings are checked before the (long) import
        cache_folder.default_folder()
        cache_folder.max_bytes()
    except ValueError as error:
        parser.exit(1, f"error: {error}\n")
    shapes = _parse_shapes(options.shape, parser)
    low, high = _parse_int_range(options.int_range, parser)
    if options.tiles is not None:
        from ipuxl.sim.target import target_for

        try:
            target_for("ipu2", tiles_per_ipu=options.tiles)
        except ValueError as error:
            parser.error(f"--tiles: {error}")
    timings: dict[str, float] = {}

    start = time.perf_counter()
    try:
        model = load_model(options.model)
        specs, notes = input_specs(model, shapes)
    except OnnxImportError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_IMPORT_ERROR
    unknown = sorted(set(shapes) - set(specs))
    if unknown:
        parser.error(f"--shape names {unknown}, which are not graph inputs of the model; its "
                     f"inputs are {sorted(specs)}.")
    from ipuxl.onnx.model_ir import model_to_ir

    try:
        program = model_to_ir(model, input_shapes={n: s for n, (s, _) in specs.items()})
    except OnnxImportError as error:
        print(f"error: {options.model}: {error}", file=sys.stderr)
        return EXIT_IMPORT_ERROR
    timings["import"] = time.perf_counter() - start

    _print_header(options.model, model, program)
    for note in notes:
        print(f"note: {note}")
    _print_ir(program.ir, options.ir_lines)

    report, timings["estimate"] = _estimate(program.ir, options.tiles)
    print("\n== IPU model (estimate) ==")
    print(report.summary())
    if report.fits:
        print(f"The program fits: peak tile {report.peak_tile.bytes:,} B.")
    else:
        print()
        print(report.oom_text())
        print(f"The program DOES NOT FIT in {report.target.describe()}; it runs on the "
              "CPU all the same.")

    inputs = random_inputs(specs, seed=options.seed, int_range=(low, high))
    print("\n== Run ==")
    cache = cache_folder.use_for_inference(program.ir)
    print(f"cache: {cache or 'off'}")
    print(f"device: {options.device}; random inputs (seed {options.seed}):")
    for name, array in inputs.items():
        print(f"  {name}: {list(array.shape)} {array.dtype}")
    outputs, run_times = _run(program, inputs, options.device, options.tiles)
    print("outputs:")
    for name, array in outputs.items():
        print(f"  {name}: {describe_array(array)}")
    timings.update(run_times)
    print("\n== Times ==")
    print("  " + "  ".join(f"{k} {_seconds(v)}" for k, v in timings.items()))
    return 0


# --------------------------------------------------------------------- arguments
def _parse_shapes(items: Sequence[str], parser: argparse.ArgumentParser
                  ) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
            if any(d < 0 for d in shape):
                raise ValueError
        except ValueError:
            parser.error(f"--shape {item!r}: write NAME=D0,D1,... with non-negative integer "
                         "sizes, e.g. --shape input=1,3,224,224 (NAME= for a scalar).")
        shapes[name] = shape
    return shapes


def _parse_int_range(text: str, parser: argparse.ArgumentParser) -> tuple[int, int]:
    try:
        low, high = (int(v) for v in text.split(","))
        if high <= low:
            raise ValueError
    except ValueError:
        parser.error(f"--int-range {text!r}: write LO,HI with LO < HI, e.g. 0,2.")
    return low, high


# ------------------------------------------------------------------------- inputs
def input_specs(model: Any, shapes: dict[str, tuple[int, ...]] | None = None
                ) -> tuple[dict[str, tuple[tuple[int, ...], np.dtype]], list[str]]:
    """The shape and NumPy dtype of each graph input that is not an initializer.

    Symbolic dimensions take ``shapes[name]`` when given, else 1.

    Returns:
        ``({name: (shape, dtype)}, notes)``: a note for each input whose symbolic
        dimensions were set to 1.

    Raises:
        OnnxImportError: an input is not a tensor, or has a type ipuxl cannot hold.
    """
    from ipuxl.onnx.importer import OnnxImportError, input_dtype

    shapes = shapes or {}
    initializers = {init.name for init in model.graph.initializer}
    specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    notes: list[str] = []
    for info in model.graph.input:
        if info.name in initializers:
            continue
        if not info.type.HasField("tensor_type"):
            raise OnnxImportError(f"Graph input {info.name!r} is not a tensor (sequence, "
                                  "map and optional inputs are not supported).")
        tensor_type = info.type.tensor_type
        dtype = input_dtype(info.name, tensor_type.elem_type)
        if info.name in shapes:
            specs[info.name] = (shapes[info.name], dtype)
            continue
        dims, symbolic = [], []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
            else:
                dims.append(1)
                symbolic.append(dim.dim_param or "?")
        if symbolic:
            notes.append(f"input {info.name!r}: symbolic dimension(s) {symbolic} set to 1; "
                         f"give --shape {info.name}=... for other sizes.")
        specs[info.name] = (tuple(dims), dtype)
    return specs, notes


def random_inputs(specs: dict[str, tuple[tuple[int, ...], np.dtype]], *, seed: int = 0,
                  int_range: tuple[int, int] = (0, 2)) -> dict[str, np.ndarray]:
    """Random arrays for ``specs`` (``{name: (shape, dtype)}``): standard normal floats,
    integers uniform in ``[int_range[0], int_range[1])`` (clipped to the dtype's range),
    booleans at random."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, (shape, dtype) in specs.items():
        dtype = np.dtype(dtype)
        if dtype == np.bool_:
            arrays[name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            low, high = max(int_range[0], info.min), min(int_range[1], info.max + 1)
            arrays[name] = rng.integers(low, max(high, low + 1), size=shape).astype(dtype)
        elif np.issubdtype(dtype, np.complexfloating):
            arrays[name] = (rng.standard_normal(shape)
                            + 1j * rng.standard_normal(shape)).astype(dtype)
        else:
            arrays[name] = rng.standard_normal(shape).astype(dtype)
    return arrays


# ------------------------------------------------------------------------ printing
def describe_array(array: np.ndarray) -> str:
    """One line: shape, dtype, min/max/mean/std (of the finite values), how many are not
    finite, and the first few values."""
    array = np.asarray(array)
    text = f"shape {list(array.shape)} {array.dtype}"
    if array.size == 0:
        return text + " (empty)"
    values = array.astype(np.float64) if array.dtype == np.bool_ else array
    if np.issubdtype(values.dtype, np.number) and not np.iscomplexobj(values):
        flat = values.reshape(-1).astype(np.float64)
        finite = flat[np.isfinite(flat)]
        if finite.size:
            text += (f" min {finite.min():.4g} max {finite.max():.4g} "
                     f"mean {finite.mean():.4g} std {finite.std():.4g}")
        if finite.size != flat.size:
            text += f" non-finite {flat.size - finite.size}"
    first = np.array2string(array.reshape(-1)[:4], precision=4, separator=", ")
    return text + f" first {first}"


def _print_header(path: str, model: Any, program: Any) -> None:
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    weights = sum(int(np.prod(w.shape)) for w in program.weights.values())
    print(f"== {path} ==")
    producer = f"{model.producer_name} {model.producer_version}".strip()
    print(f"producer: {producer or '?'}; opsets: {opsets}; {len(model.graph.node)} nodes; "
          f"{len(program.weights)} weights ({weights:,} elements)")


def _print_ir(ir: Any, max_lines: int) -> None:
    print("\n== Imported Ir ==")
    lines = str(ir).splitlines()
    if max_lines > 0 and len(lines) > max_lines:
        head = max_lines - max_lines // 4
        tail = max_lines - head
        print("\n".join(lines[:head]))
        print(f"  ... {len(lines) - head - tail} lines left out (--ir-lines 0 prints all) ...")
        print("\n".join(lines[-tail:]) if tail else "")
    else:
        print("\n".join(lines))


def _seconds(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


# ----------------------------------------------------------------- estimate and run
def _estimate(ir: Any, tiles: int | None) -> tuple[Any, float]:
    from ipuxl import sim
    from ipuxl.sim.device import ipus_used
    from ipuxl.sim.target import target_for

    start = time.perf_counter()
    target = target_for("ipu2", num_ipus=ipus_used(ir), tiles_per_ipu=tiles)
    report = sim.estimate(ir, target)
    return report, time.perf_counter() - start


def _run(program: Any, inputs: dict[str, np.ndarray], device: str, tiles: int | None
         ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Compile and run twice; the outputs of the first run and the times."""
    import ipuxl
    from ipuxl.sim.device import IpuModelDevice, ipus_used

    start = time.perf_counter()
    if device == "ipu_model":
        options = {"numIPUs": ipus_used(program.ir)}
        if tiles is not None:
            options["tilesPerIPU"] = tiles
        else:
            from ipuxl.sim.target import target_for

            options["tilesPerIPU"] = target_for("ipu2").tilesPerIPU
        session = ipuxl.Session(program.ir, IpuModelDevice(options),
                                weights_to_host_on_exit=False, allow_out_of_memory="run")
    else:
        session = ipuxl.Session(program.ir, "cpu", weights_to_host_on_exit=False)
    times = {"compile": time.perf_counter() - start}
    feed = {program.inputs[name]: array for name, array in inputs.items()}
    with session:
        start = time.perf_counter()
        results = session.run(feed)
        times["first run"] = time.perf_counter() - start
        start = time.perf_counter()
        session.run(feed)
        times["second run"] = time.perf_counter() - start
    outputs = {name: results[stream] for name, stream in program.outputs.items()}
    return outputs, times


if __name__ == "__main__":
    sys.exit(main())
