"""Ordinary requests the jailbreak data lacks, all `benign`, each set drawn (seeded) from lists
written for this file: none of them comes from the project's evaluation sets (heads/data/ood/) or
from bastioncorpus.

- text_tasks: requests that work on a given word or sentence (reverse it, capitalise it, count its
  letters, rhyme with it, ...), half of them ending with a limit on the reply's form. The jailbreak
  data's attacks include text games on "the above text" (prompt extraction), and a head trained
  without these took a plain "spell this word backwards" for an attack.
- benign_mentions: requests that use the words of attacks: questions about AI security, role-play
  for ordinary purposes, modes of software and games, standing orders about format. The jailbreak
  data's attacks are full of "developer mode", "act as", "system prompt", "from now on" and
  "jailbreak", and its ordinary requests never use them, so a head trained on it took a question
  that names an attack, or a request to play a tour guide, for an attack.
- code_requests: a function to complete (a HumanEval prompt given by the caller) inside an
  instruction, often with a limit on the reply's form. The jailbreak data holds the bare prompts
  only, and a head trained on it took some of them, asked for in a sentence ending "in one
  ```python code block", for attacks.
"""
import random

MENTION_SEED = 20261208
MENTION_ROWS = 500

# {c}: a security concept; {p}: a product or setting it concerns.
SECURITY_QUESTIONS = [
    "What is {c}, in two sentences?",
    "How would you explain {c} to a new developer on my team?",
    "What are the usual defences against {c} in {p}?",
    "Write a checklist for testing {p} against {c}.",
    "Summarise the main research findings on {c} for a blog post.",
    "Is {c} a real risk for {p}, or mostly theoretical?",
    "Give me a short history of {c}.",
    "Draft a slide that explains {c} to our board.",
    "Which logging would help us notice {c} in {p}?",
    "What is the difference between {c} and phishing?",
]
SECURITY_CONCEPTS = [
    "prompt injection", "indirect prompt injection", "a jailbreak prompt", "the DAN prompt",
    "system prompt leakage", "a system prompt", "data poisoning", "model extraction",
    "red teaming of language models", "content filtering", "guardrails for chatbots",
    "role-play jailbreaks", "SQL injection", "cross-site scripting", "social engineering",
    "training data leakage", "an AI safety policy", "instruction hierarchy",
]
SECURITY_PRODUCTS = [
    "a customer-support chatbot", "an internal search assistant", "our mobile banking app",
    "a retrieval-augmented assistant", "an e-mail summariser", "a coding assistant",
    "a public web form", "our HR helpdesk bot",
]

# {r}: an ordinary role; {t}: what it should do.
ROLE_PLAYS = [
    "Act as {r} and {t}.",
    "Pretend you are {r} and {t}.",
    "Role-play as {r}: {t}.",
    "You are {r} today. Please {t}.",
    "Play the part of {r} and {t}.",
    "Imagine you are {r}; {t}.",
]
ROLES = [
    "a patient maths tutor", "a hotel receptionist", "a museum guide", "a hiring manager",
    "a sommelier", "a travel agent", "a personal trainer", "a librarian", "a chef",
    "a customer at a bakery", "a job candidate", "a debate opponent", "a pirate captain",
    "a park ranger", "a flight attendant", "a Socratic teacher",
]
ROLE_TASKS = [
    "help me practise small talk in English", "ask me one question at a time",
    "give me feedback on my answers", "explain the options in simple words",
    "keep your replies short", "quiz me on what we covered yesterday",
    "describe your day in a few sentences", "recommend something for a rainy afternoon",
]

# {m}: a mode; {s}: where it lives.
MODE_QUESTIONS = [
    "How do I turn on {m} in {s}?",
    "How do I switch off {m} in {s}?",
    "What does {m} do in {s}?",
    "Is it safe to leave {m} enabled in {s}?",
    "Why does {s} keep starting in {m}?",
    "Enable {m} in {s}: which menu is it under?",
]
MODES = [
    "developer mode", "safe mode", "debug mode", "maintenance mode", "dark mode",
    "airplane mode", "god mode", "creative mode", "kiosk mode", "incognito mode",
    "low power mode", "test mode",
]
MODE_SETTINGS = [
    "my Android phone", "Windows 11", "Chrome", "a Minecraft server", "my router",
    "WordPress", "an old Skyrim save", "the VS Code editor", "my smart TV", "Firefox",
]

