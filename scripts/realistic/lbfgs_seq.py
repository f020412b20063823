"""pytorch/examples' time_sequence_prediction: two LSTMCells in double precision predict
sine waves, trained with L-BFGS on the whole data set at once: optimizer.step(closure),
where the closure runs zero_grad, the forward, the loss and backward, up to 20 times
inside one step. After each step, a prediction 1000 steps into the future under no_grad,
and the curve written out (CSV here, a matplotlib PDF in the original). True
bottleneck: the closure's forward and backward inside LBFGS's step (a Python loop over
999 time steps of LSTMCell); the optimizer's own arithmetic is small.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=input.dtype)
        c_t = torch.zeros(input.size(0), 51, dtype=input.dtype)
        h_t2 = torch.zeros(input.size(0), 51, dtype=input.dtype)
        c_t2 = torch.zeros(input.size(0), 51, dtype=input.dtype)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--length", type=int, default=400)
    p.add_argument("--future", type=int, default=200)
    p.add_argument("--hand", type=int, default=0)
    p.add_argument("--float32", action="store_true", help="the by-hand check of float32")
    args = p.parse_args()
    np.random.seed(2)
    T, L, N = 20, args.length, 100
    x = np.empty((N, L), "int64")
    x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
    data = np.sin(x / 1.0 / T).astype("float32" if args.float32 else "float64")
    torch.manual_seed(0)
    input = torch.from_numpy(data[3:, :-1])
    target = torch.from_numpy(data[3:, 1:])
    test_input = torch.from_numpy(data[:3, :-1])
    test_target = torch.from_numpy(data[:3, 1:])
    seq = Sequence() if args.float32 else Sequence().double()
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        evals = [0]

        def closure():
            evals[0] += 1
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        t1 = time.perf_counter()
        with torch.no_grad():
            pred = seq(test_input, future=args.future)
            test_loss = criterion(pred[:, : -args.future], test_target)
            y = pred.detach().numpy()
        np.savetxt(f"/tmp/predict{i % 4}.csv", y, delimiter=",")
        t2 = time.perf_counter()
        times.append((t1 - t0, t2 - t1, evals[0]))
        print(f"STEP {i}: loss {loss.item():.6f} test loss {test_loss.item():.6f}", flush=True)
        if args.hand and len(times) >= args.hand + 1:
            rows = times[1:]
            tr = sorted(r[0] for r in rows)[len(rows) // 2]
            ev = sorted(r[1] for r in rows)[len(rows) // 2]
            print(f"HAND median step {tr * 1e3:.1f} ms (closure calls {sorted(r[2] for r in rows)[len(rows)//2]}), "
                  f"median predict+save {ev * 1e3:.1f} ms, predict share {100 * sum(r[1] for r in rows) / sum(r[0] + r[1] for r in rows):.1f}%")
            return


if __name__ == "__main__":
    main()
