"""NVIDIA tacotron2's text front end: the cleaners (ASCII, lowercase, numbers and abbreviations spelled
out, whitespace collapsed) and the 148 symbols text_to_sequence maps cleaned text and {ARPAbet} onto."""
import functools
import re


_PAD = "_"
_SPECIAL = "-"
_PUNCTUATION = "!'(),.:;? "
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# CMUdict's phones: vowels bare and with stress 0/1/2; NVIDIA lists them sorted (text/cmudict.py).
_VOWELS = ["AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"]
_CONSONANTS = ["B", "CH", "D", "DH", "F", "G", "HH", "JH", "K", "L", "M", "N", "NG", "P", "R", "S", "SH",
               "T", "TH", "V", "W", "Y", "Z", "ZH"]
ARPABET = sorted([v + s for v in _VOWELS for s in ("", "0", "1", "2")] + _CONSONANTS)

# '@' keeps phones apart from letters ("@B" is the phone, "B" the letter).
symbols = [_PAD] + list(_SPECIAL) + list(_PUNCTUATION) + list(_LETTERS) + ["@" + p for p in ARPABET]
symbol_to_id = {s: i for i, s in enumerate(symbols)}


@functools.lru_cache(maxsize=None)
def unidecode(text):
    from unidecode import unidecode as transliterate   # here: `--help` needs no tts extra
    return transliterate(text)


def _inflect():
    import inflect    # inflect 7 takes seconds to import (typeguard instruments it): pay it on first use
    return inflect.engine()


_DIGITS = "zero one two three four five six seven eight nine".split()


def _number_words(number, **kwargs):
    """inflect's number_to_words; past its range (67 digits and up: NumOutOfRangeError) the
    digits one at a time ('one two three ...', an ordinal's suffix dropped), not an error."""
    import inflect
    digits = str(number)
    if len(digits) <= 66:
        try:
            return _inflect().number_to_words(number, **kwargs)
        except inflect.NumOutOfRangeError:
            pass
    return " ".join(_DIGITS[int(d)] for d in digits if d.isdigit())


def _count(n, unit):
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _spell_dollars(m):
    """'3.50' -> '3 dollars, 50 cents' (later rules spell the digits); NVIDIA's _expand_dollars."""
    parts = m.group(1).split(".")
    if len(parts) > 2 or any(len(part) > 66 for part in parts):    # (int() refuses 4300 digits)
        return m.group(1) + " dollars"
    dollars = int(parts[0]) if parts[0] else 0
    cents = int(parts[1]) if len(parts) > 1 and parts[1] else 0
    if dollars and cents:
        return _count(dollars, "dollar") + ", " + _count(cents, "cent")
    if dollars:
        return _count(dollars, "dollar")
    if cents:
        return _count(cents, "cent")
    return "zero dollars"


