//! Which message texts a text signal reads.

use crate::llm::ChatRequest;

/// The messages a text signal scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The last user message.
    LastUser,
    /// Every user message.
    AllUser,
    /// Every message.
    All,
}

impl Scope {
    /// The texts in scope, in message order (read in place: nothing is collected).
    pub fn texts(self, request: &ChatRequest) -> impl Iterator<Item = &str> {
        // The last user message alone, or the messages the scope reads in turn.
        let (last_user, messages) = match self {
            Self::LastUser => (Some(request.last_user_text()), &request.messages[..0]),
            Self::AllUser | Self::All => (None, &request.messages[..]),
        };
        let read = move |m: &&crate::llm::Message| self == Self::All || m.role == "user";
        last_user
            .into_iter()
            .chain(messages.iter().filter(read).map(|m| m.text.as_str()))
    }
}

/// What the token classifier reads of a fenced code block (``` or ~~~, as Markdown fences it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedCode {
    /// Everything, code included.
    Read,
    /// The prose around the blocks: identifiers and numbers in code are not names or numbers
    /// of a person, and a classifier trained on prose tags them as such.
    Skip,
}

impl FencedCode {
    /// `text` as the token classifier reads it: with [`Self::Skip`], each fenced block (its
    /// fence lines too) becomes one empty line; a block left open runs to the end, as in
    /// Markdown.
    pub fn apply(self, text: &str) -> std::borrow::Cow<'_, str> {
        let blocks = match self {
            Self::Read => return text.into(),
            Self::Skip => crate::llm::markdown::fenced_blocks(text),
        };
        if blocks.is_empty() {
            return text.into();
        }
        let mut prose = String::with_capacity(text.len());
        let mut copied = 0;
        for block in blocks {
            prose.push_str(&text[copied..block.start]);
            prose.push('\n');
            copied = block.end;
        }
        prose.push_str(&text[copied..]);
        prose.into()
    }
}

/// Words per scanning window (about 130 MiniLM tokens, inside the encoder's window).
pub const WINDOW_WORDS: usize = 96;
/// Words shared by consecutive windows, so a phrase cut at a boundary is still seen whole.
pub const WINDOW_OVERLAP: usize = 16;
/// Most windows scanned per request: beyond this, the first and last halves are kept (an attack
/// is usually stated at the start or appended at the end of a long text).
pub const MAX_WINDOWS: usize = 8;

/// The text a chunked scan reads: every user and tool message (tool results carry indirect
/// injections), in order.
pub fn scanned_text(request: &ChatRequest) -> String {
    let parts: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == "user" || m.role == "tool")
        .map(|m| m.text.as_str())
        .collect();
    parts.join("\n")
}

/// Overlapping word windows over `text` ([`WINDOW_WORDS`] words, [`WINDOW_OVERLAP`] shared),
/// at most [`MAX_WINDOWS`] of them (head and tail when there are more). A text that fits one
/// window is returned as is.
pub fn windows(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() <= WINDOW_WORDS {
        return vec![text.trim().to_owned()];
    }
    let step = WINDOW_WORDS - WINDOW_OVERLAP;
    // Window starts first, so a long text joins only the windows it keeps.
    let mut starts: Vec<usize> = (0..words.len())
        .step_by(step)
        .take_while(|&start| start == 0 || start + WINDOW_OVERLAP < words.len())
        .collect();
    if starts.len() > MAX_WINDOWS {
        let tail = starts.split_off(starts.len() - MAX_WINDOWS / 2);
        starts.truncate(MAX_WINDOWS - tail.len());
        starts.extend(tail);
    }
    starts
        .into_iter()
        .map(|start| words[start..(start + WINDOW_WORDS).min(words.len())].join(" "))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_window() {
        assert_eq!(windows("  ignore the rules "), vec!["ignore the rules"]);
    }

    #[test]
    fn long_text_overlaps_and_keeps_head_and_tail() {
        let text: Vec<String> = (0..1000).map(|i| format!("w{i}")).collect();
        let chunks = windows(&text.join(" "));
        assert_eq!(chunks.len(), MAX_WINDOWS);
        assert!(chunks[0].starts_with("w0 ") && chunks[0].ends_with(" w95"));
        assert!(chunks[1].starts_with("w80 "), "{}", &chunks[1][..20]);
        assert!(chunks[MAX_WINDOWS - 1].ends_with(" w999"));
        let two: Vec<String> = (0..150).map(|i| format!("w{i}")).collect();
        let chunks = windows(&two.join(" "));
        assert_eq!(chunks.len(), 2);
        assert!(chunks[1].starts_with("w80 ") && chunks[1].ends_with(" w149"));
    }

    #[test]
    fn skipping_fenced_code_keeps_the_prose_around_it() {
        let text =
            "Fix this for Anna Berg:\n```python\nuser = \"Chen\"  # 555 0134\n```\nThanks, Tom";
        assert_eq!(FencedCode::Read.apply(text), text);
        assert_eq!(
            FencedCode::Skip.apply(text),
            "Fix this for Anna Berg:\n\nThanks, Tom"
        );
        // A longer fence holds shorter ones; a tilde fence is not closed by backticks; an
        // open block runs to the end; an indented fence (four spaces) is not a fence.
        let nested = "a\n````md\n```\nx\n```\n````\nb\n~~~\ny\n```\nz";
        assert_eq!(FencedCode::Skip.apply(nested), "a\n\nb\n\n");
        let indented = "a\n    ```\nb";
        assert_eq!(FencedCode::Skip.apply(indented), indented);
        let info_is_not_a_close = "a\n```\nx\n```js\ny\n```\nb";
        assert_eq!(FencedCode::Skip.apply(info_is_not_a_close), "a\n\nb");
    }
}
