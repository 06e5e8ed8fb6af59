"""Hugging Face model folders for the zoo: `config.json` + `model.safetensors`.

    model = kiln.AutoModelForSequenceClassification.from_pretrained("my-bert", num_labels=3)
    model.save_pretrained("out")                    # out/config.json, out/model.safetensors
    net = kiln.nn.zoo.from_pretrained("out")        # the zoo entry the config names
    backbone = kiln.AutoBackbone.from_pretrained("my-resnet", out_indices=(2, 3, 4))

The config's `architectures` (else its `model_type`) chooses the zoo entry: BertForSequenceClassification
(bert), GPT2LMHeadModel (gpt2), BartForConditionalGeneration (bart), T5ForConditionalGeneration (t5),
ResNetForImageClassification (resnet: resnet18/34/50 by the config),
ConvNextForImageClassification (convnext), ViTForImageClassification (vit), and Kiln's KilnMLP /
KilnLeNet. The config's fields the zoo entry has are read (HF's names); its other fields (id2label,
torch_dtype, transformers_version, ...) are kept in `model.config` and written back, and `id2label`
sets num_labels. Keyword arguments override the config (num_labels=3). The weights are the zoo's
state_dict keys: HF's own for bert, gpt2, bart and t5 (an HF folder of those loads as it is; GPT-2's attention
mask buffers are skipped and the tied lm_head.weight may be absent), torchvision's for the vision
models (docs/nn.md#the-zoo). A name that is not a local folder is an OSError: Kiln downloads nothing.
"""
import json
import logging
import os
import tempfile

import numpy as np

from kiln.errors import CorruptFile, InvalidArgument, KilnIOError, Unsupported

logger = logging.getLogger(__name__)

CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"
# HF architecture -> (model_type, task)
ARCHITECTURES = {
    "BertForSequenceClassification": ("bert", "sequence-classification"),
    "GPT2LMHeadModel": ("gpt2", "causal-lm"),
    "BartForConditionalGeneration": ("bart", "seq2seq-lm"),
    "T5ForConditionalGeneration": ("t5", "seq2seq-lm"),
    "ResNetForImageClassification": ("resnet", "image-classification"),
    "ConvNextForImageClassification": ("convnext", "image-classification"),
    "ViTForImageClassification": ("vit", "image-classification"),
    "KilnMLP": ("kiln-mlp", "image-classification"),
    "KilnLeNet": ("kiln-lenet", "image-classification"),
}
_ARCHITECTURE_OF = {model_type: arch for arch, (model_type, _) in ARCHITECTURES.items()}
_MODEL_TYPE_OF = {"bert": "bert", "gpt2": "gpt2", "bart": "bart", "t5": "t5", "resnet18": "resnet",
                  "resnet34": "resnet", "resnet50": "resnet", "convnext_tiny": "convnext", "vit": "vit",
                  "mlp": "kiln-mlp", "lenet": "kiln-lenet"}
# GPT-2 checkpoints written by older transformers hold the attention masks as buffers.
_SKIPPED_SUFFIXES = (".attn.bias", ".attn.masked_bias")


class PretrainedConfig:
    """A model folder's config: attributes for every field (HF's PretrainedConfig reads the same)."""

    def __init__(self, values):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(f"the config has no field '{name}'") from None

    def __setattr__(self, name, value):
        self._values[name] = value

    def to_dict(self):
        return dict(self._values)

    def __repr__(self):
        return f"PretrainedConfig({json.dumps(self._values, sort_keys=True)})"

    def save_pretrained(self, folder):
        os.makedirs(folder, exist_ok=True)
        _write_json(os.path.join(folder, CONFIG_NAME), self._values)

    @classmethod
    def from_pretrained(cls, folder):
        return cls(read_config(folder))


