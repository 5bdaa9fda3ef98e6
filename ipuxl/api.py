"""PopXL's public API: the names ``import ipuxl as popxl`` gives.

``ipuxl/__init__`` loads this module the first time one of its names is used
(``ipuxl.Ir``, ``from ipuxl import ops``, ``from ipuxl import *``) and copies its names
into the package, so ``ipuxl.X`` is ``ipuxl.api.X``. Until then only what a program
imports by module path is loaded: ``import ipuxl.runtime`` serves saved packages
without the building code.
"""

# Importable but not in PopXL's __all__ (the `x as x` form marks a re-export).
from ipuxl import dtypes as dtypes
from ipuxl import ops as ops
from ipuxl import popart as _popart
from ipuxl import popdist as popdist
from ipuxl import sim as sim
from ipuxl import transforms as transforms
from ipuxl.alias import alias_popxl as alias_popxl
from ipuxl.context import (
    gcg,
    get_current_graph,
    get_ir,
    get_main_graph,
    gir,
    gmg,
    in_sequence,
    io_tiles,
    ipu,
    name_scope,
)
from ipuxl.dot import to_dot as to_dot  # an ipuxl extension: Graphviz source
from ipuxl.dtypes import bfloat16 as bfloat16  # an ipuxl extension
from ipuxl.dtypes import (
    bool,
    complex64,
    complex128,
    double,
    dtype,
    float,
    float8_143,
    float8_152,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ipuxl.execution_context import ExecutionContext
from ipuxl.graph import Graph
from ipuxl.ir import Ir
from ipuxl.jit import jit as jit  # ipuxl extensions: the JAX-style workflow
from ipuxl.jit_grad import grad as grad
from ipuxl.jit_grad import value_and_grad as value_and_grad
from ipuxl.module import Module
from ipuxl.profiling import profile as profile
from ipuxl.random_seed import create_seeds
from ipuxl.remote_buffer import RemoteBuffer, remote_buffer
from ipuxl.replica_grouping import ReplicaGrouping
from ipuxl.replica_sharding import (
    remote_replica_sharded_variable,
    replica_sharded_variable,
)
from ipuxl.replica_sharding import (
    replica_sharded_buffer as replica_sharded_buffer,  # importable, not in PopXL's __all__
)
from ipuxl.session import Session
from ipuxl.session import export as export  # an ipuxl extension: a package for ipuxl.runtime
from ipuxl.streams import DeviceToHostStream, HostToDeviceStream, d2h_stream, h2d_stream
from ipuxl.tensor import Constant as Constant
from ipuxl.tensor import Tensor, TensorByRef, TensorSpec
from ipuxl.tensor import Variable as Variable
from ipuxl.tensor_factories import (
    constant,
    graph_input,
    graph_output,
    remote_variable,
    variable,
)
from ipuxl.tensor_location import (
    ReplicatedTensorSharding,
    TensorLocation,
    TensorStorage,
    TileSet,
)

# An ipuxl extension: popart.OutOfMemoryException, raised by the IPU model (ipuxl.sim).
OutOfMemoryError = _popart.OutOfMemoryException

__all__ = [
    # context
    "get_current_graph", "get_main_graph", "get_ir", "gcg", "gmg", "gir", "in_sequence",
    "name_scope", "ipu", "io_tiles",
    # dtypes
    "dtype", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "half", "float8_143", "float8_152", "float16", "float", "float32", "double", "float64",
    "complex64", "complex128",
    # classes and factories
    "Graph", "Ir", "Module", "create_seeds", "RemoteBuffer", "remote_buffer",
    "ReplicaGrouping", "HostToDeviceStream", "DeviceToHostStream", "h2d_stream", "d2h_stream",
    "Tensor", "variable", "constant", "graph_input", "graph_output", "remote_variable",
    "remote_replica_sharded_variable", "replica_sharded_variable",
    "TensorByRef",
    "TensorSpec", "TensorStorage", "TensorLocation", "ReplicatedTensorSharding", "TileSet",
    "ExecutionContext", "Session",
]
