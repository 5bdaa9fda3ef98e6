"""``ipuxl.to_dot`` and ``POPART_DOT_CHECKS`` (``Ir.dot_checkpoint``).

The DOT text is read back with the small parser below, which accepts only the statement
forms ``to_dot`` documents (one per line) and fails on anything else, so a badly escaped
name shows up as a parse error rather than a silently different drawing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.dot as dot_module
import ipuxl.ops as ops
from ipuxl.dot import dot_checks, to_dot, write_checkpoint, write_dot_checkpoint

_STRING = r'"(?:[^"\\]|\\.)*"'
_NODE = re.compile(rf"^\s*({_STRING}) \[(.*)\];$")
_EDGE = re.compile(rf"^\s*({_STRING}) -> ({_STRING}) \[(.*)\];$")
_ATTR = re.compile(rf"(\w+)=({_STRING}|[^,\s]+)")
_CLUSTER = re.compile(rf"^\s*subgraph ({_STRING}) \{{$")
_LABEL = re.compile(rf"^\s*label=({_STRING});$")
_FIXED = {'digraph "ipuxl" {', "compound=true;", "newrank=true;", "}"}


def _unquote(text: str) -> str:
    assert text.startswith('"') and text.endswith('"'), text
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text[1:-1])


def _attrs(text: str) -> dict[str, str]:
    found = {k: _unquote(v) if v.startswith('"') else v for k, v in _ATTR.findall(text)}
    # Every character of the list must belong to an attribute: nothing unparsed is left.
    assert _ATTR.sub("", text).replace(",", "").strip() == "", text
    return found


@dataclasses.dataclass
class Dot:
    clusters: dict[str, str]  # cluster name -> label, in order
    nodes: dict[str, tuple[str, dict[str, str]]]  # id -> (cluster, attributes)
    edges: list[tuple[str, str, dict[str, str]]]

    def nodes_of(self, cls: str) -> list[str]:
        return [n for n, (_, attrs) in self.nodes.items() if attrs["class"] == cls]

    def into(self, node: str) -> list[tuple[str, dict[str, str]]]:
        """The data edges into ``node`` (not dotted stream or dashed call edges), in order."""
        return [(s, a) for s, d, a in self.edges
                if d == node and a.get("style") not in ("dotted", "dashed")]


def parse(text: str) -> Dot:
    """Read ``to_dot``'s output; any line of another form fails the test."""
    dot = Dot({}, {}, [])
    cluster = None
    for line in text.splitlines():
        stripped = line.strip()
        if (match := _CLUSTER.match(line)) is not None:
            assert cluster is None, "clusters do not nest"
            cluster = _unquote(match.group(1))
            dot.clusters[cluster] = ""
        elif (match := _LABEL.match(line)) is not None and cluster is not None:
            dot.clusters[cluster] = _unquote(match.group(1))
        elif (match := _EDGE.match(line)) is not None:
            src, dst = _unquote(match.group(1)), _unquote(match.group(2))
            dot.edges.append((src, dst, _attrs(match.group(3))))
        elif stripped.startswith(("node [", "edge [")):
            continue
        elif (match := _NODE.match(line)) is not None:
            node = _unquote(match.group(1))
            assert node not in dot.nodes and cluster is not None, line
            dot.nodes[node] = (cluster, _attrs(match.group(2)))
        elif stripped == "}" and cluster is not None and line.startswith("  }"):
            cluster = None
        else:
            assert stripped in _FIXED, f"unexpected DOT line: {line!r}"
    assert cluster is None
    for src, dst, _ in dot.edges:
        assert src in dot.nodes and dst in dot.nodes, (src, dst)
    return dot


