"""NVIDIA tacotron2's hyper-parameters (its hparams.py: names and defaults) as a dataclass, plus
tiny sizes for fast CPU tests."""
import dataclasses
from dataclasses import dataclass, field


@dataclass
class HParams:
    # Experiment
    epochs: int = 500
    iters_per_checkpoint: int = 1000
    seed: int = 1234

    # Data
    text_cleaners: list = field(default_factory=lambda: ["english_cleaners"])

    # Audio
    max_wav_value: float = 32768.0
    sampling_rate: int = 22050
    filter_length: int = 1024
    hop_length: int = 256
    win_length: int = 1024
    n_mel_channels: int = 80
    mel_fmin: float = 0.0
    mel_fmax: float = 8000.0

    # Model: len(symbols) of NVIDIA's text/symbols.py (pad, special, punctuation, letters, ARPAbet)
    n_symbols: int = 148
    symbols_embedding_dim: int = 512

    # Encoder
    encoder_kernel_size: int = 5
    encoder_n_convolutions: int = 3
    encoder_embedding_dim: int = 512

    # Decoder
    n_frames_per_step: int = 1  # NVIDIA: "currently only 1 is supported"
    decoder_rnn_dim: int = 1024
    prenet_dim: int = 256
    max_decoder_steps: int = 1000
    gate_threshold: float = 0.5
    p_attention_dropout: float = 0.1
    p_decoder_dropout: float = 0.1

    # Attention
    attention_rnn_dim: int = 1024
    attention_dim: int = 128

    # Location layer
    attention_location_n_filters: int = 32
    attention_location_kernel_size: int = 31

    # Postnet
    postnet_embedding_dim: int = 512
    postnet_kernel_size: int = 5
    postnet_n_convolutions: int = 5

    # Optimization
    learning_rate: float = 1e-3
    weight_decay: float = 1e-6
    grad_clip_thresh: float = 1.0
    batch_size: int = 64
    mask_padding: bool = True  # fill the model's padded outputs with fixed values

    # Not NVIDIA's (off by default): Tachibana et al.'s guided attention loss, weight *
    # mean(A * (1 - exp(-(n/N - t/T)^2 / (2 sigma^2)))) over each item's frames t and characters n
    # (ESPnet's definition), added to the loss: it pulls the alignment towards the diagonal, which
    # on a small corpus then forms in far fewer steps (DC-TTS uses sigma 0.2). 0 = off. The weight
    # is 50 because NVIDIA's loss (MSE of unnormalised log-mels) gives the attention's parameters
    # 27 to 75 times the gradient this mean does at initialisation (measured, full model); at
    # ESPnet's weight 1, or 5, it did not move the attention in 340 steps.
    guided_attention_sigma: float = 0.0
    guided_attention_weight: float = 50.0

    @classmethod
    def small(cls, **changes):
        """Tiny sizes (same structure) so a CPU test runs in well under a second."""
        tiny = dict(symbols_embedding_dim=16, encoder_embedding_dim=16, attention_rnn_dim=24,
                    decoder_rnn_dim=24, prenet_dim=8, attention_dim=8,
                    attention_location_n_filters=4, attention_location_kernel_size=5,
                    postnet_embedding_dim=16, n_mel_channels=6, max_decoder_steps=30,
                    batch_size=4)
        return cls(**{**tiny, **changes})

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)
