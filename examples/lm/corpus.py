"""A small English-like corpus for the LM example, made on the spot.

    python examples/lm/corpus.py --out=/tmp/corpus.txt

Sentences come from a tiny grammar (subject, verb with agreement, object,
optional place), and words are picked with Zipf frequencies, so the text
has the skew of real text and structure an LSTM can learn. No download.
"""

import numpy as np
from absl import app
from absl import flags

NOUNS = (
    "cat dog bird farmer teacher child river city house garden king queen "
    "horse ship market doctor student village road tree letter song window "
    "friend soldier baker painter forest mountain book table door"
).split()
ADJECTIVES = (
    "old small big quiet happy green dark young tired bright cold warm "
    "strange lucky careful brave"
).split()
VERBS = (
    "see find like follow watch help visit paint carry build remember meet "
    "call answer wash"
).split()
PLACES = "in near behind under across beside".split()
DETERMINERS = "the a every this that".split()


def _pick(rng, words, s: float = 1.1) -> str:
    p = 1.0 / np.arange(1, len(words) + 1) ** s
    return words[rng.choice(len(words), p=p / p.sum())]


def _noun_phrase(rng, plural: bool) -> str:
    words = [
        _pick(rng, ("the", "some", "many"))
        if plural
        else _pick(rng, DETERMINERS)
    ]
    if rng.random() < 0.4:
        words.append(_pick(rng, ADJECTIVES))
    noun = _pick(rng, NOUNS)
    words.append(noun + "s" if plural else noun)
    return " ".join(words)


def _third_person(verb: str) -> str:
    if verb.endswith(("sh", "ch")):
        return verb + "es"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def sentence(rng) -> str:
    """One sentence: `subject verb object [place] .`, verbs agreeing."""
    plural = rng.random() < 0.3
    verb = _pick(rng, VERBS)
    if not plural:
        verb = _third_person(verb)
    parts = [
        _noun_phrase(rng, plural),
        verb,
        _noun_phrase(rng, rng.random() < 0.3),
    ]
    if rng.random() < 0.3:
        parts += [_pick(rng, PLACES), _noun_phrase(rng, False)]
    return " ".join(parts) + " ."


def write_corpus(path: str, sentences: int, seed: int = 0) -> None:
    """Writes `sentences` lines of the grammar's text to `path`."""
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(sentences):
            f.write(sentence(rng) + "\n")


FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    write_corpus(FLAGS.out, FLAGS.sentences, FLAGS.seed)


if __name__ == "__main__":
    # Defined here, not on import, so that importing `write_corpus` next to
    # the LM's own flags (`--seed`) does not define them twice.
    flags.DEFINE_string("out", None, "Where to write the corpus.")
    flags.DEFINE_integer("sentences", 20_000, "Number of lines.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed of the word choices.")
    flags.mark_flag_as_required("out")
    app.run(main)
