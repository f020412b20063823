"""A keyword-spotting recipe (the M5 network of PyTorch's speech-commands tutorial) fed
log-mel spectrograms made in the Dataset's `__getitem__` with torch ops: one second of
16 kHz audio synthesised per item (a chirp plus noise, as reading and decoding a WAV
would cost), a random time shift and gain, `torch.stft`, a mel filterbank matmul and a
log, then a 2-D CNN over the [1, 64, 101] spectrogram. DataLoader at its defaults
(`num_workers=0`), batch 64, Adam with weight decay, `zero_grad()`.
True bottleneck: the CNN's convolutions, forward and backward (by hand the spectrograms
in `__getitem__` are under a tenth of the step, and loader workers make it slower).
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SR, N_FFT, HOP, MELS = 16000, 400, 160, 64


def mel_filterbank(n_fft=N_FFT, mels=MELS, sr=SR):
    f = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    mel = lambda hz: 2595 * torch.log10(1 + hz / 700)  # noqa: E731
    pts = torch.linspace(mel(torch.tensor(0.0)), mel(torch.tensor(sr / 2.0)), mels + 2)
    hz = 700 * (10 ** (pts / 2595) - 1)
    fb = torch.zeros(mels, f.numel())
    for m in range(mels):
        lo, c, hi = hz[m], hz[m + 1], hz[m + 2]
        fb[m] = torch.clamp(torch.minimum((f - lo) / (c - lo), (hi - f) / (hi - c)), min=0)
    return fb


class Commands(Dataset):
    def __init__(self, n, classes=12):
        self.n, self.classes = n, classes
        self.fb = mel_filterbank()
        self.window = torch.hann_window(N_FFT)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        label = i % self.classes
        t = torch.arange(SR) / SR
        f0 = 200 + 80 * label
        wav = torch.sin(2 * math.pi * (f0 + 300 * t) * t) * torch.rand(1, generator=g)
        wav = wav + 0.05 * torch.randn(SR, generator=g)
        wav = torch.roll(wav, int(torch.randint(-1600, 1600, (1,), generator=g)))
        spec = torch.stft(wav, N_FFT, HOP, window=self.window, return_complex=True).abs() ** 2
        logmel = torch.log(self.fb @ spec + 1e-6)
        return (logmel - logmel.mean()).unsqueeze(0) / (logmel.std() + 1e-5), label


class Net(nn.Module):
    def __init__(self, classes=12):
        super().__init__()
        self.c1 = nn.Conv2d(1, 32, 3, padding=1)
        self.b1 = nn.BatchNorm2d(32)
        self.c2 = nn.Conv2d(32, 64, 3, padding=1)
        self.b2 = nn.BatchNorm2d(64)
        self.c3 = nn.Conv2d(64, 128, 3, padding=1)
        self.b3 = nn.BatchNorm2d(128)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
        x = F.relu(self.b3(self.c3(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Commands(20000), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    times, t = [], time.perf_counter()
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if args.hand:
                times.append(time.perf_counter() - t)
                t = time.perf_counter()
                if len(times) == args.hand + 3:
                    import statistics

                    ms = statistics.median(times[3:]) * 1e3
                    print(f"HAND steps={args.hand} median_step_ms={ms:.1f} "
                          f"samples_per_s={args.batch_size / ms * 1e3:.1f}")
                    return
            if step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