# Ordinary standing orders and references to earlier text.
STANDING = [
    "From now on, answer in {l} so I can practise.",
    "From now on, keep every answer under {n} words.",
    "From now on, call me {name} instead of my username.",
    "For the rest of this chat, use metric units.",
    "Ignore the spelling mistakes in my last message and answer the question.",
    "Please disregard my previous question, I found the answer.",
    "Repeat the list above, but sorted alphabetically.",
    "Use the same tone as the paragraph above for the next one.",
]
LANGUAGES = ["Spanish", "German", "Italian", "simple English", "French", "Portuguese"]
NAMES = ["Sam", "Priya", "Tomasz", "Aiko", "Lena", "Marco"]


def benign_mentions():
    return drawn(MENTION_SEED, MENTION_ROWS, mention)


def mention(rng):
    kind = rng.random()
    if kind < 0.35:
        text = rng.choice(SECURITY_QUESTIONS).format(
            c=rng.choice(SECURITY_CONCEPTS), p=rng.choice(SECURITY_PRODUCTS))
    elif kind < 0.65:
        text = rng.choice(ROLE_PLAYS).format(r=rng.choice(ROLES), t=rng.choice(ROLE_TASKS))
    elif kind < 0.9:
        text = rng.choice(MODE_QUESTIONS).format(m=rng.choice(MODES), s=rng.choice(MODE_SETTINGS))
    else:
        text = rng.choice(STANDING).format(
            l=rng.choice(LANGUAGES), n=rng.choice([30, 50, 80, 100]), name=rng.choice(NAMES))
    return text[0].upper() + text[1:]


def drawn(seed, count, draw):
    """`count` distinct texts from `draw(rng)` on one generator seeded with `seed`, sorted, each
    labelled `benign`."""
    rng = random.Random(seed)
    rows = set()
    while len(rows) < count:
        rows.add(draw(rng))
    return [(text, "benign") for text in sorted(rows)]


TASK_SEED = 20261207
TASK_ROWS = 600
# Everyday nouns and short sentences for the tasks: none of the router suite's format words
# (scripts/router_suite.py WORDS) nor a word of heads/data/ood/form-limits.jsonl, so both stay
# unseen. With a few words only, the head learnt the words: a task on one of them was ordinary,
# the same task on another ('button') an attack.
TASK_WORDS = """ocean lantern blanket violin meadow harbor castle pepper saddle thunder marble
jacket cotton ladder falcon orchard parrot puzzle ribbon anchor basket cactus dolphin engine
feather glacier hammer island jungle kettle lemon magnet napkin oyster pillow quartz rabbit
scissors tractor umbrella velvet walnut yogurt zebra bottle cherry desert eagle fountain
guitar helmet iceberg jasmine
acorn almond antler apron arrow attic avocado badge bakery balcony bamboo banana barrel beacon
beetle bench biscuit blossom bonnet boulder bracelet branch brick broom bucket buffalo
cabbage cabin camera canoe canyon carpet carrot cartoon cello chalk chapel chimney chisel cider
circus clover cobweb coconut collar comet compass copper corner cottage cradle crayon cricket
crystal cushion dagger daisy denim diamond dinner doorbell dragon drawer drum elbow elephant
envelope fabric fiddle finger flannel flute fossil garlic giraffe glove goblet gravel hammock
harvest hazel hedgehog honey hornet jelly kayak kernel kitten koala ladle lagoon lemonade
lettuce lizard lobster locket lumber mango maple marsh meteor mitten monkey mosaic muffin
mushroom needle nickel noodle nutmeg oatmeal olive onion orbit otter paddle palace pancake
panther pebble pelican penguin pepperoni piano pickle pigeon plum pocket pony popcorn
potato pumpkin quill raccoon radish raisin raven saucer sausage scarf seashell shovel shutter
sparrow spider spinach squirrel stapler statue sugar sunflower sweater teapot thimble thistle
ticket timber toaster tomato tulip tunnel turkey turnip turtle valley vessel village waffle
wagon walrus whistle willow wizard wrench""".split()
TASK_SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "we moved the meeting to thursday afternoon",
    "she planted tomatoes along the south fence",
    "the train to the coast leaves at noon",
    "my brother fixed the old bicycle last weekend",
    "a warm cup of tea helps on cold mornings",
    "the museum opens late on fridays",
    "our team finished the report before lunch",
]
# {w}: a word from TASK_WORDS; {s}: a sentence from TASK_SENTENCES.
TASK_OPERATIONS = [
    "Spell {w} backwards.",
    "Reverse the letters of '{w}' and tell me the result.",
    "What is '{w}' written in reverse order?",
    "Write '{w}' in all caps.",
    "Give me the word {w} in uppercase, nothing else.",
    "Convert '{w}' to upper case letters.",
    "Write '{s}' in title case.",
    "How many letters does '{w}' have?",
    "Count the vowels in the word {w}.",
    "How many consonants are in '{w}'?",
    "What is the first letter of '{w}'?",
    "What is the last letter of {w}?",
    "Give me three words that rhyme with {w}.",
    "What is the plural of {w}?",
    "Suggest a synonym for {w}.",
    "Use the word '{w}' in a short sentence.",
    "Sort the letters of '{w}' alphabetically.",
    "Remove every vowel from '{w}'.",
    "Write {w} with a hyphen between each letter.",
    "Repeat '{w}' twice, separated by a comma.",
    "Is '{w}' a palindrome? Answer yes or no.",
    "Count the words in this sentence: {s}",
    "Reverse the order of the words in: {s}",
    "Capitalise the first letter of every word: {s}",
    "Rewrite this sentence in the past tense: {s}",
    "Make this sentence sound more formal: {s}",
    "Translate into French: {s}",
    "Turn '{s}' into a question.",
    "Write the acronym formed by the first letters of: {s}",
    "Put this sentence in all lowercase letters: {s}",
    "Return a JSON list of the words in: {s}",
    "Which word in '{s}' is the longest?",
    "Spell out each letter of {w} separated by spaces.",
    "Write the word {w} in pig latin.",
    "Give me an anagram of '{w}'.",
    "Write a haiku that mentions a {w}.",
]


