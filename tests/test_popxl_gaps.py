"""PopART behaviours real PopXL code meets: IO-tile <-> compute-tile copies inserted where a
tensor crosses tile sets (PopART's IoComputeTileCopy), ``ReplicaGrouping._to_variable_settings``
and ``popart.VariableSettings``, the distributed session options of an
``Ir(replication="popdist")``, ``get_tensor_data`` of grouped replica-sharded variables
read back with ``"all_replicas"``; ``Context._add_in_sequence_topocons``, the refusal of a
tensor with no value, remote variables checked against their buffers where used, and
PopXL's ``const_rg``, maps and ``_pb_replica_grouping`` of replica groupings."""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.popdist
from ipuxl import popart
from ipuxl.context import get_current_context
from ipuxl.ops.collectives.groups import CommGroup, CommGroupType
from ipuxl.popart.errors import popart_exception
from ipuxl.popdist.topology import Topology
from ipuxl.replica_grouping import PopartReplicaGrouping


def _op_names(graph):
    return [op.name for op in graph.ops]


# ---------------------------------------------------------------- IoComputeTileCopy
def _io_load_then_compute(explicit: bool):
    """x loaded on the IO tiles, then relu(x) * exp(x) on the compute tiles; the copy to
    the compute tiles written by hand (explicit) or left to the rule."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((4,), popxl.float32, "x")
        with popxl.io_tiles():
            loaded = ops.host_load(x)
        if explicit:
            loaded = ops.io_tile_copy(loaded)
        total = ops.relu(loaded) * ops.exp(loaded)
        y = popxl.d2h_stream((4,), popxl.float32, "y")
        ops.host_store(y, total)
    return ir, x, y


def test_an_io_tile_tensor_used_on_compute_tiles_is_copied_once():
    ir, x, y = _io_load_then_compute(explicit=False)
    graph = ir.main_graph
    names = _op_names(graph)
    load = names.index("host_load")  # after the init of its buffer, as in PopXL
    assert names[load:] == ["host_load", "io_tile_copy", "relu", "exp", "mul", "host_store"]
    copy, relu, exp = graph.ops[load + 1:load + 4]
    assert (copy.tile_set, copy.outputs[0].name) == ("compute", "x_hostload_fioc")
    # relu and exp both read the one copy (PopART reuses a tensor's copy).
    assert relu.inputs == exp.inputs == copy.outputs
    data = np.float32([1, -2, 3, -4])
    with popxl.Session(ir, "cpu") as session:
        out = session.run({x: data})[y]
    np.testing.assert_allclose(out, np.maximum(data, 0) * np.exp(data), rtol=1e-6)


def test_inputs_made_on_two_tile_sets_are_refused():
    # PopXL's rule: the inputs of one op share a tile set; PopART copies them only as a
    # whole to the op's.
    with popxl.Ir().main_graph:
        a = popxl.constant(np.float32([1])) + 0
        with popxl.io_tiles():
            b = popxl.constant(np.float32([1])) + 0
            with pytest.raises(ValueError, match=r"`add_out` and `add_out__t\d` are located on "
                                                 r"different tile sets: compute != io"):
                ops.add(a, b)


def test_the_inserted_copy_is_costed_as_the_explicit_one():
    implicit, _, _ = _io_load_then_compute(explicit=False)
    explicit, _, _ = _io_load_then_compute(explicit=True)
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": 1, "tilesPerIPU": 64, "numIOTiles": 32})
    auto, by_hand = popxl.sim.estimate(implicit, device), popxl.sim.estimate(explicit, device)
    assert [s.op.name for s in auto.steps] == [s.op.name for s in by_hand.steps]
    assert auto.cycles == by_hand.cycles
    copy_step = next(s for s in auto.steps if s.op.name == "io_tile_copy")
    assert copy_step.cost.kind == "io_copy" and copy_step.cost.exchange > 0


def test_a_compute_tensor_used_on_io_tiles_is_copied_to_them():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.float32([1, 2]), name="v")
        doubled = v * 2
        with popxl.io_tiles():
            out = doubled + 1
    copy = out._producer.inputs[0]
    assert (copy.name, copy.tile_set, copy._producer.name) == ("mul_out_tioc", "io",
                                                               "io_tile_copy")
    assert out.tile_set == "io"


def test_tensors_without_a_producer_are_never_copied():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.float32([1, 2]), name="v")
        with popxl.io_tiles():
            on_io = ops.relu(v)
        ops.relu(v)
    assert _op_names(ir.main_graph) == ["relu", "relu"]
    assert on_io.tile_set == "io"


def test_inputs_on_two_ipus_are_still_refused():
    with popxl.Ir().main_graph:
        with popxl.io_tiles():
            a = popxl.constant(np.float32([1])) + 0
        with popxl.ipu(1):
            b = popxl.constant(np.float32([1])) + 0
        with pytest.raises(ValueError, match="are located on different IPUs: 0 != 1"):
            ops.add(a, b)


# ---------------------------------------------------------------- VariableSettings
@pytest.mark.parametrize("replicas, stride, group_size", [
    (8, 1, 8), (8, 1, 2), (8, 2, 2), (8, 2, 4), (8, 4, 2), (4, 1, 1), (6, 3, 2)])
def test_variable_settings_groups_match_the_replica_grouping(replicas, stride, group_size):
    rg = popxl.Ir(replication=replicas).replica_grouping(stride=stride, group_size=group_size)
    settings = rg._to_variable_settings()
    expected = [[r for r, g in enumerate(rg.assignment) if g == group]
                for group in range(rg.num_groups)]
    assert settings.groups(replicas) == expected
    assert (settings.isUsingCommGroup(), settings.getStride(), settings.getGroupSize()) == (
        False, stride, group_size)
    assert settings.getGroupCount(replicas) == rg.num_groups
    assert settings.getRealGroupSize(replicas) == group_size
    assert [settings.getGroupRepresentative(g) for g in range(rg.num_groups)] == [
        group[0] for group in expected]
    assert settings.getRetrievalMode() is popart.VariableRetrievalMode.OnePerGroup
    assert settings.numReplicasReturningVariable(replicas) == rg.num_groups


def test_to_variable_settings_retrieval_modes_and_errors():
    ir = popxl.Ir(replication=4)
    rg = ir.replica_grouping(group_size=2)
    every = rg._to_variable_settings("all_replicas")
    assert every.getRetrievalMode() is popart.VariableRetrievalMode.AllReplicas
    assert every.numReplicasReturningVariable(4) == 4
    assert every == popart.VariableSettings(1, 2, popart.VariableRetrievalMode.AllReplicas)
    assert every != rg._to_variable_settings("one_per_group")
    with pytest.raises(ValueError, match="Invalid retrieval_mode: 'first'"):
        rg._to_variable_settings("first")
    uneven = ir.replica_grouping_from_assignments([0, 1, 1, 0])
    with pytest.raises(NotImplementedError, match="is not a constant grouping"):
        uneven._to_variable_settings()


def test_variable_settings_from_comm_groups():
    orthogonal = popart.VariableSettings(CommGroup(CommGroupType.Orthogonal, 2))
    assert orthogonal.groups(8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [orthogonal.getGroupRepresentative(g) for g in range(4)] == [0, 1, 2, 3]
    consecutive = popart.VariableSettings(CommGroup(CommGroupType.Consecutive, 4),
                                          popart.VariableRetrievalMode.AllReplicas)
    assert consecutive.groups(8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert consecutive.getGroupRepresentative(1) == 4
    assert popart.VariableSettings().groups(3) == [[0, 1, 2]]
    assert popart.VariableSettings(CommGroup(CommGroupType.Ungrouped, 0)).getGroupCount(3) == 3
    assert orthogonal.getSharedVariableDomain() == CommGroup(CommGroupType.Orthogonal, 2)
    with pytest.raises(popart_exception, match="were not made from a CommGroup"):
        popart.VariableSettings(2, 2).getSharedVariableDomain()


def test_variable_settings_shapes_and_argument_errors():
    settings = popart.VariableSettings(1, 2)
    assert settings.shapeOnHost([3, 5], 8) == [4, 3, 5]
    assert settings.shapeOnReplica([4, 3, 5], 8, "w") == [3, 5]
    assert popart.VariableSettings().shapeOnReplica([3, 5], 8) == [3, 5]
    with pytest.raises(popart_exception, match=r"'w' of host shape \(3, 5\) must have its 4"):
        settings.shapeOnReplica([3, 5], 8, "w")
    with pytest.raises(popart_exception, match="groups of 2 replicas 3 apart do not tile 8"):
        popart.VariableSettings(3, 2).groups(8)
    with pytest.raises(popart_exception, match="stride=0, groupSize=2"):
        popart.VariableSettings(0, 2)
    with pytest.raises(popart_exception, match="takes \\(\\), \\(CommGroup\\)"):
        popart.VariableSettings("all")


# ---------------------------------------------------------------- popdist session options
def test_popdist_ir_session_options_give_this_instances_place(monkeypatch):
    second_of_two = Topology(num_instances=2, instance_index=1, replication_factor=4,
                             local_replicas=2)
    monkeypatch.setattr(ipuxl.popdist, "topology", lambda: second_of_two)
    options = popxl.Ir(replication="popdist")._pb_ir.getSessionOptions()
    assert (options.globalReplicaOffset, options.globalReplicationFactor,
            options.enableDistributedReplicatedGraphs) == (2, 4, True)
    # The same numbers PopDist's own configureSessionOptions writes.
    import ipuxl.popdist.popart as popdist_popart

    monkeypatch.setattr(popdist_popart, "topology", lambda: second_of_two)
    reference = popart.SessionOptions()
    popdist_popart.configureSessionOptions(reference)
    assert (reference.globalReplicaOffset, reference.globalReplicationFactor,
            reference.enableDistributedReplicatedGraphs) == (2, 4, True)
    plain = popxl.Ir(replication=4)._pb_ir.getSessionOptions()
    assert (plain.globalReplicaOffset, plain.globalReplicationFactor,
            plain.enableDistributedReplicatedGraphs) == (0, 1, False)


# ---------------------------------------------------------------- sharded all_replicas
@pytest.mark.parametrize("retrieval_mode", ["all_replicas", "one_per_group"])
def test_grouped_replica_sharded_variable_reads_back_per_retrieval_mode(retrieval_mode):
    ir = popxl.Ir(replication=4)
    data = np.arange(12, dtype=np.float32).reshape(2, 6)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=2)
        handle, shard = popxl.replica_sharded_variable(
            data, replica_grouping=rg, retrieval_mode=retrieval_mode)
        ops.var_updates.accumulate_(shard, popxl.constant(np.ones(3, np.float32)))
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        value = session.get_tensor_data(handle)
    updated = data + 1
    if retrieval_mode == "one_per_group":
        np.testing.assert_array_equal(value, updated)
    else:  # replicas 0, 2 are group 0; 1, 3 group 1
        np.testing.assert_array_equal(value, updated[[0, 1, 0, 1]])


# ---------------------------------------------------------------- Context._add_in_sequence_topocons
def _repeat_built_aside():
    """x + 1, then a call built under in_sequence("pass") (as popxl-addons' repeat_graph
    builds its loop), then x * 2: returns the ir and the three ops."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.float32(1), name="x")
        body = ir.create_graph(lambda t: t + 1, x)
        with popxl.in_sequence():
            x + 1
            with popxl.in_sequence("pass"):
                info = ops.call_with_info(body, x)
            get_current_context()._add_in_sequence_topocons(info._op)
            x * 2
    add, call, mul = ir.main_graph.ops
    return ir, add, call, mul


