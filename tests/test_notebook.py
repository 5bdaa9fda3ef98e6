"""Notebook views: ``_repr_html_`` and ``_repr_pretty_`` of ``Ir``, ``Graph`` and ``Tensor``
(``ipuxl.notebook``)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import notebook
from ipuxl.printing import format_graph

_VOID = {"br", "hr", "img", "meta", "input", "link"}


class _Checker(HTMLParser):
    """Checks that tags are balanced, and collects the text and the ``<details>`` tags."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.details: list[bool] = []  # open attribute of each <details>, in order
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "details":
            self.details.append("open" in dict(attrs))
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack.pop() == tag, f"unbalanced </{tag}>"

    def handle_data(self, data):
        self.text.append(data)


def check_html(html: str) -> _Checker:
    checker = _Checker()
    checker.feed(html)
    checker.close()
    assert checker.stack == [], checker.stack
    return checker


def build() -> tuple[popxl.Ir, dict]:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, 3), popxl.float32, "x"))
        w = popxl.variable(np.ones((3, 3), np.float32), name='w <b> & "c"')
        g = ir.create_graph(lambda t: ops.relu(t) + 1.0, x.spec)
        (y,) = ops.call(g, x @ w)
        ops.var_updates.accumulate_(w, w)
        body = ir.create_graph(lambda t: ops.exp(t), y.spec)
        (z,) = ops.repeat(body, 2, y)
    return ir, {"x": x, "w": w, "y": y, "z": z, "g": g, "body": body}


# ----------------------------------------------------------------------------- Ir
def test_ir_html_has_one_details_block_per_graph_main_open_subgraphs_collapsed():
    ir, _ = build()
    html = ir._repr_html_()
    assert html == notebook.ir_html(ir)
    checker = check_html(html)
    assert checker.details == [True] + [False] * (len(ir.graphs) - 1)
    assert html.count("<details open>") == 1


def test_ir_html_holds_each_graphs_text_form():
    ir, _ = build()
    text = "".join(check_html(notebook.ir_html(ir)).text)
    for graph in ir.graphs:
        assert format_graph(graph) in text


def test_ir_html_header_counts():
    ir, _ = build()
    text = "".join(check_html(notebook.ir_html(ir)).text)
    n_ops = sum(len(g.ops) for g in ir.graphs)
    assert (f"Ir {ir.id}: {len(ir.graphs)} graphs, {n_ops} ops, 1 variable (36 bytes)"
            in text)


def test_names_are_html_escaped():
    ir, _ = build()
    html = notebook.ir_html(ir)
    assert "<b>" not in html.replace("<b>Ir", "")  # the only <b> is the header's
    assert "w &lt;b&gt; &amp; &quot;c&quot;" in html


def test_source_lines_link_to_the_file():
    ir, t = build()
    html = notebook.ir_html(ir)
    matmul = t["y"].graph.ops[2]  # after the host load's init and load
    assert matmul.name == "matmul"
    file, line = matmul.location
    link = re.escape(f'href="file://{file}#L{line}"')
    assert re.search(rf"matmul\(.*\).*# <a {link} title=\"[^\"]+\">test_notebook.py:{line}</a>",
                     html)


def test_a_long_graph_is_cut_with_a_marker():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        for _ in range(3000):
            x = ops.relu(x)
    lines = format_graph(ir.main_graph).split("\n")
    html = notebook.ir_html(ir)
    text = "".join(check_html(html).text)
    omitted = len(lines) - notebook.HEAD_LINES - notebook.TAIL_LINES
    assert f"\u2026 {omitted:,} lines omitted (print(ir) shows all)" in text
    assert "%0    relu_out" in text and "%2999 " in text
    assert "%1500 " not in text
    assert text.count("\n") < notebook.HEAD_LINES + notebook.TAIL_LINES + 10
    assert len(html) < 400_000


def test_a_short_graph_is_not_cut():
    ir, _ = build()
    assert "omitted" not in notebook.ir_html(ir)


# ----------------------------------------------------------------------------- Graph
def test_graph_html_shows_the_graph_open_and_its_callees_collapsed():
    ir, t = build()
    html = ir.main_graph._repr_html_()
    checker = check_html(html)
    assert checker.details == [True] + [False] * (len(ir.graphs) - 1)
    g_html = t["g"]._repr_html_()
    checker = check_html(g_html)
    assert checker.details == [True]
    assert format_graph(t["g"]) in "".join(checker.text)
    assert f"Graph {t['g'].id}: 2 ops, 1 input, 1 output" in "".join(checker.text)


# ----------------------------------------------------------------------------- Tensor
def test_tensor_html_shows_dtype_shape_graph_producer_and_location():
    _, t = build()
    y = t["y"]
    html = y._repr_html_()
    text = "".join(check_html(html).text)
    assert f"Tensor[{y.name} float32 (2, 3)]" in text
    assert "f32[2,3]" in text
    call = y.graph.ops[3]
    assert f"%3 {y.name}: f32[2,3] = call[" in text
    assert f"test_notebook.py:{call.location[1]}" in text
    w_text = "".join(check_html(t["w"]._repr_html_()).text)
    assert 'Variable[w <b> & "c" float32 (3, 3)]' in w_text
    assert "none (a variable, constant, stream or graph input)" in w_text


def test_subgraph_tensor_html_names_its_graph():
    _, t = build()
    inner = t["g"].outputs[0]
    text = "".join(check_html(inner._repr_html_()).text)
    assert t["g"].id in text and "add" in text


# ----------------------------------------------------------------------------- pretty
class _FakePrinter:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def text(self, text: str) -> None:
        self.parts.append(text)


def _pretty(obj) -> str:
    try:
        from IPython.lib.pretty import pretty
    except ImportError:
        printer = _FakePrinter()
        obj._repr_pretty_(printer, False)
        return "".join(printer.parts)
    return pretty(obj)


@pytest.mark.parametrize("which", ["ir", "graph", "tensor", "variable"])
def test_repr_pretty_is_the_text_form(which):
    ir, t = build()
    obj = {"ir": ir, "graph": t["g"], "tensor": t["z"], "variable": t["w"]}[which]
    assert _pretty(obj) == str(obj)
    printer = _FakePrinter()
    obj._repr_pretty_(printer, False)
    assert printer.parts == [str(obj)]
    if which in ("tensor", "variable"):
        assert str(obj) == repr(obj)


def test_session_views(monkeypatch):
    import numpy as np

    import ipuxl as popxl
    import ipuxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(3, np.float32), name="w")
        ops.host_store(popxl.d2h_stream((3,), popxl.float32, "y"), w + 1.0)
    monkeypatch.delenv("IPUXL_IPU_MODEL_TILES", raising=False)  # the full chip
    session = popxl.Session(ir, "ipu_model")

    class Printer:
        def __init__(self):
            self.parts = []

        def text(self, value):
            self.parts.append(value)

    printer = Printer()
    session._repr_pretty_(printer, False)
    line = printer.parts[0]
    assert line.startswith(f"Session of Ir {ir.id} on ipu_model")
    assert "not attached: 1 variable, 0 input streams, 1 output stream" in line
    assert "IPU model (est.): 1472-tile GC200 (ipu2), fits" in line
    html = session._repr_html_()
    assert "<details><summary>Ir" in html and "host_store" in html
