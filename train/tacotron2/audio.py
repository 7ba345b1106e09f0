"""Speech audio for Tacotron 2: WAV files, NVIDIA tacotron2's log-mel spectrogram, Griffin-Lim. Each
transform runs on NumPy, or on the GPU (CuPy FFT) for a CuPy array, with the same numbers.
Shapes: L samples, F = n_fft // 2 + 1 frequency bins, T = 1 + L // hop frames, n_mels bands."""
import functools
import os

import numpy as np

from layers.backend import to_device, xp_of

# NVIDIA tacotron2's hparams (LJSpeech).
SAMPLE_RATE = 22050
N_FFT = 1024
HOP = 256
WIN = 1024
N_MELS = 80
FMIN = 0.0
FMAX = 8000.0
LOG_FLOOR = 1e-5    # dynamic_range_compression: log(clamp(x, min=1e-5))


def _hz_to_mel(f):
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), then 27 mels per factor of 6.4."""
    f = np.asarray(f, np.float64)
    log_part = 15.0 + 27.0 * np.log(np.maximum(f, 1000.0) / 1000.0) / np.log(6.4)
    return np.where(f < 1000.0, f * 3.0 / 200.0, log_part)


def _mel_to_hz(m):
    m = np.asarray(m, np.float64)
    return np.where(m < 15.0, m * 200.0 / 3.0, 1000.0 * np.exp((m - 15.0) * np.log(6.4) / 27.0))


@functools.lru_cache(maxsize=None)
def mel_filterbank(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=N_MELS, fmin=FMIN, fmax=FMAX):
    """M (n_mels, F) float64, read-only: band i is the triangle rising from f[i] to 1 at f[i+1] and
    falling to f[i+2], times 2 / (f[i+2] - f[i]) (Slaney's equal area); the n_mels + 2 edges f are evenly
    spaced in Slaney mels from fmin to fmax, bin k is at k * sr / n_fft.
    = librosa.filters.mel(htk=False, norm='slaney')."""
    bins = np.linspace(0.0, sr / 2, n_fft // 2 + 1)
    f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    rising = (bins - f[:-2, None]) / (f[1:-1] - f[:-2])[:, None]
    falling = (f[2:, None] - bins) / (f[2:] - f[1:-1])[:, None]
    M = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (f[2:] - f[:-2]))[:, None]
    M.flags.writeable = False     # cached and shared: nobody may change it
    return M


@functools.lru_cache(maxsize=None)
def _mel_pinv(sr, n_fft, n_mels, fmin, fmax):
    P = np.linalg.pinv(mel_filterbank(sr, n_fft, n_mels, fmin, fmax))
    P.flags.writeable = False
    return P


def _window(xp, n_fft, win):
    """Periodic Hann w[n] = 0.5 - 0.5 cos(2 pi n / win), n < win, zero-padded on both sides to n_fft
    (torch.hann_window(win) / scipy's get_window('hann', win, fftbins=True), centred as librosa does)."""
    w = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(win) / win)
    left = (n_fft - win) // 2
    return xp.asarray(np.pad(w, (left, n_fft - win - left)))


def stft(wav, n_fft=N_FFT, hop=HOP, win=WIN):
    """S[k, t] = sum_n w[n] x[t * hop + n] exp(-2 pi i k n / n_fft): (L,) -> (F, T) complex128, x = wav
    reflect-padded by n_fft // 2 at both ends (torch.stft(center=True, pad_mode='reflect'), as NVIDIA's
    STFT pads). float64 inside: the log of a quiet band makes float32 FFT rounding visible."""
    xp = xp_of(wav)
    x = xp.pad(xp.asarray(wav, xp.float64), n_fft // 2, mode="reflect")
    T = 1 + (len(x) - n_fft) // hop
    frames = x[xp.arange(n_fft)[None, :] + hop * xp.arange(T)[:, None]]     # (T, n_fft)
    return xp.fft.rfft(frames * _window(xp, n_fft, win), axis=1).T


def stft_magnitude(wav, n_fft=N_FFT, hop=HOP, win=WIN):
    """|stft(wav)|: (L,) -> (F, T) float64."""
    return abs(stft(wav, n_fft, hop, win))


def _overlap_add(frames, hop):
    """y[t * hop + n] = sum over t of frames[t, n]: (T, n) -> (hop * (T - 1) + n,). Done as
    ceil(n / hop) adds of hop-wide column blocks, not a loop over frames: a few GPU kernels, not T."""
    xp = xp_of(frames)
    T, n = frames.shape
    R = -(-n // hop)
    frames = xp.pad(frames, ((0, 0), (0, R * hop - n)))
    y = xp.zeros((T + R - 1, hop), frames.dtype)
    for r in range(R):
        y[r:r + T] += frames[:, r * hop:(r + 1) * hop]
    return y.reshape(-1)[:hop * (T - 1) + n]


def istft(S, hop=HOP, win=WIN):
    """Griffin and Lim's least-squares inverse of stft: x = OLA(w * irfft(S)) / OLA(w^2), the centre
    padding cut off (librosa.istft(center=True)): S (F, T) -> (hop * (T - 1),) float64;
    n_fft = 2 (F - 1)."""
    xp = xp_of(S)
    n_fft = 2 * (S.shape[0] - 1)
    w = _window(xp, n_fft, win)
    y = _overlap_add(xp.fft.irfft(S.T, n=n_fft, axis=1) * w, hop)
    norm = _overlap_add(xp.broadcast_to(w * w, (S.shape[1], n_fft)), hop)
    y = y / xp.maximum(norm, np.finfo(np.float64).tiny)    # norm is 0 only in the cut-off padding
    return y[n_fft // 2:len(y) - n_fft // 2]


def mel_spectrogram(wav, sr=SAMPLE_RATE, n_fft=N_FFT, hop=HOP, win=WIN, n_mels=N_MELS, fmin=FMIN,
                    fmax=FMAX):
    """log(max(M @ |stft(wav)|, 1e-5)), NVIDIA's TacotronSTFT.mel_spectrogram: wav (L,) in [-1, 1]
    sampled at sr -> (n_mels, T) float32, on NumPy or CuPy as wav is."""
    xp = xp_of(wav)
    M = xp.asarray(mel_filterbank(sr, n_fft, n_mels, fmin, fmax))
    return xp.log(xp.maximum(M @ stft_magnitude(wav, n_fft, hop, win), LOG_FLOOR)).astype(xp.float32)


def spectral_convergence(mag, est):
    """||mag - est||_F / ||mag||_F: how far magnitude spectrogram est is from the target mag (scalar)."""
    xp = xp_of(mag)
    return xp.linalg.norm(mag - est) / xp.linalg.norm(mag)


def griffin_lim(mel, n_iter=60, sr=SAMPLE_RATE, n_fft=N_FFT, hop=HOP, win=WIN, n_mels=N_MELS,
                fmin=FMIN, fmax=FMAX, seed=0, return_history=False):
    """Waveform (hop * (T - 1),) float32 from a log-mel (n_mels, T), on NumPy or CuPy as mel is.
    |S| = max(pinv(M) @ exp(mel), 0); from a random phase (seeded), n_iter rounds of
    x = istft(|S| exp(i angle)), angle = arg stft(x) (Griffin and Lim 1984). With return_history, also
    (n_iter,) NumPy: spectral_convergence(|S|, |stft(x)|) after each round."""
    xp = xp_of(mel)
    if hop * (mel.shape[1] - 1) <= n_fft // 2:
        # too short for the STFT's reflect padding: a frame or three is silence, not speech
        x = xp.zeros(max(hop * (mel.shape[1] - 1), 0), xp.float32)
        return (x, np.zeros(0)) if return_history else x
    M_pinv = xp.asarray(_mel_pinv(sr, n_fft, n_mels, fmin, fmax))
    mag = xp.maximum(M_pinv @ xp.exp(xp.asarray(mel, xp.float64)), 0.0)
    # The phase is drawn on the host, so NumPy and CuPy start from the same numbers.
    angle = xp.asarray(2.0 * np.pi * np.random.default_rng(seed).random(mag.shape))
    x = istft(mag * xp.exp(1j * angle), hop, win)
    history = []
    for _ in range(n_iter):
        x = istft(mag * xp.exp(1j * xp.angle(stft(x, n_fft, hop, win))), hop, win)
        if return_history:
            history.append(spectral_convergence(mag, stft_magnitude(x, n_fft, hop, win)))
    x = x.astype(xp.float32)
    return (x, np.array([float(h) for h in history])) if return_history else x


def load_wav(path):
    """(wav (L,) float32 in [-1, 1), sample rate) from any file libsndfile reads (WAV, FLAC, ...);
    16-bit samples become int16 / 32768 as in NVIDIA's loader; channels are averaged to mono."""
    import soundfile as sf    # here, not at the top: the transforms need only NumPy / CuPy
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no audio file at {path}")
    try:
        wav, sr = sf.read(path, dtype="float32", always_2d=True)
    except sf.LibsndfileError as e:
        raise ValueError(f"{path} is not an audio file soundfile can read ({e.error_string})") from e
    return wav.mean(axis=1), sr


def save_wav(path, wav, sr=SAMPLE_RATE):
    """Write wav (L,) (NumPy or CuPy, nominally in [-1, 1]) as 16-bit PCM: libsndfile stores
    round(wav * 32768) clipped to the int16 range, the exact inverse of load_wav for 16-bit values."""
    import soundfile as sf
    sf.write(path, np.asarray(to_device(wav, "cpu"), np.float32), sr, subtype="PCM_16")
