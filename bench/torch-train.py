#!/usr/bin/env python3
"""PyTorch reference for `placesim train` (bench/train-vs-torch.sh): the same built-in model
(mlp: 784-256-128-10; cnn: the zoo's small ResNet at 1x28x28), the same data (fashion-mnist IDX
files standardised by the training pixels' mean and deviation as `placesim train` does by default,
a seeded shuffle per epoch), batch, optimizer and learning-rate schedule (a half cosine to 0 at
the end of --epochs, or constant), on one thread. Prints one JSON
line: examples/s over the steps run (the input batching included, evaluation not), and the test
accuracy at the end when asked."""
import argparse, gzip, json, os, time

import numpy as np
import torch
import torch.nn as nn


def idx(path):
    op = gzip.open if path.endswith('.gz') else open
    with op(path, 'rb') as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(folder, prefix):
    def f(stem):
        p = os.path.join(folder, stem)
        return p if os.path.exists(p) else p + '.gz'
    return idx(f(prefix + '-images-idx3-ubyte')), idx(f(prefix + '-labels-idx1-ubyte'))


def conv_bn(cin, cout, k, stride, relu):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout, eps=1e-5)]
    return nn.Sequential(*(layers + [nn.ReLU()] if relu else layers))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = conv_bn(cin, cout, 3, stride, True)
        self.c2 = conv_bn(cout, cout, 3, 1, False)
        self.sc = conv_bn(cin, cout, 1, stride, False) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.c2(self.c1(x)) + self.sc(x))


def model(name):
    if name == 'mlp':
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(conv_bn(1, 16, 3, 1, True), nn.MaxPool2d(2, 2), Block(16, 16, 1),
                         Block(16, 32, 2), Block(32, 64, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model', choices=['mlp', 'cnn'])
    ap.add_argument('--data', default='/usr/share/datasets/fashion-mnist')
    ap.add_argument('--batch', type=int, default=64)
    ap.add_argument('--steps', type=int, default=0, help='stop after N steps (0: --epochs)')
    ap.add_argument('--epochs', type=int, default=1)
    ap.add_argument('--optimizer', default='sgd', choices=['sgd', 'adam'])
    ap.add_argument('--lr', type=float, default=None)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--eval', action='store_true')
    ap.add_argument('--seed', type=int, default=0, help='seed of the weights and the shuffle')
    ap.add_argument('--lr-schedule', default='cosine', choices=['cosine', 'constant'])
    ap.add_argument('--inputs', default='standard', choices=['standard', 'unit'])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xs, ys = load(a.data, 'train')
    m = model(a.model)
    lr = a.lr if a.lr is not None else (0.001 if a.optimizer == 'adam' else 0.01)
    opt = (torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9) if a.optimizer == 'sgd'
           else torch.optim.Adam(m.parameters(), lr=lr, eps=1e-8))
    loss_fn = nn.CrossEntropyLoss()
    shape = (a.batch, 1, 28, 28)
    per_epoch = len(ys) // a.batch
    steps, t_run = 0, 0.0
    rng = np.random.default_rng(42 + a.seed)
    std = a.inputs == 'standard'
    mu = xs.astype(np.float64).mean() / 255 if std else 0.0
    sd = xs.astype(np.float64).std() / 255 if std else 1.0
    decay_steps = per_epoch * a.epochs
    for epoch in range(a.epochs if not a.steps else 1 << 30):
        order = rng.permutation(len(ys))
        for b in range(per_epoch):
            if a.steps and steps >= a.steps:
                break
            t0 = time.perf_counter()
            i = order[b * a.batch:(b + 1) * a.batch]
            x = torch.from_numpy(xs[i].astype(np.float32) / 255.0 - mu).reshape(shape) / sd
            y = torch.from_numpy(ys[i].astype(np.int64))
            if a.lr_schedule == 'cosine':
                for g in opt.param_groups:
                    g['lr'] = lr * 0.5 * (1 + np.cos(np.pi * min(steps, decay_steps) / decay_steps))
            opt.zero_grad()
            loss_fn(m(x), y).backward()
            opt.step()
            t_run += time.perf_counter() - t0
            steps += 1
        if a.steps and steps >= a.steps:
            break
    out = {'model': a.model, 'steps': steps, 'batch': a.batch,
           'examples_per_s': steps * a.batch / t_run, 'threads': a.threads,
           'torch': torch.__version__}
    if a.eval:
        m.train(True)  # placesim evaluates with batch statistics too
        tx, ty = load(a.data, 't10k')
        with torch.no_grad():
            correct = 0
            for s in range(0, len(ty), a.batch):
                x = torch.from_numpy(tx[s:s + a.batch].astype(np.float32) / 255.0 - mu).reshape(-1, 1, 28, 28) / sd
                correct += int((m(x).argmax(1).numpy() == ty[s:s + a.batch]).sum())
        out['test_accuracy'] = correct / len(ty)
    print(json.dumps(out))


if __name__ == '__main__':
    main()
