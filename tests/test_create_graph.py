"""``Ir.create_graph``, ``create_empty_graph`` and ``Module`` (spec §6, §3.3, §4).

Graph numerics (what a traced graph computes when it is called) are in ``test_call.py``.
"""

import functools
from typing import List, Tuple  # noqa: UP035 - PopXL matches exactly these spellings

import _graph_annotations_future as future
import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.context import get_current_context
from ipuxl.ops.call import call
from ipuxl.ops.repeat import repeat


def by_ref_names(graph):
    return sorted(t.name for t in graph.inputs if t in graph._by_ref_inputs)


def specs(tensors):
    return [(t.name, t.shape, t.dtype) for t in tensors]


@pytest.fixture
def ir():
    ir = popxl.Ir()
    yield ir
    assert get_current_context().graphs == [], "a graph was left on the context stack"


@pytest.fixture
def x(ir):
    with ir.main_graph:
        return popxl.variable(np.zeros((2, 3), np.float32), name="x")


# ---------------------------------------------------------------- signature binding


def test_tensor_and_spec_arguments_become_inputs_named_after_parameters(ir, x):
    def fn(a, b, c):
        return a + c

    spec = popxl.TensorSpec((4,), popxl.int32)
    graph = ir.create_graph(fn, x, spec, x)
    assert specs(graph.inputs) == [
        ("a", (2, 3), popxl.float32), ("b", (4,), popxl.int32), ("c", (2, 3), popxl.float32)]
    assert [t.id for t in graph.inputs] == [f"{graph.id}/a", f"{graph.id}/b", f"{graph.id}/c"]
    assert [t.name for t in graph.outputs] == ["add_out"]
    assert by_ref_names(graph) == []


def test_only_the_spec_is_used_and_meta_shape_is_kept(ir, x):
    seen = {}

    def fn(t):
        seen["t"] = t
        return t

    spec = popxl.TensorSpec((2,), popxl.float16, meta_shape=(8,))
    graph = ir.create_graph(fn, spec)
    assert seen["t"] is graph.inputs[0] and seen["t"].graph is graph
    assert graph.inputs[0].meta_shape == (8,)
    graph = ir.create_graph(fn, x)
    assert seen["t"] is not x and seen["t"].graph is graph


def test_keywords_defaults_and_non_tensor_values_pass_through(ir, x):
    seen = {}

    def fn(a, n: int, flag=True, *, scale=2.0, options=None, other=None):
        seen.update(n=n, flag=flag, scale=scale, options=options, other=other)
        return a * scale

    options = {"w": x}  # a plain dict parameter is passed unchanged, tensors and all
    graph = ir.create_graph(fn, n=3, a=x, options=options, other=ir.main_graph)
    assert seen == {"n": 3, "flag": True, "scale": 2.0, "options": options,
                    "other": ir.main_graph}
    assert seen["options"]["w"] is x
    assert specs(graph.inputs) == [("a", (2, 3), popxl.float32)]


def test_keyword_only_tensor_becomes_an_input(ir, x):
    graph = ir.create_graph(lambda a, *, b: a + b, x, b=x)
    assert [t.name for t in graph.inputs] == ["a", "b"]


def test_list_and_tuple_arguments_give_one_input_per_element_and_fn_gets_a_list(ir, x):
    seen = {}

    def fn(first, xs, ys):
        seen.update(xs=xs, ys=ys)
        return [*xs, *ys]

    with ir.main_graph:
        y = popxl.variable(np.ones(4, np.int32), name="y")
    spec = popxl.TensorSpec((1,), popxl.bool)
    graph = ir.create_graph(fn, x, [x, y], (spec,))
    assert [t.name for t in graph.inputs] == ["first", "xs_0", "xs_1", "ys_0"]
    assert type(seen["xs"]) is list and type(seen["ys"]) is list
    assert seen["xs"] == list(graph.inputs[1:3]) and seen["ys"] == [graph.inputs[3]]
    assert list(graph.outputs) == list(graph.inputs[1:])


def test_list_without_tensors_and_nested_containers_pass_through(ir, x):
    seen = {}

    def fn(sizes, nested):
        seen.update(sizes=sizes, nested=nested)

    graph = ir.create_graph(fn, (1, 2), [[x]])
    assert seen == {"sizes": (1, 2), "nested": [[x]]}
    assert graph.inputs == ()


