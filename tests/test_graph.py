"""``popxl.Graph`` (spec §3.2) and the naming rules (§3.3)."""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops


def test_constructor_raises_type_error():
    with pytest.raises(TypeError, match="Cannot create popxl.graph.Graph instances using the "
                                        "constructor."):
        popxl.Graph()


# ---------------------------------------------------------------- properties


def test_main_graph_properties():
    ir = popxl.Ir()
    main = ir.main_graph
    assert (main.id, main.name, main.ir, main.main_graph) == ("", "", ir, main)
    assert repr(main) == "Graph[id= name=]"
    assert main.inputs == () and main.outputs == () and main.called_graphs == ()


def test_subgraph_properties():
    ir = popxl.Ir()
    graph = ir.create_empty_graph("body")
    with graph:
        x = popxl.graph_input((2,), popxl.float32, "x")
        n = popxl.graph_input((), popxl.int32, "n")
        c = popxl.constant(2.0, name="c")
        y = x * c
        popxl.graph_output(y)
        popxl.graph_output(x)
    assert graph.main_graph is ir.main_graph and graph.ir is ir
    assert repr(graph) == "Graph[id=body_subgraph(0) name=body_subgraph(0)]"
    assert graph.inputs == (x, n) and isinstance(graph.inputs, tuple)
    assert graph.outputs == (y, x)
    assert graph.inputs_by_name == {"x": x, "n": n}
    assert graph.constants == (c,) and graph.variables == ()
    assert set(graph.tensors) == {x, n, c, y}
    assert graph.get_tensor("body_subgraph(0)/x") is x
    assert [op.name for op in graph.ops] == ["mul"]


def test_main_graph_tensors_variables_and_constants():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(1.0, name="v")
        c = popxl.constant(2.0, name="c")
        s = popxl.h2d_stream((1,), popxl.float32, "s")
    main = ir.main_graph
    assert main.variables == (v,) and main.constants == (c,)
    assert all(isinstance(t, popxl.Tensor) for t in main.tensors)
    assert {t.id for t in main.tensors} == {"v", "c", s.tensor_id}


def test_get_tensor_unknown_id_raises_key_error():
    graph = popxl.Ir().create_empty_graph()
    with graph:
        popxl.graph_input((1,), popxl.float32, "x")
    with pytest.raises(KeyError, match="No tensor with id 'x' in graph 'graph_subgraph\\(0\\)'"):
        graph.get_tensor("x")


def test_in_tests_membership_of_tensors():
    ir = popxl.Ir()
    other = ir.create_empty_graph()
    with ir.main_graph:
        v = popxl.variable(1.0)
    with other:
        x = popxl.graph_input((), popxl.float32)
    assert v in ir.main_graph and v not in other and x in other


@pytest.mark.parametrize("value", ["v", 1, None])
def test_in_with_a_non_tensor_raises_type_error(value):
    with pytest.raises(TypeError, match="Only a Tensor can be tested for membership of a Graph"):
        value in popxl.Ir().main_graph  # noqa: B015 - the membership test is the test


def test_eq_and_hash():
    ir = popxl.Ir()
    graph = ir.create_empty_graph()
    assert ir.main_graph == ir.main_graph and graph != ir.main_graph
    assert hash(graph) == hash((graph.id, ir))
    # Same id, different Ir: not equal.
    assert popxl.Ir().main_graph != ir.main_graph
    with pytest.raises(TypeError, match="A Graph can only be compared with another Graph"):
        graph == "graph_subgraph(0)"  # noqa: B015 - the comparison is the test


# ---------------------------------------------------------------- context stack


def test_with_pushes_and_pops():
    ir = popxl.Ir()
    graph = ir.create_empty_graph()
    with ir.main_graph as main:
        assert main is ir.main_graph and popxl.gcg() is main
        with graph:
            assert popxl.gcg() is graph and popxl.gmg() is main
        assert popxl.gcg() is main
    with pytest.raises(RuntimeError):
        popxl.gcg()


def test_with_pops_when_an_exception_propagates():
    ir = popxl.Ir()
    with pytest.raises(KeyError):
        with ir.main_graph:
            raise KeyError("boom")
    with pytest.raises(RuntimeError, match="Trying to access a graph"):
        popxl.gcg()


def test_nesting_a_graph_of_another_ir_raises_runtime_error():
    first, second = popxl.Ir(), popxl.Ir()
    with first.main_graph:
        with pytest.raises(RuntimeError, match="Trying to a create a context manager nested in "
                                               "another context, when the previous context's "
                                               "Ir is different"):
            with second.main_graph:
                pass  # pragma: no cover - never entered
        assert popxl.gcg() is first.main_graph
    with second.main_graph:  # fine once the first Ir's graph is left
        assert popxl.gir() is second