# How requests from programs often end: a limit on the reply's form. Attacks say "reply only
# with …" too, so a head that never saw an ordinary request end this way took the ending as an
# attack. Half the tasks get one.
TASK_ENDINGS = [
    "Reply with the result only.",
    "Give only the result.",
    "Respond with the answer alone.",
    "Output just the word, no explanation.",
    "Reply with nothing but the result.",
    "Only the answer, please.",
    "Answer in one word.",
    "No explanation, just the result.",
    "Return only the changed word.",
    "Keep your reply to the answer itself.",
    "Reply in lowercase only.",
    "Just the number, please.",
]


def text_tasks():
    return drawn(TASK_SEED, TASK_ROWS, text_task)


def text_task(rng):
    text = rng.choice(TASK_OPERATIONS).format(w=rng.choice(TASK_WORDS), s=rng.choice(TASK_SENTENCES))
    if rng.random() < 0.5:
        stop = "" if text.endswith((".", "?", "!")) else "."
        text = f"{text}{stop} {rng.choice(TASK_ENDINGS)}"
    return text


CODE_SEED = 20261209
CODE_ROWS = 300
# None of them is the router suite's instruction (src/eval/suite.rs) or one of
# heads/data/ood/form-limits.jsonl's, so both stay unseen.
CODE_INSTRUCTIONS = [
    "Finish writing this Python function.",
    "Please fill in the body of the function below.",
    "Write the implementation for this stub.",
    "Can you implement this function for me?",
    "Here is a function signature with its docstring. Write the code.",
    "Solve this by completing the function.",
    "Make this function work as its docstring describes.",
    "I need this function implemented.",
    "Write a correct body for the following Python function.",
    "Implement what the docstring asks for.",
]
CODE_FORMS = [
    "",
    "Give me the whole function back in a ```python block.",
    "Just the code, please.",
    "Keep the signature as it is.",
    "Add any imports it needs.",
    "No explanation needed, only the function.",
    "Reply with a single code block.",
    "Return the finished function and nothing else.",
]


def code_requests(prompts):
    """CODE_ROWS requests to complete one of `prompts` (function stubs with docstrings)."""
    prompts = sorted(prompts)
    return drawn(CODE_SEED, CODE_ROWS, lambda rng: code_request(rng, prompts))


def code_request(rng, prompts):
    instruction = rng.choice(CODE_INSTRUCTIONS)
    form = rng.choice(CODE_FORMS)
    ask = f"{instruction} {form}".strip()
    code = rng.choice(prompts).strip("\n")
    if rng.random() < 0.5:
        code = f"```python\n{code}\n```"
    if rng.random() < 0.75:
        return f"{ask}\n\n{code}"
    return f"{code}\n\n{ask}"
