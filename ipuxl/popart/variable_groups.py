"""Weights that groups of replicas share (``VariableSettings``): Builder -> model -> session.

``builder.addInitializedInputTensor(value, popart.VariableSettings(...), "w")`` records the
settings in the model's metadata, under PopART's keys and numbers (every initialized input
gets them, the default settings too):

* ``__comm_group_type/w``: the ``CommGroupType`` (All 0, Consecutive 1, Orthogonal 2,
  Ungrouped 3);
* ``__comm_group_size/w``: the ``CommGroup``'s ``replicaGroupSize``;
* ``__variable_settings/w``: the ``VariableRetrievalMode`` (OnePerGroup 0, AllReplicas 2).

A session reads them back. With ``R`` replicas, settings of ``G > 1`` groups make the
initializer the host's value, ``[G, *shape]`` (one value per group, groups in the order of
their first replica); each replica holds ``shape`` and starts from its group's value. So
tensor infos and anchors are per replica (``AnchorReturnType("All")`` of ``w`` returns
``[R, *shape]``), ``readWeights`` and ``modelToHost`` give ``[G, *shape]``, and a training
session reduces a grouped weight's gradient within its group, keeping its optimizer state
per group too.

As PopART's builder does, a model with ``embedReplicationFactor(R)`` (``R > 1``) written
*before* the weight types the weight's graph input ``[G, *value.shape]``: PopART prepends
the group count to the value's shape, which then already holds it, so only the
initializer's shape says what the host holds.

Example:
    >>> import numpy as np
    >>> from ipuxl import popart
    >>> builder = popart.Builder()
    >>> settings = popart.VariableSettings(
    ...     popart.CommGroup(popart.CommGroupType.Consecutive, 2))
    >>> w = builder.addInitializedInputTensor(np.zeros((2, 3), np.float32), settings, "w")
    >>> import onnx
    >>> model = onnx.load_from_string(builder.getModelProto())
    >>> model_variable_settings(model, w).groups(4)
    [[0, 1], [2, 3]]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ipuxl.ops.collectives.groups import CommGroup, CommGroupType
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.variable_settings import VariableSettings
from ipuxl.replication import to_replicas

__all__ = ["settings_metadata", "input_shape", "model_variable_settings", "weight_variable",
           "variable_like", "single_valued"]

_TYPE_KEY = "__comm_group_type/"
_SIZE_KEY = "__comm_group_size/"
_MODE_KEY = "__variable_settings/"
_REPLICATION_FACTOR_KEY = "__replicationFactor"  # Builder.embedReplicationFactor


def settings_metadata(settings: VariableSettings, what: str) -> list[tuple[str, str]]:
    """The model metadata that records ``settings``, as PopART's builder writes it:
    ``(key prefix, value)`` pairs, each key the prefix followed by the weight's id.

    Raises:
        TypeError: ``settings`` is not a ``popart.VariableSettings`` (``what`` names
            the weight in the message).
        popart_exception: settings made from a stride and group size, which PopART's
            builder cannot record (it writes a ``CommGroup``).
    """
    if not isinstance(settings, VariableSettings):
        raise TypeError(
            f"addInitializedInputTensor: the settings of {what} must be a "
            f"popart.VariableSettings, got {type(settings).__name__} {settings!r}. Pass "
            "for example `popart.VariableSettings(popart.CommGroup(...))`.")
    if not settings.isUsingCommGroup():
        raise popart_exception(
            "The variable settings were not initialised using a `popart::CommGroup` "
            f"instance: {settings!r} of {what} gives a stride and group size, which a "
            "model cannot record. Make them from a popart.CommGroup.")
    domain = settings.getSharedVariableDomain()
    return [(_TYPE_KEY, str(domain.type.value)),
            (_SIZE_KEY, str(int(domain.replicaGroupSize))),
            (_MODE_KEY, str(settings.getRetrievalMode().value))]


def input_shape(model: Any, settings: VariableSettings, shape: tuple[int, ...]
                ) -> tuple[int, ...]:
    """The type PopART's builder gives a weight's graph input: ``shape``, with the group
    count prepended when the model embeds a replication factor above 1."""
    factors = [entry.value for entry in model.metadata_props
               if entry.key == _REPLICATION_FACTOR_KEY]
    replicas = int(factors[-1]) if factors else 1
    return tuple(shape) if replicas <= 1 else (settings.getGroupCount(replicas), *shape)


def model_variable_settings(model: Any, tensor_id: str) -> VariableSettings:
    """The ``VariableSettings`` the model's metadata records for weight ``tensor_id``;
    PopART's defaults (``All``, size 0, ``OnePerGroup``) for what it does not record."""
    from ipuxl.popart import VariableRetrievalMode

    found = {entry.key: entry.value for entry in model.metadata_props}
    kind = CommGroupType(int(found.get(_TYPE_KEY + tensor_id, 0)))
    size = int(found.get(_SIZE_KEY + tensor_id, 0))
    mode = VariableRetrievalMode(int(found.get(_MODE_KEY + tensor_id, 0)))
    return VariableSettings(CommGroup(kind, size), mode)


