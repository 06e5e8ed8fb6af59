#!/usr/bin/python3
"""An optimum-graphcore training script with its imports changed to Kiln: the shape of optimum's
examples/image-classification/run_image_classification.py (an IPUConfig from a folder, overrides from
the command line, IPUTrainingArguments, IPUTrainer with compute_metrics, train / evaluate /
save_model), on the handwritten digits scikit-learn ships (8 x 8 images, 10 classes).

    /usr/bin/python3 examples/ipu/run_image_classification.py --output_dir run --num_train_epochs 5 \\
        --ipu_config_name examples/ipu --ipu_config_overrides "device_iterations=8" --lamb --fp32

Every IPUTrainingArguments field is a command-line flag (HfArgumentParser's rules, as optimum's
scripts parse them). The original's two imports:

    from optimum.graphcore import IPUConfig, IPUTrainer, IPUTrainingArguments
"""
import sys

import numpy as np
from sklearn.datasets import load_digits

from kiln.graphcore import IPUConfig, IPUTrainer, IPUTrainingArguments


def parse_args(argv):
    """IPUTrainingArguments from `--name value` flags (HfArgumentParser's form for this script)."""
    values, i = {}, 0
    while i < len(argv):
        name = argv[i].lstrip("-").replace("-", "_")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            raw, i = argv[i + 1], i + 2
        else:
            raw, i = "true", i + 1
        for kind in (int, float):
            try:
                raw = kind(raw)
                break
            except ValueError:
                pass
        values[name] = {"true": True, "false": False}.get(raw, raw) if isinstance(raw, str) else raw
    return IPUTrainingArguments(**values)


def digits(split):
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = data.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    part = order[:1500] if split == "train" else order[1500:]
    return [{"input": x[i], "labels": y[i]} for i in part]


def compute_metrics(p):
    return {"accuracy": float((np.argmax(p.predictions, axis=-1) == p.label_ids).mean())}


def main(argv):
    training_args = parse_args(argv)
    ipu_config = IPUConfig.from_pretrained(training_args.ipu_config_name or "examples/ipu")
    import kiln.nn as nn
    model = nn.zoo.create_model("mlp", input_size=64, input_shape=[1, 8, 8], hidden_sizes=[64], num_labels=10)
    trainer = IPUTrainer(model=model, ipu_config=ipu_config, args=training_args, train_dataset=digits("train"),
                         eval_dataset=digits("eval"), compute_metrics=compute_metrics)
    train_result = trainer.train()
    trainer.log_metrics("train", train_result.metrics)
    metrics = trainer.evaluate()
    trainer.log_metrics("eval", metrics)
    trainer.save_model()
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
