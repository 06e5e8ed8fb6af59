"""A text-classification script in the shape of transformers' examples/pytorch/text-classification/
run_glue.py, with its imports changed from transformers to kiln (and the stand-ins below for what
would come from the Hub: the tokenizer, the model and the `datasets` JSON loader).

Run by tests/python/test_hf_scripts.py:
    python run_glue.py --train_file train.json --validation_file dev.json --output_dir out --do_train ...
    python run_glue.py args.json
"""
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from kiln import (  # transformers' names
    DataCollatorWithPadding,
    EvalPrediction,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    max_seq_length: int = field(default=32, metadata={"help": "Longer sequences are truncated."})
    overwrite_cache: bool = field(default=False, metadata={"help": "Overwrite the cached preprocessed datasets."})
    pad_to_max_length: bool = field(default=False, metadata={"help": "Pad to max_seq_length, not per batch."})
    max_train_samples: Optional[int] = field(default=None)
    max_eval_samples: Optional[int] = field(default=None)
    train_file: Optional[str] = field(default=None, metadata={"help": "A csv or a json file."})
    validation_file: Optional[str] = field(default=None)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="bag-of-words", metadata={"help": "The model (a stand-in here)."})
    embedding_size: int = field(default=16)


# ---- Stand-ins for AutoTokenizer, AutoModelForSequenceClassification and load_dataset ----------
class WordTokenizer:
    pad_token_id, unk_token_id, cls_token_id = 0, 1, 2
    padding_side = "right"
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab):
        self.vocab = vocab

    @classmethod
    def from_texts(cls, texts):
        words = sorted({w for t in texts for w in t.split()})
        return cls({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, **{w: i + 3 for i, w in enumerate(words)}})

    def __len__(self):
        return len(self.vocab)

    def __call__(self, texts, padding=False, max_length=None, truncation=False):
        out = {"input_ids": [], "attention_mask": []}
        for text in texts:
            ids = [self.cls_token_id] + [self.vocab.get(w, self.unk_token_id) for w in text.split()]
            if truncation and max_length:
                ids = ids[:max_length]
            if padding == "max_length":
                ids = ids + [self.pad_token_id] * (max_length - len(ids))
            out["input_ids"].append(ids)
            out["attention_mask"].append([int(i != self.pad_token_id) for i in ids])
        return out

    def save_pretrained(self, folder):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "vocab.json"), "w") as f:
            json.dump(self.vocab, f)


class BagOfWordsClassifier(torch.nn.Module):
    def __init__(self, vocab_size, embedding_size, num_labels):
        super().__init__()
        self.embeddings = torch.nn.Embedding(vocab_size, embedding_size)
        self.classifier = torch.nn.Linear(embedding_size, num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        mask = attention_mask.unsqueeze(-1).float()
        logits = self.classifier((self.embeddings(input_ids) * mask).sum(1) / mask.sum(1))
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
        return {"logits": logits} if loss is None else {"loss": loss, "logits": logits}


def load_dataset(data_files):
    def rows(path):
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    return {split: rows(path) for split, path in data_files.items()}


def map_batched(rows, function):
    """datasets.Dataset.map(function, batched=True) over a list of rows."""
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    new = function(columns)
    return [dict(row, **{k: v[i] for k, v in new.items()}) for i, row in enumerate(rows)]


# ---- The script --------------------------------------------------------------------------------
def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(sys.argv[1]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", handlers=[
        logging.StreamHandler(sys.stdout)])
    logger.info(f"Training/evaluation parameters {training_args}")
    set_seed(training_args.seed)

    raw_datasets = load_dataset({"train": data_args.train_file, "validation": data_args.validation_file})
    label_list = sorted({row["label"] for row in raw_datasets["train"]})
    num_labels = len(label_list)
    tokenizer = WordTokenizer.from_texts(row["sentence"] for row in raw_datasets["train"])
    model = BagOfWordsClassifier(len(tokenizer), model_args.embedding_size, num_labels)

    padding = "max_length" if data_args.pad_to_max_length else False
    max_seq_length = data_args.max_seq_length

    def preprocess_function(examples):
        return tokenizer(examples["sentence"], padding=padding, max_length=max_seq_length, truncation=True)

    train_dataset = map_batched(raw_datasets["train"], preprocess_function)
    eval_dataset = map_batched(raw_datasets["validation"], preprocess_function)
    if data_args.max_train_samples is not None:
        train_dataset = train_dataset[:data_args.max_train_samples]
    if data_args.max_eval_samples is not None:
        eval_dataset = eval_dataset[:data_args.max_eval_samples]

    def compute_metrics(p: EvalPrediction):
        preds = p.predictions[0] if isinstance(p.predictions, tuple) else p.predictions
        preds = np.argmax(preds, axis=1)
        return {"accuracy": (preds == p.label_ids).astype(np.float32).mean().item()}

    if data_args.pad_to_max_length:
        data_collator = default_data_collator
    elif training_args.fp16:
        data_collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)
    else:
        data_collator = None  # the Trainer pads with the tokenizer

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        compute_metrics=compute_metrics,
        tokenizer=tokenizer,
        data_collator=data_collator,
    )

    if training_args.do_train:
        checkpoint = training_args.resume_from_checkpoint
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.save_model()
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()

    if training_args.do_eval:
        logger.info("*** Evaluate ***")
        metrics = trainer.evaluate(eval_dataset=eval_dataset)
        metrics["eval_samples"] = len(eval_dataset)
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
