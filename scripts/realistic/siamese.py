"""pytorch/examples' siamese_network as it runs on a CPU: a ResNet-18 (written out here,
as torchvision builds it, since torchvision is not installed) with a 1-channel stem and
no head, run on both images of a pair (`forward_once` twice), the two features
concatenated into a 2-layer head and a sigmoid, BCELoss, Adadelta under StepLR, pairs
drawn at random in `__getitem__` (same class for even indices, another for odd), batch
64, DataLoader at its defaults. fake_mnist stands in for torchvision's MNIST. True
bottleneck: ResNet-18's convolutions, forward and backward.
"""

import argparse
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import Dataset

from fake_mnist import MNIST


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


def resnet18_trunk():
    layers = [nn.Conv2d(1, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False),
              nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1))]
        cin = cout
    layers.append(nn.AdaptiveAvgPool2d((1, 1)))
    return nn.Sequential(*layers)


class SiameseNetwork(nn.Module):
    def __init__(self):
        super(SiameseNetwork, self).__init__()
        self.resnet = resnet18_trunk()
        self.fc_in_features = 512
        self.fc = nn.Sequential(nn.Linear(self.fc_in_features * 2, 256), nn.ReLU(inplace=True), nn.Linear(256, 1))
        self.sigmoid = nn.Sigmoid()
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1, input2):
        output = torch.cat((self.forward_once(input1), self.forward_once(input2)), 1)
        return self.sigmoid(self.fc(output))


class APP_MATCHER(Dataset):
    def __init__(self, train, n):
        super(APP_MATCHER, self).__init__()
        self.dataset = MNIST(train=train, n=n)
        self.data = torch.from_numpy(self.dataset.data).unsqueeze(1).clone()
        np_arr = self.dataset.targets.numpy()
        self.grouped_examples = {i: np.where(np_arr == i)[0] for i in range(10)}

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index):
        selected_class = random.randint(0, 9)
        group = self.grouped_examples[selected_class]
        r1 = random.randint(0, group.shape[0] - 1)
        image_1 = self.data[group[r1]].clone().float()
        if index % 2 == 0:
            r2 = random.randint(0, group.shape[0] - 1)
            while r2 == r1:
                r2 = random.randint(0, group.shape[0] - 1)
            image_2 = self.data[group[r2]].clone().float()
            target = torch.tensor(1, dtype=torch.float)
        else:
            other = random.randint(0, 9)
            while other == selected_class:
                other = random.randint(0, 9)
            g2 = self.grouped_examples[other]
            image_2 = self.data[g2[random.randint(0, g2.shape[0] - 1)]].clone().float()
            target = torch.tensor(0, dtype=torch.float)
        return image_1, image_2, target


def train(args, model, device, train_loader, optimizer, epoch, hand):
    model.train()
    criterion = nn.BCELoss()
    t = time.perf_counter()
    for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
        images_1, images_2, targets = images_1.to(device), images_2.to(device), targets.to(device)
        optimizer.zero_grad()
        outputs = model(images_1, images_2).squeeze()
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        if hand is not None:
            hand.append(time.perf_counter() - t)
            t = time.perf_counter()
            if len(hand) == args.hand + 3:
                import statistics

                ms = statistics.median(hand[3:]) * 1e3
                print(f"HAND steps={args.hand} median_step_ms={ms:.1f} samples_per_s={len(images_1) / ms * 1e3:.1f}")
                raise SystemExit(0)
        if batch_idx % args.log_interval == 0:
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(images_1), len(train_loader.dataset),
                100.0 * batch_idx / len(train_loader), loss.item()), flush=True)


def test(model, device, test_loader):
    model.eval()
    criterion = nn.BCELoss()
    test_loss = correct = 0
    with torch.no_grad():
        for images_1, images_2, targets in test_loader:
            outputs = model(images_1, images_2).squeeze()
            test_loss += criterion(outputs, targets).sum().item()
            correct += torch.where(outputs > 0.5, 1, 0).eq(targets.view_as(outputs)).sum().item()
    print(f"Test set: Average loss: {test_loss / len(test_loader.dataset):.4f}, accuracy {correct}/{len(test_loader.dataset)}", flush=True)


def main():
    parser = argparse.ArgumentParser(description="PyTorch Siamese network Example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--hand", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    train_loader = torch.utils.data.DataLoader(APP_MATCHER(True, 20000), batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(APP_MATCHER(False, 2000), batch_size=args.test_batch_size, shuffle=False)
    model = SiameseNetwork().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    hand = [] if args.hand else None
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch, hand)
        test(model, device, test_loader)
        scheduler.step()


if __name__ == "__main__":
    main()
