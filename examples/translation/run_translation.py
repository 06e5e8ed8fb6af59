#!/usr/bin/python3
"""English -> Spanish translation on the Bibles Debian ships, the shape of Hugging Face's
examples/pytorch/translation/run_translation.py with Kiln underneath: verse pairs (bible.py), a
SentencePiece tokenizer trained on them (kiln.tokenizers), the zoo's BART-style encoder-decoder
(kiln.nn.zoo "bart", token ids in T5's layout as the tokenizer writes them), Seq2SeqTrainer with
DataCollatorForSeq2Seq and predict_with_generate, and sacreBLEU's BLEU and chrF (kiln.text_metrics)
on verses held out of training.

    /usr/bin/python3 examples/translation/run_translation.py --output_dir run --books Matthew-Revelation \\
        --vocab_size 2000 --max_length 40 --d_model 128 --layers 2 --max_steps 7000 --warmup_steps 400 \\
        --learning_rate 1.5e-3          # `make translation`: held-out BLEU 15.8, chrF 36.4 (docs/text.md)

Writes to output_dir: pairs.tsv (reference, source, target), the tokenizer folder, the model
(config.json + model.safetensors), results.json (the training loss, BLEU and chrF before and after
training, and timings) and predictions.tsv (held-out verse, reference, translation).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bible  # noqa: E402

from kiln import nn  # noqa: E402
from kiln.data_collator import DataCollatorForSeq2Seq  # noqa: E402
from kiln.seq2seq_trainer import Seq2SeqTrainer, Seq2SeqTrainingArguments  # noqa: E402
from kiln.text_metrics import chrf, sacrebleu  # noqa: E402
from kiln.tokenizers import train_sentencepiece  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output_dir", required=True)
    p.add_argument("--books", default="Matthew-John", help="diatheke keys of the verses used")
    p.add_argument("--source_module", default="engWEB2015eb")
    p.add_argument("--target_module", default="spaRV1909eb")
    p.add_argument("--eval_verses", type=int, default=200, help="verses held out (every n-th verse)")
    p.add_argument("--vocab_size", type=int, default=4000, help="the joint SentencePiece vocabulary")
    p.add_argument("--max_length", type=int, default=64, help="tokens per side (longer verses are cut)")
    p.add_argument("--d_model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max_steps", type=int, default=2000)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--warmup_steps", type=int, default=200)
    p.add_argument("--num_beams", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataloader_num_workers", type=int, default=0)
    return p.parse_args(argv)


def split(pairs, eval_verses):
    """Every n-th verse held out (spread over the books), the rest for training."""
    stride = max(2, len(pairs) // max(1, eval_verses))
    held = set(range(0, len(pairs), stride)[:eval_verses])
    return [p for i, p in enumerate(pairs) if i not in held], [p for i, p in enumerate(pairs) if i in held]


def encode(tokenizer, pairs, max_length):
    """HF's preprocess_function, padded to max_length so every step has one shape (one plan); the
    labels' padding is -100, which the loss ignores."""
    sources, targets = [p[1] for p in pairs], [p[2] for p in pairs]
    enc = tokenizer(sources, text_target=targets, padding="max_length", truncation=True, max_length=max_length,
                    return_tensors="np")
    labels = np.where(enc["labels"] == tokenizer.pad_token_id, -100, enc["labels"])
    return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i], "labels": labels[i]}
            for i in range(len(pairs))]


def scores(tokenizer, generated, references):
    hypotheses = tokenizer.batch_decode(generated, skip_special_tokens=True)
    return (sacrebleu(hypotheses, [[r] for r in references])["score"],
            chrf(hypotheses, [[r] for r in references])["score"], hypotheses)


def main(argv):
    args = parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    started = time.time()
    pairs = bible.aligned_pairs(args.books, args.source_module, args.target_module)
    with open(os.path.join(args.output_dir, "pairs.tsv"), "w", encoding="utf-8") as f:
        f.writelines(f"{r}\t{s}\t{t}\n" for r, s, t in pairs)
    train_pairs, eval_pairs = split(pairs, args.eval_verses)

    corpus = os.path.join(args.output_dir, "corpus.txt")  # one joint vocabulary for both languages
    with open(corpus, "w", encoding="utf-8") as f:
        f.writelines(f"{s}\n{t}\n" for _, s, t in train_pairs)
    tokenizer = train_sentencepiece(corpus, os.path.join(args.output_dir, "tokenizer"), vocab_size=args.vocab_size,
                                    seed=args.seed)

    nn.manual_seed(args.seed)
    model = nn.zoo.create_model(
        "bart", vocab_size=len(tokenizer), max_position_embeddings=args.max_length, d_model=args.d_model,
        encoder_layers=args.layers, decoder_layers=args.layers, encoder_ffn_dim=4 * args.d_model,
        decoder_ffn_dim=4 * args.d_model, encoder_attention_heads=args.heads, decoder_attention_heads=args.heads,
        scale_embedding=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.pad_token_id, decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id)

    references = [t for _, _, t in eval_pairs]

    def compute_metrics(p):
        bleu, chrf_score, _ = scores(tokenizer, p.predictions, references)
        return {"bleu": bleu, "chrf": chrf_score}

    training_args = Seq2SeqTrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size, learning_rate=args.learning_rate, max_steps=args.max_steps,
        warmup_steps=args.warmup_steps, weight_decay=0.01, label_smoothing_factor=0.0, save_strategy="no",
        report_to="none", seed=args.seed, logging_steps=max(1, args.max_steps // 20), predict_with_generate=True,
        generation_max_length=args.max_length, generation_num_beams=args.num_beams,
        dataloader_num_workers=args.dataloader_num_workers, disable_tqdm=True)
    trainer = Seq2SeqTrainer(model=model, args=training_args, train_dataset=encode(tokenizer, train_pairs,
                                                                                   args.max_length),
                             eval_dataset=encode(tokenizer, eval_pairs, args.max_length),
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
                             compute_metrics=compute_metrics)
    before = trainer.evaluate()
    trained_at = time.time()
    train_output = trainer.train()
    train_seconds = time.time() - trained_at
    after = trainer.predict(encode(tokenizer, eval_pairs, args.max_length))
    bleu, chrf_score, hypotheses = scores(tokenizer, after.predictions, references)
    model.save_pretrained(os.path.join(args.output_dir, "model"))
    with open(os.path.join(args.output_dir, "predictions.tsv"), "w", encoding="utf-8") as f:
        f.writelines(f"{r}\t{t}\t{h}\n" for (r, _, t), h in zip(eval_pairs, hypotheses))
    results = {"pairs": len(pairs), "train_pairs": len(train_pairs), "eval_pairs": len(eval_pairs),
               "vocab_size": len(tokenizer), "parameters": model.num_parameters(),
               "steps": args.max_steps, "train_loss": train_output.training_loss,
               "train_seconds": round(train_seconds, 1), "total_seconds": round(time.time() - started, 1),
               "bleu_before": before["eval_bleu"], "chrf_before": before["eval_chrf"],
               "eval_loss_before": before["eval_loss"], "eval_loss": after.metrics["test_loss"],
               "bleu": bleu, "chrf": chrf_score}
    with open(os.path.join(args.output_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    for (ref, source, target), h in list(zip(eval_pairs, hypotheses))[:3]:
        print(f"{ref}\n  en:   {source}\n  es:   {target}\n  kiln: {h}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
