"""``session._serializeIr(popart.IrSerializationFormat.JSON)``: PopART's IR JSON of the
imported ops and their gradient ops, with PopART's field formats."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ipuxl.popart as popart


def training_ir() -> dict:
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = builder.addInitializedInputTensor(np.ones((3, 4), np.float32), "w")
    m = builder.aiOnnx.matmul([x, w], "mm")
    builder.virtualGraph(m, 0)
    builder.recomputeOutputInBackwardPass(m, popart.RecomputeType.Recompute)
    r = builder.aiOnnx.relu([m])
    loss = builder.aiGraphcore.identityloss([r])
    session = popart.TrainingSession(builder.getModelProto(), popart.DataFlow(1, [r]), loss,
                                     popart.ConstSGD(0.1),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    return json.loads(session._serializeIr(popart.IrSerializationFormat.JSON))


def test_ops_and_gradient_ops_in_order():
    ir = training_ir()
    assert [op["type"] for op in ir["maingraph"]] == [
        "MatMul", "Relu", "IdentityLoss", "IdentityLossGrad", "ReluGrad", "MatMulGrad",
        "SGD0VarUpdate"]


def test_fields_are_popart_s_strings():
    matmul = training_ir()["maingraph"][0]
    assert matmul["name"] == "mm"
    assert matmul["inputs"][0] == {"name": "x", "shape": "[2 3]", "type": "FLOAT", "index": "0"}
    assert matmul["inputs"][1]["shape"] == "[3 4]"
    assert matmul["outputs"][0]["index"] == "0"
    attributes = matmul["attributes"]
    assert attributes["__ipu_number"] == "0"
    assert attributes["recompute"] == "YES"
    relu = training_ir()["maingraph"][1]
    assert relu["attributes"]["recompute"] == "NO"


def test_inference_lists_the_forward_ops():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("INT32", [2]), "x")
    c = builder.aiOnnx.cast([x], "FLOAT16")
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [c]),
                                      popart.DeviceManager().createCpuDevice())
    ir = json.loads(session._serializeIr(popart.IrSerializationFormat.JSON))
    assert [(op["type"], op["inputs"][0]["type"], op["attributes"]["to"])
            for op in ir["maingraph"]] == [("Cast", "INT32", "10")]


def test_only_json_is_a_format():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [x]),
                                      popart.DeviceManager().createCpuDevice())
    with pytest.raises(TypeError, match="format must be popart.IrSerializationFormat.JSON"):
        session._serializeIr("JSON")


def test_virtual_graphs_give_every_op_an_ipu():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    a = builder.aiOnnx.sin([x])
    b = builder.aiOnnx.cos([a])
    builder.virtualGraph(b, 1)
    options = popart.SessionOptions()
    options.virtualGraphMode = popart.VirtualGraphMode.Manual
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [b]),
                                      popart.DeviceManager().createCpuDevice(),
                                      userOptions=options)
    ir = json.loads(session._serializeIr(popart.IrSerializationFormat.JSON))
    assert [op["attributes"]["__ipu_number"] for op in ir["maingraph"]] == ["0", "1"]


def test_random_like_ops_are_listed_as_popart_rewrites_them():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    r = builder.aiOnnx.randomuniformlike([x])
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [r]),
                                      popart.DeviceManager().createCpuDevice())
    ir = json.loads(session._serializeIr(popart.IrSerializationFormat.JSON))
    assert [op["type"] for op in ir["maingraph"]] == ["RandomUniform"]
