"""pytorch/examples' mnist_hogwild: one model in shared memory trained by 2 processes at
once (torch.multiprocessing, spawn), each with its own DataLoader and SGD; a synthetic
MNIST stands in for the download."""
import argparse, os, time
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.multiprocessing as mp
import torch.optim as optim


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def train(rank, args, model, dataset):
    torch.manual_seed(args.seed + rank)
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True)
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    pid = os.getpid()
    for epoch in range(1, args.epochs + 1):
        t = time.perf_counter()
        for batch_idx, (data, target) in enumerate(loader):
            opt.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            opt.step()
            if batch_idx % 10 == 0:
                print(f"{pid}\tTrain Epoch: {epoch} [{batch_idx * len(data)}] loss {loss.item():.4f} {(time.perf_counter()-t)*1e3/(batch_idx+1):.2f} ms/batch", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-processes", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    mp.set_start_method("spawn", force=True)
    x = torch.randn(6000, 1, 28, 28)
    y = torch.randint(0, 10, (6000,))
    dataset = torch.utils.data.TensorDataset(x, y)
    model = Net()
    model.share_memory()
    procs = []
    for rank in range(args.num_processes):
        pr = mp.Process(target=train, args=(rank, args, model, dataset))
        pr.start()
        procs.append(pr)
    for pr in procs:
        pr.join()
