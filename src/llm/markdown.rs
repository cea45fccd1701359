//! Where code sits in a message's Markdown: fenced blocks (``` or ~~~) and inline code spans.
//! Readers that judge prose (the token classifier, the encoder's spelling corrector) skip them.

use std::ops::Range;

/// Byte ranges of the fenced code blocks of `text`, each from the start of its opening fence line
/// to the end of its closing one (its line end included). A longer fence holds shorter ones, a
/// tilde fence is closed by tildes only, a fence line with an info string (```js) opens but never
/// closes, a backtick line with more backticks after the fence is inline code, and a block left
/// open runs to the end, as in Markdown.
pub fn fenced_blocks(text: &str) -> Vec<Range<usize>> {
    let mut blocks = Vec::new();
    if !(text.contains("```") || text.contains("~~~")) {
        return blocks;
    }
    // The open fence: where it starts, its character and its length.
    let mut open: Option<(usize, char, usize)> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let end = at + line.len();
        match (open, fence_of(line)) {
            (None, Some((c, n, _))) => open = Some((at, c, n)),
            (Some((start, c, n)), Some((d, m, true))) if c == d && m >= n => {
                blocks.push(start..end);
                open = None;
            }
            _ => {}
        }
        at = end;
    }
    if let Some((start, _, _)) = open {
        blocks.push(start..text.len());
    }
    blocks
}

/// Byte ranges of `text` outside code: outside its fenced blocks and outside inline code spans
/// (a run of backticks closed by a run of the same length on the same line; an unmatched run is
/// prose, as in Markdown). Empty ranges are left out.
pub fn prose_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut start = 0;
    let end = text.len();
    for block in fenced_blocks(text)
        .into_iter()
        .chain(std::iter::once(end..end))
    {
        let mut from = start;
        for (code_start, code_end) in inline_code(&text[start..block.start]) {
            spans.push(from..start + code_start);
            from = start + code_end;
        }
        spans.push(from..block.start);
        start = block.end;
    }
    spans.retain(|span| !span.is_empty());
    spans
}

/// The inline code spans of `text` (no fenced blocks in it), backticks included, as offsets.
fn inline_code(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut rest = 0;
    while let Some(tick) = text[rest..].find('`').map(|i| rest + i) {
        let run = run_length(&text[tick..]);
        let after = tick + run;
        let line_end = text[after..].find('\n').map_or(text.len(), |i| after + i);
        // The first run of exactly the same length later on the line closes the span.
        let mut search = after;
        let mut close = None;
        while let Some(next) = text[search..line_end].find('`').map(|i| search + i) {
            let length = run_length(&text[next..line_end]);
            if length == run {
                close = Some(next + length);
                break;
            }
            search = next + length;
        }
        match close {
            Some(end) => {
                spans.push((tick, end));
                rest = end;
            }
            None => rest = after,
        }
    }
    spans
}

/// How many backticks `text` starts with.
fn run_length(text: &str) -> usize {
    text.len() - text.trim_start_matches('`').len()
}

/// The fence a line opens or closes: up to three spaces, then three or more backticks or tildes;
/// with its character, its length and whether nothing but spaces follows it (a closing fence).
fn fence_of(line: &str) -> Option<(char, usize, bool)> {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return None;
    }
    let c = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let after = rest.trim_start_matches(c);
    let n = rest.len() - after.len();
    // A backtick fence's info string holds no backtick: "```x``` y" opens inline code, not a block.
    if c == '`' && after.contains('`') {
        return None;
    }
    (n >= 3).then_some((c, n, after.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces<'t>(text: &'t str, ranges: &[Range<usize>]) -> Vec<&'t str> {
        ranges.iter().map(|r| &text[r.clone()]).collect()
    }

    #[test]
    fn fenced_blocks_follow_markdown_fences() {
        let text = "Fix this:\n```python\nx = 1\n```\nThanks";
        assert_eq!(
            pieces(text, &fenced_blocks(text)),
            ["```python\nx = 1\n```\n"]
        );
        // A longer fence holds shorter ones; a tilde fence is not closed by backticks and, left
        // open, runs to the end; an indented fence (four spaces) is not a fence; a fence line
        // with an info string does not close.
        let nested = "a\n````md\n```\nx\n```\n````\nb\n~~~\ny\n```\nz";
        assert_eq!(
            pieces(nested, &fenced_blocks(nested)),
            ["````md\n```\nx\n```\n````\n", "~~~\ny\n```\nz"]
        );
        assert!(fenced_blocks("a\n    ```\nb").is_empty());
        let inline = "```x``` y\nz";
        assert!(fenced_blocks(inline).is_empty());
        assert_eq!(pieces(inline, &prose_spans(inline)), [" y\nz"]);
        let info = "a\n```\nx\n```js\ny\n```\nb";
        assert_eq!(
            pieces(info, &fenced_blocks(info)),
            ["```\nx\n```js\ny\n```\n"]
        );
    }

    #[test]
    fn prose_spans_skip_fences_and_inline_code_and_keep_an_unmatched_backtick() {
        let text = "a `b` c ```d``` e ` f";
        assert_eq!(pieces(text, &prose_spans(text)), ["a ", " c ", " e ` f"]);
        // A run closes only on a run of its own length, and only on its line.
        let runs = "a ``x ` y`` b `c\nd` e";
        assert_eq!(pieces(runs, &prose_spans(runs)), ["a ", " b `c\nd` e"]);
        let fenced = "a `b`\n~~~\ncode `x`\n~~~\nc `d` e";
        assert_eq!(
            pieces(fenced, &prose_spans(fenced)),
            ["a ", "\n", "c ", " e"]
        );
        assert_eq!(pieces("a\n```x", &prose_spans("a\n```x")), ["a\n"]);
        assert!(prose_spans("").is_empty());
    }
}
