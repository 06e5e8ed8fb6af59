"""Hugging Face's HfArgumentParser: command-line flags (or a JSON / YAML file, or a dict) into
dataclasses and kiln.TrainingArguments, as transformers' example scripts read them:

    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=sys.argv[1])
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

TrainingArguments' flags are read by Kiln's own parser (every HF field, `--no_<flag>` for flags that
default to true, HF's value syntax); a dataclass's fields become argparse options with HF's rules:
`--name` and `--name-with-dashes`, bools as `--flag`, `--flag true|false` and `--no_flag` (when the
default is true), Optional[X] as X, Literal and Enum types as choices, lists as nargs="+", fields
without a default required, metadata "help", "choices" and "aliases". Flags no type takes are an
error naming them (or returned, with return_remaining_strings=True).
"""
import argparse
import dataclasses
import enum
import json
import os
import sys
import typing

from kiln._core import core
from kiln.training_args import TrainingArguments

__all__ = ["HfArgumentParser", "string_to_bool"]


def string_to_bool(v):
    if isinstance(v, bool):
        return v
    if v.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if v.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"Truthy value expected: got {v} but expected one of yes/no, true/false, t/f, "
                                     "y/n, 1/0 (case insensitive).")


def _is_training_arguments(t):
    return isinstance(t, type) and issubclass(t, TrainingArguments)


def _unwrap_optional(t):
    if typing.get_origin(t) is typing.Union:
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return t


class HfArgumentParser(argparse.ArgumentParser):
    def __init__(self, dataclass_types, **kwargs):
        if "formatter_class" not in kwargs:
            kwargs["formatter_class"] = argparse.ArgumentDefaultsHelpFormatter
        super().__init__(**kwargs)
        if dataclasses.is_dataclass(dataclass_types) or _is_training_arguments(dataclass_types):
            dataclass_types = [dataclass_types]
        self.dataclass_types = list(dataclass_types)
        for t in self.dataclass_types:
            if _is_training_arguments(t):
                continue
            if not dataclasses.is_dataclass(t):
                raise TypeError(f"HfArgumentParser takes dataclasses and TrainingArguments, not {t!r}")
            hints = typing.get_type_hints(t)
            for f in dataclasses.fields(t):
                if f.init:
                    self._add_field(f, hints.get(f.name, f.type))

    def _add_field(self, field, field_type):
        names = [f"--{field.name}"]
        if "_" in field.name:
            names.append(f"--{field.name.replace('_', '-')}")
        kwargs = dict(field.metadata)
        aliases = kwargs.pop("aliases", [])
        names += [aliases] if isinstance(aliases, str) else list(aliases)
        t = _unwrap_optional(field_type)
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        default = field.default if field.default is not dataclasses.MISSING else (
            field.default_factory() if field.default_factory is not dataclasses.MISSING else None)
        origin = typing.get_origin(t)
        if origin is typing.Literal or (isinstance(t, type) and issubclass(t, enum.Enum)):
            choices = list(typing.get_args(t)) if origin is typing.Literal else [e.value for e in t]
            kwargs.setdefault("choices", choices)
            kwargs["type"] = type(choices[0]) if choices else str
        elif t is bool:
            kwargs.update(type=string_to_bool, nargs="?", const=True)
        elif origin in (list, typing.List):
            (item,) = typing.get_args(t) or (str,)
            kwargs.update(type=item, nargs="+")
        elif isinstance(t, type):
            kwargs["type"] = t
        if has_default:
            kwargs["default"] = default
        else:
            kwargs["required"] = True
        self.add_argument(*names, dest=field.name, **kwargs)
        if t is bool and default is True:  # HF adds --no_<flag>
            self.add_argument(f"--no_{field.name}", f"--no-{field.name.replace('_', '-')}", action="store_false",
                              dest=field.name)

    def parse_args_into_dataclasses(self, args=None, return_remaining_strings=False, look_for_args_file=True,
                                    args_filename=None, args_file_flag=None):
        """The types' instances in their order (then the strings no type took, when asked for)."""
        del look_for_args_file, args_filename, args_file_flag  # the .args files of HF's: not read
        argv = list(sys.argv[1:] if args is None else args)
        remaining = argv
        training = None
        if any(_is_training_arguments(t) for t in self.dataclass_types):
            cpp, remaining = core.TrainingArguments.parse_args_with_remaining(argv)
            training = cpp.to_dict()
        namespace, remaining = self.parse_known_args(remaining)
        outputs = [self._instance(t, vars(namespace), training) for t in self.dataclass_types]
        if return_remaining_strings:
            return (*outputs, remaining)
        if remaining:
            raise ValueError(f"Some specified arguments are not used by the HfArgumentParser: {remaining}")
        return tuple(outputs)

    @staticmethod
    def _instance(t, values, training):
        if _is_training_arguments(t):
            return t(**training)
        names = {f.name for f in dataclasses.fields(t) if f.init}
        return t(**{k: v for k, v in values.items() if k in names})

    def parse_dict(self, args, allow_extra_keys=False):
        """The types' instances from a dict of field values; unknown keys are a ValueError unless
        allow_extra_keys."""
        unused = set(args)
        outputs = []
        for t in self.dataclass_types:
            if _is_training_arguments(t):
                names = set(core.TrainingArguments.option_names())
                outputs.append(t(**{k: v for k, v in args.items() if k in names}))
            else:
                names = {f.name for f in dataclasses.fields(t) if f.init}
                outputs.append(t(**{k: v for k, v in args.items() if k in names}))
            unused -= names
        if unused and not allow_extra_keys:
            raise ValueError(f"Some keys are not used by the HfArgumentParser: {sorted(unused)}")
        return tuple(outputs)

    def parse_json_file(self, json_file, allow_extra_keys=False):
        with open(os.fspath(json_file), encoding="utf-8") as f:
            return self.parse_dict(json.load(f), allow_extra_keys=allow_extra_keys)

    def parse_yaml_file(self, yaml_file, allow_extra_keys=False):
        import yaml  # python3-yaml
        with open(os.fspath(yaml_file), encoding="utf-8") as f:
            return self.parse_dict(yaml.safe_load(f), allow_extra_keys=allow_extra_keys)
