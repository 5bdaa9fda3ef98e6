"""``print_tensor``: an identity op that prints its input to stderr when the program runs.

The print is a JAX debug callback with ordered effects, so prints appear at run time, once
per execution (also inside loops), in program order. Formatting uses numpy's array
printing with options built from the op's arguments. A print that fails writes a warning
line instead: printing never fails a run.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
    ...     y = ops.print_tensor(x)   # at run time: "print_x: [0. 1. 2.]" on stderr
    >>> y.name
    'print_out'
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from ipuxl.host_callbacks import register_callback_op
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.type_rules import same_as_input
from ipuxl.replica_axis import replica_count, replica_index
from ipuxl.tensor import Tensor

if TYPE_CHECKING:
    from ipuxl.lowering import GraphLowering
    from ipuxl.op import Op

__all__ = ["print_tensor"]

_FLOAT_FORMATS = ("auto", "fixed", "scientific", "none")


def format_tensor(value: np.ndarray, *, summarise_threshold: int, edge_items: int,
                  max_line_width: int, digits: int, float_format: str, separator: str,
                  open_bracket: str, close_bracket: str) -> str:
    """The text ``print_tensor`` prints for ``value`` (without the title)."""
    array = np.asarray(value)
    if array.dtype.kind == "V" or type(array.dtype).__module__.startswith("ml_dtypes"):
        array = array.astype(np.float32)  # float8 and bfloat16 print as their float values
    # 0 turns summarising and line splitting off (PopXL's rule; NumPy would read 0 as
    # "summarise everything" and "one item per line").
    options: dict[str, Any] = {
        "max_line_width": max_line_width if max_line_width > 0 else sys.maxsize,
        "threshold": summarise_threshold if summarise_threshold > 0 else sys.maxsize,
        "edgeitems": edge_items,
        "separator": separator,
    }
    if float_format == "auto" and array.dtype.kind == "f":
        float_format, digits = _auto_format(array, digits)
    if float_format == "auto":
        options.update(precision=digits, floatmode="maxprec")
    elif float_format == "fixed":
        options.update(precision=digits, floatmode="fixed", suppress_small=True)
    elif float_format == "scientific":
        options["formatter"] = {
            "float_kind": lambda v: np.format_float_scientific(v, precision=digits,
                                                               unique=False)}
    else:
        options["floatmode"] = "unique"
    text = np.array2string(array, **options)
    return text.replace("[", open_bracket).replace("]", close_bracket)


def _auto_format(array: np.ndarray, digits: int) -> tuple[str, int]:
    """Poplar's automatic float format: ``digits`` significant digits in fixed point,
    counted from the integer digits of the largest magnitude (at least one: ``[1, 2]``
    prints ``1.0000000 2.0000000``, ``[0.4, 0.1]`` ``0.4000000 0.1000000`` with 8
    digits); scientific when the integer part alone needs more than ``digits``, or when
    every value is below the last fixed digit. Returns the format and its precision."""
    finite = np.abs(array[np.isfinite(array)].astype(np.float64))
    largest = float(finite.max()) if finite.size else 0.0
    whole = max(1, int(np.floor(np.log10(largest))) + 1) if largest > 0 else 1
    if whole > digits or 0 < largest < 10.0 ** -(digits - 1):
        return "scientific", max(digits - 1, 0)
    return "fixed", digits - whole


def _printer(title: str, options: dict[str, Any]) -> Callable[..., None]:
    """The host callback: ``callback(value)``, or ``callback(replica, value)`` under
    replication, which prints ``title (replica r): value``."""
    def callback(*args: Any) -> None:
        # Look stderr up at call time, so that redirections (and pytest capture) apply.
        stream = sys.stderr
        *replica, value = args
        label = f"{title} (replica {int(replica[0])})" if replica else title
        try:
            stream.write(f"{label}: {format_tensor(value, **options)}\n")
        except Exception as error:  # printing must never fail a run
            try:
                stream.write(f"warning: print_tensor could not print {title}: {error!r}\n")
            except Exception:
                pass

    return callback


def _lower_print(lowering: GraphLowering, op: Op) -> None:
    value = lowering.read(op.inputs[0])
    attrs = dict(op.attrs)
    attrs.pop("gradient_title")
    if attrs.pop("print_self"):
        attrs.pop("print_gradient")
        title = attrs.pop("title")
        if replica_count() > 1:
            jax.debug.callback(_printer(title, attrs), replica_index(), value, ordered=True)
        else:
            jax.debug.callback(_printer(title, attrs), value, ordered=True)
    lowering.set(op.outputs[0], value)


def _print_grad(builder: Any, op: Op, output_grads: list[Tensor | None]) -> list[Tensor | None]:
    """The gradient passes through; with ``print_gradient`` it is printed on the way, with
    the title ``gradient_title`` (default ``<title>_gradient``)."""
    (grad,) = output_grads
    attrs = dict(op.attrs)
    if not attrs.pop("print_gradient") or grad is None:
        return [grad]
    title = attrs.pop("gradient_title") or f"{attrs['title']}_gradient"
    attrs.update(title=title, gradient_title=None, print_self=True, print_gradient=False)
    return [_PRINT_TENSOR.apply({"t": grad}, **attrs)[0]]


_PRINT_TENSOR = OpDef(
    "print_tensor",
    infer=same_as_input,
    lower=_lower_print,
    special=True,
    effectful=True,
    grad=_print_grad,
    output_names=lambda inputs, attrs: ["print_out"],
)
register_callback_op(_PRINT_TENSOR.name)


def print_tensor(
    t: Tensor,
    title: str | None = None,
    print_self: bool = True,
    print_gradient: bool = False,
    summarise_threshold: int = 1000,
    edge_items: int = 3,
    max_line_width: int = 75,
    digits: int = 8,
    float_format: str = "auto",
    separator: str = " ",
    open_bracket: str = "[",
    close_bracket: str = "]",
    *,
    gradient_title: str | None = None,
) -> Tensor:
    """Print ``t`` to stderr each time the op runs; returns a copy of ``t``.

    Args:
        t: the tensor to print.
        title: the line's title (default ``print_<t.name>``; the gradient's title is
            ``print_<t.name>_gradient``).
        print_self: print ``t`` (False prints only the gradient, if asked for).
        print_gradient: print the gradient when the graph is differentiated.
        summarise_threshold: above this many elements only the edges are printed; 0
            prints every element.
        edge_items: how many items each edge of a summarised axis shows.
        max_line_width: the line width at which to wrap; 0 never wraps.
        digits: the number of digits of floating point values.
        float_format: ``"auto"``, ``"fixed"``, ``"scientific"`` or ``"none"`` (numpy's
            shortest round-trip form, ignoring ``digits``).
        separator, open_bracket, close_bracket: single characters used in the text.
        gradient_title: (ipuxl only) the gradient's title, default ``<title>_gradient``
            (PopART titles an untitled tensor's gradient with its gradient's id).

    Returns:
        A new tensor equal to ``t``, named ``print_out``.

    Raises:
        ValueError: a separator or bracket that is not exactly one character, or an
            unknown ``float_format``.
    """
    check_is_tensor("t", t)
    for parameter, value in (("separator", separator), ("open_bracket", open_bracket),
                             ("close_bracket", close_bracket)):
        if not isinstance(value, str) or len(value) != 1:
            raise ValueError(
                f"Parameter {parameter} must be 1 character exactly, got {value!r}."
            )
    if float_format not in _FLOAT_FORMATS:
        raise ValueError(
            f"Parameter float_format must be one of {list(_FLOAT_FORMATS)}, got {float_format!r}."
        )
    return _PRINT_TENSOR.apply(
        {"t": t},
        title=title if title is not None else f"print_{t.name}",
        print_self=bool(print_self),
        print_gradient=bool(print_gradient),
        summarise_threshold=int(summarise_threshold),
        edge_items=int(edge_items),
        max_line_width=int(max_line_width),
        digits=int(digits),
        float_format=float_format,
        separator=separator,
        open_bracket=open_bracket,
        close_bracket=close_bracket,
        gradient_title=gradient_title,
    )[0]
