"""The PyTorch models that the parity tests and bench/bench.py export to ONNX.

Seeded, in eval mode, with non-trivial BatchNorm statistics, so an exported model is a fixed function.
"""
import torch
from torch import nn


class MLP(nn.Module):
    """Linear-ReLU-Linear-ReLU-Linear on flat 784-vectors (MNIST-sized)."""

    def __init__(self, d_in=784, hidden=256, d_out=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, d_out))

    def forward(self, x):
        return self.net(x)


class LeNet(nn.Module):
    """Conv-ReLU-BatchNorm-MaxPool-Conv-ReLU-MaxPool-AvgPool-Flatten-Linear-ReLU-Linear on 1x28x28.

    BatchNorm follows the ReLU so that the exporter cannot fold it into the Conv's weights: the
    exported graph keeps a BatchNormalization node for Kiln to run.
    """

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.BatchNorm2d(6), nn.MaxPool2d(2),  # 6x14x14
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),                               # 16x5x5
            nn.AvgPool2d(2, stride=1))                                                     # 16x4x4
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 4 * 4, 120), nn.ReLU(), nn.Linear(120, 10))

    def forward(self, x):
        return self.head(self.features(x))


class ViewNet(nn.Module):
    """A conv whose output is flattened with x.view(x.size(0), -1): the exported Reshape takes its
    target shape from Shape -> Gather -> Unsqueeze -> Concat, computed at run time."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.fc(y.view(y.size(0), -1))


class LSTMClassifier(nn.Module):
    """A one-layer LSTM over 64 steps of 128 features, its last hidden state into a 10-way head:
    exports to ONNX's LSTM (the recurrent row of bench/bench.py)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(128, 256, batch_first=True)
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


# name -> (constructor, input shape without the batch dimension)
MODELS = {
    "mlp": (MLP, (784,)),
    "lenet": (LeNet, (1, 28, 28)),
    "viewnet": (ViewNet, (3, 8, 8)),
    "lstm": (LSTMClassifier, (64, 128)),
}


def build(name, seed=0):
    """The model `name`, seeded and in eval mode, with random BatchNorm running statistics."""
    ctor, _ = MODELS[name]
    torch.manual_seed(seed)
    model = ctor()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def export(model, input_shape, path, batch=2):
    """Exports with opset 17 and a dynamic batch axis named 'batch'."""
    example = torch.randn(batch, *input_shape)
    with torch.no_grad():
        torch.onnx.export(model, example, str(path), opset_version=17,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return path
