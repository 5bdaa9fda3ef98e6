"""An ONNX model + a DataFlow (+ a loss and an optimizer) -> one ipuxl Ir.

The Ir a PopART session runs is an ordinary PopXL program:

* one h2d stream per model input that a node, an anchor, a loss or the outputs read (PopART drops
  an isolated stream tensor) and one d2h stream per anchor;
  ``ir.num_host_transfers`` is ``batchesPerStep * accumulationFactor`` (one slot per
  micro-batch) and ``ir.replication_factor`` the replication factor;
* one variable per floating-point initializer (the weights, named as in the model; a
  weight with ``VariableSettings`` is grouped, :mod:`ipuxl.popart.variable_groups`), and
  ``randomSeed___`` for random operators (:mod:`ipuxl.popart.session_random`);
* inference: ``repeat(batchesPerStep)`` of a body that loads the inputs, runs the imported
  ONNX graph and stores every anchor;
* training: the imported graph (plus the seed-era losses) is a forward subgraph;
  ``transforms.autodiff`` makes its gradient graph; a micro-batch body calls both and
  either updates the weights (no accumulation) or adds the gradients into
  ``Accum___<w>`` variables, which an outer ``repeat(batchesPerStep)`` body reduces (over
  replicas too), applies and zeroes after ``repeat(accumulationFactor)`` micro-batches.

Gradient anchors (``Gradient___<id>``) may name any floating-point tensor the loss depends
on: the autodiff call requires the weights and those tensors, and each anchor stores the
gradient of the scaled loss, as PopART's do. Every anchor is stored every micro-batch; the
session turns the ``[bps, accl, repl, ...]`` values into what each anchor's return type
asks for (:mod:`ipuxl.popart.dataflow`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ipuxl.host_values import index_argument
from ipuxl.onnx.importer import (
    Importer,
    RandomDraws,
    check_model,
    model_source,
    opsets_of,
    value_info_spec,
)
from ipuxl.onnx.model_ir import initializer_arrays, is_weight
from ipuxl.onnx.ops.popart_checks import unknown_input_shape_message
from ipuxl.onnx.registry import dtype_of
from ipuxl.onnx.session_keywords import session_keywords
from ipuxl.popart import session_random as seeds
from ipuxl.popart.conv_options_log import convolution_logger
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.fn_model import load_fn_model, read_ids
from ipuxl.popart.gradient_anchors import (
    anchored_gradients,
    check_accumulator_anchors,
    constants_with_gradients,
    loss_depends_on,
)
from ipuxl.popart.losses import (
    IdentityLoss,
    L1Loss,
    Loss,
    NllLoss,
    ReductionType,
    reduction_type,
)
from ipuxl.popart.names import (
    reservedAccumPrefix,
    reservedGradientPrefix,
    reservedRestoredPrefix,
)
from ipuxl.popart.optimizer_state_names import (
    compound_scalars,
    saved_state,
    scalar_value,
    state_initializers,
    updated_weight,
)
from ipuxl.popart.patterns import check_excluded_patterns
from ipuxl.popart.pipeline import check_pipelining
from ipuxl.popart.variable_groups import single_valued, variable_like, weight_variable

__all__ = ["Program", "Plan", "build_program"]


@dataclass
class Plan:
    """The batch structure of one run."""

    batches_per_step: int
    accumulation: int
    replicas: int

    @property
    def micro_batches(self) -> int:
        return self.batches_per_step * self.accumulation


@dataclass
class Program:
    """A built Ir and where everything in it is, by ONNX / PopART name."""

    ir: Any
    plan: Plan
    model: Any
    inputs: dict[str, Any] = field(default_factory=dict)       # id -> h2d stream
    anchors: dict[str, Any] = field(default_factory=dict)      # id -> d2h stream
    weights: dict[str, Any] = field(default_factory=dict)      # id -> Variable
    hyper: dict[str, Any] = field(default_factory=dict)        # name -> Variable
    state: dict[str, Any] = field(default_factory=dict)        # name -> Variable
    # Accum___<w> -> Variable: zero between steps, so neither saved nor read back.
    accumulators: dict[str, Any] = field(default_factory=dict)
    infos: dict[str, tuple[tuple[int, ...], Any]] = field(default_factory=dict)
    source: str = "model.onnx"  # where imported ops say they come from
    random_seed: Any = None  # the seed Variable of a model with random operators
    optimizer: Any = None  # a training program's optimizer


def _plan(dataflow: Any, options: Any, training: bool) -> Plan:
    """The batch structure, from the session options the PopART layer reads (each
    checked here: counts are true integers, switches bools)."""
    replicas = 1
    if options is not None and _switch(options, "enableReplicatedGraphs"):
        replicas = index_argument("replicatedGraphCount", options.replicatedGraphCount,
                                  "SessionOptions")
    accumulation = 1
    enabled = options is not None and _switch(options, "enableGradientAccumulation")
    if options is not None:
        accumulation = index_argument("accumulationFactor",
                                      getattr(options, "accumulationFactor", 1),
                                      "SessionOptions")
    if not enabled and accumulation > 1:  # PopART's whole message
        raise popart_exception(
            "enableGradientAccumulation is false, but accumulationFactor > 1. Either enable "
            "gradient accumulation, or set the accumulation factor to 1")
    if enabled and not training:
        raise popart_exception(
            "Gradient Accumulation only available when training. Accumulation only "
            "applies to training, and this is an InferenceSession: set "
            "enableGradientAccumulation = False.")
    if accumulation < 1 or replicas < 1:
        raise popart_exception("accumulationFactor and replicatedGraphCount must be >= 1.")
    return Plan(dataflow.batchesPerStep(), accumulation, replicas)


def _switch(options: Any, name: str) -> bool:
    value = getattr(options, name, False)
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"SessionOptions.{name} must be True or False, got "
                        f"{type(value).__name__} {value!r}.")
    return bool(value)


def _input_specs(model: Any, shape_info: Any) -> dict[str, tuple[tuple[int, ...], Any]]:
    initializers = {i.name for i in model.graph.initializer}
    shapes = {}
    if shape_info is not None:
        shapes = {info.name: list(shape_info.get(info.name).shape())
                  for info in model.graph.input if shape_info.has(info.name)}
    specs = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        unknown = None if info.name in shapes else unknown_input_shape_message(info)
        if unknown is not None:
            raise popart_exception(unknown)
        shape, dtype = value_info_spec(info, shapes)
        specs[info.name] = (shape, dtype)
    return specs


def build_program(fn_model: Any, dataflow: Any, *, input_shape_info: Any = None,
                  options: Any = None, loss: str | None = None,
                  losses: Sequence[Loss] | None = None, optimizer: Any = None) -> Program:
    """Build the Ir of an inference (no ``optimizer``) or training session."""
    import ipuxl

    model = load_fn_model(fn_model)
    check_model(model, initializer_data=False)  # initializer_arrays below reads them all
    source = model_source(fn_model, model)
    training = optimizer is not None
    if not training and dataflow.nAnchors() == 0:  # PopART's whole message (Ir::setDataFlow)
        raise popart_exception("User must specify an anchor tensor when doing inference.")
    plan = _plan(dataflow, options, training)
    check_pipelining(model, options, plan.batches_per_step, training)
    check_excluded_patterns(model)
    ir = ipuxl.Ir(replication=plan.replicas)
    ir.num_host_transfers = plan.micro_batches
    program = Program(ir, plan, model, source=source, optimizer=optimizer)
    arrays = initializer_arrays(model.graph)
    # A saved model's optimizer state (Accl___<w>...) starts the state, not a weight.
    state_values = {n: arrays.pop(n) for n in state_initializers(arrays)} if training \
        else {}
    specs = _input_specs(model, input_shape_info)
    used = read_ids(model.graph) | {loss} | {output.name for output in model.graph.output} \
        | {a.removeprefix(reservedGradientPrefix()) for a in dataflow.anchors()} | \
        {i for each in losses or () for i in each.input_ids()}
    with ir.main_graph:
        for name, (shape, dtype) in specs.items():
            if name not in used:  # PopART's Ir removes an isolated stream tensor
                continue
            program.inputs[name] = ipuxl.h2d_stream(shape, dtype_of(dtype), name=name)
            program.infos[name] = (shape, dtype_of(dtype))
        for name, array in arrays.items():
            if is_weight(array):  # one replica's shape: a grouped weight's is a group's
                weight = weight_variable(model, name, array, plan.replicas)
                program.weights[name] = weight
                program.infos[name] = (tuple(weight.shape), weight.dtype)
        if seeds.draws_random(model, training):
            program.random_seed = seeds.seed_variable()
        if training:
            _build_training(program, dataflow, arrays, loss, losses or (), optimizer, options,
                            state_values)
        else:
            _build_inference(program, dataflow, arrays, options)
    return program


# ---------------------------------------------------------------------------- inference
def _build_inference(program: Program, dataflow: Any, arrays: dict[str, np.ndarray],
                     options: Any) -> None:
    import ipuxl
    from ipuxl import ops

    model, bindings = program.model, {}

    def body() -> None:
        env: dict[str, Any] = {n: a for n, a in arrays.items() if n not in program.weights}
        importer = Importer(opsets_of(model), source=program.source, training=False,
                            popart=True, session=session_keywords(options),
                            on_node=convolution_logger(options, training=False))
        if program.random_seed is not None:
            seed = seeds.seed_input(program.random_seed, bindings)
            importer.random = RandomDraws(seeds.step_seed(seed))
        for name, variable in program.weights.items():
            graph_input = ipuxl.graph_input(variable.shape, variable.dtype, name)
            bindings[graph_input] = variable
            env[name] = graph_input
        importer.known.update(single_valued(program.weights, arrays))
        for name, stream in program.inputs.items():
            env[name] = ops.host_load(stream, name)
        importer.run(model.graph, env)
        _record_infos(program, env)
        for anchor in dataflow.anchors():
            tensor = importer.tensor(anchor, _lookup(env, anchor))
            _store_anchor(program, anchor, tensor)

    body.__qualname__ = "inference_step"
    graph = program.ir.create_graph(body)
    ops.repeat(graph, program.plan.batches_per_step, inputs_dict=bindings)


# ----------------------------------------------------------------------------- training
def _build_training(program: Program, dataflow: Any, arrays: dict[str, np.ndarray],
                    loss: str | None, losses: Sequence[Loss], optimizer: Any,
                    options: Any, state_values: Mapping[str, np.ndarray]) -> None:
    import ipuxl
    from ipuxl import ops
    from ipuxl.transforms.autodiff import autodiff_with_integer_gradients

    model, ir, plan = program.model, program.ir, program.plan
    if loss is None and not losses:
        raise popart_exception("A TrainingSession needs a loss: pass loss=<tensor id of a "
                               "scalar loss in the model> (or losses=[popart.NllLoss(...)]).")
    gradient_anchors = [a for a in dataflow.anchors()
                        if a.startswith(reservedGradientPrefix())]
    accum_anchors = [a for a in dataflow.anchors() if a.startswith(reservedAccumPrefix())]
    mean = _reduction_is_mean(options)
    scalars = compound_scalars(optimizer, {n: v.dtype for n, v in program.weights.items()},
                               plan.accumulation, plan.replicas, mean)
    scalar_anchors = [a for a in dataflow.anchors() if a in scalars]
    updated_anchors = {a: w for a in dataflow.anchors()
                       if (w := updated_weight(a, program.weights, plan.accumulation))}
    # An anchored weight is stored after its update, as PopART copies it to the host
    # after its VarUpdate op.
    weight_anchors = [a for a in dataflow.anchors() if a in program.weights]
    forward_anchors = [a for a in dataflow.anchors()
                       if a not in gradient_anchors and a not in accum_anchors
                       and a not in scalars and a not in updated_anchors
                       and a not in weight_anchors]
    check_accumulator_anchors(accum_anchors, program)
    from ipuxl.onnx.ops.nn_norm import running_statistics
    from ipuxl.popart.variable_copies import copy_var_updates
    copied = {**running_statistics(model.graph, list(program.weights)),
              **copy_var_updates(model.graph, list(program.weights))}
    graph, constants = constants_with_gradients(model.graph, gradient_anchors, program.source,
                                                 opsets_of(model))
    weight_inputs: dict[str, Any] = {}
    data_inputs: dict[str, Any] = {}
    constant_inputs: dict[str, Any] = {}
    named: dict[str, Any] = {}  # every tensor of the forward graph, by ONNX name
    extra: list[str] = []  # the non-weights whose gradients are anchored
    # Weights the loss does not depend on (a Detach cuts the path): PopART makes no
    # gradient for them, so no VarUpdate, and they keep their values (no weight decay).
    frozen: set[str] = set()
    loss_id = loss if loss is not None else "__ipuxl_loss__"

    def forward() -> None:
        env: dict[str, Any] = {n: a for n, a in arrays.items() if n not in program.weights}
        importer = Importer(opsets_of(model), source=program.source, training=True,
                            popart=True, session=session_keywords(options),
                            on_node=convolution_logger(options, training=True))
        if program.random_seed is not None:  # fed the micro-batch's seed (step_seed)
            data_inputs[seeds.SEED_NAME] = seeds.seed_input(program.random_seed)
            importer.random = RandomDraws(data_inputs[seeds.SEED_NAME])
        for name in program.inputs:
            shape, dtype = program.infos[name]
            data_inputs[name] = env[name] = ipuxl.graph_input(shape, dtype, name)
        for name, variable in program.weights.items():
            weight_inputs[name] = env[name] = ipuxl.graph_input(variable.shape,
                                                                variable.dtype, name)
        importer.known.update(single_valued(program.weights, arrays))
        for name, value in constants.items():
            constant_inputs[name] = env[name] = ipuxl.graph_input(
                value.shape, dtype_of(value.dtype), name)
        importer.run(graph, env)
        if losses:
            env[loss_id] = _seed_era_losses(env, losses)
        _record_infos(program, env)
        named.update((n, t) for n, t in env.items() if isinstance(t, ipuxl.Tensor))
        if options is not None and getattr(options, "enablePipelining", False):
            # A pipelined PopART program stashes activations and restores them for the
            # backward pass as `Restored___<id>`: the same values, which ipuxl never copies.
            restored = reservedRestoredPrefix()
            env.update((a, env[a[len(restored):]]) for a in forward_anchors
                       if a.startswith(restored) and a[len(restored):] in env)
        value = importer.tensor(loss_id, _lookup(env, loss_id))
        if value.nelms != 1:  # PopART's whole message (its tests compare the ending)
            raise popart_exception(f"Loss tensor, '{loss_id}', must be a scalar tensor")
        extra.extend(anchored_gradients(gradient_anchors, named, value, program.weights))
        reached = loss_depends_on(value)
        frozen.update(n for n, t in weight_inputs.items() if t not in reached)
        ipuxl.graph_output(value)
        for anchor in forward_anchors:
            ipuxl.graph_output(importer.tensor(anchor, _lookup(env, anchor)))
        for output in copied.values():
            ipuxl.graph_output(importer.tensor(output, _lookup(env, output)))

    forward.__qualname__ = "onnx_forward"
    fwd = ir.create_graph(forward)
    weights_in_fwd = list(weight_inputs.values())
    # Gradients anchored beyond the weights' (inputs, activations): PopART gives one to
    # every tensor the loss depends on, integers included (a float-to-integer cast stops
    # them).
    grad_info = autodiff_with_integer_gradients(fwd, grads_provided=fwd.outputs[:1],
                         grads_required=weights_in_fwd + [named[n] for n in extra])
    extra_index = {name: len(weights_in_fwd) + i for i, name in enumerate(extra)}

    for name, variable in program.weights.items():
        for prefix, _ in optimizer.state(name):
            value = optimizer.state_value(name, prefix, variable.shape, variable.dtype.as_numpy())
            if prefix + name in state_values:
                value = saved_state(prefix + name, state_values[prefix + name], value)
            program.state[prefix + name] = variable_like(variable, value, prefix + name)
        if plan.accumulation > 1:
            program.accumulators["Accum___" + name] = variable_like(
                variable, np.zeros(variable.shape, variable.dtype.as_numpy()),
                "Accum___" + name)
        for key in optimizer.KEYS:
            hyper_name, value = optimizer.hyper(name, key)
            if not value.isConst and hyper_name not in program.hyper:
                program.hyper[hyper_name] = ipuxl.variable(np.float32(value.val),
                                                           name=hyper_name)
    if not optimizer.lossScaling.isConst:
        program.hyper["lossScaling___default___"] = ipuxl.variable(
            np.float32(optimizer.lossScaling.val), name="lossScaling___default___")

    def graph_inputs(bindings: dict[Any, Any], accumulating: bool = False) -> dict[str, Any]:
        """Graph inputs for the variables (by reference where the graph writes them: a
        micro-batch that only accumulates reads the weights and writes ``Accum___``)."""
        made = {}
        for group in (program.weights, program.state, program.accumulators):
            if accumulating and group is program.state:
                continue
            for name, variable in group.items():
                by_ref = not accumulating or group is program.accumulators
                made[name] = ipuxl.graph_input(variable.shape, variable.dtype, name,
                                               by_ref=by_ref)
                bindings[made[name]] = variable
        for name, variable in program.hyper.items():
            made[name] = ipuxl.graph_input(variable.shape, variable.dtype, name)
            bindings[made[name]] = variable
        if program.random_seed is not None:
            made[seeds.SEED_NAME] = seeds.seed_input(program.random_seed, bindings)
        return made

    def hyper_for(made: dict[str, Any], weight: str) -> dict[str, Any]:
        values = {}
        for key in optimizer.KEYS:
            hyper_name, value = optimizer.hyper(weight, key)
            values[key] = made[hyper_name] if not value.isConst else value.val
        return values

    def loss_scaling(made: dict[str, Any]) -> Any:
        return made.get("lossScaling___default___", optimizer.lossScaling.val)

    def apply_updates(made: dict[str, Any], grads: dict[str, Any]) -> None:
        reduced = {}
        for name in program.weights:
            grad = grads[name]
            if plan.replicas > 1:  # within the weight's group of replicas
                grad = ops.collectives.replicated_all_reduce(
                    grad, op="add", group=program.weights[name].replica_grouping)
            if mean and plan.micro_batches // plan.batches_per_step * plan.replicas > 1:
                grad = grad * (1.0 / (plan.accumulation * plan.replicas))
            reduced[name] = grad
        reduced = optimizer.clip_gradients(reduced)  # clip_norm_settings: all weights at once
        for name in program.weights:
            if name in copied or name in frozen:
                continue
            state = {prefix: made[prefix + name] for prefix, _ in optimizer.state(name)}
            optimizer.update(made[name], reduced[name], state, hyper_for(made, name))

    def micro(made: dict[str, Any], update: bool) -> None:
        # In the order written: the forward and backward calls read each weight (and the
        # seed) before the updates write it, which no data edge says for a loss linear in
        # a weight, and the user cannot add `popxl.in_sequence()` to generated code.
        with ipuxl.in_sequence():
            micro_body(made, update)

    def micro_body(made: dict[str, Any], update: bool) -> None:
        loaded = {name: ops.host_load(stream, name) for name, stream in program.inputs.items()}
        if seeds.SEED_NAME in made:
            loaded[seeds.SEED_NAME] = seeds.step_seed(made[seeds.SEED_NAME])
        inputs_dict = {data_inputs[n]: loaded[n] for n in data_inputs}
        inputs_dict.update({weight_inputs[n]: made[n] for n in weight_inputs})
        inputs_dict.update({constant_inputs[n]: ipuxl.constant(v, name=n)
                            for n, v in constants.items()})
        fwd_info = ops.call_with_info(fwd, inputs_dict=inputs_dict)
        loss_value = fwd_info.outputs[0]
        scale = loss_scaling(made)
        seed = ipuxl.constant(np.ones(loss_value.shape, loss_value.dtype.as_numpy()))
        seed = seed * scale if not isinstance(scale, float) or scale != 1.0 else seed
        bwd_info = ops.call_with_info(grad_info.graph, seed,
                                      inputs_dict=grad_info.inputs_dict(fwd_info))
        by_tensor = grad_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        scaled = {name: by_tensor[made[name]] for name in program.weights}
        scaled.update((name, bwd_info.outputs[i]) for name, i in extra_index.items())
        scaled[loss_id] = seed
        grads = {}
        for name in program.weights:
            grad = scaled[name]
            grads[name] = grad * (1.0 / scale) if not isinstance(scale, float) or scale != 1.0 \
                else grad
        for index, anchor in enumerate(forward_anchors):
            _store_anchor(program, anchor, fwd_info.outputs[1 + index])
        for anchor in gradient_anchors:
            # PopART's gradient tensors carry the loss scaling (its updates divide it out).
            _store_anchor(program, anchor, scaled[anchor[len(reservedGradientPrefix()):]])
        for anchor in scalar_anchors:
            scalar = scalars[anchor]
            _store_anchor(program, anchor, scalar_value(
                scalar, hyper_for(made, scalar.weight), loss_scaling(made)))
        if update:
            apply_updates(made, grads)
            for index, name in enumerate(copied, start=1 + len(forward_anchors)):
                ops.var_updates.copy_var_update_(made[name], fwd_info.outputs[index])
            for anchor, weight in updated_anchors.items():
                _store_anchor(program, anchor, made[weight] + 0.0)
            for anchor in weight_anchors:
                _store_anchor(program, anchor, made[anchor] + 0.0)
        else:
            for name in program.weights:
                accum = made["Accum___" + name]
                ops.var_updates.copy_var_update_(accum, accum + grads[name])
            for anchor in accum_anchors:  # the sum so far, micro-batch by micro-batch
                _store_anchor(program, anchor, made[anchor] + 0.0)
            for anchor in weight_anchors:  # updated after the last micro-batch
                _store_anchor(program, anchor, made[anchor] + 0.0)

    if plan.accumulation == 1:
        bindings: dict[Any, Any] = {}

        def step() -> None:
            micro(graph_inputs(bindings), update=True)

        step.__qualname__ = "training_step"
        ops.repeat(ir.create_graph(step), plan.batches_per_step, inputs_dict=bindings)
        return

    outer_bindings: dict[Any, Any] = {}

    def outer() -> None:
        with ipuxl.in_sequence():  # the accumulators are read after the loop writes them
            outer_body()

    def outer_body() -> None:
        made = graph_inputs(outer_bindings)
        inner_bindings: dict[Any, Any] = {}

        def inner() -> None:
            inner_made = graph_inputs(inner_bindings, accumulating=True)
            micro(inner_made, update=False)

        inner.__qualname__ = "micro_batch"
        inner_graph = ir.create_graph(inner)
        ops.repeat(inner_graph, plan.accumulation,
                   inputs_dict={g: made[v.name] for g, v in inner_bindings.items()})
        grads = {name: made["Accum___" + name] + 0.0 for name in program.weights}
        apply_updates(made, grads)
        for name in program.weights:
            accum = made["Accum___" + name]
            ops.var_updates.copy_var_update_(accum, accum * 0.0)

    outer.__qualname__ = "training_step"
    ops.repeat(ir.create_graph(outer), plan.batches_per_step, inputs_dict=outer_bindings)


def _reduction_is_mean(options: Any) -> bool:
    """``accumulationAndReplicationReductionType``: ``Sum`` (the default) or ``Mean``."""
    if options is None:
        return False
    value = getattr(options, "accumulationAndReplicationReductionType", "Sum")
    what = "SessionOptions.accumulationAndReplicationReductionType"
    reduction = reduction_type(value, what)
    if reduction is ReductionType.NoReduction:
        raise popart_exception(f"{what} must be ReductionType.Sum or ReductionType.Mean: the "
                               "gradients of the micro-batches and replicas are combined "
                               "into one update, so they must be reduced.")
    return reduction is ReductionType.Mean


_NLL_REDUCTIONS = {ReductionType.Sum: "sum", ReductionType.Mean: "mean",
                   ReductionType.NoReduction: "none"}


def _seed_era_losses(env: dict[str, Any], losses: Sequence[Loss]) -> Any:
    """The sum of the seed-era loss objects, made with ipuxl ops."""
    from ipuxl import ops

    total = None
    for loss in losses:
        tensors = [_lookup(env, i) for i in loss.input_ids()]
        if isinstance(loss, NllLoss):
            probs, label = tensors
            value = ops.nll_loss(probs, label, ignore_index=loss.ignore_index,
                                 reduction=_NLL_REDUCTIONS[loss.reduction])
        elif isinstance(loss, L1Loss):
            value = _reduce(ops.abs(tensors[0]) * float(loss.lambda_), loss.reduction)
        elif isinstance(loss, IdentityLoss):
            value = _reduce(tensors[0], loss.reduction)
        else:
            raise TypeError(f"Unknown loss {loss!r}: use popart.NllLoss, L1Loss or IdentityLoss.")
        env[loss.output()] = value
        total = value if total is None else total + value
    return total


def _reduce(tensor: Any, reduction: ReductionType) -> Any:
    from ipuxl import ops

    if reduction is ReductionType.Sum:
        return ops.sum(tensor)
    if reduction is ReductionType.Mean:
        return ops.mean(tensor)
    return tensor


# -------------------------------------------------------------------------------- shared
def _lookup(env: Mapping[str, Any], tensor_id: str) -> Any:
    if tensor_id not in env:
        raise popart_exception(
            f"Anchor tensor {tensor_id!r} is not in the model: anchors must name a tensor "
            "of the ONNX graph (an output of a node, a graph input or an initializer) or "
            f"{reservedGradientPrefix()}<weight> in training.")
    return env[tensor_id]


def _store_anchor(program: Program, anchor: str, tensor: Any) -> None:
    import ipuxl
    from ipuxl import ops

    stream = program.anchors.get(anchor)
    if stream is None:
        with program.ir.main_graph:
            stream = ipuxl.d2h_stream(tensor.shape, tensor.dtype, name=f"anchor:{anchor}")
        program.anchors[anchor] = stream
        program.infos.setdefault(anchor, (tuple(tensor.shape), tensor.dtype))
    ops.host_store(stream, tensor)


def _record_infos(program: Program, env: Mapping[str, Any]) -> None:
    from ipuxl.tensor import Tensor

    for name, value in env.items():
        if isinstance(value, Tensor):
            program.infos.setdefault(name, (tuple(value.shape), value.dtype))
        elif isinstance(value, np.ndarray):
            program.infos.setdefault(name, (value.shape, dtype_of(value.dtype)))
