"""transformers' Seq2SeqTrainer and Seq2SeqTrainingArguments (optimum's ORTSeq2SeqTrainer names too):
evaluation and prediction that generate (predict_with_generate) with Kiln's generation engine.

    args = Seq2SeqTrainingArguments(output_dir="out", predict_with_generate=True, generation_max_length=64,
                                    generation_num_beams=4)
    trainer = Seq2SeqTrainer(model=net, args=args, train_dataset=train, eval_dataset=dev,
                             data_collator=DataCollatorForSeq2Seq(tokenizer), compute_metrics=bleu)
    trainer.evaluate(max_new_tokens=32, num_beams=2)      # gen kwargs, as HF's

With predict_with_generate, prediction_step is HF's: the batch without its labels goes to
model.generate (a kiln.nn zoo causal LM's, or any model's own generate, as HF calls self.model.generate)
with the weights trained so far, the generated ids padded with the pad token to max_length (or
max_new_tokens + 1), the loss computed by Kiln's eval model when the batch has labels. The loop is
then HF's evaluation_loop (kiln/trainer_eval_loop.py). sortish_sampler is accepted and, as in HF's
Seq2SeqTrainer, has no effect.
"""
import numpy as np

from kiln.trainer import Trainer
from kiln.training_args import TrainingArguments

__all__ = ["Seq2SeqTrainer", "Seq2SeqTrainingArguments", "ORTSeq2SeqTrainer", "ORTSeq2SeqTrainingArguments"]


class Seq2SeqFields:
    """HF's Seq2SeqTrainingArguments fields on top of a TrainingArguments class."""

    _SEQ2SEQ_DEFAULTS = {"sortish_sampler": False, "predict_with_generate": False, "generation_max_length": None,
                         "generation_num_beams": None, "generation_config": None}

    def __init__(self, output_dir=None, **kwargs):
        seq2seq = {k: kwargs.pop(k) for k in list(kwargs) if k in self._SEQ2SEQ_DEFAULTS}
        super().__init__(output_dir, **kwargs)
        object.__setattr__(self, "_seq2seq", dict(self._SEQ2SEQ_DEFAULTS))
        for key, value in seq2seq.items():
            self.__setattr__(key, value)

    def __getattr__(self, name):
        extra = self.__dict__.get("_seq2seq")
        if extra is not None and name in extra:
            return extra[name]
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        if name in self._SEQ2SEQ_DEFAULTS:
            if name in ("generation_max_length", "generation_num_beams") and value is not None and int(value) < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
            self._seq2seq[name] = value
            return
        super().__setattr__(name, value)

    def to_dict(self):
        out = {**super().to_dict(), **self._seq2seq}
        if hasattr(out["generation_config"], "to_dict"):
            out["generation_config"] = out["generation_config"].to_dict()
        return out


class Seq2SeqTrainingArguments(Seq2SeqFields, TrainingArguments):
    """transformers' Seq2SeqTrainingArguments: TrainingArguments with sortish_sampler,
    predict_with_generate, generation_max_length, generation_num_beams and generation_config (a
    GenerationConfig, a folder holding generation_config.json, or the file)."""


