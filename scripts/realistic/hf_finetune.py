"""A Hugging Face Trainer fine-tune as its examples write it, offline: a small BERT built from a
config (no download), a Dataset of variable-length token-id sequences, a collator padding each
batch into input_ids/attention_mask/labels, TrainingArguments with defaults (AdamW, linear
decay, warm-up), evaluation and checkpoints every 500 steps. `--ckpt` turns on
gradient_checkpointing, `--bf16` bf16, `--accum N` gradient accumulation; `--hand N` times N
optimizer steps with a TrainerCallback, apart from tune. Needs transformers and accelerate."""
import argparse
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,
                          TrainingArguments)


class Reviews(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.lengths = np.clip(rng.lognormal(4.0, 0.6, size=n).astype(int), 8, 256)
        self.labels = rng.integers(0, 2, size=n)
        self.seed = seed

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        rng = np.random.default_rng(self.seed * 7919 + i)
        y = int(self.labels[i])
        ids = rng.integers(1000 + 500 * y, 8000 + 500 * y, size=int(self.lengths[i]))
        return {"input_ids": [101] + ids.tolist() + [102], "labels": y}


def collate(features):
    n = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), n, dtype=torch.long)
    mask = torch.zeros(len(features), n, dtype=torch.long)
    for k, f in enumerate(features):
        ids[k, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[k, : len(f["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.tensor([f["labels"] for f in features])}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--out", default="hf_out")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--ckpt", action="store_true", help="gradient_checkpointing=True")
    ap.add_argument("--hand", type=int, default=0)
    args = ap.parse_args()
    config = BertConfig(vocab_size=9000, hidden_size=256, num_hidden_layers=4,
                        num_attention_heads=4, intermediate_size=1024, num_labels=2)
    model = BertForSequenceClassification(config)
    targs = TrainingArguments(output_dir=args.out, per_device_train_batch_size=16,
                              per_device_eval_batch_size=64, num_train_epochs=20,
                              learning_rate=5e-5, warmup_steps=100, weight_decay=0.01,
                              logging_steps=20, eval_strategy="steps", eval_steps=500,
                              save_steps=500, save_total_limit=2, report_to=[], gradient_accumulation_steps=args.accum,
                              bf16=args.bf16, dataloader_num_workers=args.workers,
                              gradient_checkpointing=args.ckpt,
                              use_cpu=not torch.cuda.is_available())
    callbacks = []
    if args.hand:
        import time

        class Hand(TrainerCallback):
            times = []

            def on_step_begin(self, a, state, control, **kw):
                self.t0 = time.perf_counter()

            def on_step_end(self, a, state, control, **kw):
                self.times.append(time.perf_counter() - self.t0)
                if len(self.times) >= args.hand:
                    t = sorted(self.times[3:])
                    print(f"hand: median {1000 * t[len(t) // 2]:.1f} ms a step", flush=True)
                    control.should_training_stop = True

        callbacks.append(Hand())
    trainer = Trainer(model=model, args=targs, train_dataset=Reviews(20000, 1),
                      eval_dataset=Reviews(1000, 2), data_collator=collate, callbacks=callbacks)
    trainer.train()
