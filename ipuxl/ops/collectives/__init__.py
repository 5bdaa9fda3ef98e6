"""Collectives (``popxl.ops.collectives``): ops that exchange values between replicas, or
between the IPUs of one replica (spec §11.10).

* :mod:`.replicated`: ``replicated_all_reduce`` (and ``_``), ``replicated_reduce_scatter``,
  ``replica_sharded_slice``, ``replicated_slice``, ``replicated_all_gather``;
* :mod:`.across_ipus`: ``all_reduce``, ``all_reduce_identical_inputs``,
  ``all_reduce_identical_grad_inputs``;
* :mod:`.groups`: the checks of the shared arguments, and PopXL's legacy ``CommGroup``
  and ``CommGroupType``;
* :mod:`.named_axis`: the grouped JAX collectives on the replica axis that the
  replicated ops lower to.
"""

from ipuxl.ops.collectives.across_ipus import (
    all_reduce,
    all_reduce_identical_grad_inputs,
    all_reduce_identical_inputs,
)
from ipuxl.ops.collectives.groups import CommGroup, CommGroupType
from ipuxl.ops.collectives.replicated import (
    replica_sharded_slice,
    replicated_all_gather,
    replicated_all_reduce,
    replicated_all_reduce_,
    replicated_reduce_scatter,
    replicated_slice,
)

__all__ = [
    "CommGroup", "CommGroupType",
    "replicated_all_reduce", "replicated_all_reduce_", "replicated_reduce_scatter",
    "replica_sharded_slice", "replicated_slice", "replicated_all_gather",
    "all_reduce", "all_reduce_identical_inputs", "all_reduce_identical_grad_inputs",
]
