"""Edits of the exported and the training ONNX graphs for ORTModule: the wrapper's name prefix
removed, fed values made plain inputs, and the training graph split where the output gradients
enter (see the package docstring)."""
from __future__ import annotations

import onnx
from onnx import helper

from kiln.training.ortmodule._calls import _Fallback


def _strip_prefix(graph, prefix: str):
    """The export's names of the wrapped module's parameters and buffers ("inner.fc.weight") as its
    own state_dict names ("fc.weight")."""
    names = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    rename = {n: n[len(prefix):] for n in names if n.startswith(prefix)}
    if not rename:
        return
    taken = {o for node in graph.node for o in node.output} | names
    clash = [new for new in rename.values() if new in taken]
    if clash:
        raise _Fallback(f"the export names values {clash[:3]} like the module's parameters")
    for v in list(graph.input) + list(graph.output) + list(graph.value_info) + list(graph.initializer):
        v.name = rename.get(v.name, v.name)
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = rename.get(name, name)


def _fed_as_inputs(model: onnx.ModelProto, fed: set) -> onnx.ModelProto:
    """The model with the values ORTModule feeds on every call (inputs, parameters, buffers, output
    gradients) as plain graph inputs, and every other initializer the nodes read as a constant: Kiln
    then runs it by position with its outputs written in place (Session.run_bound)."""
    g = model.graph
    read = {i for n in g.node for i in _reads(n)} | {o.name for o in g.output}
    constants = [t for t in g.initializer if t.name not in fed and t.name in read]
    inputs = [i for i in g.input if i.name in fed and i.name in read]
    del g.initializer[:]
    g.initializer.extend(constants)
    del g.input[:]
    g.input.extend(inputs)
    return model


def _subgraph_reads(graph) -> list:
    """The names a subgraph (an If branch, a Loop or Scan body) reads from the graphs around it."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for n in graph.node for o in n.output}
    reads = []
    for n in graph.node:
        for name in _reads(n):
            if name and name not in defined and name not in reads:
                reads.append(name)
    reads += [o.name for o in graph.output if o.name not in defined and o.name not in reads]
    return reads


def _reads(node) -> list:
    """A node's inputs and, for If / Loop / Scan, the outer values its subgraphs read by name."""
    names = list(node.input)
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            names += [r for r in _subgraph_reads(a.g) if r not in names]
    return names


def _split(training: onnx.ModelProto, output_names: list, grad_names: list, fed: set):
    """The training graph cut where the output gradients (its dY inputs) enter: (forward part,
    backward part without its stash inputs, stash names, the stash values fixed by the signature).
    `fed`: the names ORTModule feeds every call (inputs, parameters, buffers); every other
    initializer is a constant. The forward part computes every node that
    does not depend on a dY and returns the outputs and the values the backward part reads (the
    stash); the backward part computes the rest and returns the gradients. Constant nodes the
    backward reads are copied into it rather than stashed."""
    g = training.graph
    dys = {i.name for i in g.input if i.name.startswith("kiln_grad_output_")}
    tainted, backward_nodes, forward_nodes = set(dys), [], []
    pending = list(g.node)
    while pending:  # the file's order need not be topological: repeat until no node moves
        moved, rest = False, []
        produced = {o for n in forward_nodes + backward_nodes for o in n.output}
        known = produced | {i.name for i in g.input} | {i.name for i in g.initializer}
        for n in pending:
            if any(i and i not in known for i in _reads(n)):
                rest.append(n)
                continue
            moved = True
            if any(i in tainted for i in _reads(n)):
                backward_nodes.append(n)
                tainted.update(o for o in n.output if o)
            else:
                forward_nodes.append(n)
        if not moved:
            raise _Fallback("internal: the training graph has a cycle or reads an undefined value")
        pending = rest
    forward_out = {o for n in forward_nodes for o in n.output if o}
    # Values fixed by the signature (shapes and what is computed from them and from constants): the
    # backward part takes them as constants, so that Kiln plans its Reshapes and gradients with
    # known shapes instead of inferring them on every call.
    constant_inputs = {t.name for t in g.initializer if t.name not in fed}
    static = set()
    for n in forward_nodes:
        if n.op_type in ("Shape", "Size", "Constant") or all(not i or i in static or i in constant_inputs
                                                               for i in _reads(n)):
            static.update(o for o in n.output if o)
    constants = {o: n for n in forward_nodes if n.op_type == "Constant" for o in n.output}
    read_by_backward = [i for n in backward_nodes for i in _reads(n) if i in forward_out]
    copied = {constants[i].output[0]: constants[i] for i in read_by_backward if i in constants}
    stash = list(dict.fromkeys(i for i in read_by_backward if i not in constants))

    def part(nodes, inputs, outputs):
        p = onnx.ModelProto()
        p.CopyFrom(training)
        del p.graph.node[:]
        p.graph.node.extend(nodes)
        del p.graph.input[:]
        p.graph.input.extend(inputs)
        del p.graph.output[:]
        p.graph.output.extend(outputs)
        del p.graph.value_info[:]
        return _fed_as_inputs(p, fed)

    infos = {v.name: v for v in list(g.value_info) + list(g.output)}
    fwd_inputs = [i for i in g.input if i.name not in dys]
    fwd_outputs = [infos[n] for n in output_names] + [
        infos.get(n) or helper.make_empty_tensor_value_info(n) for n in stash if n not in output_names]
    fed = fed | dys
    forward = part(forward_nodes, fwd_inputs, fwd_outputs)
    bwd_inputs = [i for i in g.input if i.name in fed]
    backward = part(list(copied.values()) + backward_nodes, bwd_inputs, [infos[n] for n in grad_names])
    return forward, backward, stash, static
