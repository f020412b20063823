"""By hand: channels_last against contiguous for the conv nets of the realistic scripts
(siamese ResNet-18 trunk, DCGAN discriminator and generator, eval_heavy), fp32, one fixed
batch, forward+backward+step, interleaved rounds in one process. Usage: python channels_last_bench.py [THREADS]."""
import sys, time, torch, torch.nn as nn
import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import siamese, gan, eval_heavy

def bench(name, model, x, loss_fn, rounds=4, steps=6):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    res = {False: [], True: []}
    for r in range(rounds):
        for cl in ([False, True] if r % 2 == 0 else [True, False]):
            fmt = torch.channels_last if cl else torch.contiguous_format
            model.to(memory_format=fmt)
            xb = x.contiguous(memory_format=fmt)
            for _ in range(2):
                opt.zero_grad(); loss_fn(model(xb)).backward(); opt.step()
            t = time.perf_counter()
            for _ in range(steps):
                opt.zero_grad(); loss_fn(model(xb)).backward(); opt.step()
            res[cl].append((time.perf_counter() - t) / steps * 1e3)
    a, b = sorted(res[False])[rounds // 2], sorted(res[True])[rounds // 2]
    print(f"{name}: contiguous {a:.1f} ms, channels_last {b:.1f} ms -> {a/b:.2f}x  ({res})", flush=True)

torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
m = siamese.resnet18_trunk()
bench("siamese resnet18 trunk b64 1x28x28", m, torch.randn(64, 1, 28, 28), lambda y: y.float().pow(2).mean())
d = gan.disc()
bench("gan disc b64 3x32x32", d, torch.randn(64, 3, 32, 32), lambda y: y.float().mean())
g = gan.gen()
bench("gan gen b64", g, torch.randn(64, 64, 1, 1), lambda y: y.float().pow(2).mean())
e = eval_heavy.net()
bench("eval_heavy net b64 3x32x32", e, torch.randn(64, 3, 32, 32), lambda y: y.float().mean())
