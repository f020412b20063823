"""pytorch/examples' gcn as it runs on a CPU: full-batch node classification, a 2-layer
graph convolution (`torch.mm` by the weights, `torch.spmm` by the normalised sparse
adjacency), the node features a sparse COO tensor, Adam with weight decay, and after
every optimizer step two evaluations (`model.eval()` under `no_grad`, on the training
and the validation nodes). A synthetic Cora-shaped graph (2708 nodes, 1433 binary
features, about 5400 citations, 7 classes) stands in for the download. No DataLoader:
each step is the whole graph. 200 epochs by default, as the example.
"""

import argparse
import time

import torch
from torch import nn
import torch.nn.functional as F
from torch.optim import Adam


class GraphConv(nn.Module):
    def __init__(self, input_dim, output_dim, use_bias=False):
        super(GraphConv, self).__init__()
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)
        output = torch.spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super(GCN, self).__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x, dim=1)


def load_cora(V=2708, Fdim=1433, E=5429, C=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, C, (V,), generator=g)
    centers = (torch.rand(C, Fdim, generator=g) < 0.02).float()
    features = ((torch.rand(V, Fdim, generator=g) < 0.005).float() + centers[labels] * (torch.rand(V, Fdim, generator=g) < 0.5)).clamp(max=1)
    scale_vector = 1 / torch.sum(features, dim=1)
    scale_vector[scale_vector == float("inf")] = 0
    features = torch.diag(scale_vector).to_sparse() @ features
    src = torch.randint(0, V, (E,), generator=g)
    same = torch.rand(E, generator=g) < 0.8
    pool = [torch.nonzero(labels == c).flatten() for c in range(C)]
    dst = torch.tensor([int(pool[int(labels[s])][torch.randint(len(pool[int(labels[s])]), (1,), generator=g)]) if k else int(torch.randint(0, V, (1,), generator=g)) for s, k in zip(src, same)])
    adj_mat = torch.sparse_coo_tensor(torch.stack([src, dst]), torch.ones(E), (V, V))
    adj_mat = torch.eye(V) + adj_mat
    degree_mat = torch.sqrt(1 / torch.sum(adj_mat, dim=1))
    degree_mat[degree_mat == float("inf")] = 0
    degree_mat = torch.diag(degree_mat).to_sparse()
    adj_mat = degree_mat @ adj_mat @ degree_mat
    return features.to_sparse(), labels, adj_mat.to_sparse()


def train_iter(epoch, model, optimizer, criterion, input, target, mask_train, mask_val, print_every=10):
    start_t = time.time()
    model.train()
    optimizer.zero_grad()
    output = model(*input)
    loss = criterion(output[mask_train], target[mask_train])
    loss.backward()
    optimizer.step()
    step_t = time.time() - start_t
    loss_train, acc_train = test(model, criterion, input, target, mask_train)
    loss_val, acc_val = test(model, criterion, input, target, mask_val)
    if epoch % print_every == 0:
        print(f"Epoch: {epoch:04d} ({(time.time() - start_t):.4f}s) loss_train: {loss_train:.4f} acc_train: {acc_train:.4f} loss_val: {loss_val:.4f} acc_val: {acc_val:.4f}", flush=True)
    return step_t, time.time() - start_t


def test(model, criterion, input, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*input)
        output, target = output[mask], target[mask]
        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="PyTorch Graph Convolutional Network")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--l2", type=float, default=5e-4)
    parser.add_argument("--dropout-p", type=float, default=0.5)
    parser.add_argument("--hidden-dim", type=int, default=16)
    parser.add_argument("--val-every", type=int, default=20)
    parser.add_argument("--include-bias", action="store_true")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--hand", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    features, labels, adj_mat = load_cora()
    idx = torch.randperm(len(labels))
    idx_test, idx_val, idx_train = idx[:1000], idx[1000:1500], idx[1500:]
    gcn = GCN(features.shape[1], args.hidden_dim, labels.max().item() + 1, args.include_bias, args.dropout_p)
    optimizer = Adam(gcn.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()
    times = []
    for epoch in range(args.epochs):
        times.append(train_iter(epoch + 1, gcn, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val, args.val_every))
        if args.hand and len(times) == args.hand + 3:
            import statistics

            tr = statistics.median(t for t, _ in times[3:]) * 1e3
            al = statistics.median(a for _, a in times[3:]) * 1e3
            print(f"HAND steps={args.hand} train_step_ms={tr:.2f} with_two_evals_ms={al:.2f} evals_share={100 * (al - tr) / al:.1f}%")
            raise SystemExit(0)
    loss_test, acc_test = test(gcn, criterion, (features, adj_mat), labels, idx_test)
    print(f"Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}")
