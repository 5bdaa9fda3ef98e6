"""``builder.aiOnnx`` and ``builder.aiOnnxOpsetN``: one method per ONNX operator.

The methods are made from ``onnx.defs``'s schemas of the opset, with PopART's
signatures::

    builder.aiOnnx.<op in lower case>(args, [num_outputs,] <attributes>, debugContext="")

* ``args`` is the list of input tensor ids (absent for operators without inputs, such as
  ``RandomNormal``); an optional input left out in the middle is ``""``.
* ``num_outputs`` comes first for operators whose output count varies (``Split``,
  ``MaxPool``, ``BatchNormalization``, ``Dropout`` (default 1), ``LSTM`` (default 3),
  ``Loop``...); such methods return a list of ids, as do operators with several outputs
  (``TopK``). The others return one id.
* attributes follow, required ones first and then optional ones, each group in alphabetical
  order (the order of PopART's generated API), with ONNX's defaults; an attribute left at
  its default is not written. Graph attributes take a subgraph Builder
  (``builder.createSubgraphBuilder()``); ``Cast``'s ``to`` and the ``dtype`` attributes
  take PopART's type names (``"FLOAT16"``) as well as ONNX's numbers.
* ``debugContext`` (or ``debugPrefix=``) names the node and its outputs.

Names differ from the operator where PopART's do: ``logical_and``, ``logical_or``,
``logical_not``, ``logical_xor`` and ``logical_if``. ``constant(value,
is_value_sufficient=False, debugContext="")`` takes a NumPy array.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ipuxl.host_values import check_numbers, index_argument
from ipuxl.popart.arguments import number_argument
from ipuxl.popart.builder_graphcore import input_count_error, tensor_ids
from ipuxl.popart.errors import popart_exception

__all__ = ["AiOnnx", "onnx_opset_class", "op_table", "OpSpec", "LATEST_OPSET"]


def _latest_opset() -> int:
    import onnx.defs

    return int(onnx.defs.onnx_opset_version())


LATEST_OPSET = _latest_opset()
_METHOD_NAMES = {"And": "logical_and", "Or": "logical_or", "Not": "logical_not",
                 "Xor": "logical_xor", "If": "logical_if"}
_DEFAULT_OUTPUTS = {"Dropout": 1, "LSTM": 3, "GRU": 2, "RNN": 2}
_TYPE_ATTRIBUTES = ("to", "dtype")  # INT attributes that hold an element type
_UNBOUNDED = 2**31 - 1


@dataclass(frozen=True)
class AttributeSpec:
    name: str
    type: int  # onnx.AttributeProto.AttributeType
    required: bool
    default: Any  # None when the schema has none; a tuple for a list


@dataclass(frozen=True)
class OpSpec:
    """One operator as an opset's method sees it."""

    op_type: str
    since: int
    min_inputs: int
    max_inputs: int
    min_outputs: int
    max_outputs: int
    attributes: tuple[AttributeSpec, ...]

    @property
    def variable_outputs(self) -> bool:
        return self.min_outputs != self.max_outputs

    @property
    def takes_args(self) -> bool:
        return self.max_inputs > 0


def _attribute_default(attribute: Any) -> Any:
    from onnx import helper

    proto = attribute.default_value
    if proto.type == 0:
        return None
    value = helper.get_attribute_value(proto)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):  # a tuple: specs are hashable (their signatures are cached)
        return tuple(v.decode() if isinstance(v, bytes) else v for v in value)
    if isinstance(value, float):
        return float(str(np.float32(value)))  # 1e-05, not 9.999999747378752e-06
    return value


def _spec(schema: Any) -> OpSpec:
    attributes = [AttributeSpec(a.name, int(a.type.value), bool(a.required),
                                _attribute_default(a))
                  for a in schema.attributes.values()]
    attributes.sort(key=lambda a: (not a.required, a.name))
    max_inputs = min(int(schema.max_input), _UNBOUNDED)
    return OpSpec(schema.name, int(schema.since_version), int(schema.min_input), max_inputs,
                  int(schema.min_output), min(int(schema.max_output), _UNBOUNDED),
                  tuple(attributes))


@functools.cache
def op_table(version: int) -> dict[str, OpSpec]:
    """``{method name: OpSpec}`` of ai.onnx opset ``version`` (deprecated operators
    excluded)."""
    import onnx.defs

    newest: dict[str, Any] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx") or schema.since_version > version:
            continue
        known = newest.get(schema.name)
        if known is None or schema.since_version > known.since_version:
            newest[schema.name] = schema
    return {_METHOD_NAMES.get(name, name.lower()): _spec(schema)
            for name, schema in sorted(newest.items()) if not schema.deprecated}


def _python_default(spec: OpSpec, attribute: AttributeSpec) -> Any:
    from onnx import AttributeProto

    if attribute.required:
        return inspect.Parameter.empty
    if isinstance(attribute.default, tuple):
        return list(attribute.default)
    if attribute.default is not None:
        return attribute.default
    if _kept_when_empty(spec, attribute):
        return None
    if attribute.type in (AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS):
        return []
    return None


