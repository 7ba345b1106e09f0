"""Offline English speech from espeak-ng through ctypes (the espeakng-loader wheel bundles libespeak-ng
and its data: no system package): synthesize("In his defense.") -> float32 samples at 22050 Hz."""
import ctypes
import os
import threading

import numpy as np

SAMPLE_RATE = 22050

# speak_lib.h constants.
_AUDIO_OUTPUT_SYNCHRONOUS = 2    # espeak_Synth returns when all audio has gone through the callback
_INITIALIZE_DONT_EXIT = 0x8000   # return an error instead of exit() when the data folder is unusable
_POS_CHARACTER = 1
_CHARS_UTF8 = 0x1
_ENDPAUSE = 0x1000               # keep the sentence-final pause
_ERRORS = {-1: "EE_INTERNAL_ERROR", 1: "EE_BUFFER_FULL", 2: "EE_NOT_FOUND"}

# int SynthCallback(short *wav, int numsamples, espeak_EVENT *events)
_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                  ctypes.c_void_p)

_lock = threading.Lock()    # libespeak-ng is one global synthesiser
_engine = None              # (lib, callback, chunks) once initialised; the callback must stay referenced


def _init():
    try:
        import espeakng_loader
    except ImportError as e:
        raise ImportError("espeak-ng speech needs the espeakng-loader wheel: "
                          "pip install 'cudnnlite[tts]'") from e
    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    # int espeak_Initialize(espeak_AUDIO_OUTPUT output, int buflength, const char *path, int options)
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    # void espeak_SetSynthCallback(t_espeak_callback *SynthCallback)
    lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
    lib.espeak_SetSynthCallback.restype = None
    # espeak_ERROR espeak_SetVoiceByName(const char *name)
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    # espeak_ERROR espeak_Synth(const void *text, size_t size, unsigned int position,
    #     espeak_POSITION_TYPE position_type, unsigned int end_position, unsigned int flags,
    #     unsigned int *unique_identifier, void *user_data)
    lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                 ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
    data = os.path.dirname(espeakng_loader.get_data_path())    # path: the folder holding espeak-ng-data/
    sr = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data.encode(), _INITIALIZE_DONT_EXIT)
    if sr != SAMPLE_RATE:
        raise RuntimeError(f"espeak_Initialize(path={data!r}) returned {sr}, "
                           f"not the sample rate {SAMPLE_RATE}")
    chunks = []

    def collect(wav, n, events):
        if wav and n > 0:
            chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
        return 0    # 0: go on synthesising

    callback = _SynthCallback(collect)
    lib.espeak_SetSynthCallback(callback)
    return lib, callback, chunks


def synthesize(text, voice="en-us"):
    """text (str) -> (L,) float32 = int16 samples / 32768 at 22050 Hz, ending in a sentence pause.
    espeak-ng carries state from one utterance to the next: the same text again in one process can
    differ by a few samples, while a fresh process repeats the same sequence exactly."""
    global _engine
    with _lock:
        if _engine is None:
            _engine = _init()
        lib, _, chunks = _engine
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ValueError(f"espeak-ng has no voice {voice!r}")
        chunks.clear()
        data = text.encode()
        status = lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8 | _ENDPAUSE,
                                  None, None)
        if status != 0:
            name = _ERRORS.get(status, f"espeak_ERROR {status}")
            raise RuntimeError(f"espeak_Synth({text!r}) failed: {name}")
        wav = np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
    return wav.astype(np.float32) / 32768
