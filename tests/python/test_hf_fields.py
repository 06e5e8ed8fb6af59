"""Every field of Hugging Face's TrainingArguments is accepted (issue 22, item 1): at its default in
Python, on the command line and in JSON, round-tripping through to_dict; the v4 aliases take effect;
the fields that ask for what Kiln does not do are an Unsupported naming the field away from their
default; the ones Kiln reads change the run (eval_on_start, train_sampling_strategy)."""
import json

import pytest
from kiln_package import import_kiln
from test_python_trainer import blobs, export_mlp

kiln = import_kiln()

# A script's arguments as transformers' examples pass them (their defaults, and a few set).
HF_SCRIPT_ARGS = dict(fp16=False, push_to_hub=False, remove_unused_columns=True, dataloader_pin_memory=True,
                      tf32=None, torch_compile=False, hub_model_id=None, hub_strategy="every_save",
                      include_for_metrics=[], save_safetensors=True, log_level_replica="warning",
                      ddp_find_unused_parameters=None, use_cpu=True, no_cuda=True, accelerator_config={"x": 1},
                      fsdp="", debug="", group_by_length=False, length_column_name="length", past_index=-1)


def test_a_scripts_arguments_are_accepted_and_round_trip(tmp_path):
    args = kiln.TrainingArguments(output_dir=str(tmp_path), **HF_SCRIPT_ARGS)
    d = args.to_dict()
    for key, _value in HF_SCRIPT_ARGS.items():
        assert key in d, key
    assert d["accelerator_config"] == {"x": 1} and d["no_cuda"] is True
    again = kiln.TrainingArguments(**d)
    assert again == args and again.to_dict() == d
    assert json.loads(args.to_json_string())["remove_unused_columns"] is True


def test_v4_aliases_take_effect():
    a = kiln.TrainingArguments(output_dir="x", per_gpu_train_batch_size=4, per_gpu_eval_batch_size=6,
                               fp16_backend="cpu_amp")
    assert a.per_device_train_batch_size == 4 and a.per_device_eval_batch_size == 6
    assert a.half_precision_backend == "cpu_amp"


@pytest.mark.parametrize("field,value,reason", [
    ("push_to_hub", True, "uploads nothing"),
    ("torch_compile", True, "torch.compile is PyTorch's compiler"),
    ("auto_find_batch_size", True, "give per_device_train_batch_size"),
    ("fsdp", "full_shard", "shard the optimizer state with deepspeed"),
    ("past_index", 1, "mems"),
    ("save_safetensors", False, "safetensors only"),
    ("eval_do_concat_batches", False, "concatenated arrays"),
])
def test_what_kiln_does_not_do_is_unsupported_naming_the_field(field, value, reason):
    with pytest.raises(kiln.Unsupported, match=f"{field}=.*{reason}"):
        kiln.TrainingArguments(output_dir="x", **{field: value})


def test_choices_are_checked():
    with pytest.raises(kiln.InvalidArgument, match="hub_strategy 'sometimes' is not one of"):
        kiln.TrainingArguments(output_dir="x", hub_strategy="sometimes")
    with pytest.raises(TypeError, match="unexpected keyword argument 'push_to_hubb'"):
        kiln.TrainingArguments(output_dir="x", push_to_hubb=False)


def test_eval_on_start_and_sequential_sampling_change_the_run(tmp_path):
    events = []

    class Record(kiln.TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            events.append(("evaluate", state.global_step))

        def on_step_end(self, args, state, control, **kwargs):
            events.append(("step", state.global_step))

    args = kiln.TrainingArguments(output_dir=str(tmp_path / "a"), report_to="none", disable_tqdm=True,
                                  save_strategy="no", max_steps=2, eval_on_start=True,
                                  train_sampling_strategy="sequential", per_device_train_batch_size=8)
    trainer = kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=args, train_dataset=blobs(32, 1),
                           eval_dataset=blobs(16, 2), callbacks=[Record()])
    trainer.train()
    assert events[0] == ("evaluate", 0) and ("step", 1) in events
    # Sequential: the first batch is items 0..7 (the loss of one step equals a run on those 8 alone).
    args2 = kiln.TrainingArguments(output_dir=str(tmp_path / "b"), report_to="none", disable_tqdm=True,
                                   save_strategy="no", max_steps=1, train_sampling_strategy="sequential",
                                   per_device_train_batch_size=8, logging_steps=1)
    first = kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=args2, train_dataset=blobs(32, 1)).train()
    only = kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=args2, train_dataset=blobs(32, 1)[:8]).train()
    assert first.training_loss == only.training_loss