def _kept_when_empty(spec: OpSpec, attribute: AttributeSpec) -> bool:
    """Whether an empty list given for this attribute is written, not dropped: the
    ``axes`` of the ``Reduce*`` operators, where PopART tells "left out" (``None``: reduce
    every axis) from ``[]`` (reduce none)."""
    return spec.op_type.startswith("Reduce") and attribute.name == "axes"


@functools.cache
def _signature(spec: OpSpec) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = []
    if spec.takes_args:
        params.append(inspect.Parameter("args", kind))
    if spec.variable_outputs:
        default = _DEFAULT_OUTPUTS.get(spec.op_type, inspect.Parameter.empty)
        params.append(inspect.Parameter("num_outputs", kind, default=default))
    for attribute in spec.attributes:
        if spec.variable_outputs and attribute.name == "num_outputs":
            continue  # Split-18's attribute: written from the method's num_outputs
        params.append(inspect.Parameter(attribute.name, kind,
                                        default=_python_default(spec, attribute)))
    params.append(inspect.Parameter("debugContext", kind, default=""))
    return inspect.Signature(params)


def _same(value: Any, default: Any) -> bool:
    if default is None:
        return False
    if isinstance(default, tuple):
        return isinstance(value, (list, tuple)) and list(value) == list(default)
    try:
        return bool(value == default)
    except (TypeError, ValueError):  # arrays
        return False


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (list, tuple)) and len(value) == 0)


def _attribute_value(where: str, attribute: AttributeSpec, value: Any) -> Any:
    """The value to write, checked against the schema's type: integers are true
    integers (a bool is 0 or 1, ``2.5`` is refused), floats are numbers, strings are
    strings, tensors hold numbers. Nothing is converted by truncation or ``str()``."""
    from onnx import AttributeProto

    from ipuxl.popart.tensor_info import data_type_of

    kind, name = attribute.type, attribute.name
    if kind == AttributeProto.INT:
        if name in _TYPE_ATTRIBUTES and not isinstance(value, (int, np.integer)):
            return int(data_type_of(value).value)
        return _integer(name, value, where)
    if kind == AttributeProto.FLOAT:
        return _float(value, f"{where}: attribute {name!r}")
    if kind == AttributeProto.STRING:
        return _string(name, value, where)
    if kind == AttributeProto.INTS:
        _require_sequence(name, value, where)
        return [_integer(f"{name}[{i}]", v, where) for i, v in enumerate(value)]
    if kind == AttributeProto.FLOATS:
        _require_sequence(name, value, where)
        return [_float(v, f"{where}: attribute {name}[{i}]") for i, v in enumerate(value)]
    if kind == AttributeProto.STRINGS:
        _require_sequence(name, value, where)
        return [_string(f"{name}[{i}]", v, where) for i, v in enumerate(value)]
    if kind == AttributeProto.TENSOR:
        array = np.asarray(value)
        check_numbers(array, f"{where}: attribute {name!r}")
        return array
    return value  # graphs (Builders or GraphProtos), tensors lists


