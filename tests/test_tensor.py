"""Tensors (spec §3.4, §3.5), Variable and Constant (§3.6), TensorSpec and TensorByRef (§3.7)
and the tensor factories (§3.8)."""

from collections.abc import Mapping

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.errors import UndefinedValue
from ipuxl.tensor import Constant, Variable

# ---------------------------------------------------------------- construction


@pytest.mark.parametrize("cls", [popxl.Tensor, Variable, Constant])
def test_constructor_raises_runtime_error(cls):
    with pytest.raises(RuntimeError, match="popxl.Tensor cannot be constructed directly."):
        cls()


def test_subclasses():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        c = popxl.constant(1.0)
        alias = ops.add_(v, v)
        out = v + c
    assert type(v) is Variable and type(c) is Constant
    # The alias returned by an in-place op on a variable is a plain Tensor.
    assert type(alias) is popxl.Tensor and type(out) is popxl.Tensor


# ---------------------------------------------------------------- properties


def test_properties():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((2, 3), np.float16), name="t")
    assert (t.id, t.name, t.scope, t.ir, t.graph) == ("t", "t", "", ir, ir.main_graph)
    assert (t.dtype, t.shape, t.rank, t.nelms, t.meta_shape) == (
        popxl.float16, (2, 3), 2, 6, ())
    assert t.spec == popxl.TensorSpec((2, 3), popxl.float16)
    assert t.in_sync_with_ipu is True


def test_scalar_properties():
    with popxl.Ir().main_graph:
        t = popxl.constant(3, popxl.int8)
    assert (t.shape, t.rank, t.nelms) == ((), 0, 1)


def test_meta_shape_comes_from_graph_input():
    with popxl.Ir().create_empty_graph():
        x = popxl.graph_input((2,), popxl.float32, "x", meta_shape=(4,))
    assert x.meta_shape == (4,) and x.spec.meta_shape == (4,)


def test_transpose_properties():
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros((2, 3), np.float32))
        assert t.T.shape == (3, 2) and t.T_.shape == (3, 2)
        assert t.transpose((1, 0)).shape == (3, 2)
        assert [op.name for op in t.graph.ops] == ["transpose", "transpose_", "transpose"]


def test_shape_methods():
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros((2, 3), np.float32))
        assert t.reshape((3, 2)).shape == (3, 2) and t.reshape_((6,)).shape == (6,)
        assert t.flatten().shape == (6,) and t.flatten_().shape == (6,)
        assert t.detach().shape == (2, 3) and t.detach_().shape == (2, 3)


# ---------------------------------------------------------------- placement


def test_op_outputs_take_the_context_ipu_and_tile_set():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        default = ops.relu(v)
        with popxl.ipu(1):
            on_one = ops.relu(v)
        with popxl.io_tiles():
            on_io = ops.relu(v)
    assert (default.ipu, default.tile_set) == (0, "compute")
    assert (on_one.ipu, on_one.tile_set) == (1, "compute")
    assert (on_io.ipu, on_io.tile_set) == (0, "io")


def test_ipu_and_tile_set_of_an_unused_tensor_are_undefined():
    with popxl.Ir().main_graph:
        v = popxl.variable(1.0, name="fresh")
        with pytest.raises(UndefinedValue, match="Tensor's IPU is undefined."):
            v.ipu  # noqa: B018 - reading the property is the test
        with pytest.raises(UndefinedValue, match="Tensor's tile set is undefined"):
            v.tile_set  # noqa: B018 - reading the property is the test
        with popxl.ipu(2), popxl.io_tiles():
            ops.relu(v)
    # Without a producer, the first consumer decides.
    assert (v.ipu, v.tile_set) == (2, "io")


def test_inputs_on_different_ipus_or_tile_sets_raise():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        a = ops.relu(v)
        with popxl.ipu(1):
            b = ops.relu(v)
        with popxl.io_tiles():
            c = ops.relu(v)
        with pytest.raises(ValueError, match="The input tensors `relu_out` and `relu_out__t0` "
                                             "are located on different IPUs"):
            ops.add(a, b)
        # PopXL's rule: an op's inputs made by ops share one tile set.
        with pytest.raises(ValueError, match=r"The input tensors `relu_out` and `relu_out__t1` "
                                             r"are located on different tile sets: compute != "
                                             r"io\. Copy one .* `ops.io_tile_copy`"):
            ops.add(a, c)
        assert [op.name for op in popxl.gcg().ops] == ["relu"] * 3


