"""The official VQA answer normalisation (VQA v2 ``vqaEval.py``, also used by VizWiz and OK-VQA).

Steps, in the official order:

1. newlines and tabs become spaces; outer whitespace is stripped;
2. punctuation (:data:`PUNCTUATION`): if the text contains a comma between two digits
   (``1,000``), or the mark is followed or preceded by a space, the mark is deleted; otherwise
   it becomes a space (``t-shirt`` → ``t shirt``, ``yes, it is`` → ``yes it is``). The digit-comma
   test is on the whole text, so ``1,000-2,000`` → ``10002000`` (an official quirk we keep);
3. a period not followed by a digit is deleted, so decimals survive (``3.5``) and ``5.`` →
   ``5``. (The official pattern is ``(?!<=\\d)(\\.)(?!\\d)``: its ``(?!<=\\d)`` is a lookahead for the
   literal ``<=``, which never fires where a ``.`` starts, so this is what it actually does. It is
   also passed ``re.UNICODE`` as the *count*, so only the first 32 periods go — kept, as is the
   original Python 2 meaning of ``\\d``: ASCII digits only, so ``٣.٥`` loses its period);
4. lower-case, split on whitespace, number words ``none, zero … ten`` → ``0 … 10``, articles
   ``a, an, the`` dropped, apostrophe-less contractions restored (``dont`` → ``don't``) from the
   official table — kept verbatim, including its oddities: the capitalised keys (``Im``, ``Ive``)
   can never match after lower-casing, and ``somebody'd`` maps to ``somebodyd``.

Apostrophes and colons are not punctuation here (``don't``, ``2:30`` stay).

Sources: GT-Vision-Lab/VQA ``PythonEvaluationTools/vqaEvaluation/vqaEval.py`` (2021 revision,
``processPunctuation`` / ``processDigitArticle``) and the VizWiz-VQA evaluator, which runs the
same steps with an older contraction table (:data:`VIZWIZ_CONTRACTIONS`).
"""

from __future__ import annotations

import re

__all__ = [
    "ARTICLES",
    "CONTRACTIONS",
    "NUMBER_WORDS",
    "PUNCTUATION",
    "VIZWIZ_CONTRACTIONS",
    "normalise_vqa_answer",
    "process_digit_article",
    "process_punctuation",
]

PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`")
PUNCTUATION = (*PUNCTUATION, ",", "?", "!")
NUMBER_WORDS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
ARTICLES = frozenset({"a", "an", "the"})

_CONTRACTION_TABLE = """
aint ain't  arent aren't  cant can't  couldve could've  couldnt couldn't  couldn'tve couldn't've
couldnt've couldn't've  didnt didn't  doesnt doesn't  dont don't  hadnt hadn't  hadnt've hadn't've
hadn'tve hadn't've  hasnt hasn't  havent haven't  hed he'd  hed've he'd've  he'dve he'd've  hes he's
howd how'd  howll how'll  hows how's  Id've I'd've  I'dve I'd've  Im I'm  Ive I've  isnt isn't
itd it'd  itd've it'd've  it'dve it'd've  itll it'll  let's let's  maam ma'am  mightnt mightn't
mightnt've mightn't've  mightn'tve mightn't've  mightve might've  mustnt mustn't  mustve must've
neednt needn't  notve not've  oclock o'clock  oughtnt oughtn't  ow's'at 'ow's'at  'ows'at 'ow's'at
'ow'sat 'ow's'at  shant shan't  shed've she'd've  she'dve she'd've  she's she's  shouldve should've
shouldnt shouldn't  shouldnt've shouldn't've  shouldn'tve shouldn't've  somebody'd somebodyd
somebodyd've somebody'd've  somebody'dve somebody'd've  somebodyll somebody'll  somebodys somebody's
someoned someone'd  someoned've someone'd've  someone'dve someone'd've  someonell someone'll
someones someone's  somethingd something'd  somethingd've something'd've
something'dve something'd've  somethingll something'll  thats that's  thered there'd
thered've there'd've  there'dve there'd've  therere there're  theres there's  theyd they'd
theyd've they'd've  they'dve they'd've  theyll they'll  theyre they're  theyve they've  twas 'twas
wasnt wasn't  wed've we'd've  we'dve we'd've  weve we've  werent weren't  whatll what'll
whatre what're  whats what's  whatve what've  whens when's  whered where'd  wheres where's
whereve where've  whod who'd  whod've who'd've  who'dve who'd've  wholl who'll  whos who's
whove who've  whyll why'll  whyre why're  whys why's  wont won't  wouldve would've
wouldnt wouldn't  wouldnt've wouldn't've  wouldn'tve wouldn't've  yall y'all  yall'll y'all'll
y'allll y'all'll  yall'd've y'all'd've  y'alld've y'all'd've  y'all'dve y'all'd've  youd you'd
youd've you'd've  you'dve you'd've  youll you'll  youre you're  youve you've
"""
_WORDS = _CONTRACTION_TABLE.split()
CONTRACTIONS: dict[str, str] = dict(zip(_WORDS[::2], _WORDS[1::2], strict=True))


def _vizwiz_contractions() -> dict[str, str]:
    """The VizWiz evaluator's table: the pre-2016 VQA one, whose apostrophes are typographic
    (U+2019) from ``couldn'tve`` on, except the keys ``couldn'tve``, ``hadn'tve`` and the values
    of ``weve``, ``wheres``, ``whove``, which kept the ASCII apostrophe."""
    curly = lambda text: text.replace("'", "\u2019")  # noqa: E731
    table: dict[str, str] = {}
    for index, (key, value) in enumerate(CONTRACTIONS.items()):
        if index < 5:  # aint … couldnt: ASCII in both tables
            table[key] = value
            continue
        table[key if key in ("couldn'tve", "hadn'tve") else curly(key)] = (
            value if key in ("weve", "wheres", "whove") else curly(value)
        )
    return table


VIZWIZ_CONTRACTIONS: dict[str, str] = _vizwiz_contractions()

# re.ASCII: the official Python 2 patterns were compiled without re.UNICODE, so \d is [0-9]
_COMMA_BETWEEN_DIGITS = re.compile(r"(\d)(,)(\d)", re.ASCII)
_PERIOD_NOT_BEFORE_DIGIT = re.compile(r"\.(?!\d)", re.ASCII)
_OFFICIAL_PERIOD_COUNT = int(re.UNICODE)  # 32: the flag the official code passes as sub()'s count


def normalise_vqa_answer(text: str) -> str:
    """``text`` in the official VQA normal form (steps 1–4 of the module docstring)."""
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return process_digit_article(process_punctuation(text))


def process_punctuation(text: str) -> str:
    """Steps 2–3 of the module docstring (punctuation, then periods)."""
    glue = _COMMA_BETWEEN_DIGITS.search(text) is not None
    out = text
    for mark in PUNCTUATION:  # the tests look at the original text, as the official code does
        spaced = f"{mark} " in text or f" {mark}" in text
        out = out.replace(mark, "" if glue or spaced else " ")
    return _PERIOD_NOT_BEFORE_DIGIT.sub("", out, count=_OFFICIAL_PERIOD_COUNT)


def process_digit_article(text: str, contractions: dict[str, str] = CONTRACTIONS) -> str:
    """Step 4 of the module docstring, with the given contraction table."""
    words = [NUMBER_WORDS.get(word, word) for word in text.lower().split()]
    words = [word for word in words if word not in ARTICLES]
    return " ".join(contractions.get(word, word) for word in words)