def _float(value: Any, what: str) -> float:
    """A float attribute's value: a Python or NumPy number, or a 0-d NumPy array of one
    (``mean=np.array(1.0, np.float16)``), as PopART's bindings take anything Python can
    turn into a float."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    return number_argument(value, what, finite=False)


def _integer(name: str, value: Any, where: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)  # ONNX's boolean attributes are INTs (keepdims=True is 1)
    return index_argument(name, value, where)


def _string(name: str, value: Any, where: str) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if not isinstance(value, str):
        raise TypeError(f"{where}: attribute {name!r} is a string, got "
                        f"{type(value).__name__} {value!r}.")
    return value


def _require_sequence(name: str, value: Any, where: str) -> None:
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{where}: attribute {name!r} is a list, got "
                        f"{type(value).__name__} {value!r}. Pass a list.")


class AiOnnx:
    """The ai.onnx operators of one opset as methods (see the module docstring); the
    subclasses ``AiOnnxOpset6`` ... fix the version."""

    version: int = 0

    def __init__(self, builder: Any):
        self._builder = builder

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        spec = op_table(self.version).get(name)
        if spec is None:
            raise AttributeError(_unknown_message(type(self).__name__, name, self.version))
        method = _make_method(self, name, spec)
        self.__dict__[name] = method
        return method

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(op_table(self.version)))

    def __str__(self) -> str:
        return f"AiOnnx{self.version}"  # PopART's name of the opset object

    def constant(self, value: Any, is_value_sufficient: bool = False,
                 debugContext: Any = "", *, debugPrefix: Any = None) -> str:  # noqa: N803
        """A Constant node holding ``value`` (a NumPy array; its dtype is kept).
        ``is_value_sufficient`` is PopART's hint that only the value matters; ipuxl
        always folds constants."""
        array = np.asarray(value)
        check_numbers(array, "aiOnnx.constant: value")
        name = debugPrefix if debugPrefix is not None else debugContext
        return self._builder.add_node("Constant", [], {"value": array}, 1, domain="",
                                      version=self.version, debug_context=name)[0]


def _unknown_message(owner: str, name: str, version: int) -> str:
    close = difflib.get_close_matches(name, list(op_table(version)), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return (f"'{owner}' has no operator method {name!r} (ai.onnx opset {version}).{hint} "
            "The methods are the ONNX operators in lower case, e.g. aiOnnx.matmul; And/Or/"
            "Not/Xor/If are logical_and, logical_or, logical_not, logical_xor, logical_if.")


def _make_method(opset: AiOnnx, name: str, spec: OpSpec) -> Any:
    signature = _signature(spec)

    def method(*args: Any, **kwargs: Any) -> Any:
        if "debugPrefix" in kwargs:
            kwargs["debugContext"] = kwargs.pop("debugPrefix")
        if "outputs" in kwargs and spec.variable_outputs:
            kwargs["num_outputs"] = kwargs.pop("outputs")
        try:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return _write(opset, name, spec, dict(bound.arguments))
        except TypeError as error:
            raise TypeError(incompatible_arguments(name, signature, args, kwargs, error)) \
                from None

    method.__name__ = name
    method.__qualname__ = f"{type(opset).__name__}.{name}"
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__doc__ = (f"Add an ONNX {spec.op_type}-{spec.since} node "
                      f"(https://onnx.ai/onnx/operators/onnx__{spec.op_type}.html).")
    return method


def _write(opset: AiOnnx, name: str, spec: OpSpec, arguments: dict[str, Any]) -> Any:
    where = f"aiOnnx.{name} ({spec.op_type}-{spec.since})"
    inputs = tensor_ids(arguments.pop("args", []), where, _call_form(name, spec))
    debug = arguments.pop("debugContext")
    if not spec.min_inputs <= len(inputs) <= spec.max_inputs:
        raise input_count_error(spec.op_type, inputs, (spec.min_inputs, spec.max_inputs),
                                where, _call_form(name, spec), _UNBOUNDED)
    count = spec.max_outputs
    if spec.variable_outputs:
        count = index_argument("num_outputs", arguments.pop("num_outputs"), where)
        if not spec.min_outputs <= count <= spec.max_outputs:
            raise popart_exception(
                f"{spec.op_type} has an invalid number of outputs {count}. Must be between "
                f"{spec.min_outputs}..{spec.max_outputs} ({where}: num_outputs is how many "
                "outputs the node makes).")
    attributes: dict[str, Any] = {}
    for attribute in spec.attributes:
        if attribute.name not in arguments:
            continue
        value = arguments[attribute.name]
        if value is None and not attribute.required:
            continue
        if not attribute.required and not _kept_when_empty(spec, attribute) \
                and (_empty(value) or _same(value, attribute.default)):
            continue
        if attribute.required and value is None:
            raise popart_exception(f"{where}: attribute {attribute.name!r} is required.")
        attributes[attribute.name] = _attribute_value(where, attribute, value)
    if spec.op_type == "Split" and any(a.name == "num_outputs" for a in spec.attributes) \
            and len(inputs) < 2:
        attributes["num_outputs"] = count  # Split-18: sizes from the output count
    if spec.op_type in ("Conv", "AveragePool", "MaxPool", "Pad"):
        from ipuxl.popart.builder_shapes import verify_window_node

        verify_window_node(opset._builder._inferred_types(), spec.op_type, inputs, attributes)
    outputs = opset._builder.add_node(spec.op_type, inputs, attributes, count, domain="",
                                      version=opset.version, debug_context=debug)
    if spec.variable_outputs or spec.max_outputs > 1:
        return outputs
    return outputs[0]


def incompatible_arguments(name: str, signature: inspect.Signature, args: tuple[Any, ...],
                           kwargs: dict[str, Any], error: Exception) -> str:
    """PopART's (pybind11's) message for a call its signature refuses, which tests match
    (``"add(): incompatible function arguments. The following argument types are
    supported:"``), then the signature, what was passed and why it does not fit."""
    given = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return (f"{name}(): incompatible function arguments. The following argument types are "
            f"supported:\n    1. {signature}\n\nInvoked with: {given}\n"
            f"The arguments do not fit: {error}")


def _call_form(name: str, spec: OpSpec) -> str:
    """How to call the method, for messages: ``aiOnnx.add([a, b])``."""
    names = ["x", "y", "z"]
    if spec.max_inputs <= len(names) and spec.min_inputs == spec.max_inputs:
        listed = ", ".join(names[:spec.max_inputs])
    else:
        listed = ", ".join(names[:max(spec.min_inputs, 1)]) + ", ..."
    return f"aiOnnx.{name}([{listed}])"


@functools.cache
@functools.cache
def onnx_opset_class(version: int) -> type[AiOnnx]:
    """The class ``AiOnnxOpset<version>`` (one class per version)."""
    if not 6 <= version <= LATEST_OPSET:
        raise popart_exception(f"There is no ai.onnx opset {version} (6 to {LATEST_OPSET} "
                               "are available).")
    return type(f"AiOnnxOpset{version}", (AiOnnx,), {"version": version,
                                                      "__module__": __name__})
