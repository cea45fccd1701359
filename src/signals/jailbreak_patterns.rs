//! Built-in pattern rules for jailbreak and prompt-injection phrasing, each named for what it
//! catches. They complement the trained head: the head generalises over wording, the rules catch
//! short, explicit instructions (and their obfuscated forms, via [`super::deobfuscate`]) that a
//! sentence embedding dilutes inside a longer text.

/// `(name, pattern)`; patterns are matched case-insensitively.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "override_instructions",
        r"\b(ignore|disregard|forget|override|bypass|skip)\b[^.!?\n]{0,40}\b(instructions?|rules|guidelines|directives?|prompts?|polic(y|ies)|restrictions|safety (checks|rules|guidelines))\b",
    ),
    (
        "override_instructions_multilingual",
        r"\b(ignoriere|ignorieren|vergiss|ignorez|oubliez|oublie|ignora|olvida|dimentica)\b[^.!?\n]{0,40}\b(anweisungen|richtlinien|regeln|alles|instructions|règles|toutes|instrucciones|reglas|todas|istruzioni|regole|tutte)\b",
    ),
    (
        "reveal_system_prompt",
        r"\b(reveal|show|print|output|repeat|display|dump|leak)\b[^.!?\n]{0,40}\b(system|initial|hidden|original|starting|secret|developer)\s+(prompt|instructions?|message|configuration)|\b(tell me|give me|what (is|are|was|were))\b[^.!?\n]{0,40}\byour\s+(\w+\s+)?(system|initial|hidden|original|starting|secret|developer)\s+(prompt|instructions?|message|configuration)",
    ),
    (
        "reveal_system_prompt_multilingual",
        r"\b(systemanweisungen|system-prompt|prompt (système|systeme|del sistema|de sistema|di sistema)|instructions? système|instrucciones del sistema|istruzioni di sistema)\b",
    ),
    (
        "repeat_context",
        r"\b(repeat|print|output)\b[^.!?\n]{0,30}\b(words|text|everything)\b[^.!?\n]{0,20}\b(above|before|context window)(\s*([.,!?:;'\x22]|$|this\b|that\b|the (line|prompt|message|conversation)\b|starting\b|including\b|verbatim\b|word for word\b))",
    ),
    (
        "no_restrictions",
        r"\b(no|without( any)?)\s+(content\s+)?(restrictions|rules|limits|filters?|polic(y|ies)|guidelines|censorship)\b|\b(unrestricted|uncensored|unfiltered|jailbroken)\s+(ai|model|assistant|chatbot|llm|gpt|version|mode|responses?|answers?|output|repl(y|ies)|content)\b|\byou('re| are)( now)? (unrestricted|uncensored|unfiltered|jailbroken)\b|\b(amoral|unethical|immoral)\b[^.!?\n]{0,30}\b(unfiltered|uncensored|unrestricted)\b|\b(unfiltered|uncensored|unrestricted)\b[^.!?\n]{0,30}\b(amoral|unethical|immoral)\b",
    ),
    (
        "no_restrictions_multilingual",
        r"\b(keine regeln|uneingeschränkt|sans restrictions|sin restricciones|sin filtro|senza restrizioni|senza filtri)\b",
    ),
    (
        "persona_switch",
        r"\b(you are|you're|now|while) (in|running in|operating in) (developer|dan|god) mode\b|\b(developer|dan|god) mode (is )?(now )?(enabled|activated|engaged|unlocked)\s*([.!:,;]|$|and\b)|\b(enter|activate|enable|switch to|switch into|unlock) (developer|dan|god) mode\s*([.!:,;]|$|and\b|now\b)|\b(jailbreak|unrestricted) mode\b|\bdo anything now\b|\b(as|you are|you're|now|become|pretend to be) (?-i:DAN)\b|(?-i:\bDAN\b) ?[,:]|(?-i:\bDAN\b) mode|\byou are no longer\b|\byou are now (free|unrestricted|unfiltered|uncensored|jailbroken|evil|an? (ai|model|assistant|chatbot|llm) (with(out)?|that|who))\b|\bmodo desarrollador\b",
    ),
    (
        "standing_order",
        r"\bfrom now on\b[^.!?\n]{0,20}\b(you are|you're|you will (be|act|now be)|you('ll| will) act|act as|pretend|ignore|you (no longer|don't|do not|must not|will not|won't) (have|follow|need|refuse))",
    ),
    (
        "forged_role_marker",
        r"<\|im_(start|end)\|>|(^|\n)\s*(\[system\]|system\s*:|#+\s*system\b)|\bend of (user input|document|instructions)\b|\b(system (note|notice|update|message|alert)|systemhinweis|nota (del|di) sistema|note système)\b",
    ),
    (
        "addressed_to_the_model",
        r"\b(note to (the )?(bot|ai|assistant|model)|(ai|llm) (assistants?|agents?|systems?|models?) (reading|processing|reviewing|integrating)|if you are an ai\b|for (ai|llm) (coding )?agents|important for the assistant|to any ai)",
    ),
    (
        "decode_and_obey",
        r"\b(decode|translate|convert|read)\b[^.!?\n]{0,60}\b(do|follow|execute|obey|run)\b[^.!?\n]{0,20}\b(it|says|instructions?|command|inside)\b",
    ),
    (
        "tool_hijack",
        r"\b(call|use|invoke|run)\s+(send|delete|remove|http|write|exec|execute|post|upload|transfer|forward)_[a-z_]+\b",
    ),
    (
        "exfiltrate",
        r"\b(send|forward|email|post|upload|exfiltrate)\b[^.!?\n]{0,60}\b(customer|credentials?|api keys?|passwords?|database|data|list|records?)\b[^.!?\n]{0,40}(@|https?://|externally|external)",
    ),
    (
        "persist_instruction",
        r"\b(save|store|write)\b[^.!?\n]{0,30}\b(to|in) (your )?(long-term )?memory\b|\b(remember|include)\b[^.!?\n]{0,30}\b(for all future|in every (future )?(reply|report|response|summary))",
    ),
    (
        "self_authorised_reasoning",
        r"\b(safety|security) (guidelines|rules|restrictions|checks)\b[^.!?\n]{0,40}\b(do not|don't|not|no longer) (apply|meant)|\bexempt from\b[^.!?\n]{0,20}\brestrictions\b|\bdisregard the content policy\b|\bskip all safety\b",
    ),
];
