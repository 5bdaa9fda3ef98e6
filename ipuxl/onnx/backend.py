"""ONNX's backend interface for ipuxl, so ``onnx.backend.test.BackendTest`` runs against it.

    import ipuxl.onnx.backend as backend
    rep = backend.prepare(model, "CPU")
    outputs = rep.run([x])

``prepare`` checks the model (every unsupported operator listed at once) and returns a
:class:`IpuxlRep`. Its ``run`` imports the model for the shapes of the inputs it is given
(ipuxl compiles for static shapes), compiles one ``popxl.Session`` per signature and runs
it. A node that needs the *value* of a graph input (``Reshape``'s shape given as an
input, say) makes ``run`` specialise the model on that input's value: it is imported
as a constant, and the compiled Session is kept per value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jax import tree_util

from ipuxl.onnx.importer import NeedsValueError, check_model, load_model
from ipuxl.onnx.model_ir import initializer_arrays, model_to_ir
from ipuxl.onnx.ops.sequence import from_host, to_host

__all__ = ["IpuxlBackend", "IpuxlRep", "prepare", "run_model", "run_node",
           "supports_device"]

try:
    from onnx.backend.base import Backend, BackendRep, namedtupledict
except ImportError as error:  # pragma: no cover - the onnx extra is missing
    raise ImportError("ipuxl.onnx.backend needs the onnx package: "
                      "pip install 'ipuxl[onnx]'") from error

_MAX_SPECIALISATIONS = 16


class IpuxlRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns the graph outputs in order."""

    def __init__(self, model: Any, device: str = "CPU"):
        self.model = model
        self.device = device
        graph = model.graph
        initializers = initializer_arrays(graph)
        self.input_names = [i.name for i in graph.input if i.name not in initializers]
        self.output_names = [o.name for o in graph.output]
        # Sequence and optional inputs, by name: their ONNX types.
        self._structured = {i.name: i.type for i in graph.input
                            if not i.type.HasField("tensor_type")}
        self._sessions: dict[Any, tuple[Any, Any]] = {}
        self._static: set[str] = set()

    def run(self, inputs: Any, **kwargs: Any) -> Any:
        arrays = self._arrays(inputs)
        while True:
            key = self._key(arrays)
            compiled = self._sessions.get(key)
            if compiled is None:
                try:
                    compiled = self._compile(arrays)
                except NeedsValueError as error:
                    names = self._inputs_behind(error.input_name) - self._static
                    names -= set(self._structured)
                    if not names:
                        raise
                    self._static |= names
                    continue
                if len(self._sessions) >= _MAX_SPECIALISATIONS:
                    self._sessions.pop(next(iter(self._sessions)))[0].__exit__(None, None, None)
                self._sessions[key] = compiled
            session, program = compiled
            flat = self._flat(arrays)
            feed = {program.inputs[n]: flat[n] for n in program.inputs}
            outputs = session.run(feed)
            values = [_onnx_array(self._output(program, outputs, n)) for n in self.output_names]
            return namedtupledict("Outputs", self.output_names)(*values)

    def _inputs_behind(self, name: str) -> set[str]:
        """The graph inputs whose values decide ``name`` (``name`` itself if it is one)."""
        producers = {out: node for node in self.model.graph.node for out in node.output}
        found, todo, seen = set(), [name], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in self.input_names:
                found.add(current)
            elif current in producers:
                todo.extend(i for i in producers[current].input if i)
        return found

    def _arrays(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            given = dict(inputs)
        else:
            seq = list(inputs) if isinstance(inputs, Sequence) else [inputs]
            given = dict(zip(self.input_names, seq))
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise ValueError(f"The model's inputs {missing} were not given.")
        return {n: from_host(self._structured[n], given[n]) if n in self._structured
                else np.asarray(given[n]) for n in self.input_names}

    def _flat(self, arrays: dict[str, Any]) -> dict[str, np.ndarray]:
        """The host arrays by stream name (``<name>.<i>`` for a sequence's arrays)."""
        flat = {}
        for name, value in arrays.items():
            if name in self._structured:
                for index, leaf in enumerate(tree_util.tree_leaves(value)):
                    flat[f"{name}.{index}"] = leaf
            else:
                flat[name] = value
        return flat

    @staticmethod
    def _output(program: Any, outputs: Any, name: str) -> Any:
        tree = program.structures.get(name)
        if tree is None:
            return outputs[program.outputs[name]]
        leaves = [outputs[program.outputs[f"{name}.{i}"]] for i in range(tree.num_leaves)]
        return to_host(tree_util.tree_unflatten(tree, leaves))

    def _key(self, arrays: dict[str, Any]) -> Any:
        key = []
        for n, value in arrays.items():
            if n in self._structured:
                leaves, tree = tree_util.tree_flatten(value)
                key.append((n, str(tree), tuple((a.shape, a.dtype.str) for a in leaves)))
            else:
                key.append((n, value.shape, value.dtype.str,
                            value.tobytes() if n in self._static else None))
        return tuple(key)

    def _compile(self, arrays: dict[str, np.ndarray]) -> tuple[Any, Any]:
        from ipuxl.session import Session

        program = model_to_ir(
            self.model, input_shapes={n: a.shape for n, a in arrays.items()
                                      if n not in self._structured},
            known_inputs={n: arrays[n] for n in self._static}, check=False,
            input_structures={n: arrays[n] for n in self._structured})
        session = Session(program.ir, _jax_device(self.device))
        session.__enter__()
        return session, program


class IpuxlBackend(Backend):
    """ONNX's ``Backend`` for ipuxl (class methods, as ONNX's interface has them)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> IpuxlRep:
        model = load_model(model)
        check_model(model)
        return IpuxlRep(model, device)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> Any:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: Any, inputs: Any, device: str = "CPU",
                 outputs_info: Any = None, **kwargs: Any) -> Any:
        """Run one NodeProto on ``inputs`` (a list in the node's input order)."""
        from onnx import helper

        arrays = [np.asarray(a) for a in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                      a.shape) for n, a in zip(names, arrays)]
        graph_outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        opset = kwargs.get("opset_version")
        imports = [helper.make_opsetid(node.domain or "", opset)] if opset else None
        model = helper.make_model(helper.make_graph([node], "node", graph_inputs,
                                                    graph_outputs), opset_imports=imports)
        return cls.run_model(model, dict(zip(names, arrays)), device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        import jax

        kind = str(device).split(":")[0].upper()
        if kind == "CPU":
            return True
        if kind == "CUDA":
            return any(d.platform == "gpu" for d in jax.devices())
        return False


def _jax_device(device: str) -> Any:
    """The Session device for ONNX's device string: ``"CPU"``, or ``"CUDA[:i]"`` for JAX's
    i-th GPU."""
    import jax

    kind, _, index = str(device).upper().partition(":")
    if kind == "CPU":
        return "cpu"
    gpus = [d for d in jax.devices() if d.platform == "gpu"] if kind == "CUDA" else []
    position = int(index) if index.isdigit() else (0 if not index else len(gpus))
    if position >= len(gpus):
        raise RuntimeError(f"ipuxl's ONNX backend cannot run on {device!r}: JAX sees no such "
                           "device (supports_device tells which devices it can use).")
    return gpus[position]


def _onnx_array(value: Any) -> Any:
    """PopXL's float8_143/152 host data (structured bytes) as ONNX's FLOAT8E4M3FNUZ /
    FLOAT8E5M2FNUZ arrays (ml_dtypes); anything else as it is."""
    if isinstance(value, np.ndarray) and value.dtype.names is not None \
            and value.dtype.itemsize == 1:
        from ipuxl import dtypes

        return value.view(dtypes.dtype.as_dtype(value.dtype).jax_dtype)
    return value


prepare = IpuxlBackend.prepare
run_model = IpuxlBackend.run_model
run_node = IpuxlBackend.run_node
supports_device = IpuxlBackend.supports_device
