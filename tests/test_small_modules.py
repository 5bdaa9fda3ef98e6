"""The small PopXL modules: ``popxl.errors``, ``popxl.typing_``, ``popart`` (the
compatibility shim) and ``popxl.testing`` (spec §1, §3.7). The dtype order of
``popxl.testing`` is pinned in test_dtypes.py."""

import typing

import numpy as np
import pytest

import ipuxl as popxl
from ipuxl import errors, popart, testing, typing_


# ----------------------------------------------------------------------------- errors
def test_undefined_value_is_a_plain_exception():
    assert issubclass(errors.UndefinedValue, Exception)
    assert not issubclass(errors.UndefinedValue, (RuntimeError, ValueError))


def test_undefined_value_is_raised_for_a_fresh_variables_ipu():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.zeros(2, np.float32))
    with pytest.raises(errors.UndefinedValue):
        _ = v.ipu


# ----------------------------------------------------------------------------- typing_
ByRef = typing_.NewAliasAnnotation("ByRef", popxl.Tensor)


def test_alias_annotation_is_a_named_marker():
    assert repr(ByRef) == "ByRef" and ByRef.__name__ == "ByRef"
    assert ByRef.__supertype__ is popxl.Tensor
    assert typing_.NewAliasAnnotation("ByRef", popxl.Tensor) is not ByRef  # by identity


def test_alias_annotation_cannot_be_called():
    with pytest.raises(NotImplementedError, match="^ByRef should only be used as an annotation"):
        ByRef(1)
    with pytest.raises(NotImplementedError,
                       match="^TensorByRef should only be used as an annotation"):
        popxl.TensorByRef()


def test_alias_annotation_is_found_in_annotations():
    def body(a: ByRef, b: ByRef | None, c: typing.List[ByRef]) -> None:  # noqa: UP006
        """A graph body that takes its inputs by reference."""

    hints = typing.get_type_hints(body)
    assert hints["a"] is ByRef
    assert ByRef in typing.get_args(hints["b"])
    assert typing.get_args(hints["c"]) == (ByRef,)
    assert ByRef in typing.get_args(None | ByRef)


# ----------------------------------------------------------------------------- popart
@pytest.mark.parametrize("error", [popart.popart_exception,
                                   popart.poplar_application_runtime_error])
def test_popart_errors_are_runtime_errors(error):
    assert issubclass(error, RuntimeError)
    with pytest.raises(RuntimeError, match="message"):
        raise error("message")


def test_popart_errors_are_distinct():
    assert not issubclass(popart.popart_exception, popart.poplar_application_runtime_error)
    assert not issubclass(popart.poplar_application_runtime_error, popart.popart_exception)


def test_popart_has_a_version_string():
    assert isinstance(popart.__version__, str) and popart.__version__


# ----------------------------------------------------------------------------- testing
@pytest.mark.parametrize("make", [testing.get_all_dtypes, testing.get_all_int_dtypes])
def test_dtype_lists_are_new_lists(make):
    first = make()
    first.clear()
    assert make()


def test_dtype_lists_hold_no_bool():
    assert popxl.bool not in testing.get_all_dtypes()
    assert testing.get_all_int_dtypes(include_signed=False, include_unsigned=False) == []
