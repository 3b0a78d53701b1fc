"""int8 ONNX graphs whose answer for a sentence does not depend on the other
sentences of its batch, nor on the CPU.

`quantize(proto)` starts from onnxruntime's dynamic quantization
(`quantize_dynamic`): every MatMul with a constant weight becomes
`DynamicQuantizeLinear` (the activations to uint8) -> `MatMulInteger`
(against int8 weights) -> a rescale, and embeddings are stored as int8.
Two of its choices are changed:

- **One scale per row, not per tensor.** `DynamicQuantizeLinear` takes one
  scale from the largest activation of the whole tensor, which holds every
  sentence (and hypothesis) of the batch, so a sentence's rounding, and in
  the end its translation, changed with the sentences beside it. Here each
  row (one token of one sentence) gets its own scale, `max |x| / 127`, and a
  fixed zero point of 128 (symmetric). Written here because onnxruntime has
  no per-row dynamic quantization: `MatMulInteger` accepts only a scalar
  activation zero point, and `MatMulNBits`' int8 compute (also per row, in
  blocks) measured slower than this on the benchmark CPU (docs/benchmarks.md,
  Serving).
- **7-bit weights** (`reduce_range`, onnxruntime's option for this): the
  u8 x s8 instruction of CPUs without VNNI (AVX2's `vpmaddubsw`) saturates
  16-bit sums of two products, which 255 x 127 x 2 exceeds, so 8-bit
  weights gave other integers on AVX2 than on VNNI CPUs. With |w| <= 63 no
  sum saturates and the integer products are exact everywhere.

The integer matmuls are then exact and row by row; what remains
batch-dependent is what float32 has too (the float ops' rounding).
"""

import logging
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_ZERO_POINT = 128
_STEP, _TINY, _OFFSET = "per_row_int8/step", "per_row_int8/tiny", "per_row_int8/offset"


def quantize(proto):
    """`proto` with int8 weights and per-row int8 activations (see the
    module docstring); subgraphs included."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Its advice to pre-process first (symbolic shape inference) is left
    # out: that fails on these graphs and made no int8 graph faster here.
    advice = _DropMessage("run pre-processing before quantization")
    logging.getLogger().addFilter(advice)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            source = os.path.join(scratch, "float32.onnx")
            target = os.path.join(scratch, "int8.onnx")
            onnx.save(proto, source)
            quantize_dynamic(source, target, weight_type=QuantType.QInt8, reduce_range=True,
                             extra_options={"EnableSubgraph": True})
            quantized = onnx.load(target)
    finally:
        logging.getLogger().removeFilter(advice)
    _quantize_rows(quantized.graph)
    return quantized


def _quantize_rows(graph):
    """Replaces every `DynamicQuantizeLinear` of `graph` (and its subgraphs)
    by per-row symmetric quantization with the same three outputs: the
    uint8 values, the scales `(..., 1)` and the zero point 128."""
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    nodes, replaced = [], False
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                _quantize_rows(subgraph)
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        x = node.input[0]
        values, scales, zero_point = node.output
        # A per-row scale is right only for the rows of a matmul's left
        # operand (each output row then has one activation scale).
        if any(user.op_type != "MatMulInteger" or list(user.input[:1]) != [values]
               for user in consumers.get(values, [])):
            raise ValueError(f"Cannot quantize {x!r} per row: it is not only the left operand "
                             "of integer matmuls.")
        name, replaced = values, True
        nodes += [
            helper.make_node("Abs", [x], [f"{name}/abs"]),
            helper.make_node("ReduceMax", [f"{name}/abs"], [f"{name}/max"], axes=[-1], keepdims=1),
            helper.make_node("Mul", [f"{name}/max", _STEP], [f"{name}/scale"]),
            # An all-zero row (ReLU can give one) keeps a finite scale.
            helper.make_node("Max", [f"{name}/scale", _TINY], [scales]),
            helper.make_node("Div", [x, scales], [f"{name}/scaled"]),
            helper.make_node("Round", [f"{name}/scaled"], [f"{name}/rounded"]),
            helper.make_node("Add", [f"{name}/rounded", _OFFSET], [f"{name}/shifted"]),
            helper.make_node("Cast", [f"{name}/shifted"], [values], to=TensorProto.UINT8),
            helper.make_node("Constant", [], [zero_point],
                             value=numpy_helper.from_array(np.array(_ZERO_POINT, np.uint8))),
        ]
    if replaced:
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend([
            numpy_helper.from_array(np.array(1 / 127, np.float32), _STEP),
            numpy_helper.from_array(np.array(1e-30, np.float32), _TINY),
            numpy_helper.from_array(np.array(_ZERO_POINT, np.float32), _OFFSET)])


class _DropMessage(logging.Filter):
    """Drops log records that contain `text`."""

    def __init__(self, text):
        super().__init__()
        self.text = text

    def filter(self, record):
        return self.text not in record.getMessage()
