"""`GraphBuilder`: ONNX nodes written as function calls, for the graphs put
together by hand around the converted ones (`beam_search`,
`text`). Plain `onnx.helper` underneath."""

import numpy as np
from onnx import helper, numpy_helper

from keras_transformer.export.onnx.graphs import OPSET

IR_VERSION = 8
"""The ONNX IR version written: opset 17 needs 8, and older onnxruntime
releases refuse files newer than they know."""
OPSETS = {"": OPSET, "com.microsoft": 1, "ai.onnx.contrib": 1, "ai.onnx.ml": 3}


class GraphBuilder:
    """Collects nodes and initializers; every value gets a unique name under
    `prefix` (so that names never clash with a subgraph's, which onnxruntime
    refuses).

    `builder.op("Add", a, b)` adds a node and returns its output's name (a
    tuple of names with `outputs=n`); `builder.constant(array)` adds an
    initializer and returns its name.
    """

    def __init__(self, prefix):
        self.prefix = prefix
        self.nodes = []
        self.initializers = []
        self._count = 0

    def name(self, hint):
        self._count += 1
        return f"{self.prefix}/{hint}_{self._count}"

    def constant(self, value, dtype=None, name=None):
        array = np.asarray(value, dtype=dtype)
        if array.dtype.kind in "OU":
            array = array.astype(object)
        tensor = numpy_helper.from_array(array, name or self.name("constant"))
        self.initializers.append(tensor)
        return tensor.name

    def op(self, op_type, *inputs, outputs=1, domain="", name=None, **attributes):
        names = ([name] if name else []) if outputs == 1 else []
        names = names or [self.name(op_type) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.name(op_type),
                                           domain=domain, **attributes))
        return names[0] if outputs == 1 else tuple(names)

    def graph(self, name, inputs, outputs):
        """The graph of everything added, with these `ValueInfoProto` inputs
        and outputs."""
        return helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)


def make_model(graph, doc_string=""):
    """A model around `graph` with this package's opsets and IR version."""
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, version)
                                                   for domain, version in OPSETS.items()],
                             ir_version=IR_VERSION, producer_name="keras_transformer",
                             doc_string=doc_string)