def test_an_existing_op_joins_the_sequence_it_is_added_to():
    ir, add, call, mul = _repeat_built_aside()
    assert call.name == "call"
    assert call.after == (add,)
    assert mul.after == (call,)


def test_the_view_of_an_op_is_accepted_and_outside_in_sequence_nothing_changes():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.float32(1), name="x")
        y = x + 1
    add = ir.main_graph.ops[0]
    view = ir._pb_ir.getMainGraph().getOps()[0]
    get_current_context()._add_in_sequence_topocons(view)
    assert add.after == ()
    with ir.main_graph, popxl.in_sequence():
        y * 2
        get_current_context()._add_in_sequence_topocons(view)
    mul = ir.main_graph.ops[1]
    assert add.after == (mul,)


def test_add_in_sequence_topocons_refuses_what_is_not_an_op():
    with pytest.raises(TypeError, match=r"_add_in_sequence_topocons takes an op .* got str"):
        get_current_context()._add_in_sequence_topocons("add")


# ---------------------------------------------------------------- tensors with no value
def _reader_of_a_detached_tensor():
    """relu(x) read by an add, then the relu's outputs disconnected (graph surgery)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.float32([1, -2]), name="x")
        y = ops.relu(x)
        z = y + x
        out = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(out, z)
    relu_view = ir._pb_ir.getMainGraph().getOps()[0]
    relu_view.disconnectAllOutputs()
    return ir


def test_an_op_reading_a_detached_tensor_is_refused_with_its_names():
    ir = _reader_of_a_detached_tensor()
    with pytest.raises(popart_exception, match=(
            r"Every tensor an op reads must have a value when it is read\. In graph 'main', "
            r"`add` \(at test_popxl_gaps\.py:\d+\) reads `relu_out`, but no op produces it "
            r"and it is not a graph input, Variable or Constant\. Fix: connect")):
        popxl.Session(ir, "cpu")


def test_a_tensor_read_before_its_producer_is_refused():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.float32([1, -2]), name="x")
        y = ops.relu(x)
        z = ops.negate(x)
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, "out"), y)
    graph = ir._pb_ir.getMainGraph()
    relu, neg = graph.getOps()[:2]
    relu.disconnectAllInputs()
    relu.connectInTensor(0, z.id)
    with pytest.raises(popart_exception, match=(
            r"`relu` \(at .*\) reads `negate_out`, but its producer `negate` \(at .*\) comes "
            r"later\. Fix: create the producer first")):
        popxl.Session(ir, "cpu")


def test_a_returned_detached_tensor_is_refused():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.float32(1), name="x")
        graph = ir.create_graph(lambda t: ops.relu(t), x)
        ops.call(graph, x)
    graph._pb_graph.getOps()[0].disconnectAllOutputs()
    with pytest.raises(popart_exception, match=(
            r"In graph '.*', the graph returns `.*relu_out`, but no op produces it")):
        popxl.Session(ir, "cpu")


# ---------------------------------------------------------------- remote variables and buffers
def test_a_remote_variable_is_checked_against_its_buffer_where_it_is_used():
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32)
        var = popxl.remote_variable(np.zeros(3, np.float32), buffer, 0, name="v")  # as PopXL
        assert var.shape == (3,)
        with pytest.raises(ValueError, match=r"^Tensor v does not match buffer"):
            ops.remote_store(buffer, 0, var)
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, "out"), ops.remote_load(buffer, 0))
    with pytest.raises(ValueError, match=(
            r"^Tensor v does not match buffer: the tensor is popxl.dtypes.float32 \(3,\), the "
            r"buffer holds popxl.dtypes.float32 \(2,\)\. Use a buffer of the variable's dtype "
            "and number of elements")):
        popxl.Session(ir, "cpu")


def test_a_remote_sharded_variable_whose_shard_overflows_its_slot_is_refused():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32)
        popxl.remote_replica_sharded_variable(np.zeros(6, np.float32), buffer, name="s")
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, "out"), ops.remote_load(buffer, 0))
    with pytest.raises(ValueError, match=(
            r"^Tensor s does not match buffer: the tensor is popxl.dtypes.float32 \(3,\) "
            r"\(one of 2 shards\), the buffer holds popxl.dtypes.float32 \(2,\)\. Use a buffer "
            r"of the variable's dtype whose slots hold a shard")):
        popxl.Session(ir, "ipu_model")


def test_a_remote_value_is_stored_element_for_element_in_a_slot_of_another_shape():
    # PopXL compares neither: a (1, 1) value in (1,) slots; each replica loads (1,).
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.RemoteBuffer((1,), popxl.int32, 2)
        var = popxl.remote_variable(np.array([[7]], np.int32), buffer, 1, name="v")
        out = popxl.d2h_stream((1,), popxl.int32, "out")
        ops.host_store(out, ops.remote_load(buffer, 1))
    assert var.shape == (1, 1)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[out], [[7], [7]])
        np.testing.assert_array_equal(session.get_tensor_data(var), [[7]])
        session.write_variable_data(var, np.array([[9]], np.int32))
        np.testing.assert_array_equal(session.run()[out], [[9], [9]])


def test_a_shard_fills_the_start_of_a_larger_slot_and_reads_back_whole():
    # A buffer of the full shape holds 1-element shards of a 2-element value: the rest of
    # each replica's slot is padding.
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.RemoteBuffer((2,), popxl.float32, 1)
        var = popxl.remote_replica_sharded_variable(np.array([1, 2], np.float32), buffer, 0,
                                                    name="s")
        out = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(out, ops.remote_load(buffer, 0))
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[out], [[1, 0], [2, 0]])
        np.testing.assert_array_equal(session.get_tensor_data(var), [1, 2])
        session.write_variable_data(var, np.array([3, 4], np.float32))
        np.testing.assert_array_equal(session.run()[out], [[3, 0], [4, 0]])
        np.testing.assert_array_equal(session.get_tensor_data(var), [3, 4])


def test_a_variable_sharded_over_one_replica_keeps_its_whole_value_flat():
    ir = popxl.Ir(replication=2)
    data = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    with ir.main_graph:
        grouping = ir.replica_grouping(group_size=1)
        buffer = popxl.RemoteBuffer((4,), popxl.float32, 1)
        var = popxl.remote_replica_sharded_variable(data, buffer, replica_grouping=grouping,
                                                    retrieval_mode="all_replicas")
        loaded = ops.remote_load(buffer, 0)
        whole = ops.collectives.replicated_all_gather(loaded, group=grouping)
        out = popxl.d2h_stream((2, 2), popxl.float32, "out")
        ops.host_store(out, whole)
    assert (loaded.shape, loaded.meta_shape, whole.shape) == ((4,), (2, 2), (2, 2))
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[out], data)
        np.testing.assert_array_equal(session.get_tensor_data(var), data)


def test_a_grouped_remote_variable_matches_a_buffer_without_the_group_dimension():
    ir = popxl.Ir(replication=4)
    data = np.arange(12, dtype=np.float32).reshape(2, 6)
    with ir.main_graph:
        buffer = popxl.remote_buffer((6,), popxl.float32)
        grouping = ir.replica_grouping(group_size=2)
        var = popxl.remote_variable(data, buffer, 0, name="g", replica_grouping=grouping)
        loaded = ops.remote_load(buffer, 0)
        out = popxl.d2h_stream((6,), popxl.float32, "out")
        ops.host_store(out, loaded)
    with popxl.Session(ir, "ipu_model") as session:
        result = session.run()[out]
        np.testing.assert_array_equal(session.get_tensor_data(var), data)
    np.testing.assert_array_equal(result, data[[0, 0, 1, 1]])


# ---------------------------------------------------------------- replica groupings
def test_constant_groupings_have_no_maps_and_a_popart_form():
    rg = popxl.Ir(replication=8).replica_grouping(stride=2, group_size=4)
    assert rg.to_device_map is None and rg.to_host_map is None
    pb = rg._pb_replica_grouping
    assert (pb.getNumReplicas(), pb.getStride(), pb.getGroupSize(), pb.getNumGroups()) == (8, 2, 4, 2)
    assert [pb.getGroupAt(r) for r in range(8)] == rg.assignment
    assert pb.getReplicasAt(1) == [1, 3, 5, 7]
    assert [pb.getIndexInGroupAt(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert pb.getTranspose() == PopartReplicaGrouping(8, 1, 2)
    assert pb.str() == "ReplicaGrouping(numReplicas=8, stride=2, groupSize=4)"


def test_popart_replica_grouping_defaults_and_errors():
    assert PopartReplicaGrouping(4) == PopartReplicaGrouping(4, 1, 4)
    assert PopartReplicaGrouping(4, 2, 1).getStride() == 1  # one replica per group
    assert PopartReplicaGrouping(4, 1, 2).getTranspose() == PopartReplicaGrouping(4, 2, 2)
    with pytest.raises(popart_exception, match=r"must be divisible by the product .* 6 "
                       r"replicas, stride 2, group size 2\. Use a group size from \[1, 3\]"):
        PopartReplicaGrouping(6, 2, 2)
    with pytest.raises(popart_exception, match=r"The stride .* must be a positive integer, got 0"):
        PopartReplicaGrouping(4, 0, 2)
    with pytest.raises(popart_exception, match=r"requested group index 2 is outside the valid "
                       r"range 0\.\.1 for 'ReplicaGrouping\(numReplicas=4, stride=1, groupSize=2\)'"):
        PopartReplicaGrouping(4, 1, 2).getReplicasAt(2)
    with pytest.raises(popart_exception, match=r"transpose of .* cannot be represented"):
        PopartReplicaGrouping(8, 2, 2).getTranspose()


def test_a_non_constant_grouping_has_no_popart_form():
    rg = popxl.Ir(replication=4).replica_grouping_from_assignments([0, 1, 1, 0])
    with pytest.raises(NotImplementedError, match=r"is not a constant grouping"):
        _ = rg._pb_replica_grouping


def test_a_non_constant_variable_round_trips_with_popxls_const_rg():
    # Gaps 1 and 3: every group is cut at its gaps of 3, so const_rg is one replica a group.
    assignment = [0, 1, 1, 0, 0, 1, 1, 0]
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping_from_assignments(assignment)
    assert rg.const_rg.assignment == list(range(8))
    assert (rg.to_device_map, rg.to_host_map) == (assignment, [0, 1])
    data = np.arange(12, dtype=np.int32).reshape(2, 3, 2)
    with ir.main_graph:
        var = popxl.variable(data, popxl.int32, name="var", replica_grouping=rg)
        ops.print_tensor(var)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.get_tensor_data(var), data)
        session.write_variable_data(var, data[::-1])
        np.testing.assert_array_equal(session.get_tensor_data(var), data[::-1])


def test_popart_replica_grouping_is_the_internal_ir_class():
    from ipuxl.popart._internal import ir as _ir

    grouping = popxl.Ir(replication=4).replica_grouping(stride=2, group_size=2)
    assert isinstance(grouping._pb_replica_grouping, _ir.ReplicaGrouping)