def weight_variable(model: Any, name: str, array: np.ndarray, replicas: int) -> Any:
    """The ipuxl variable of weight ``name`` (initial host value ``array``), grouped over
    ``replicas`` replicas as the model's settings say (in the main graph's context).

    Raises:
        popart_exception: with several groups, ``array``'s first dimension is not their
            count (PopART's message).
    """
    import ipuxl
    from ipuxl.onnx.registry import dtype_of
    from ipuxl.popart import VariableRetrievalMode

    settings = model_variable_settings(model, name)
    groups = settings.groups(replicas)
    if len(groups) > 1 and (array.ndim == 0 or array.shape[0] != len(groups)):
        first = array.shape[0] if array.ndim else "none"
        raise popart_exception(
            f"Return mismatch with possibly appended outer dimension ({first}) of Tensor: "
            f"\"{name}\". should match numGroups: {len(groups)}. Its value has shape "
            f"{list(array.shape)}: give one value per group, as an array of shape "
            f"[{len(groups)}, ...].")
    mode = "all_replicas" if settings.getRetrievalMode() is VariableRetrievalMode.AllReplicas \
        else "one_per_group"
    return ipuxl.variable(array, dtype_of(array.dtype), name=name,
                          downcast=False, replica_grouping=_grouping(groups, replicas),
                          retrieval_mode=mode)


def variable_like(weight: Any, value: np.ndarray, name: str) -> Any:
    """A variable grouped as ``weight`` is, each group starting from ``value`` (one
    replica's shape): the optimizer state and gradient accumulator of a weight."""
    import ipuxl

    grouping = weight.replica_grouping
    if grouping.num_groups > 1:
        value = np.repeat(np.asarray(value)[np.newaxis], grouping.num_groups, axis=0)
    return ipuxl.variable(value, name=name, downcast=False, replica_grouping=grouping)


def single_valued(weights: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
                  ) -> dict[str, np.ndarray]:
    """The host values of the weights that hold one value on every replica: the
    importer may read those (a grouped weight's value differs between replicas)."""
    return {name: arrays[name] for name, variable in weights.items()
            if variable.replica_grouping.num_groups == 1}


def _grouping(groups: list[list[int]], replicas: int) -> Any:
    from ipuxl.context import get_current_context

    assignment = [0] * replicas
    for index, members in enumerate(groups):
        for replica in members:
            assignment[replica] = index
    return get_current_context().graph.ir.replica_grouping_from_assignments(assignment)


def returns_replicas(variable: Any, replicas: int) -> bool:
    """Whether the session reads and writes weight ``variable`` once per replica
    (``[R, *shape]``): ``VariableRetrievalMode::AllReplicas`` with several replicas.
    PopART's host copy of such a weight (what ``weightsFromHost`` sends and
    ``modelToHost`` saves) stays one value per group: ``weightsToHost`` keeps each group's
    first replica there, and the per-replica values for ``readWeights``."""
    return variable.retrieval_mode == "all_replicas" and replicas > 1


def replica_values(variable: Any, groups: Any, replicas: int) -> Any:
    """Weight ``variable``'s host value ``groups`` (one value per group) as
    ``readWeights`` gives it: ``[R, *shape]``, each replica its group's value, where
    :func:`returns_replicas`; otherwise ``groups`` itself."""
    if not returns_replicas(variable, replicas):
        return groups
    groups = np.asarray(groups).reshape(variable.shape_on_host)
    return to_replicas(groups, variable.replica_grouping, replicas)
