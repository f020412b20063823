"""A Hugging Face Trainer fine-tune, offline and small enough for a test: a 2-layer BERT
built from a config (no download), sequences of 6 and 30 token ids in turn (8 and 32 with
[CLS] and [SEP]), a collator padding each batch of 8 to its longest into
input_ids/attention_mask/labels, TrainingArguments with the defaults a script keeps.
Each padded batch holds 8 x 32 = 256 positions and 160 real tokens on average: 20 a
sequence, 32 with the padding."""
import sys

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Pairs(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        n = 6 if i % 2 else 30
        ids = [(i * 7 + k * 13) % 900 + 100 for k in range(n)]
        return {"input_ids": [1] + ids + [2], "labels": i % 2}


def collate(features):
    n = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), n, dtype=torch.long)
    mask = torch.zeros(len(features), n, dtype=torch.long)
    for k, f in enumerate(features):
        ids[k, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[k, : len(f["input_ids"])] = 1
    labels = torch.tensor([f["labels"] for f in features])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


if __name__ == "__main__":
    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128, num_labels=2)
    args = TrainingArguments(output_dir=sys.argv[1], per_device_train_batch_size=8,
                             num_train_epochs=1000, save_strategy="no", report_to=[],
                             logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                      train_dataset=Pairs(), data_collator=collate)
    trainer.train()
