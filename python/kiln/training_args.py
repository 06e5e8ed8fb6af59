"""kiln.TrainingArguments: Hugging Face's TrainingArguments over Kiln's C++ one.

    args = TrainingArguments(output_dir="run", learning_rate=3e-4, eval_strategy="steps", eval_steps=50)
    args.learning_rate            # 0.0003
    args.to_dict(); args.to_json_string()

Every field of Kiln's TrainingArguments (HF's names, defaults and validation rules, see
include/kiln/training_args.h) is a keyword and an attribute. An unknown keyword is a TypeError, as
for HF's dataclass; a bad value or combination a ValueError (kiln.InvalidArgument) with HF's
message. Setting an attribute validates the arguments again.
"""
import contextlib

from kiln._core import core


class TrainingArguments:
    """HF's TrainingArguments(output_dir=None, **kwargs); output_dir None means "trainer_output"."""

    def __init__(self, output_dir=None, **kwargs):
        names = set(core.TrainingArguments.option_names())
        for key in kwargs:
            if key not in names:
                raise TypeError(f"TrainingArguments.__init__() got an unexpected keyword argument '{key}'")
        values = dict(kwargs)
        if output_dir is not None:
            values["output_dir"] = _plain(output_dir)
        values = {k: _plain(v) for k, v in values.items()}
        self._set_core(core.TrainingArguments(values))

    @classmethod
    def _from_core(cls, cpp_args):
        """A TrainingArguments over a copy of a C++ one (callbacks fired outside a Python Trainer)."""
        self = cls.__new__(cls)
        self._set_core(core.TrainingArguments(cpp_args.to_dict()))
        return self

    def _set_core(self, cpp_args):
        object.__setattr__(self, "_core", cpp_args)
        object.__setattr__(self, "_values", cpp_args.to_dict())

    def __getattr__(self, name):
        values = self.__dict__.get("_values")
        if values is not None and name in values:
            return values[name]
        raise AttributeError(f"'TrainingArguments' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError(f"TrainingArguments has no field '{name}'")
        values = dict(self._values)
        values[name] = _plain(value)
        self._set_core(core.TrainingArguments(values))

    def __eq__(self, other):
        return isinstance(other, TrainingArguments) and self._core == other._core

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"TrainingArguments({fields})"

    __str__ = __repr__

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._values))

    # ---- HF's methods and properties -----------------------------------------------------------
    def to_dict(self):
        return dict(self._values)

    def to_json_string(self):
        return self._core.to_json_string()

    def to_sanitized_dict(self):
        """HF's form for TensorBoard hparams: None and lists as strings."""
        return {k: (v if isinstance(v, (bool, int, float, str)) else str(v)) for k, v in self._values.items()}

    def get_warmup_steps(self, num_training_steps):
        return self._core.get_warmup_steps(num_training_steps)

    @property
    def train_batch_size(self):
        return self._values["per_device_train_batch_size"]

    @property
    def eval_batch_size(self):
        return self._values["per_device_eval_batch_size"]

    @property
    def n_gpu(self):
        return 0

    @property
    def world_size(self):
        """The ranks of this run (`mpirun -np N ...`); 1 for a process alone."""
        return self._core.world_size()

    @property
    def process_index(self):
        return self._core.process_index()

    @property
    def local_process_index(self):
        return self._core.local_process_index()

    @property
    def should_log(self):
        return self._core.should_log()

    @property
    def should_save(self):
        return self._core.should_save()

    @contextlib.contextmanager
    def main_process_first(self, local=True, desc="work"):
        """HF's: the main process (of this host with `local`, else rank 0) runs the block first, the
        others wait for it and then run it (dataset preparation that writes a cache, say)."""
        main = (self.local_process_index if local else self.process_index) == 0
        if not main:
            core.dist_barrier()
        try:
            yield
        finally:
            if main:
                core.dist_barrier()


def _plain(value):
    """Enums (HF's IntervalStrategy.STEPS) as their values, paths as str."""
    import enum
    import os
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple):
        return list(value)
    return value
