"""BatchNormalization in PopART sessions: its parameter shapes and rank checked in
PopART's words, the inference-mode refusal when its gradient would be created (unless
detached), and the running statistics a training session copies into its variables."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ipuxl.popart as popart
from ipuxl.onnx.errors import OnnxImportError
from ipuxl.onnx.ops.nn_norm import running_statistics
from ipuxl.onnx.ops.popart_checks import session_check

X = np.random.default_rng(3).random((2, 2, 2, 2)).astype(np.float32)


def build(shapes: dict[str, tuple[int, ...]] | None = None, outputs: int = 1,
          detach: bool = False, **attributes) -> tuple[popart.Builder, str, str, list[str]]:
    """``loss = mean(BatchNormalization(x, scale, B, mean, var) + x)``, and the input
    ids (``x`` and the parameters)."""
    shapes = {"scale": (2,), "B": (2,), "mean": (2,), "var": (2,), **(shapes or {})}
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(X))
    params = [builder.addInputTensor(popart.TensorInfo("FLOAT", list(shapes[name])))
              for name in ("scale", "B", "mean", "var")]
    y = builder.aiOnnx.batchnormalization([x, *params], outputs, 1e-5, 0.1, **attributes)[0]
    after = builder.aiGraphcore.detach([y]) if detach else y
    loss = builder.aiGraphcore.identityloss([builder.aiOnnx.add([after, x])])
    return builder, y, loss, [x, *params]


def training_session(builder: popart.Builder, y: str, loss: str, _: list[str]
                     ) -> popart.TrainingSession:
    return popart.TrainingSession(builder.getModelProto(), popart.DataFlow(1, [y]), loss,
                                  popart.ConstSGD(0.1),
                                  deviceInfo=popart.DeviceManager().createCpuDevice())


@pytest.mark.parametrize("name", ["scale", "B", "mean", "var"])
def test_a_parameter_of_the_wrong_shape_is_refused_as_popart(name):
    with pytest.raises(popart.popart_exception,
                       match=rf"^expected shape of batch norm input tensor {name} \(\[1\]\) "
                             r"to be \[2\] to match dimension 1 of X \(\[2 2 2 2\]\)"):
        training_session(*build({name: (1,)}, outputs=5))


def test_spatial_zero_parameters_have_all_but_the_first_dimension():
    builder = popart.Builder(opsets={"ai.onnx": 7, "ai.onnx.ml": 1, "ai.graphcore": 1})
    x = builder.addInputTensor(popart.TensorInfo(X))
    params = [builder.addInputTensor(popart.TensorInfo("FLOAT", shape))
              for shape in ([2, 2, 2], [2, 2, 2], [2, 2, 2], [2, 2, 4])]
    (y,) = builder.aiOnnx.batchnormalization([x, *params], 1, 1e-5, 0.1, spatial=0)
    with pytest.raises(popart.popart_exception,
                       match=r"tensor var \(\[2 2 4\]\) to be \[2 2 2\] to match all but the "
                             r"first dimension of X \(\[2 2 2 2\]\)"):
        popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [y]),
                                deviceInfo=popart.DeviceManager().createCpuDevice())


def test_a_session_needs_rank_three():
    class Node:
        op_type, domain = "BatchNormalization", ""

    with pytest.raises(OnnxImportError,
                       match=r"^batch norm requires X to have a rank >= 3\.  x has rank 2$"):
        session_check(Node(), 9, [np.ones((2, 2), np.float32)])
    session_check(Node(), 9, [X])


def test_inference_mode_on_the_loss_path_is_refused_unless_detached():
    with pytest.raises(popart.popart_exception,
                       match=r"has 1 output\(s\) which means it is in inference mode, but its "
                             r"gradient Op is being created\. To use the BatchNorm Op in "
                             r"inference mode during training, it has to be detached first\."):
        training_session(*build())
    built = build(detach=True)
    session = training_session(*built)
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    feeds = dict(zip(built[3], (X, np.ones(2, np.float32), np.zeros(2, np.float32),
                                np.zeros(2, np.float32), np.ones(2, np.float32))))
    session.run(popart.PyStepIO(feeds, anchors))
    (y,) = anchors.values()
    want = (X - 0.0) / np.sqrt(1.0 + 1e-5)  # inference: the given mean 0 and var 1
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_running_statistics_name_the_variables_a_training_batchnorm_updates():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(X))
    scale = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    bias = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    mean = builder.addInitializedInputTensor(np.zeros(2, np.float32))
    var = builder.addInitializedInputTensor(np.ones(2, np.float32))
    detached = builder.aiGraphcore.detach([var])
    outs = builder.aiOnnx.batchnormalization([x, scale, bias, mean, detached], 5, 1e-5, 0.1)
    builder.aiOnnx.batchnormalization([x, scale, bias, mean, var], 1, 1e-5, 0.1)
    graph = onnx.load_from_string(builder.getModelProto()).graph
    assert running_statistics(graph, [mean, var]) == {mean: outs[1], var: outs[2]}
    assert running_statistics(graph, [mean]) == {mean: outs[1]}
