"""kiln.nn: define models as with torch.nn, run them in Kiln and export trainable ONNX.

    import kiln.nn as nn
    import kiln.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.fc = nn.Linear(8 * 28 * 28, 10)

        def forward(self, x):                       # x is a kiln.nn.Var
            x = F.relu(self.bn(self.conv(x)))
            return self.fc(x.flatten(1))

    nn.manual_seed(0)
    net = Net()
    net.export("net.onnx", {"input": (1, 1, 28, 28)}, dynamic_axes={"input": {0: "batch"}})
    out = net(np.zeros((4, 1, 28, 28), np.float32))   # runs in Kiln; hooks fire
    net.load_state_dict(torch_model.state_dict())     # torch's keys

A module passed to kiln.Trainer(model=net, ...) is exported in training mode with the shapes of
the first training example (batch dim dynamic), trained, and its weights loaded back.
"""
from kiln._core import core
from kiln.nn import (
    functional,  # noqa: F401
    zoo,  # noqa: F401
)
from kiln.nn.backbone import AutoBackbone, Backbone
from kiln.nn.layers import (
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    ConvTranspose2d,
    Dropout,
    Embedding,
    Flatten,
    GroupNorm,
    Identity,
    LayerNorm,
    Linear,
    MaxPool2d,
    ModuleDict,
    ModuleList,
    MultiheadAttention,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Tanh,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from kiln.nn.module import Module, NativeModule, Parameter, RemovableHandle, StateDictError
from kiln.nn.var import Size, SymDim, Var

__all__ = ["AdaptiveAvgPool2d", "AutoBackbone", "AvgPool2d", "Backbone", "BatchNorm1d", "BatchNorm2d", "Conv1d",
           "Conv2d", "ConvTranspose2d", "Dropout", "Embedding", "Flatten", "GELU", "GroupNorm", "Identity",
           "LayerNorm", "Linear", "MaxPool2d", "Module", "ModuleDict", "ModuleList", "MultiheadAttention",
           "NativeModule", "Parameter", "ReLU", "RemovableHandle", "Sequential", "Sigmoid", "SiLU", "Size",
           "StateDictError", "SymDim", "Tanh", "TransformerDecoderLayer", "TransformerEncoderLayer", "Var",
           "functional", "load_weights_file", "manual_seed", "zoo"]


def manual_seed(seed):
    """torch.manual_seed's role for parameter initialisation."""
    core.nn.manual_seed(int(seed))


def load_weights_file(path):
    """A safetensors or .npz file as {name: numpy array}."""
    import os
    return core.nn.load_weights_file(os.fspath(path))