def _write_json(path, values):
    """Atomically: a temporary file in the folder, flushed to disk, then renamed."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(values, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _folder(path):
    path = os.fspath(path)
    if not os.path.isdir(path):
        if os.path.exists(path):
            raise KilnIOError(f"'{path}' is a file; from_pretrained takes a folder holding {CONFIG_NAME} and "
                              f"{WEIGHTS_NAME}")
        raise KilnIOError(f"'{path}' is not a local folder: Kiln runs offline and downloads nothing from the Hugging "
                          f"Face Hub; pass a folder holding {CONFIG_NAME} and {WEIGHTS_NAME}")
    return path


def read_config(folder):
    path = os.path.join(_folder(folder), CONFIG_NAME)
    if not os.path.isfile(path):
        raise KilnIOError(f"'{folder}' has no {CONFIG_NAME}")
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise CorruptFile(f"'{path}' is not valid JSON: {e}") from None
    if not isinstance(values, dict):
        raise CorruptFile(f"'{path}' holds a {type(values).__name__}, not a JSON object")
    return values


def model_type_of(values, where):
    """The config's model type: its architectures' first known entry, else model_type."""
    for arch in values.get("architectures") or []:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch][0]
    model_type = values.get("model_type")
    if model_type in _ARCHITECTURE_OF:
        return model_type
    known = ", ".join(sorted(ARCHITECTURES))
    raise Unsupported(f"{where}: architectures {values.get('architectures')} / model_type {model_type!r} is not a "
                      f"model Kiln's zoo has (architectures: {known})")


def zoo_name(model_type, values):
    if model_type == "resnet":
        return "resnet50" if values.get("layer_type") == "bottleneck" else "resnet18"
    if model_type == "convnext":
        return "convnext_tiny"
    return {"kiln-mlp": "mlp", "kiln-lenet": "lenet"}.get(model_type, model_type)


def zoo_config(name, values, overrides):
    """The zoo entry's config from a model folder's fields (the ones it has) and the overrides."""
    from kiln.nn import zoo
    known = zoo.config_for(name)
    config = {k: v for k, v in values.items() if k in known}
    if "num_labels" in known and "num_labels" not in values and isinstance(values.get("id2label"), dict):
        config["num_labels"] = len(values["id2label"])
    for key, value in overrides.items():
        if key not in known:
            raise InvalidArgument(f"from_pretrained: '{name}' has no config field '{key}' (fields: "
                                  f"{', '.join(sorted(known))})")
        config[key] = value
    return config


def load_weights(module, folder, ignore_mismatched_sizes=False, part_of_model=False):
    """model.safetensors into the module, HF's way: missing and unexpected keys are logged (GPT-2's
    mask buffers and the tied lm_head.weight silently); a shape mismatch is an error unless
    ignore_mismatched_sizes, which leaves those weights as initialized. part_of_model (a backbone):
    the file's other weights (the head) are not reported."""
    from kiln._core import core
    path = os.path.join(folder, WEIGHTS_NAME)
    if not os.path.isfile(path):
        other = [n for n in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
                 if os.path.exists(os.path.join(folder, n))]
        hint = f" (it has {other[0]}: Kiln reads safetensors only; save it with safe_serialization=True)" if other \
            else ""
        raise KilnIOError(f"'{folder}' has no {WEIGHTS_NAME}{hint}")
    weights = dict(core.nn.load_weights_file(path))
    weights = {k: v for k, v in weights.items() if not k.endswith(_SKIPPED_SUFFIXES)}
    own = module.state_dict()
    mismatched = [k for k, v in weights.items() if k in own and tuple(np.shape(v)) != tuple(own[k].shape)]
    if mismatched:
        detail = ", ".join(f"{k}: {list(np.shape(weights[k]))} in the file, {list(own[k].shape)} in the model"
                           for k in mismatched)
        if not ignore_mismatched_sizes:
            raise InvalidArgument(f"Error(s) in loading state_dict from '{path}': size mismatch for {detail}. "
                                  "Pass ignore_mismatched_sizes=True to initialize those weights anew.")
        logger.warning("Some weights were newly initialized because their shapes differ: %s", detail)
        weights = {k: v for k, v in weights.items() if k not in mismatched}
    missing, unexpected = module.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to transformer.wte.weight
    if missing:
        logger.warning("Some weights of the model were not in %s and are newly initialized: %s", path, missing)
    if unexpected and not part_of_model:
        logger.warning("Some weights of %s were not used by the model: %s", path, unexpected)