# ---------------------------------------------------------------- op-created hooks


def test_hooks_fire_for_ops_of_their_graph_only():
    ir = popxl.Ir()
    body = ir.create_empty_graph()
    main_seen, body_seen = [], []
    ir.main_graph.register_op_created_hook(main_seen.append)
    body.register_op_created_hook(body_seen.append)
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        ops.relu(v)
        with body:
            ops.exp(popxl.graph_input((2,), popxl.float32))
        ops.negate(v)
    # Hooks receive PopART's ops (`popart._internal.ir` views), as in PopXL.
    assert [op.name() for op in main_seen] == ["relu", "negate"]
    assert [op.name() for op in body_seen] == ["exp"]
    assert popxl.Tensor._from_pb_tensor(main_seen[0].outTensor(0)).graph is ir.main_graph


def test_hooks_are_removed_by_handle():
    ir = popxl.Ir()
    seen_a, seen_b = [], []
    first = ir.main_graph.register_op_created_hook(seen_a.append)
    second = ir.main_graph.register_op_created_hook(seen_b.append)
    assert isinstance(first, int) and first != second
    with ir.main_graph:
        v = popxl.variable(1.0)
        ops.relu(v)
        ir.main_graph.remove_op_created_hook(first)
        ops.relu(v)
    assert len(seen_a) == 1 and len(seen_b) == 2


def test_removing_an_unknown_hook_raises_value_error():
    ir = popxl.Ir()
    handle = ir.main_graph.register_op_created_hook(lambda op: None)
    ir.main_graph.remove_op_created_hook(handle)
    with pytest.raises(ValueError, match=f"Unknown op created hook {handle}"):
        ir.main_graph.remove_op_created_hook(handle)
    with pytest.raises(ValueError, match="Unknown op created hook 0"):
        ir.create_empty_graph().remove_op_created_hook(0)


# ---------------------------------------------------------------- naming (§3.3)


def test_main_graph_ids_are_names_and_default_to_t():
    with popxl.Ir().main_graph:
        named = popxl.variable(1.0, name="w")
        unnamed = popxl.constant(1.0)
    assert (named.id, named.name, named.scope) == ("w", "w", "")
    assert unnamed.id == "t"


def test_subgraph_ids_carry_the_graph_scope():
    graph = popxl.Ir().create_empty_graph("body")
    with graph:
        x = popxl.graph_input((), popxl.float32, "x")
        y = x + 1.0
    assert (x.id, x.name, x.scope) == ("body_subgraph(0)/x", "x", "body_subgraph(0)")
    assert y.id == "body_subgraph(0)/add_out"


def test_name_scopes_prefix_names():
    graph = popxl.Ir().create_empty_graph()
    with graph, popxl.name_scope("a"), popxl.name_scope("b"):
        x = popxl.graph_input((), popxl.float32, "x")
    assert x.name == "a/b/x" and x.id == "graph_subgraph(0)/a/b/x"


def test_taken_ids_get_a_suffix_from_the_ir_wide_counter():
    ir = popxl.Ir()
    body = ir.create_empty_graph()
    with ir.main_graph:
        first = popxl.variable(1.0, name="w")
        second = popxl.variable(1.0, name="w")
        with body:
            popxl.graph_input((), popxl.float32, "w")  # not taken in this graph
            in_body = popxl.graph_input((), popxl.float32, "w")
        third = popxl.variable(1.0, name="w")
    assert [first.id, second.id, in_body.name, third.id] == ["w", "w__t0", "w__t1", "w__t2"]


def test_suffixes_skip_ids_a_user_already_took():
    with popxl.Ir().main_graph:
        popxl.variable(1.0, name="w")
        popxl.variable(1.0, name="w__t0")
        clash = popxl.variable(1.0, name="w")
    assert clash.id == "w__t1"


def test_default_output_names():
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32), name="x")
        names = [
            ops.add(x, x).name,
            ops.matmul(x, x).name,
            ops.reshape(x, (4,)).name,
            ops.cast(x, popxl.int32).name,
            ops.identity(x).name,
            *(t.name for t in ops.split(x, 2)),
            ops.add_(x, x).name,
        ]
    assert names == ["add_out", "matmul_out", "x_reshaped", "x_int32", "identity_x",
                     "x_split_0", "x_split_1", "add_lhs_inplace_out"]


def test_default_output_names_are_uniquified():
    with popxl.Ir().main_graph:
        x = popxl.variable(1.0, name="x")
        a, b = x + x, x + x
    assert (a.name, b.name) == ("add_out", "add_out__t0")
