"""Annotation-only aliases (PopXL's ``popxl.typing_``).

Example:
    >>> TensorByRef = NewAliasAnnotation("TensorByRef", "Tensor")
    >>> def body(x: TensorByRef) -> None: ...
    >>> TensorByRef
    TensorByRef
"""

from __future__ import annotations

import typing
from typing import Any

__all__ = ["NewAliasAnnotation"]


class _AliasAnnotation:
    """A marker recognised by identity in annotations; it cannot be called like a type."""

    def __init__(self, name: str, supertype: Any) -> None:
        self.__name__ = name
        self.__qualname__ = name
        self.__supertype__ = supertype

    def __call__(self, *args: Any, **kwargs: Any) -> typing.NoReturn:
        raise NotImplementedError(
            f"{self.__name__} should only be used as an annotation, for example "
            f"`def f(x: {self.__name__})`; it cannot be called to create a value."
        )

    def __repr__(self) -> str:
        return self.__name__

    def __or__(self, other: Any) -> Any:
        return typing.Union[self, other]  # noqa: UP007 - `|` would call this method again

    def __ror__(self, other: Any) -> Any:
        return typing.Union[other, self]  # noqa: UP007 - as in __or__


def NewAliasAnnotation(name: str, tp: Any) -> Any:  # noqa: N802 - PopXL's name
    """Create an annotation-only alias of ``tp``, e.g. ``TensorByRef`` for ``Tensor``.

    Unlike ``typing.NewType`` the marker is compared by identity, so code can find it in a
    function's annotations; it also works inside ``typing.List[...]`` and ``X | None``.

    Args:
        name: the alias name, also its ``repr``.
        tp: the aliased type (a type or a forward-reference string).

    Returns:
        The marker. Calling it raises ``NotImplementedError``.
    """
    return _AliasAnnotation(name, tp)
