"""pytorch/examples' vae as it runs on a CPU: MNIST through a DataLoader at its defaults
(no workers), a 784-400-20 VAE, its loss a Python function of two functional terms
(`F.binary_cross_entropy(reduction='sum')` plus the KL divergence) outside the model,
Adam, `loss.item()` accumulated each step and printed every 10, a test pass and 64
samples decoded at each epoch's end. fake_mnist stands in for torchvision's MNIST.
"""

import argparse

import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F

from fake_mnist import MNIST

parser = argparse.ArgumentParser(description="VAE MNIST Example")
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--log-interval", type=int, default=10)
parser.add_argument("--hand", type=int, default=0)
args = parser.parse_args()

torch.manual_seed(args.seed)
device = torch.device("cpu")
train_loader = torch.utils.data.DataLoader(MNIST(train=True, n=20000), batch_size=args.batch_size, shuffle=True)
test_loader = torch.utils.data.DataLoader(MNIST(train=False, n=2000), batch_size=args.batch_size, shuffle=False)


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
optimizer = optim.Adam(model.parameters(), lr=1e-3)


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


hand = None
if args.hand:
    from handtimer import Hand

    hand = Hand(args.hand)


def train(epoch):
    model.train()
    train_loss = 0
    hand and hand.start()
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.to(device)
        hand and hand.mark("data")
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        hand and hand.mark("fwd")
        loss = loss_function(recon_batch, data, mu, logvar)
        hand and hand.mark("other")
        loss.backward()
        hand and hand.mark("bwd")
        train_loss += loss.item()
        optimizer.step()
        if hand:
            hand.mark("opt")
            if hand.end(data.size(0)):
                hand.report()
                raise SystemExit(0)
            hand.start()
        if batch_idx % args.log_interval == 0:
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100.0 * batch_idx / len(train_loader), loss.item() / len(data)), flush=True)
    print("====> Epoch: {} Average loss: {:.4f}".format(epoch, train_loss / len(train_loader.dataset)))


def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, (data, _) in enumerate(test_loader):
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
    print("====> Test set loss: {:.4f}".format(test_loss / len(test_loader.dataset)))


if __name__ == "__main__":
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        test(epoch)
        with torch.no_grad():
            sample = model.decode(torch.randn(64, 20).to(device)).cpu()