def from_pretrained(folder, task=None, ignore_mismatched_sizes=False, **overrides):
    """The zoo model a folder holds, with its weights; `task` (an Auto class's) must match."""
    from kiln.nn import zoo
    values = read_config(folder)
    folder = os.fspath(folder)
    model_type = model_type_of(values, os.path.join(folder, CONFIG_NAME))
    arch = _ARCHITECTURE_OF[model_type]
    if task is not None and ARCHITECTURES[arch][1] != task:
        raise InvalidArgument(f"'{folder}' holds a {arch}, which is not a {task} model")
    name = zoo_name(model_type, values)
    config = zoo_config(name, values, overrides)
    module = zoo.create_model(name, **config)
    load_weights(module, folder, ignore_mismatched_sizes)
    module.config = PretrainedConfig({**values, **module._zoo_config, "model_type": model_type,
                                      "architectures": [arch]})
    return module


def save_pretrained(module, folder, safe_serialization=True, **kwargs):
    """config.json and model.safetensors of a zoo model (made by create_model or from_pretrained)."""
    del kwargs  # HF's push_to_hub, max_shard_size, ...: one file, offline
    name = getattr(module, "_zoo_name", None)
    if name is None:
        raise InvalidArgument("save_pretrained writes zoo models (kiln.nn.zoo.create_model / from_pretrained); save "
                              "a model of your own with save_safetensors")
    if not safe_serialization:
        raise Unsupported("save_pretrained(safe_serialization=False): Kiln writes model.safetensors only")
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    config = getattr(module, "config", None)
    values = config.to_dict() if config is not None else {}
    model_type = _MODEL_TYPE_OF[name]
    values.update(module._zoo_config)  # the config the model was built with
    values.update(model_type=model_type, architectures=[_ARCHITECTURE_OF[model_type]])
    module.save_safetensors(os.path.join(folder, WEIGHTS_NAME))
    _write_json(os.path.join(folder, CONFIG_NAME), values)


class _AutoModel:
    _task = None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, ignore_mismatched_sizes=False, **kwargs):
        if model_args:
            raise TypeError("from_pretrained takes the folder, then keyword arguments")
        for key in ("cache_dir", "revision", "token", "trust_remote_code", "local_files_only", "torch_dtype",
                    "low_cpu_mem_usage", "force_download"):  # about downloads and torch: nothing to do
            kwargs.pop(key, None)
        return from_pretrained(pretrained_model_name_or_path, cls._task, ignore_mismatched_sizes, **kwargs)

    @classmethod
    def from_config(cls, config):
        """A fresh (randomly initialized) model of a config (a PretrainedConfig or a dict)."""
        from kiln.nn import zoo
        values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        model_type = model_type_of(values, "from_config")
        if cls._task is not None and ARCHITECTURES[_ARCHITECTURE_OF[model_type]][1] != cls._task:
            raise InvalidArgument(f"the config is of a {_ARCHITECTURE_OF[model_type]}, which is not a {cls._task} "
                                  "model")
        name = zoo_name(model_type, values)
        module = zoo.create_model(name, **zoo_config(name, values, {}))
        module.config = PretrainedConfig({**values, **module._zoo_config})
        return module


class AutoModel(_AutoModel):
    """Any zoo model from its folder."""


class AutoModelForSequenceClassification(_AutoModel):
    _task = "sequence-classification"


class AutoModelForSeq2SeqLM(_AutoModel):
    """HF's: the encoder-decoders (bart, t5)."""
    _task = "seq2seq-lm"


class AutoModelForCausalLM(_AutoModel):
    _task = "causal-lm"


class AutoModelForImageClassification(_AutoModel):
    _task = "image-classification"


class AutoConfig:
    @staticmethod
    def from_pretrained(folder, **kwargs):
        values = read_config(folder)
        values.update(kwargs)
        return PretrainedConfig(values)