def test_var_positional_and_var_keyword_tensors(ir, x):
    seen = {}

    def fn(a, *args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        return a

    graph = ir.create_graph(fn, x, x, x, w=x, k="text")
    assert [t.name for t in graph.inputs] == ["a", "args_0", "args_1", "w"]
    assert seen["kwargs"]["k"] == "text"
    assert seen["args"][0] is graph.inputs[1] and seen["kwargs"]["w"] is graph.inputs[3]


def test_graph_inputs_created_inside_follow_the_signature_in_execution_order(ir, x):
    def fn(a, b):
        late = popxl.graph_input((3,), popxl.int32, "late")
        early = popxl.graph_input((), popxl.float32, "early", by_ref=True)
        return a + b, late, early

    graph = ir.create_graph(fn, x, x)
    assert [t.name for t in graph.inputs] == ["a", "b", "late", "early"]
    assert by_ref_names(graph) == ["early"]


# ---------------------------------------------------------------- TensorByRef


def test_by_ref_annotations(ir, x):
    def scalar(a: popxl.TensorByRef, b: popxl.Tensor):
        pass

    def lists(a: List[popxl.TensorByRef], b: Tuple[popxl.TensorByRef],  # noqa: UP006
              c: list, d: popxl.TensorByRef):
        pass

    def varargs(*args: popxl.TensorByRef, **kwargs: popxl.TensorByRef):
        pass

    def plain_varargs(*args, **kwargs):
        pass

    assert by_ref_names(ir.create_graph(scalar, x, x)) == ["a"]
    # `d` is annotated TensorByRef but gets a list: only List/Tuple[TensorByRef] count.
    assert by_ref_names(ir.create_graph(lists, [x, x], (x,), [x], [x])) == [
        "a_0", "a_1", "b_0"]
    assert by_ref_names(ir.create_graph(varargs, x, x, k=x)) == ["args_0", "args_1", "k"]
    assert by_ref_names(ir.create_graph(plain_varargs, x, k=x)) == []


def test_by_ref_annotations_under_future_annotations(ir, x):
    """ipuxl resolves string annotations (PopXL silently ignores them, spec §16.2)."""
    assert by_ref_names(ir.create_graph(future.by_ref_scalar, x, x)) == ["x"]
    assert by_ref_names(ir.create_graph(future.by_ref_lists, [x], (x, x), [x])) == [
        "xs_0", "ys_0", "ys_1"]
    assert by_ref_names(ir.create_graph(future.by_ref_varargs, x, k=x)) == ["args_0", "k"]
    assert by_ref_names(ir.create_graph(future.by_ref_with_unresolvable, x)) == ["x"]


def test_by_ref_annotation_on_module_build(ir, x):
    class Update(popxl.Module):
        def build(self, state: popxl.TensorByRef, step: popxl.Tensor):
            ops.var_updates.accumulate_(state, step)

    assert by_ref_names(ir.create_graph(Update(), x, x)) == ["state"]


# ---------------------------------------------------------------- naming


def module_level_function(t):
    return t


class Holder:
    def method(self, t):
        return t

    @staticmethod
    def static(t):
        return t


def test_graph_ids_use_qualname_without_locals_and_one_ir_wide_counter(ir, x):
    def local(t):
        return t

    class LocalModule(popxl.Module):
        def build(self, t):
            return t

    ids = [
        ir.create_graph(module_level_function, x).id,
        ir.create_graph(local, x).id,
        ir.create_graph(Holder().method, x).id,
        ir.create_graph(Holder.static, x).id,
        ir.create_graph(LocalModule(), x).id,
        ir.create_empty_graph("custom").id,
        ir.create_graph(lambda t: t, x).id,
        ir.create_empty_graph().id,
    ]
    assert ids == [
        "module_level_function_subgraph(0)",
        "test_graph_ids_use_qualname_without_locals_and_one_ir_wide_counter.local_subgraph(1)",
        "Holder.method_subgraph(2)",
        "Holder.static_subgraph(3)",
        "test_graph_ids_use_qualname_without_locals_and_one_ir_wide_counter."
        "LocalModule_subgraph(4)",
        "custom_subgraph(5)",
        "test_graph_ids_use_qualname_without_locals_and_one_ir_wide_counter."
        "<lambda>_subgraph(6)",
        "graph_subgraph(7)",
    ]
    assert [g.id for g in ir.graphs] == ["", *ids]
    assert all(g.name == g.id for g in ir.graphs)


def test_repeat_wrapper_graphs_take_a_counter_value(ir, x):
    with ir.main_graph:
        body = ir.create_graph(module_level_function, x)
        repeat(body, 2, x)
    after = ir.create_empty_graph()
    assert body.id == "module_level_function_subgraph(0)"
    assert after.id == "graph_subgraph(2)"
    assert ir.graphs[2].id == "module_level_function_subgraph(0)__loop_wrapper_subgraph(1)"


def test_counters_are_per_ir(x):
    first, second = popxl.Ir(), popxl.Ir()
    first.create_empty_graph()
    assert second.create_empty_graph().id == "graph_subgraph(0)"


def test_same_function_traced_twice_gives_two_graphs_at_their_own_shapes(ir, x):
    spec = popxl.TensorSpec((5,), popxl.int32)
    a = ir.create_graph(module_level_function, x)
    b = ir.create_graph(module_level_function, spec)
    assert a != b and a.id != b.id
    assert a.outputs[0].shape == (2, 3) and b.outputs[0].shape == (5,)


# ---------------------------------------------------------------- empty graph, outputs


def test_create_empty_graph_has_no_inputs_outputs_or_ops(ir):
    graph = ir.create_empty_graph("blank")
    assert (graph.inputs, graph.outputs, graph.ops) == ((), (), ())
    assert ir.get_graph(graph.id) is graph
    with graph:
        t = popxl.graph_input((2,), popxl.float32, "t")
        popxl.graph_output(ops.relu(t))
    assert specs(graph.inputs) == [("t", (2,), popxl.float32)]
    assert [t.name for t in graph.outputs] == ["relu_out"]


@pytest.mark.parametrize(
    "result, count",
    [
        (lambda t: None, 0),
        (lambda t: t, 1),
        (lambda t: (t, t + t), 2),
        (lambda t: [t], 1),
        (lambda t: (u for u in (t, t)), 2),
        (lambda t: [], 0),
    ],
)
def test_outputs_none_tensor_or_iterable_of_tensors(ir, x, result, count):
    graph = ir.create_graph(result, x)
    assert len(graph.outputs) == count


def test_create_graph_needs_no_context_and_leaves_the_stack_as_it_was(ir, x):
    assert get_current_context().graphs == []
    graph = ir.create_graph(lambda t: t * 2.0, x)
    assert get_current_context().graphs == []
    with ir.main_graph:
        ir.create_graph(lambda t: t * 2.0, x)
        assert popxl.gcg() is ir.main_graph
    assert graph.constants[0].graph is graph


def test_the_subgraph_is_current_while_tracing(ir, x):
    seen = {}

    def fn(t):
        seen["current"] = popxl.gcg()
        seen["main"] = popxl.gmg()

    graph = ir.create_graph(fn, x)
    assert seen == {"current": graph, "main": ir.main_graph}


# ---------------------------------------------------------------- Module


def test_module_call_returns_build_and_base_build_raises(ir, x):
    class Double(popxl.Module):
        def __init__(self):
            self.w = None

        def build(self, t, scale=2.0):
            self.w = popxl.graph_input(t.shape, t.dtype, "w")
            return t * scale + self.w

    module = Double()
    graph = ir.create_graph(module, x, scale=3.0)
    assert graph.id == ("test_module_call_returns_build_and_base_build_raises."
                        "Double_subgraph(0)")
    assert [t.name for t in graph.inputs] == ["t", "w"]
    assert module.w is graph.inputs[1]
    with ir.main_graph:
        direct = module(x, 1.0)  # __call__ is build: ops go into the current graph
    assert direct.graph is ir.main_graph
    with pytest.raises(NotImplementedError, match="^Your popxl.Module must override `build` "
                       "method"):
        popxl.Module()()
    with pytest.raises(NotImplementedError, match="^Your popxl.Module must override `build`"):
        ir.create_graph(popxl.Module(), x)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("fn", [5, "fn", functools.partial(module_level_function)])
def test_fn_must_be_a_function_or_module(ir, x, fn):
    with pytest.raises(TypeError, match="^Callable `fn` must be either a function or a class "
                       "that extends popxl.Module"):
        ir.create_graph(fn, x)


@pytest.mark.parametrize(
    "args, kwargs",
    [((), {}), (("x", "x"), {}), ((), {"t": "x", "u": "x"}), (("x",), {"t": "x"})],
)
def test_arguments_must_match_the_signature(ir, x, args, kwargs):
    args = [x for _ in args]
    kwargs = {k: x for k in kwargs}
    with pytest.raises(ValueError, match="^The arguments, `args` and `kwargs`, do not match the "
                       "signature of the function `fn`."):
        ir.create_graph(module_level_function, *args, **kwargs)


def test_list_mixing_tensors_and_other_values(ir, x):
    with pytest.raises(TypeError, match="^A list argument can't contain a mixture of Tensors "
                       "and other types"):
        ir.create_graph(lambda xs: None, [x, 1])
    with pytest.raises(TypeError, match="^A tuple argument can't contain a mixture"):
        ir.create_graph(lambda xs: None, (popxl.TensorSpec((1,), popxl.int8), "a"))


@pytest.mark.parametrize("result", [1, "text", [1], {"a": 1}, np.zeros(2)])
def test_output_must_be_none_tensor_or_iterable_of_tensors(ir, x, result):
    with pytest.raises(ValueError, match="^Output of subgraph must be None, a Tensor or an "
                       "iterable of Tensors"):
        ir.create_graph(lambda t: result, x)


def test_mixed_output_list(ir, x):
    with pytest.raises(ValueError, match="^Output of subgraph must be None"):
        ir.create_graph(lambda t: [t, 1], x)


def test_capturing_a_parent_tensor_raises(ir, x):
    with pytest.raises(ValueError, match="^The input tensor `.*` is not in the current Graph"):
        ir.create_graph(lambda t: t + x, x)
    with pytest.raises(ValueError, match="is not in the current Graph"):
        ir.create_graph(lambda: ops.relu(x))
    with pytest.raises(ValueError, match="is not in the current Graph"):
        ir.create_graph(lambda t: x, x)  # returning it: graph_output checks the graph too


def test_an_error_while_tracing_pops_the_subgraph(ir, x):
    def broken(t):
        raise KeyError("inside")

    with ir.main_graph, pytest.raises(KeyError):
        ir.create_graph(broken, x)
    assert get_current_context().graphs == []


# ---------------------------------------------------------------- hooks, printing


def test_op_created_hooks_fire_only_for_their_graph(ir, x):
    main_ops, sub_ops = [], []
    ir.main_graph.register_op_created_hook(lambda op: main_ops.append(op.name()))
    with ir.main_graph:
        graph = ir.create_graph(lambda t: ops.relu(t) + t, x)
        graph.register_op_created_hook(lambda op: sub_ops.append(op.name()))
        with graph:
            ops.exp(graph.inputs[0])
        call(graph, x)
        repeat(ir.create_graph(lambda t: ops.sin(t), x), 2, x)
    assert main_ops == ["call", "repeat"]
    assert sub_ops == ["exp"]


def test_ir_text_prints_each_subgraph_once_and_call_sites_name_it(ir, x):
    with ir.main_graph:
        graph = ir.create_graph(lambda t, u: (ops.relu(t), u * t), x, x)
        call(graph, x, x)
        call(graph, x, inputs_dict={graph.inputs[1]: x})
    text = str(ir)
    header = f"graph {graph.id}(t: f32[2,3], u: f32[2,3])"
    assert text.count(header) == 1
    body = text[text.index(header):]
    assert "relu_out: f32[2,3] = relu(t)" in body
    assert "return (relu_out, mul_out)" in body
    assert text.count(f"call[graphs=({graph.id},)") == 2
    main = text[:text.index(header)]
    assert "relu_out: f32[2,3], mul_out: f32[2,3] = call" in main
    assert "relu_out__t" in main  # the second call's outputs are made unique
    assert str(graph).startswith(header)
