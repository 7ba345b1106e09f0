"""LSTM forward + backward on this engine (cuDNN's RNN) and on torch CUDA at Tacotron 2's
encoder size (B 64, T 150, 512 -> 2 x 256 bidirectional), and one LSTMCell step at Tacotron 2's
decoder size (B 64, input 768, hidden 1024) three ways: the fused kernels LSTMCell uses, cuDNN's
RNN with T = 1, and torch CUDA.

    python -m tools.bench_lstm --device 0
"""
import statistics

import numpy as np

from tools.timing import ms_per_call
from train import cli


def _ms(fn, sync, repeats=3):
    return statistics.median(ms_per_call(fn, sync) for _ in range(repeats))


def main():
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool times the GPU path (cuDNN's RNN, fused "
                                         "kernels) against torch CUDA")
    import cupy
    import torch
    import layers as L
    dev, tdev = args.device, f"cuda:{args.device}"
    sync_ours, sync_torch = cupy.cuda.get_current_stream().synchronize, torch.cuda.synchronize
    rng = np.random.default_rng(0)
    rows = []

    # encoder: bidirectional LSTM over a padded batch with varied lengths
    B, T, I, H = 64, 150, 512, 256
    lengths = sorted(rng.integers(T // 2, T + 1, B).tolist(), reverse=True)
    lengths[0] = T
    x = rng.standard_normal((B, T, I)).astype(np.float32)
    m = L.nn.LSTM(I, H, batch_first=True, bidirectional=True).to(dev)
    t = torch.nn.LSTM(I, H, batch_first=True, bidirectional=True).to(tdev)
    xs = L.tensor(x, device=dev, requires_grad=True)
    xt = torch.tensor(x, device=tdev, requires_grad=True)

    def ours_enc():
        y, _ = m(xs, lengths=lengths)
        y.sum().backward()

    def torch_enc():
        packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(lengths),
                                                         batch_first=True)
        y, _ = t(packed)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=T)
        y.sum().backward()
    rows.append(("encoder LSTM fwd+bwd (B64 T150 512->2x256)", _ms(ours_enc, sync_ours),
                 _ms(torch_enc, sync_torch), "cuDNN RNN"))

    # decoder: one LSTMCell step
    B, I, H = 64, 768, 1024
    cell = L.nn.LSTMCell(I, H).to(dev)
    tcell = torch.nn.LSTMCell(I, H).to(tdev)
    xs = L.tensor(rng.standard_normal((B, I)).astype(np.float32), device=dev, requires_grad=True)
    hs, cs = (L.tensor(rng.standard_normal((B, H)).astype(np.float32), device=dev,
                       requires_grad=True) for _ in range(2))
    xt, ht, ct = (torch.tensor(a.numpy(), device=tdev, requires_grad=True) for a in (xs, hs, cs))
    one = L.nn.LSTM(I, H).to(dev)

    def ours_cell():
        h1, c1 = cell(xs, (hs, cs))
        (h1.sum() + c1.sum()).backward()

    def cudnn_t1():
        y, (h1, c1) = one(xs.reshape(1, B, I), (hs.reshape(1, B, H), cs.reshape(1, B, H)))
        (h1.sum() + c1.sum()).backward()

    def torch_cell():
        h1, c1 = tcell(xt, (ht, ct))
        (h1.sum() + c1.sum()).backward()
    t_fused, t_cudnn = _ms(ours_cell, sync_ours), _ms(cudnn_t1, sync_ours)
    rows.append(("LSTMCell step fwd+bwd (B64 768->1024): fused", t_fused,
                 _ms(torch_cell, sync_torch), "matmul + fused kernel"))
    rows.append(("LSTMCell step fwd+bwd: cuDNN RNN with T=1", t_cudnn, float("nan"), "cuDNN RNN"))
    print(f"{cupy.cuda.runtime.getDeviceProperties(dev)['name'].decode()}")
    print(f"{'case':<48} {'cudnnlite ms':>12} {'torch ms':>9}  path")
    for name, a, b, path in rows:
        print(f"{name:<48} {a:12.3f} {b:9.3f}  {path}")


if __name__ == "__main__":
    main()