def build_example() -> tuple[popxl.Ir, dict]:
    """A stream in and out, a variable, a call, an in-place add_ and accumulate_, a repeat."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, 3), popxl.float32, "x"))
        w = popxl.variable(np.ones((3, 3), np.float32), name="w")
        g = ir.create_graph(lambda t: ops.relu(t) + 1.0, x.spec)
        (y,) = ops.call(g, x @ w)
        ops.var_updates.accumulate_(w, w)
        ops.add_(y, x)
        body = ir.create_graph(lambda t: ops.relu(t), y.spec)
        (z,) = ops.repeat(body, 3, y)
        ops.host_store(popxl.d2h_stream((2, 3), popxl.float32, "y"), z)
    return ir, {"g": g, "body": body}


def _type(t) -> str:
    return f"{t.dtype.name}[{','.join(map(str, t.shape))}]"


def _op_node(ir: popxl.Ir, op) -> str:
    graphs = list(ir.graphs)
    return f"g{graphs.index(op.graph)}_op{list(op.graph.ops).index(op)}"


# ----------------------------------------------------------------------------- structure
def test_one_cluster_per_graph_labelled_with_its_name():
    ir, _ = build_example()
    dot = parse(to_dot(ir))
    assert list(dot.clusters) == [f"cluster_{n}" for n in range(len(ir.graphs))]
    assert list(dot.clusters.values()) == ["main", *(g.id for g in ir.graphs[1:])]


def test_a_node_per_op_and_per_source_tensor_in_the_right_cluster():
    ir, _ = build_example()
    dot = parse(to_dot(ir))
    for n, graph in enumerate(ir.graphs):
        in_cluster = {c for c, _ in dot.nodes.values()}
        assert f"cluster_{n}" in in_cluster
        ops_here = [i for i, (c, a) in dot.nodes.items()
                    if c == f"cluster_{n}" and a["class"] == "op"]
        assert len(ops_here) == len(graph.ops)
        sources = [t for t in graph.tensors
                   if t._producer is None and t.id not in ir._streams]
        tensors_here = [a["label"] for c, a in dot.nodes.values()
                        if c == f"cluster_{n}" and a["class"] == "tensor"]
        assert tensors_here == [f"{t.name}\n{_type(t)}" for t in sources]
    assert len(dot.nodes_of("op")) == sum(len(g.ops) for g in ir.graphs)
    assert len(dot.nodes_of("stream")) == 2


def test_op_labels_are_the_name_and_output_types_and_tooltips_the_source_line():
    ir, _ = build_example()
    dot = parse(to_dot(ir))
    for graph in ir.graphs:
        for op in graph.ops:
            _, attrs = dot.nodes[_op_node(ir, op)]
            assert attrs["label"] == "\n".join([op.name, *(_type(t) for t in op.outputs)])
            assert attrs["tooltip"] == f"{op.location[0]}:{op.location[1]}"
    matmul = next(op for op in ir.main_graph.ops if op.name == "matmul")
    assert dot.nodes[_op_node(ir, matmul)][1]["label"] == "matmul\nfloat32[2,3]"


def test_an_edge_per_data_dependency_labelled_with_the_tensor_and_its_type():
    ir, _ = build_example()
    dot = parse(to_dot(ir))
    for graph in ir.graphs:
        for op in graph.ops:
            edges = dot.into(_op_node(ir, op))
            labels = [a["label"].removeprefix("writes ") for _, a in edges]
            assert labels == [f"{t.name} {_type(t)}" for t in op.inputs]
            for (src, _), tensor in zip(edges, op.inputs):
                if tensor._producer is not None:
                    assert src == _op_node(ir, tensor._producer)
                else:
                    assert dot.nodes[src][1]["label"].split("\n")[0] == tensor.name
    data_edges = [e for e in dot.edges if e[2].get("style") not in ("dotted", "dashed")]
    assert len(data_edges) == sum(len(op.inputs) for g in ir.graphs for op in g.ops)


def test_streams_feed_host_load_and_receive_host_store():
    ir, _ = build_example()
    dot = parse(to_dot(ir))
    load, store = (next(op for op in ir.main_graph.ops if op.name == name)
                   for name in ("host_load", "host_store"))
    streams = {dot.nodes[s][1]["label"]: s for s in dot.nodes_of("stream")}
    assert set(streams) == {"x\nfloat32[2,3]", "y\nfloat32[2,3]"}
    dotted = {(s, d) for s, d, a in dot.edges if a.get("style") == "dotted"}
    assert dotted == {(streams["x\nfloat32[2,3]"], _op_node(ir, load)),
                      (_op_node(ir, store), streams["y\nfloat32[2,3]"])}


def test_in_place_ops_and_their_written_inputs_are_marked():
    ir, _ = build_example()
    dot = parse(to_dot(ir))
    by_name = {op.name: op for op in ir.main_graph.ops}
    for name in ("add_", "accumulate_"):
        node = _op_node(ir, by_name[name])
        attrs = dot.nodes[node][1]
        assert attrs["color"] == "red" and "filled" in attrs["style"]
        (written, w_attrs), (_, other) = dot.into(node)
        target = by_name[name].inputs[0]
        assert w_attrs["label"] == f"writes {target.name} {_type(target)}"
        assert (w_attrs["style"], w_attrs["color"]) == ("bold", "red")
        assert "color" not in other and not other["label"].startswith("writes")
    matmul = dot.nodes[_op_node(ir, by_name["matmul"])][1]
    assert "color" not in matmul and "filled" not in matmul["style"]
    assert all("color" not in a for _, a in dot.into(_op_node(ir, by_name["matmul"])))


def test_call_and_repeat_edges_go_into_the_called_clusters():
    ir, graphs = build_example()
    dot = parse(to_dot(ir))
    first_in = {}
    for node, (cluster, _) in dot.nodes.items():
        first_in.setdefault(cluster, node)
    calls = [(s, d, a) for s, d, a in dot.edges if a.get("style") == "dashed"]
    expected = []
    for graph in ir.graphs:
        for op in graph.ops:
            for callee in op.attrs.get("graphs", ()):
                cluster = f"cluster_{list(ir.graphs).index(callee)}"
                expected.append((_op_node(ir, op), first_in[cluster], cluster, op.name))
    assert sorted((s, d, a["lhead"], a["label"]) for s, d, a in calls) == sorted(expected)
    assert {e[3] for e in expected} == {"call", "repeat"}
    call_target = next(e for e in expected if e[3] == "call" and e[0].startswith("g0_"))
    assert call_target[2] == f"cluster_{list(ir.graphs).index(graphs['g'])}"
    assert "  compound=true;" in to_dot(ir).splitlines()


def test_a_graph_draws_itself_and_the_graphs_it_calls():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        inner = ir.create_graph(lambda t: ops.relu(t), x.spec)
        ir.create_graph(lambda t: ops.exp(t), x.spec)  # not called: not drawn
        outer = ir.create_graph(lambda t: ops.call(inner, t)[0] * 2.0, x.spec)
        ops.call(outer, x)
    dot = parse(to_dot(outer))
    assert list(dot.clusters.values()) == [outer.id, inner.id]
    assert [a["label"].split("\n")[0] for _, a in dot.nodes.values() if a["class"] == "op"] \
        == ["call", "mul", "relu"]


def test_odd_names_are_escaped():
    names = ['a "b"/c', "back\\slash", "x (1).y {z}", "two\nlines"]
    ir = popxl.Ir()
    with ir.main_graph:
        tensors = [popxl.variable(np.ones(2, np.float32), name=n) for n in names]
        ops.add(tensors[0], tensors[1])
        ops.add(tensors[2], tensors[3])
    text = to_dot(ir)
    dot = parse(text)
    labels = [a["label"] for _, a in dot.nodes.values() if a["class"] == "tensor"]
    assert labels == [f"{n}\nfloat32[2]" for n in names]
    edge_labels = [a["label"] for _, _, a in dot.edges]
    assert edge_labels == [f"{n} float32[2]" for n in names]
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg"], input=text.encode(), capture_output=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr


def test_an_empty_graph_gets_a_placeholder_node():
    ir = popxl.Ir()
    dot = parse(to_dot(ir))
    assert dot.clusters == {"cluster_0": "main"}
    assert dot.nodes_of("empty") == ["g0_empty"]


def test_output_is_deterministic():
    assert to_dot(build_example()[0]) == to_dot(build_example()[0])


def test_to_dot_refuses_other_values():
    with pytest.raises(TypeError, match="to_dot takes an Ir or a Graph, got str"):
        to_dot("main")


def test_to_dot_is_exported_but_not_in_popxl_all():
    assert popxl.to_dot is to_dot
    assert "to_dot" not in popxl.__all__


def test_a_10000_op_program():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((4, 4), np.float32), name="x")
        for i in range(10_000):
            x = ops.relu(x) if i % 2 else ops.add(x, x)
    dot = parse(to_dot(ir))
    assert len(dot.nodes_of("op")) == 10_000 and len(dot.nodes_of("tensor")) == 1
    assert len(dot.edges) == 15_000


# ----------------------------------------------------------------------------- POPART_DOT_CHECKS
@pytest.fixture
def no_graphviz(monkeypatch):
    monkeypatch.setattr(dot_module.shutil, "which", lambda name: None)


def test_an_enabled_check_writes_a_numbered_dot_file(tmp_path, monkeypatch, no_graphviz):
    ir, _ = build_example()
    monkeypatch.setenv("POPART_DOT_CHECKS", "FWD0:FINAL")
    assert write_dot_checkpoint(ir, "FINAL", str(tmp_path)) == [str(tmp_path / "0000_FINAL.dot")]
    assert (tmp_path / "0000_FINAL.dot").read_text() == to_dot(ir)
    ir.dot_checkpoint("FWD0", str(tmp_path))
    ir.dot_checkpoint("FINAL", str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["0000_FINAL.dot", "0001_FWD0.dot", "0002_FINAL.dot"]


def test_a_disabled_check_writes_nothing(tmp_path, monkeypatch, no_graphviz):
    ir, _ = build_example()
    monkeypatch.setenv("POPART_DOT_CHECKS", "FINAL")
    assert write_dot_checkpoint(ir, "FWD0", str(tmp_path / "out")) == []
    assert os.listdir(tmp_path / "out") == []  # created: it is the Ir's logDir now
    monkeypatch.setenv("POPART_DOT_CHECKS", "")  # set, even empty: no check is added
    ir.dot_checkpoint("FINAL")
    assert os.listdir(tmp_path / "out") == []
    assert ir._pb_ir.getSessionOptions().dotChecks == []


def test_checks_come_from_the_option_and_the_environment_in_upper_case(
        tmp_path, monkeypatch, no_graphviz):
    ir, _ = build_example()
    monkeypatch.setenv("POPART_DOT_CHECKS", "bar:")
    options = ir._pb_ir.getSessionOptions()
    options.dotChecks = {"foo"}
    options.logDir = str(tmp_path)
    assert dot_checks(ir) == {"FOO", "BAR"}
    for check in ("Foo", "BAR", "Baz"):
        write_checkpoint(ir, check)
    assert sorted(os.listdir(tmp_path)) == ["0000_Foo.dot", "0001_BAR.dot"]
    options.dotChecks = "baz"  # one name
    assert dot_checks(ir) == {"BAZ", "BAR"}


def test_a_checkpoint_with_no_checks_set_enables_them_all(tmp_path, monkeypatch, no_graphviz):
    ir, _ = build_example()
    monkeypatch.delenv("POPART_DOT_CHECKS", raising=False)
    assert write_checkpoint(ir, "Foo") == []  # PopART's rule alone adds nothing
    ir.dot_checkpoint("Foo", str(tmp_path))
    assert ir._pb_ir.getSessionOptions().dotChecks == {"ALL"}
    write_checkpoint(ir, "Anything")
    assert sorted(os.listdir(tmp_path)) == ["0000_Foo.dot", "0001_Anything.dot"]


def test_a_session_writes_the_final_checkpoint(tmp_path, monkeypatch, no_graphviz):
    monkeypatch.setenv("POPART_DOT_CHECKS", "")
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2,), popxl.float32, "x"))
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, "y"), ops.relu(x))
    options = ir._pb_ir.getSessionOptions()
    options.logDir = str(tmp_path)
    popxl.Session(ir, "cpu")
    assert os.listdir(tmp_path) == []  # no check enabled
    options.dotChecks = {"FINAL"}
    popxl.Session(ir, "cpu")
    assert os.listdir(tmp_path) == ["0000_Final.dot"]
    assert (tmp_path / "0000_Final.dot").read_text() == to_dot(ir)


def test_all_enables_every_check(tmp_path, monkeypatch, no_graphviz):
    ir, _ = build_example()
    monkeypatch.setenv("POPART_DOT_CHECKS", "ALL")
    ir.dot_checkpoint("FWD0", str(tmp_path))
    ir.dot_checkpoint("bad/name", str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["0000_FWD0.dot", "0001_bad_name.dot"]


def test_each_ir_numbers_its_own_files(tmp_path, monkeypatch, no_graphviz):
    monkeypatch.setenv("POPART_DOT_CHECKS", "FINAL")
    first, second = build_example()[0], popxl.Ir()
    write_dot_checkpoint(first, "FINAL", str(tmp_path / "a"))
    write_dot_checkpoint(second, "FINAL", str(tmp_path / "b"))
    assert os.listdir(tmp_path / "a") == os.listdir(tmp_path / "b") == ["0000_FINAL.dot"]


def test_the_directory_is_log_dir_then_popart_log_dir_then_cwd(tmp_path, monkeypatch,
                                                                no_graphviz):
    ir = popxl.Ir()
    monkeypatch.setenv("POPART_DOT_CHECKS", "FINAL")
    monkeypatch.setenv("POPART_LOG_DIR", str(tmp_path / "log"))
    monkeypatch.chdir(tmp_path)
    write_dot_checkpoint(ir, "FINAL")
    monkeypatch.delenv("POPART_LOG_DIR")
    assert write_dot_checkpoint(ir, "FINAL") == [os.path.join(".", "0001_FINAL.dot")]
    write_dot_checkpoint(ir, "FINAL", str(tmp_path / "given"))  # save_dir: the Ir's logDir
    assert ir._pb_ir.getSessionOptions().logDir == str(tmp_path / "given")
    write_dot_checkpoint(ir, "FINAL")  # every later checkpoint goes there too
    assert os.listdir(tmp_path / "log") == ["0000_FINAL.dot"]
    assert (tmp_path / "0001_FINAL.dot").exists()
    assert sorted(os.listdir(tmp_path / "given")) == ["0002_FINAL.dot", "0003_FINAL.dot"]


def _fake_dot(tmp_path, body: str) -> str:
    script = tmp_path / "fake_dot"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_svg_is_rendered_with_the_dot_executable(tmp_path, monkeypatch):
    # A stand-in for Graphviz: `dot -Tsvg <in> -o <out>` copies a marker into <out>.
    fake = _fake_dot(tmp_path, 'test "$1" = -Tsvg && test "$3" = -o && echo "<svg>$2</svg>" > "$4"')
    monkeypatch.setattr(dot_module.shutil, "which", lambda name: fake if name == "dot" else None)
    monkeypatch.setenv("POPART_DOT_CHECKS", "FINAL")
    out = tmp_path / "out"
    paths = write_dot_checkpoint(popxl.Ir(), "FINAL", str(out))
    assert paths == [str(out / "0000_FINAL.dot"), str(out / "0000_FINAL.svg")]
    assert (out / "0000_FINAL.svg").read_text() == f"<svg>{out / '0000_FINAL.dot'}</svg>\n"


def test_a_failing_dot_executable_is_logged_not_raised(tmp_path, monkeypatch, caplog):
    fake = _fake_dot(tmp_path, "echo broken >&2; exit 3")
    monkeypatch.setattr(dot_module.shutil, "which", lambda name: fake)
    monkeypatch.setenv("POPART_DOT_CHECKS", "FINAL")
    with caplog.at_level(logging.WARNING, logger="popart"):
        paths = write_dot_checkpoint(popxl.Ir(), "FINAL", str(tmp_path / "out"))
    assert paths == [str(tmp_path / "out" / "0000_FINAL.dot")]
    assert "Could not render" in caplog.text and "broken" in caplog.text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graphviz_renders_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("POPART_DOT_CHECKS", "ALL")
    ir, _ = build_example()
    paths = write_dot_checkpoint(ir, "FINAL", str(tmp_path))
    assert paths[1].endswith(".svg") and "<svg" in pathlib.Path(paths[1]).read_text()
