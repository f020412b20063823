"""pytorch/examples' mnist_forward_forward as it runs on a CPU: Hinton's forward-forward
training, with no backward through the network. Each layer is an `nn.Linear` subclass
holding its own Adam and trained alone for `--epochs` full-batch steps (all 50000
positive and 50000 negative images at once) before the next layer starts; the layer
calls its `forward` directly (`self.forward(x)`, never `self(x)`, so no module hook
sees it), and `Net.train` overrides `nn.Module.train`. The one DataLoader batch is the
whole training set. fake_mnist stands in for torchvision's MNIST. True bottleneck: the
two [50000, 784] x [784, 500] matmuls of each step and their backward.
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.optim import Adam
from torch.utils.data import DataLoader

from fake_mnist import MNIST


def get_y_neg(y):
    y_neg = y.clone()
    for idx, y_samp in enumerate(y):
        allowed_indices = list(range(10))
        allowed_indices.remove(y_samp.item())
        y_neg[idx] = torch.tensor(allowed_indices)[torch.randint(len(allowed_indices), size=(1,))].item()
    return y_neg.to(device)


def overlay_y_on_x(x, y, classes=10):
    x_ = x.clone()
    x_[:, :classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Net(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers = self.layers + [Layer(dims[d], dims[d + 1]).to(device)]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        return torch.cat(goodness_per_label, 1).argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            print("training layer: ", i, flush=True)
            h_pos, h_neg = layer.train(h_pos, h_neg)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=args.lr)
        self.threshold = args.threshold
        self.num_epochs = args.epochs

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            t = time.perf_counter()
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(torch.exp(torch.cat([-g_pos + self.threshold, g_neg - self.threshold]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            if hand is not None:
                hand.append(time.perf_counter() - t)
                if len(hand) == args.hand + 2:
                    import statistics

                    ms = statistics.median(hand[2:]) * 1e3
                    print(f"HAND steps={args.hand} median_step_ms={ms:.1f} "
                          f"samples_per_s={2 * x_pos.shape[0] / ms * 1e3:.1f} (positive and negative)")
                    raise SystemExit(0)
            if i % args.log_interval == 0:
                print("Loss: ", loss.item(), flush=True)
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train_size", type=int, default=50000)
    parser.add_argument("--threshold", type=float, default=2)
    parser.add_argument("--test_size", type=int, default=10000)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--hand", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    hand = [] if args.hand else None
    train_loader = DataLoader(MNIST(train=True, n=args.train_size, normalize=True, flatten=True), batch_size=args.train_size)
    test_loader = DataLoader(MNIST(train=False, n=args.test_size, normalize=True, flatten=True), batch_size=args.test_size)
    net = Net([784, 500, 500])
    x, y = next(iter(train_loader))
    x, y = x.to(device), y.to(device)
    x_pos = overlay_y_on_x(x, y)
    y_neg = get_y_neg(y)
    x_neg = overlay_y_on_x(x, y_neg)
    net.train(x_pos, x_neg)
    print("train error:", 1.0 - net.predict(x).eq(y).float().mean().item())
    x_te, y_te = next(iter(test_loader))
    print("test error:", 1.0 - net.predict(x_te).eq(y_te).float().mean().item())