def test_inputs_sharing_the_other_tile_set_are_copied_to_the_ops():
    # PopART's IoComputeTileCopy: inputs made on the IO tiles, used by a compute op, are
    # copied to the compute tiles; an input with no producer is not placed and not copied.
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        with popxl.io_tiles():
            c = ops.relu(v)
            d = ops.relu(v)
        total = ops.add(c, d)
        copies = total._producer.inputs
        assert [(t.name, t.tile_set, t._producer.name) for t in copies] == [
            ("relu_out_fioc", "compute", "io_tile_copy"),
            ("relu_out__t0_fioc", "compute", "io_tile_copy")]
        assert [t._producer.inputs for t in copies] == [(c,), (d,)]
        assert ops.mul(c, v)._producer.inputs[1] is v


# ---------------------------------------------------------------- dunders


def test_repr():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.array([1], np.int32), name="bob")
        c = popxl.constant(np.zeros((2, 3), np.float32), name="zeros")
        t = v + v
    assert repr(v) == "Variable[bob popxl.dtypes.int32 (1,)]"
    assert repr(c) == "Constant[zeros popxl.dtypes.float32 (2, 3)]"
    assert repr(t) == "Tensor[add_out popxl.dtypes.int32 (1,)]"


def test_eq_is_identity_and_hash_is_of_id_and_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(1.0, name="a")
        b = popxl.variable(1.0, name="b")
    assert (a == a) is True and (a == b) is False and (a != b) is True
    assert (a == 1.0) is False
    assert hash(a) == hash(("a", ir))
    assert ir.main_graph.get_tensor("a") is a  # one object per (Ir, id)
    assert {a: 1, b: 2}[a] == 1


def test_len():
    with popxl.Ir().main_graph:
        assert len(popxl.variable(np.zeros((4, 2), np.float32))) == 4
        scalar = popxl.variable(1.0, name="s")
        with pytest.raises(ValueError, match="Tensor is a scalar and doesn't have a length."):
            len(scalar)


def test_iteration_and_in_raise_type_error():
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros(2, np.float32))
    with pytest.raises(TypeError):
        iter(t)
    with pytest.raises(TypeError):
        list(t)
    with pytest.raises(TypeError):
        1.0 in t  # noqa: B015 - the membership test is the test


def test_numpy_defers_to_the_reflected_operators():
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros(2, np.float32))
        result = np.ones(2, np.float32) + t
    assert isinstance(result, popxl.Tensor)
    assert result.graph.ops[-1].name == "add" and result.graph.ops[-1].inputs[1] is t


@pytest.mark.parametrize(
    "dtype, shape, argument, expected",
    [
        (popxl.int32, (2, 3), None, (12, 4)),
        (popxl.float16, (2, 3, 4), None, (24, 8, 2)),
        (popxl.float32, (2, 3), (6,), (4,)),
        (popxl.bool, (5,), None, (1,)),
        (popxl.float8_143, (2, 2), None, (2, 1)),
    ],
)
def test_strides_are_numpy_byte_strides(dtype, shape, argument, expected):
    with popxl.Ir().create_empty_graph():
        t = popxl.graph_input(shape, dtype)
    assert t.strides(argument) == expected
    if not dtype.is_float8:
        assert expected == np.empty(argument or shape, dtype.as_numpy()).strides


def test_diag_needs_rank_2():
    with popxl.Ir().main_graph:
        square = popxl.variable(np.eye(3, dtype=np.float32))
        assert square.diag().shape == (3,)
        vector = popxl.variable(np.zeros(3, np.float32), name="vector")
        with pytest.raises(ValueError, match="Diag expected a 2d tensor."):
            vector.diag()


# ---------------------------------------------------------------- operators (§3.5)


def test_operators_build_the_matching_ops():
    with popxl.Ir().main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        b = popxl.variable(np.ones(2, np.float32), name="b")
        flags = popxl.variable(np.ones(2, bool), name="flags")
        built = [a + b, a - b, a * b, a / b, a % b, a**b, -a, a @ b, 2.0 - a, 2.0 / a,
                 flags & flags, flags | flags, ~flags]
    assert [t.graph.ops[i].name for i, t in enumerate(built)] == [
        "add", "sub", "mul", "div", "fmod", "pow", "negate", "matmul", "sub", "div",
        "logical_and", "logical_or", "logical_not"]


def test_host_operands_take_the_tensor_dtype():
    with popxl.Ir().main_graph:
        h = popxl.variable(np.ones(2, np.float16))
        assert (h + 1).dtype == popxl.float16
        assert (2 * h).dtype == popxl.float16
        assert (h**2).dtype == popxl.float16  # PopXL fails here (§16.1.6)
        added = h + [1, 2]
    constant = added.graph.ops[-1].inputs[1]
    assert isinstance(constant, Constant) and constant.dtype == popxl.float16


def test_iadd_is_add_inplace_and_returns_self():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        before = v
        v += 1.0
    assert v is before and v.graph.ops[-1].name == "add_"


def test_no_ordering_operators():
    with popxl.Ir().main_graph:
        t = popxl.variable(np.ones(2, np.float32))
    with pytest.raises(TypeError):
        t < t  # noqa: B015
    with pytest.raises(TypeError):
        abs(t)
    with pytest.raises(TypeError):
        t // t


