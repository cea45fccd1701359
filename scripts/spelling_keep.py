"""Writes the words the encoder's spelling corrector keeps as they are: the technical terms of the
requests the heads were trained on, which a general English dictionary lacks ("introns",
"probit", "kinetochore") and would otherwise "correct" to a frequent neighbour.

usage: spelling_keep.py DATA_DIR DICTIONARY OUT

Reads DATA_DIR/domain.jsonl and DATA_DIR/jailbreak.jsonl (scripts/prepare_data.py), skips the
rows of their held-out share (the 20 % `mom-router train` scores on; no evaluation set is read),
and writes, sorted, every lower-cased word of four letters or more that occurs at least twice
(once may be a typo of the source) and that DICTIONARY (lines of `word count`) lacks.
Deterministic: the same inputs give the same file.
"""
import collections
import json
import re
import sys

from policy_replay import held_out  # the split `mom-router train` makes

HELD_OUT_PERCENT = 20
FEWEST_LETTERS = 4
LEAST_COUNT = 2


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    data, dictionary, out = sys.argv[1:]
    with open(dictionary, encoding="utf-8") as lines:
        listed = {line.split()[0].lower() for line in lines if line.strip()}
    counts = collections.Counter()
    for name in ("domain.jsonl", "jailbreak.jsonl"):
        with open(f"{data}/{name}", encoding="utf-8") as lines:
            for line in lines:
                text = json.loads(line)["text"]
                if held_out(text, HELD_OUT_PERCENT):
                    continue
                counts.update(w.lower() for w in re.findall(r"[A-Za-z]+", text))
    words = sorted(w for w, n in counts.items()
                   if n >= LEAST_COUNT and len(w) >= FEWEST_LETTERS and w not in listed)
    with open(out, "w", encoding="utf-8") as file:
        file.write("".join(f"{w}\n" for w in words))
    print(f"{out}: {len(words)} words", file=sys.stderr)


if __name__ == "__main__":
    main()