def test_kiln_train_takes_the_fields_as_flags(tmp_path):
    from kiln_cli import run_kiln
    proc = run_kiln("train", "--output_dir", tmp_path / "run", "--max_steps", "2", "--save_strategy", "no",
                    "--compile_only", "--push_to_hub", "false", "--remove_unused_columns", "true",
                    "--no_dataloader_pin_memory", "--per_gpu_train_batch_size", "4", "--disable_tqdm", "true")
    assert proc.returncode == 0, proc.stderr
    assert "input [4, 1, 28, 28]" in proc.stderr  # per_gpu_train_batch_size took effect
    proc = run_kiln("train", "--output_dir", tmp_path / "bad", "--push_to_hub")
    assert proc.returncode != 0 and "push_to_hub=true: Kiln runs offline" in proc.stderr


def test_floating_point_ops_and_num_examples(tmp_path):
    import numpy as np
    args = kiln.TrainingArguments(output_dir=str(tmp_path), report_to="none", disable_tqdm=True, save_strategy="no")
    trainer = kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=args, train_dataset=blobs(16, 1))
    params = trainer.num_parameters()
    batch = {"input": np.zeros((5, 8), np.float32), "labels": np.zeros(5, np.int64)}
    assert trainer.floating_point_ops(batch) == 6 * params * 5  # no input_ids: a token per example
    ids = {"input_ids": np.zeros((2, 7), np.int64)}
    assert trainer.floating_point_ops(ids) == 6 * params * 14

    class Loader:
        dataset = list(range(12))

    assert trainer.num_examples(Loader()) == 12 and trainer.num_examples(list(range(3))) == 3


def test_memory_metrics_of_each_stage(tmp_path):
    """skip_memory_metrics=False: HF's init_ (with the first train() only), train_, eval_ and test_
    <stage>_mem_cpu_alloc_delta / _peaked_delta; an evaluation inside train() is not measured alone."""
    args = kiln.TrainingArguments(output_dir=str(tmp_path), report_to="none", disable_tqdm=True, save_strategy="no",
                                  skip_memory_metrics=False, max_steps=2, eval_strategy="steps", eval_steps=1)
    trainer = kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=args, train_dataset=blobs(32, 1),
                           eval_dataset=blobs(16, 2))
    first = trainer.train().metrics
    for key in ("init_mem_cpu_alloc_delta", "init_mem_cpu_peaked_delta", "train_mem_cpu_alloc_delta",
                "train_mem_cpu_peaked_delta"):
        assert key in first, key
        assert key.endswith("alloc_delta") or first[key] >= 0, key  # an allocation delta may be negative
    in_train = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert in_train and not any("eval_mem_cpu_alloc_delta" in h for h in in_train)
    assert "init_mem_cpu_alloc_delta" not in trainer.train().metrics  # reported once
    evaluated = trainer.evaluate()
    assert "eval_mem_cpu_alloc_delta" in evaluated and evaluated["eval_mem_cpu_peaked_delta"] >= 0
    predicted = trainer.predict(blobs(8, 3)).metrics
    assert "test_mem_cpu_alloc_delta" in predicted and "test_mem_cpu_peaked_delta" in predicted
    quiet = kiln.TrainingArguments(output_dir=str(tmp_path / "q"), report_to="none", disable_tqdm=True,
                                   save_strategy="no", max_steps=1)
    assert not any("mem_cpu" in k for k in kiln.Trainer(model=export_mlp(tmp_path / "mlp.onnx"), args=quiet,
                                                         train_dataset=blobs(16, 1)).train().metrics)