def test_ensure_tensor_rejects_empty_values():
    with popxl.Ir().main_graph:
        t = popxl.variable(np.ones(2, np.float32))
        with pytest.raises(ValueError, match="The value has 0 elements - this is most likely a "
                                             "mistake"):
            t._ensure_tensor(np.zeros((0, 2)))
        empty = t._ensure_tensor([], raise_on_empty=False)
        assert empty.shape == (0,) and empty.dtype == popxl.float32
        assert t._ensure_tensor(t) is t
        assert t._ensure_tensor(1, popxl.int32).dtype == popxl.int32


def test_list_plus_equals_tensor_calls_radd():
    with popxl.Ir().main_graph:
        t = popxl.variable(np.ones(2, np.float32))
        values = [1.0, 2.0]
        values += t
        assert isinstance(values, popxl.Tensor)
        empty = []
        with pytest.raises(ValueError, match="The value has 0 elements"):
            empty += t


# ---------------------------------------------------------------- TensorSpec / TensorByRef


def test_tensor_spec_is_a_mapping():
    spec = popxl.TensorSpec((2, 3), popxl.float32)
    assert isinstance(spec, Mapping)
    assert dict(spec) == {"shape": (2, 3), "dtype": popxl.float32, "meta_shape": ()}
    assert spec.to_dict() == dict(spec)
    assert spec.to_tuple() == ((2, 3), popxl.float32, ())
    assert hash(spec) == hash(spec.to_tuple())
    assert spec == popxl.TensorSpec([2, 3], popxl.float32, ())
    assert spec != popxl.TensorSpec((2, 3), popxl.float16)
    assert repr(spec) == (
        "TensorSpec(shape=(2, 3), dtype=popxl.dtypes.float32, meta_shape=())")


def test_graph_input_from_a_spec():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.zeros((2, 2), np.int32))
    with popxl.Ir().create_empty_graph():
        x = popxl.graph_input(**v.spec, name="x")
        y = popxl.graph_input(**popxl.TensorSpec((3,), popxl.float16, (6,)))
    assert x.spec == v.spec and y.meta_shape == (6,)


def test_tensor_by_ref_is_annotation_only():
    def body(x: popxl.TensorByRef) -> None: ...

    assert body.__annotations__["x"] is popxl.TensorByRef
    with pytest.raises(NotImplementedError, match="TensorByRef should only be used as an "
                                                  "annotation"):
        popxl.TensorByRef()


# ---------------------------------------------------------------- variable (§3.8)


def test_variable_dtype_is_inferred_after_downcasting():
    with popxl.Ir().main_graph:
        assert popxl.variable(np.zeros(2)).dtype == popxl.float32
        assert popxl.variable([1, 2]).dtype == popxl.int32
        assert popxl.variable(np.zeros(2), downcast=False).dtype == popxl.float64
        assert popxl.variable([1, 2], popxl.float16).dtype == popxl.float16
        assert popxl.variable(True).dtype == popxl.bool


def test_variable_defaults():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        v = popxl.variable(np.zeros((2, 3), np.float32))
    assert v.retrieval_mode == "one_per_group"
    assert v.replica_grouping.num_groups == 1 and v.replica_grouping.group_size == 2
    assert v.shape == v.shape_on_host == v.shape_on_replica == (2, 3)


def test_variable_data_is_copied():
    data = np.zeros(2, np.float32)
    with popxl.Ir().main_graph:
        v = popxl.variable(data)
    data[0] = 5
    assert v._data[0] == 0


def test_variable_outside_the_main_graph_raises_value_error():
    ir = popxl.Ir()
    with ir.create_empty_graph():
        with pytest.raises(ValueError, match="You cannot initialise a variable tensor within a "
                                             "graph"):
            popxl.variable(1.0)


def test_variable_without_a_graph_raises_runtime_error():
    with pytest.raises(RuntimeError, match="Trying to access a graph"):
        popxl.variable(1.0)


def test_retrieval_mode():
    with popxl.Ir().main_graph:
        assert popxl.variable(1.0, retrieval_mode="all_replicas").retrieval_mode == "all_replicas"
        with pytest.raises(ValueError, match="Invalid retrieval_mode: 'one_per_replica'"):
            popxl.variable(1.0, retrieval_mode="one_per_replica")


def test_grouped_variable_data_has_a_group_dimension():
    ir = popxl.Ir(replication=4)
    grouping = ir.replica_grouping(group_size=2)
    with ir.main_graph:
        v = popxl.variable(np.zeros((2, 3), np.float32), replica_grouping=grouping)
        assert v.shape == (3,) and v.shape_on_host == (2, 3) and v.shape_on_replica == (3,)
        assert v.replica_grouping is grouping
        with pytest.raises(ValueError, match="its replica grouping has 2 groups"):
            popxl.variable(np.zeros((3,), np.float32), replica_grouping=grouping)
        with pytest.raises(ValueError, match="its replica grouping has 2 groups"):
            popxl.variable(1.0, replica_grouping=grouping)


