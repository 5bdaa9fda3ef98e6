"""The PopART op classes of :data:`._table.CLASS_OF`, made once per name.

Classes with behaviour of their own (``CallOp``, ``LoopOp``, ``IfOp``, ``IpuCopyOp``)
are written out in :mod:`.._op`; the others are plain subclasses of ``Op``, except
``AccumulatorZeroOp``, which is an ``AccumulatorScaleOp`` as in PopART. Classes whose
PopART binding sets IPU planning hints also take the hint methods of
:data:`.._hints.HINT_MIXINS` (``MatMulOp.setAvailableMemoryProportion``...), and
optimizer ops those of :data:`.._var_updates.VAR_UPDATE_MIXINS` (``isOptimizerOp``,
``getFactor``...).
"""

from __future__ import annotations

from .._hints import HINT_MIXINS
from .._op import CallOp, IfOp, IpuCopyOp, LoopOp, Op
from .._var_updates import VAR_UPDATE_MIXINS
from ._table import CLASS_OF

__all__ = ["CLASSES", "class_of", "register_custom_class"]

_WRITTEN_OUT: dict[str, type[Op]] = {
    "CallOp": CallOp, "LoopOp": LoopOp, "IfOp": IfOp, "IpuCopyOp": IpuCopyOp,
}
_BASES = {"AccumulatorZeroOp": "AccumulatorScaleOp"}
# PopART class name -> the methods of its own the view takes (hints, optimizer getters).
_MIXINS: dict[str, type] = {**HINT_MIXINS, **VAR_UPDATE_MIXINS}


def _make(path: str, made: dict[str, type[Op]]) -> type[Op]:
    submodule, _, name = path.rpartition(".")
    if path in made:
        return made[path]
    if name in _WRITTEN_OUT:
        made[path] = _WRITTEN_OUT[name]
        return made[path]
    base = _make(_BASES[name], made) if name in _BASES else Op
    module = "ipuxl.popart._internal.ir.op" + (f".{submodule}" if submodule else "")
    bases = (_MIXINS[name], base) if name in _MIXINS else (base,)
    made[path] = type(name, bases, {
        "__doc__": f"PopART's ``{name}``: the view of an ipuxl op of this class.",
        "__module__": module,
    })
    return made[path]


def _make_all() -> dict[str, type[Op]]:
    made: dict[str, type[Op]] = {}
    for path in CLASS_OF.values():
        _make(path, made)
    return made


# "[submodule.]ClassName" -> class.
CLASSES: dict[str, type[Op]] = _make_all()


# Custom ops (ipuxl.custom_ops): OpDef name -> the class their binding module declares.
_CUSTOM: dict[str, type[Op]] = {}


def register_custom_class(opdef_name: str, cls: type[Op]) -> None:
    """Make ``cls`` (a binding's op class) the class of the custom op ``opdef_name``."""
    _CUSTOM[opdef_name] = cls


def class_of(opdef_name: str) -> type[Op]:
    """The PopART class of the ipuxl op ``opdef_name`` (``Op`` if it has none)."""
    if opdef_name in _CUSTOM:
        return _CUSTOM[opdef_name]
    path = CLASS_OF.get(opdef_name)
    return Op if path is None else CLASSES[path]


def classes_in(submodule: str) -> dict[str, type[Op]]:
    """The classes of ``op.<submodule>`` (``""``: of ``op`` itself), by name."""
    prefix = submodule + "." if submodule else ""
    return {
        path[len(prefix):]: cls for path, cls in CLASSES.items()
        if path.startswith(prefix) and "." not in path[len(prefix):]
    }