class Seq2SeqTrainer(Trainer):
    """transformers' Seq2SeqTrainer over kiln.Trainer (see the module's docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._gen_kwargs = {}

    def _evaluation_overridden(self):
        """The Python evaluation loop (kiln/trainer_eval_loop.py) when generating, or when a subclass
        overrides prediction_step / evaluation_loop itself; else the native loop. Decided when the
        trainer is made, from args.predict_with_generate."""
        from kiln.trainer_hooks import overrides
        own = type(self).prediction_step is not Seq2SeqTrainer.prediction_step or overrides(self, "evaluation_loop")
        return bool(getattr(self.args, "predict_with_generate", False)) or own

    def _generation_config(self):
        from kiln.generation import GenerationConfig
        config = getattr(self.args, "generation_config", None)
        if config is None:
            return GenerationConfig(**getattr(getattr(self.model, "generation_config", None), "__dict__", {}))
        if isinstance(config, GenerationConfig):
            return config
        return GenerationConfig.from_pretrained(str(config))

    def _with_defaults(self, gen_kwargs):
        """HF: the arguments' generation_max_length / generation_num_beams unless the call gives them."""
        gen_kwargs = dict(gen_kwargs)
        if gen_kwargs.get("max_length") is None and gen_kwargs.get("max_new_tokens") is None \
                and getattr(self.args, "generation_max_length", None) is not None:
            gen_kwargs["max_length"] = self.args.generation_max_length
        if gen_kwargs.get("num_beams") is None and getattr(self.args, "generation_num_beams", None) is not None:
            gen_kwargs["num_beams"] = self.args.generation_num_beams
        return gen_kwargs

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval", **gen_kwargs):
        self._gen_kwargs = self._with_defaults(gen_kwargs)
        return super().evaluate(eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)

    def predict(self, test_dataset, ignore_keys=None, metric_key_prefix="test", **gen_kwargs):
        self._gen_kwargs = self._with_defaults(gen_kwargs)
        return super().predict(test_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        if not getattr(self.args, "predict_with_generate", False) or prediction_loss_only:
            return super().prediction_step(model, inputs, prediction_loss_only=prediction_loss_only,
                                           ignore_keys=ignore_keys)
        label_names = list(self.args.label_names or ["labels"])
        has_labels = all(n in inputs for n in label_names)
        gen_kwargs = dict(gen_kwargs or self._with_defaults(self._gen_kwargs))
        config = self._generation_config()
        rest = config.update(**gen_kwargs)
        if rest:
            raise TypeError(f"Seq2SeqTrainer: unknown generation arguments {sorted(rest)}")
        generation_inputs = {k: v for k, v in dict(inputs).items() if k not in label_names}
        if has_labels and "decoder_input_ids" in generation_inputs:
            generation_inputs.pop("decoder_input_ids")  # HF: generation makes its own
        if not callable(getattr(model, "generate", None)):
            raise ValueError(f"predict_with_generate: the model ({type(model).__name__}) has no generate method; "
                             "a kiln.nn zoo causal LM, or a module that defines generate, can generate")
        generated = _numpy(model.generate(**generation_inputs, generation_config=config))
        pad = config.pad_token_id if config.pad_token_id is not None else _first(config.eos_token_id)
        if config.max_new_tokens is not None:
            generated = _pad_to(generated, config.max_new_tokens + 1, pad)
        elif config.max_length is not None:
            generated = _pad_to(generated, config.max_length, pad)
        loss = None
        if has_labels:
            loss = super().prediction_step(model, inputs, prediction_loss_only=True, ignore_keys=ignore_keys)[0]
        labels = None
        if has_labels:
            labels = _numpy(inputs[label_names[0]])
            width = config.max_new_tokens + 1 if config.max_new_tokens is not None else config.max_length
            if width is not None:
                labels = _pad_to(labels, width, pad)
        return loss, generated, labels


def _numpy(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _first(ids):
    if ids is None:
        return 0
    return ids[0] if isinstance(ids, (list, tuple)) else ids


def _pad_to(rows, width, pad):
    """HF's _pad_tensors_to_max_len: right-padded with `pad` to `width` (never cut)."""
    if rows.ndim != 2 or rows.shape[1] >= width:
        return rows
    out = np.full((rows.shape[0], width), pad, dtype=rows.dtype)
    out[:, :rows.shape[1]] = rows
    return out


def _ort_classes():
    from kiln.ort_trainer import ORTTrainer, ORTTrainingArguments

    class ORTSeq2SeqTrainingArguments(Seq2SeqFields, ORTTrainingArguments):
        """optimum.onnxruntime.ORTSeq2SeqTrainingArguments: ORTTrainingArguments with the Seq2Seq fields."""

    class ORTSeq2SeqTrainer(Seq2SeqTrainer, ORTTrainer):
        """optimum.onnxruntime.ORTSeq2SeqTrainer: Seq2SeqTrainer under optimum's name."""

    return ORTSeq2SeqTrainingArguments, ORTSeq2SeqTrainer


ORTSeq2SeqTrainingArguments, ORTSeq2SeqTrainer = _ort_classes()