def _spell_number(m):
    """NVIDIA's _expand_number: 1001..2999 are read as years ('nineteen eighty-five', 'two thousand
    five', 'nineteen hundred'); any other number in full, without 'and' (past inflect's range, a
    digit at a time: _number_words)."""
    if len(m.group(0)) > 66:              # (int() refuses past 4300 digits; inflect past 66)
        return _number_words(m.group(0))
    n = int(m.group(0))
    if not 1000 < n < 3000:
        return _number_words(n, andword="")
    if n == 2000:
        return "two thousand"
    if 2000 < n < 2010:
        return "two thousand " + _number_words(n % 100)
    if n % 100 == 0:
        return _number_words(n // 100) + " hundred"
    return _number_words(n, andword="", zero="oh", group=2).replace(", ", " ")


# NVIDIA's normalize_numbers, applied in this order.
_NUMBER_RULES = [
    (re.compile(r"([0-9][0-9,]+[0-9])"), lambda m: m.group(1).replace(",", "")),
    # english_cleaners transliterates first, so there '£' is already 'PS' and this never fires:
    # '£20' -> 'pstwenty', as in NVIDIA's pipeline.
    (re.compile(r"£([0-9,]*[0-9]+)"), r"\1 pounds"),
    (re.compile(r"\$([0-9.,]*[0-9]+)"), _spell_dollars),
    (re.compile(r"([0-9]+\.[0-9]+)"), lambda m: m.group(1).replace(".", " point ")),
    (re.compile(r"[0-9]+(st|nd|rd|th)"), lambda m: _number_words(m.group(0))),
    (re.compile(r"[0-9]+"), _spell_number),
]

_ABBREVIATIONS = [(re.compile(rf"\b{short}\.", re.IGNORECASE), word) for short, word in [
    ("mrs", "misess"), ("mr", "mister"), ("dr", "doctor"), ("st", "saint"), ("co", "company"),
    ("jr", "junior"), ("maj", "major"), ("gen", "general"), ("drs", "doctors"), ("rev", "reverend"),
    ("lt", "lieutenant"), ("hon", "honorable"), ("sgt", "sergeant"), ("capt", "captain"),
    ("esq", "esquire"), ("ltd", "limited"), ("col", "colonel"), ("ft", "fort"),
]]

_WHITESPACE = re.compile(r"\s+")


def expand_numbers(text):
    """Digits to words: '1,000' -> 'one thousand', '3.5' -> 'three point five', '$3.50' -> 'three
    dollars, fifty cents', '1st' -> 'first', '1985' -> 'nineteen eighty-five'."""
    for pattern, replacement in _NUMBER_RULES:
        text = pattern.sub(replacement, text)
    return text


def expand_abbreviations(text):
    """'mrs.' -> 'misess', 'dr.' -> 'doctor', 'st.' -> 'saint', ... (NVIDIA's list)."""
    for pattern, word in _ABBREVIATIONS:
        text = pattern.sub(word, text)
    return text


def collapse_whitespace(text):
    return _WHITESPACE.sub(" ", text)


def basic_cleaners(text):
    """Lowercase, whitespace collapsed; no transliteration."""
    return collapse_whitespace(text.lower())


def transliteration_cleaners(text):
    """ASCII transliteration ('Café' -> 'Cafe'), lowercase, whitespace collapsed."""
    return collapse_whitespace(unidecode(text).lower())


def english_cleaners(text):
    """ASCII transliteration, lowercase, numbers then abbreviations spelled out, whitespace collapsed."""
    return collapse_whitespace(expand_abbreviations(expand_numbers(unidecode(text).lower())))


_CLEANERS = {f.__name__: f for f in (basic_cleaners, transliteration_cleaners, english_cleaners)}
# DOTALL, unlike NVIDIA's pattern, so text after a newline is not lost; text without newlines reads
# the same.
_CURLY = re.compile(r"(.*?)\{(.+?)\}(.*)", re.DOTALL)


def _ids(syms):
    return [symbol_to_id[s] for s in syms if s in symbol_to_id and s != _PAD]


def text_to_sequence(text, cleaner_names=("english_cleaners",)):
    """Symbol ids (list of int) of the cleaned text. A {...} passage is ARPAbet, not cleaned: each of
    its space-separated phones P becomes '@P' ('{HH AH0} hi' -> [@HH, @AH0, ' ', h, i]). Characters
    outside the symbol set, the pad '_' and unknown phones are dropped, as NVIDIA does."""
    unknown = [name for name in cleaner_names if name not in _CLEANERS]
    if unknown:
        raise ValueError(f"unknown cleaner(s) {unknown}; known: {sorted(_CLEANERS)}")

    def clean(part):
        for name in cleaner_names:
            part = _CLEANERS[name](part)
        return part

    ids = []
    while text:
        m = _CURLY.match(text)
        if m is None:
            ids += _ids(clean(text))
            break
        ids += _ids(clean(m.group(1))) + _ids("@" + p for p in m.group(2).split())
        text = m.group(3)
    return ids


def sequence_to_text(ids):
    """The symbols of ids joined, runs of phones back in braces ('{HH AH0} hi'); unknown ids skipped."""
    out = []
    for i in ids:
        if 0 <= i < len(symbols):
            s = symbols[i]
            out.append("{" + s[1:] + "}" if s.startswith("@") else s)
    return "".join(out).replace("}{", " ")
