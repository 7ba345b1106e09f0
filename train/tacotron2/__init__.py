"""Tacotron 2 (NVIDIA tacotron2's model, names and hyper-parameters) on the layers engine.

    hparams  HParams: NVIDIA's field names and defaults
    model    Tacotron2, its loss and training step
    text     NVIDIA's cleaners and 148 symbols (needs the `tts` extra: unidecode, inflect)
    audio    mel spectrogram and Griffin-Lim on NumPy or CuPy
"""
from .audio import griffin_lim, mel_spectrogram
from .hparams import HParams
from .model import (Tacotron2, loss_parts, make_optimizer, make_step, set_dropout, train_step,
                    train_step_device)

__all__ = ["HParams", "Tacotron2", "loss_parts", "make_optimizer", "make_step", "set_dropout",
           "train_step", "train_step_device", "mel_spectrogram", "griffin_lim", "text_to_sequence",
           "sequence_to_text"]


def __getattr__(name):
    """text_to_sequence / sequence_to_text, imported on first use: the text front end needs the
    `tts` extra, the model does not."""
    if name in ("text_to_sequence", "sequence_to_text"):
        from . import text
        return getattr(text, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