def _memmap(tmp_path, dtype, shape=(4,), mode="w+"):
    return np.memmap(tmp_path / f"data_{np.dtype(dtype).name}.bin", dtype, mode, shape=shape)


def test_memmap_variable_is_used_in_place(tmp_path):
    data = _memmap(tmp_path, np.float32)
    with popxl.Ir().main_graph:
        v = popxl.variable(data)
        same_dtype = popxl.variable(data, popxl.float32)
    assert v._data is data and same_dtype._data is data


def test_read_only_memmap_marks_the_ir(tmp_path):
    _memmap(tmp_path, np.float32).flush()
    ir = popxl.Ir()
    with ir.main_graph:
        popxl.variable(_memmap(tmp_path, np.float32, mode="r"))
    assert ir._read_only_memmap


@pytest.mark.parametrize(
    "dtype, kwargs, problem",
    [
        (np.float32, {"dtype": popxl.float16}, "the `dtype` parameter must be None or the same "
                                                "as the array's dtype"),
        (np.float64, {}, "the dtype None is not supported, as it requires downcasting the "
                         "memmap's float64 data to float32"),
        (np.int64, {"downcast": False}, "the dtype None is not supported, as it requires "
                                        "downcasting the memmap's int64 data to int32"),
    ],
)
def test_memmap_variable_must_need_no_conversion(tmp_path, dtype, kwargs, problem):
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match="When passing a memory-mapped NumPy array") as info:
            popxl.variable(_memmap(tmp_path, dtype), **kwargs)
    assert problem in str(info.value)


def test_memmap_variable_must_be_c_contiguous(tmp_path):
    data = _memmap(tmp_path, np.float32, shape=(4, 4))
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match="When passing a memory-mapped NumPy array") as info:
            popxl.variable(data.T)
        assert "it must already be in C-ordered and aligned form" in str(info.value)


def test_float8_variable():
    data = popxl.fp8_utils.host_pow2scale_cast_to_fp8(np.array([0.5, 2.0]), popxl.float8_143)
    with popxl.Ir().main_graph:
        from_fp8 = popxl.variable(data)
        from_float = popxl.variable(np.array([0.5, 2.0], np.float32), popxl.float8_152)
    assert from_fp8.dtype == popxl.float8_143 and from_float.dtype == popxl.float8_152
    assert from_float._data.dtype == popxl.dtypes.np_dtype_float8_152


# ---------------------------------------------------------------- constant (§3.8)


def test_constants_live_in_any_graph_and_are_read_only():
    ir = popxl.Ir()
    with ir.create_empty_graph() as graph:
        c = popxl.constant([1, 2], name="c")
    assert c.graph is graph and c.dtype == popxl.int32 and c.id == "graph_subgraph(0)/c"
    assert not c._data.flags.writeable
    with pytest.raises(ValueError):
        c._data[0] = 3


def test_constant_from_a_memmap_copies_it(tmp_path):
    data = _memmap(tmp_path, np.float64)
    with popxl.Ir().main_graph:
        c = popxl.constant(data)
    assert c.dtype == popxl.float32 and data.flags.writeable
    assert not np.shares_memory(c._data, data)


def test_float8_constant_needs_an_explicit_dtype():
    data = popxl.fp8_utils.host_pow2scale_cast_to_fp8(np.array([1.0]), popxl.float8_143)
    with popxl.Ir().main_graph:
        with pytest.raises(TypeError, match="Please explicitly set the data type"):
            popxl.constant(data)
        assert popxl.constant(data, popxl.float8_143).dtype == popxl.float8_143
        assert popxl.constant([1.0], popxl.float8_152).dtype == popxl.float8_152


# ---------------------------------------------------------------- graph_input / graph_output


def test_graph_input_and_output():
    graph = popxl.Ir().create_empty_graph()
    with graph:
        a = popxl.graph_input((2,), popxl.float32, "a")
        b = popxl.graph_input((2,), popxl.float32, "b", by_ref=True)
        popxl.graph_output(a + b)
    assert graph.inputs == (a, b) and graph._by_ref_inputs == {b}
    assert graph.outputs[0].name == "add_out"


def test_graph_output_of_another_graph_raises_value_error():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(1.0, name="v")
        with ir.create_empty_graph():
            with pytest.raises(ValueError, match="The input tensor `t` is not in the current "
                                                 "Graph graph_subgraph\\(0\\)"):
                popxl.graph_output(v)
            with pytest.raises(TypeError, match="The input `t` is not a Tensor"):
                popxl.graph_output(1.0)
