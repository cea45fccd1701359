"""Typo variants of a labelled JSON Lines set, for measuring how a head copes with misspelt
requests (it is never trained on them).

Usage: typo_variants.py IN OUT

Each row's text gets one variant, seeded by the text itself (the same input always gives the same
output): each letter, with probability 0.06, is swapped with the next letter, dropped, doubled
or replaced by a random letter; 30 % of variants are lower-cased and 30 % lose their end
punctuation. A variant that came out unchanged is drawn again (at most 20 times).
"""
import json
import random
import sys

RATE = 0.06
LETTERS = "qwertyuiopasdfghjklzxcvbnm"


def misspell(text, rng):
    chars, out, i = list(text), [], 0
    while i < len(chars):
        c = chars[i]
        if c.isalpha() and rng.random() < RATE:
            edit = rng.randrange(4)
            if edit == 0 and i + 1 < len(chars) and chars[i + 1].isalpha():
                out += [chars[i + 1], c]
                i += 2
                continue
            if edit == 2:
                out += [c, c]
            elif edit != 1:  # a replacement (3, or a swap with no letter after)
                out.append(rng.choice(LETTERS))
            i += 1  # edit 1 drops the letter
            continue
        out.append(c)
        i += 1
    variant = "".join(out)
    if rng.random() < 0.3:
        variant = variant.lower()
    if rng.random() < 0.3:
        variant = variant.rstrip("?.!")
    return variant


def variant_of(text):
    rng = random.Random("typo " + text)
    for _ in range(20):
        variant = misspell(text, rng)
        if variant != text:
            return variant
    return text


def main():
    source, target = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    with open(target, "w", encoding="utf-8") as out:
        for row in rows:
            row = dict(row, text=variant_of(row["text"]))
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
