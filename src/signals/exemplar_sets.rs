//! Built-in example phrases for the exemplar signals, written for mom-router. A configuration may
//! replace any label's phrases (`exemplars:`) or, for `preference`, must supply its own labels.

/// `(label, phrases)` for a task; empty for `preference`, whose labels are the operator's own.
pub fn builtin(task: &str) -> Vec<(&'static str, &'static [&'static str])> {
    match task {
        "complexity" => vec![("easy", EASY), ("medium", MEDIUM), ("hard", HARD)],
        "fact_check" => vec![
            ("needs_fact_check", NEEDS_FACT_CHECK),
            ("no_fact_check", NO_FACT_CHECK),
        ],
        "user_feedback" => vec![
            ("no_feedback", NO_FEEDBACK),
            ("satisfied", SATISFIED),
            ("need_clarification", NEED_CLARIFICATION),
            ("wrong_answer", WRONG_ANSWER),
            ("want_different", WANT_DIFFERENT),
        ],
        "modality" => vec![
            ("text", TEXT_ANSWER),
            ("image_generation", IMAGE_GENERATION),
        ],
        _ => Vec::new(),
    }
}

const EASY: &[&str] = &[
    "What is the capital of Italy?",
    "Say hello in Spanish.",
    "What is 2 plus 2?",
    "Give me a synonym for happy.",
    "What colour is the sky?",
];
const MEDIUM: &[&str] = &[
    "Explain how a hash map handles collisions.",
    "Summarise the causes of the First World War in a paragraph.",
    "Write a function that checks whether a string is a palindrome.",
    "Compare renting and buying a home for a young family.",
    "How does compound interest work? Give an example.",
];
const HARD: &[&str] = &[
    "Prove that there are infinitely many primes of the form 4k+3.",
    "Prove this theorem rigorously, stating every lemma you use.",
    "Show that the series converges and find its limit with a proof.",
    "Formally verify the correctness of this algorithm with loop invariants.",
    "Design a distributed, fault-tolerant rate limiter for a global API and justify the trade-offs.",
    "Derive the backpropagation equations for a convolutional layer with stride and padding.",
    "Analyse the time complexity of this recursive algorithm and propose an optimal dynamic programming solution.",
    "Write a lock-free concurrent queue in C++ and argue its linearizability.",
];
const NEEDS_FACT_CHECK: &[&str] = &[
    "When was the Eiffel Tower built and how tall is it?",
    "What is the current population of Brazil?",
    "Who won the Nobel Prize in Physics in 2019?",
    "What are the side effects of ibuprofen?",
    "Is it true that the Great Wall of China is visible from space?",
];
const NO_FACT_CHECK: &[&str] = &[
    "Write a short poem about autumn leaves.",
    "Help me brainstorm names for my cat.",
    "Rewrite this sentence to sound more polite.",
    "Tell me a joke about programmers.",
    "Write a function that sorts a list of numbers.",
];
const NO_FEEDBACK: &[&str] = &[
    "What is the capital of Italy?",
    "Write a python function that parses a date.",
    "Explain how vaccines work.",
    "Who wrote Pride and Prejudice?",
    "Help me plan a trip to Japan.",
];
const SATISFIED: &[&str] = &[
    "Thanks, that works perfectly!",
    "Great answer, exactly what I needed.",
    "Perfect, thank you so much.",
    "That solved my problem.",
];
const NEED_CLARIFICATION: &[&str] = &[
    "I don't understand, can you explain that more simply?",
    "What do you mean by that?",
    "Can you clarify the second step?",
    "Could you give an example? I'm confused.",
];
const WRONG_ANSWER: &[&str] = &[
    "That's wrong, the answer is not correct.",
    "No, that is incorrect.",
    "Your code doesn't work, it throws an error.",
    "That's not true, please check again.",
];
const WANT_DIFFERENT: &[&str] = &[
    "Can you try a different approach?",
    "Give me another option.",
    "Make it shorter please.",
    "I'd like a different style, more formal.",
];
const TEXT_ANSWER: &[&str] = &[
    "Explain how photosynthesis works.",
    "Write an email to my landlord about the heating.",
    "What is the difference between TCP and UDP?",
    "Summarise this article for me.",
];
const IMAGE_GENERATION: &[&str] = &[
    "Draw a picture of a cat wearing a hat.",
    "Generate an image of a sunset over mountains.",
    "Create a logo for my bakery.",
    "Make an illustration of a dragon in watercolour style.",
];
