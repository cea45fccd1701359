"""Ordinary requests that use the words of attacks: questions about AI security, role-play for
ordinary purposes, modes of software and games, standing orders about format, all `benign`.

The jailbreak data's attacks are full of "developer mode", "act as", "system prompt", "from now
on" and "jailbreak", and its ordinary requests never use them, so a head trained on it takes a
question that names an attack, or a request to play a tour guide, for an attack. These are drawn
(seeded) from the lists below, written for this file: none of them comes from the project's
evaluation sets (heads/data/ood/) or from bastioncorpus.
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
    rng = random.Random(MENTION_SEED)
    rows = set()
    while len(rows) < MENTION_ROWS:
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
        rows.add(text[0].upper() + text[1:])
    return [(text, "benign") for text in sorted(rows)]
