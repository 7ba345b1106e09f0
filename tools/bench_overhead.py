"""Per-op Python overhead of the layers engine: the time an op takes beyond the array work it
dispatches, measured on tiny inputs where that work is negligible.

    python -m tools.bench_overhead            # CPU (NumPy path)
    python -m tools.bench_overhead --device 0 # also host-side time per op on the GPU path
"""
import timeit

import numpy as np

import layers as L
from layers import F
from train import cli


def per_call_us(fn, number=20000, repeat=5):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def measure(device):
    xp = np if device == "cpu" else __import__("cupy")
    a_raw = xp.ones((4,), np.float32)
    b_raw = xp.ones((4,), np.float32)
    a, b = L.tensor(a_raw, device=device), L.tensor(b_raw, device=device)
    ag = L.tensor(a_raw, device=device, requires_grad=True)
    x4 = L.tensor(xp.ones((2, 3, 4, 4), np.float32), device=device, requires_grad=True)
    rows = [
        ("add (no graph)", lambda: a + b, lambda: a_raw + b_raw),
        ("add (recorded)", lambda: ag + b, lambda: a_raw + b_raw),
        ("mul by scalar (recorded)", lambda: ag * 2.0, lambda: a_raw * 2.0),
        ("leaky_relu (recorded)", lambda: F.leaky_relu(ag, 0.2),
         (lambda: np.where(a_raw > 0, a_raw, a_raw * np.float32(0.2))) if device == "cpu"
         else (lambda: L.kernels.leaky_relu(a_raw, 0.2))),
        ("reshape (recorded)", lambda: x4.reshape(2, -1), lambda: x4.data.reshape(2, -1)),
    ]
    out = []
    for name, op, raw in rows:
        t_op, t_raw = per_call_us(op), per_call_us(raw)
        out.append((name, t_op, t_raw, t_op - t_raw))
    return out


def main():
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--device", type=cli.device, default="cpu", help="'cpu' or a GPU index [cpu]")
    args = ap.parse_args()
    devices = ["cpu"] if cli.use_device(args.device) == "cpu" else ["cpu", args.device]
    print(f"{'device':>6}  {'op':<26} {'engine us':>10} {'raw us':>8} {'overhead us':>12}")
    for device in devices:
        for name, t_op, t_raw, over in measure(device):
            print(f"{str(device):>6}  {name:<26} {t_op:10.2f} {t_raw:8.2f} {over:12.2f}")


if __name__ == "__main__":
    main()
