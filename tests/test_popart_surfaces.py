"""Small PopART API surfaces: versions, debug contexts, the supported-operator lists, the
Builder's replication annotations, model loading errors, PopART's words for some import
refusals, ``removeIsolatedGraphs``, the ``op`` of the identical-input all-reduces and where
``compileAndExport`` writes."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.popart as popart
from ipuxl.onnx.ops.popart_checks import unknown_input_shape_message
from ipuxl.popart.operators import OpDefinition, internal_operations
from ipuxl.session_export import EXECUTABLE_FILENAME, executable_path


# ------------------------------------------------------------------------- versions
def test_version_number_and_package_hash():
    assert popart.versionNumber() == (3, 4, 0)
    assert popart.packageHash() == f"ipuxl-{popxl.__version__}"


# ------------------------------------------------------------------------- debug info
def _child(info):
    return popart.DebugContext(info, "child")  # line recorded below


def test_debug_info_records_in_destruction_order(tmp_path):
    filename = str(tmp_path / "debug.json")
    popart.initializePoplarDebugInfo(filename, "json")
    # (no assert reads `outer` or `inner`: pytest would keep them alive)
    outer = popart.DebugInfo(popart.DebugContext(), "layer_a")
    set_first, set_again = outer.setValue("arg", "42"), outer.setValue("arg", "43")
    inner = popart.DebugInfo(_child(outer), "layer_b")
    inner.setValue("values", ["1", "2"])
    outer_id, inner_id = outer.getId(), inner.getId()
    del inner, outer
    popart.closePoplarDebugInfo()
    assert set_first and not set_again
    data = json.loads((tmp_path / "debug.json").read_text(encoding="utf-8"))
    strings = data["stringTable"]
    inner_record, outer_record = data["contexts"]
    assert (inner_record["id"], outer_record["id"]) == (inner_id, outer_id)
    assert inner_record["parentId"] == outer_id and "parentId" not in outer_record
    assert (inner_record["layer"], outer_record["layer"]) == ("layer_b", "layer_a")
    assert (outer_record["arg"], inner_record["values"]) == ("42", ["1", "2"])
    assert (strings[inner_record["name"]], strings[outer_record["name"]]) == ("child", "")
    location = inner_record["location"]
    assert strings[location["functionName"]] == "_child"
    assert strings[location["fileName"]] == __file__
    assert location["lineNumber"] == _child.__code__.co_firstlineno + 1


def test_debug_info_without_a_file_and_context_forms():
    popart.DebugInfo("a name", "layer")  # no file started: nothing recorded
    location = popart.SourceLocation("f", "f.py", 3)
    context = popart.DebugContext("named", location)
    assert str(context) == "named" and context.location is location
    with pytest.raises(TypeError, match="DebugContext takes"):
        popart.DebugContext("a", location, "extra", "args")
    with pytest.raises(TypeError, match="loc must be a popart.SourceLocation"):
        popart.DebugContext("a", "b")
    with pytest.raises(TypeError, match="layer must be a string"):
        popart.DebugInfo("a", 3)
    with pytest.raises(ValueError, match="format must be 'json' or 'cbor'"):
        popart.initializePoplarDebugInfo("x.json", "xml")


def test_builder_takes_a_debug_context_as_a_name():
    builder = popart.Builder()
    w = builder.addInitializedInputTensor(np.zeros(2, np.float32), popart.DebugContext("w"))
    y = builder.aiOnnx.relu([w], popart.DebugContext("named"))
    model = onnx.load_from_string(builder.getModelProto())
    assert w == "w" and y == "Relu:0" and model.graph.node[0].name == "named"


# ------------------------------------------------------------------------- operators
def test_internal_operations_extend_the_public_ones():
    public = popart.getSupportedOperations(False)
    everything = popart.getSupportedOperations(True)
    assert everything == public + internal_operations()
    names = {op.type for op in internal_operations()}
    assert {"HostLoad", "IpuCopy", "RemoteStore"} <= names
    assert not names & {op.type for op in public}


def test_operation_definitions_list_onnx_inputs_and_types():
    definitions = popart.getSupportedOperationsDefinition(False)
    (add,) = [d for op, d in definitions.items() if (op.domain, op.type, op.version)
              == ("ai.onnx", "Add", 7)]
    assert isinstance(add, OpDefinition)
    assert [i.name for i in add.inputs] == ["A", "B"] and [o.name for o in add.outputs] == ["C"]
    assert popart.DataType.FLOAT in add.inputs[0].supportedTensors
    assert popart.DataType.STRING not in add.inputs[0].supportedTensors
    (median,) = [d for op, d in definitions.items() if op.type == "ReduceMedian"]
    assert median.inputs == [] and median.attributes["axes"].supportedValuesRegex == "*"
    internal = popart.getSupportedOperationsDefinition(True)
    assert len(internal) == len(definitions) + len(internal_operations())


# ------------------------------------------------------------------------- builder
def test_comm_group_and_replication_factor_annotations():
    builder = popart.Builder()
    t = builder.addInitializedInputTensor(np.zeros(4, np.float32), "t")
    with builder.commGroup(popart.CommGroupType.Consecutive, 2):
        inside = builder.aiGraphcore.replicatedallreduce([t])
    outside = builder.aiGraphcore.replicatedallreduce([t])
    assert builder.getInt64VectorNodeAttribute("__collectiveCommGroup", {inside}) == [
        int(popart.CommGroupType.Consecutive.value), 2]
    assert "__collectiveCommGroup" not in builder.getAllNodeAttributeNames({outside})
    builder.embedReplicationFactor(4)
    model = onnx.load_from_string(builder.getModelProto())
    assert {p.key: p.value for p in model.metadata_props}["__replicationFactor"] == "4"
    with pytest.raises(TypeError):
        builder.embedReplicationFactor(2.5)


@pytest.mark.parametrize("given, shown", [
    (b"\x0a\x07:corrupt", "\\n\\x07:corrupt"),
    ("nothing", "nothing"),
])
def test_model_that_is_neither_a_file_nor_a_proto(given, shown):
    with pytest.raises(popart.popart_exception) as error:
        popart.Builder(given)
    assert error.value.args[0] == (
        f"Failed to load a ModelProto from the string '{shown}'.\nCheck that it is either "
        "a valid path to an existing onnx model file, or is a valid onnx ModelProto string.")


# ------------------------------------------------------------------------- PopART's words
def _session(model):
    flow = popart.DataFlow(1, {model.graph.output[0].name: popart.AnchorReturnType("All")})
    return popart.InferenceSession(model.SerializeToString(), flow,
                                   popart.DeviceManager().createCpuDevice())


def _model(node, shape):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11),
                                                   helper.make_opsetid("ai.graphcore", 1)])


def test_transpose_with_a_short_permutation():
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    with pytest.raises(popart.popart_exception) as error:
        _session(_model(node, [2, 3, 4]))
    assert error.value.args[0] == ("Rank of permutation tensor [1 0], rank 2 must be equal "
                                   "to rank of input tensor, shape [2 3 4], rank 3.")


@pytest.mark.parametrize("axis", [-3, 2])
def test_reduce_median_axis_out_of_range(axis):
    node = helper.make_node("ReduceMedian", ["x"], ["y", "i"], domain="ai.graphcore",
                            axes=[axis])
    with pytest.raises(popart.popart_exception) as error:
        _session(_model(node, [2, 3]))
    assert error.value.args[0] == f"Axis {axis} is out of acceptable range [-2, 1]"


@pytest.mark.parametrize("shape, unknown", [(["batch", 2], "batch"), ([-1, 2], "-1")])
def test_unknown_input_shape_message(shape, unknown):
    info = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    dims = ", ".join(str(d) for d in shape)
    assert unknown_input_shape_message(info) == (
        f"Input tensor 'x' must be specified in InputShapeInfo, as it has shape [{dims}], "
        f"which uses an unknown value '{unknown}'.")
    assert unknown_input_shape_message(
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])) is None


# ------------------------------------------------------------------------- popart._internal
def test_remove_isolated_graphs_keeps_called_ones():
    ir = popxl.Ir()
    called = ir.create_graph(lambda a: a + 1, popxl.TensorSpec((2,), popxl.float32))
    inner = ir.create_graph(lambda a: a * 2, popxl.TensorSpec((2,), popxl.float32))
    nested = ir.create_graph(lambda a: ops.call(inner, a)[0],
                             popxl.TensorSpec((2,), popxl.float32))
    unused = ir.create_graph(lambda a: a - 1, popxl.TensorSpec((2,), popxl.float32))
    with ir.main_graph:
        x = popxl.variable(np.zeros(2, np.float32))
        ops.call(called, x)
        ops.call(nested, x)
    ir._pb_ir.removeIsolatedGraphs()
    remaining = {g.id for g in ir.graphs}
    assert remaining == {ir.main_graph.id, called.id, inner.id, nested.id}
    assert unused.id not in remaining


# ------------------------------------------------------------------------- all-reduce op
def _run(ir, outputs):
    with ir.main_graph:
        streams = []
        for k, t in enumerate(outputs):
            with popxl.ipu(t.ipu):
                stream = popxl.d2h_stream(t.shape, t.dtype, f"out{k}")
                ops.host_store(stream, t)
                streams.append(stream)
    with popxl.Session(ir, "ipu_model") as session:
        result = session.run()
    return [result[s] for s in streams]


@pytest.mark.parametrize("op, reduce", [("add", np.sum), ("max", np.max), ("mean", np.mean)])
def test_identical_grad_inputs_reduces_with_op(op, reduce):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        xs = []
        for k in range(2):
            with popxl.ipu(k):
                xs.append(popxl.variable(data[k]))
        ys = ops.collectives.all_reduce_identical_grad_inputs(xs, ipus=[0, 1], op=op)
    for y in _run(ir, ys):
        np.testing.assert_allclose(y, reduce(data, axis=0))


@pytest.mark.parametrize("op, scale", [("add", 1.0), ("mean", 0.5)])
def test_identical_inputs_gradient_reduces_with_op(op, scale):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    grads = np.array([[1, 2, 3], [10, 20, 30]], np.float32)
    ir = popxl.Ir()
    spec = popxl.TensorSpec((3,), popxl.float32)
    with ir.main_graph, popxl.ipu(0):
        forward = ir.create_graph(
            lambda a, b: ops.collectives.all_reduce_identical_inputs([a, b], [0, 1], op=op),
            spec, spec)
    backward = popxl.transforms.autodiff(forward).graph
    with ir.main_graph:
        xs, gs = [], []
        for k in range(2):
            with popxl.ipu(k):
                xs.append(popxl.variable(data[k]))
                gs.append(popxl.variable(grads[k]))
        ys = ops.call(forward, *xs)
        dxs = ops.call(backward, *gs)
    values = _run(ir, [*ys, *dxs])
    np.testing.assert_array_equal(values[0], data[0])
    np.testing.assert_array_equal(values[1], data[1])
    for dx in values[2:]:
        np.testing.assert_allclose(dx, scale * grads.sum(axis=0))


def test_identical_inputs_op_is_checked():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(2, np.float32))
        with pytest.raises(ValueError, match="Not a valid op: 'sum'"):
            ops.collectives.all_reduce_identical_inputs([x], ipus=[0], op="sum")


# ------------------------------------------------------------------------- compileAndExport
def test_executable_path(tmp_path):
    assert executable_path(tmp_path, "cpu") == os.path.join(tmp_path, EXECUTABLE_FILENAME)
    nested = tmp_path / "a" / "b" / "model.popart"
    assert executable_path(nested, "offline-ipu") == str(nested)
    assert (tmp_path / "a" / "b").is_dir()
    with pytest.raises(popart.popart_exception,
                       match="^Executables for device type ipu-model cannot be saved$"):
        executable_path(tmp_path, "ipu-model")
    with pytest.raises(TypeError, match="compileAndExport takes the path"):
        executable_path(3, "cpu")


def test_variable_retrieval_modes_have_popart_values():
    modes = popart.VariableRetrievalMode
    assert [modes.OnePerGroup.value, modes.AllReduceReplicas.value,
            modes.AllReplicas.value] == [0, 1, 2]
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match=r"Invalid retrieval_mode: 'AllReduceReplicas'"):
            popxl.variable(np.zeros(2, np.float32), retrieval_mode=modes.AllReduceReplicas)
