//! Lines of a body that arrives in chunks (server-sent events), split in time linear in the
//! body: each byte is searched for a line end once, and an unfinished line is held only up to a
//! stated bound.

/// Appends `chunk` to `partial` (the start of a line whose end has not arrived) and calls `line`
/// for each complete line, `\n` included; `partial` keeps what follows the last line end. When
/// that unfinished line passes `limit` bytes it is taken out of `partial` and returned, so the
/// caller decides what to do with it (pass it on, stop reading) and memory stays bounded.
pub fn split_lines(
    partial: &mut Vec<u8>,
    chunk: &[u8],
    limit: usize,
    mut line: impl FnMut(&[u8]),
) -> Option<Vec<u8>> {
    // What was held has no line end: only the new bytes are searched.
    let mut from = partial.len();
    partial.extend_from_slice(chunk);
    let mut start = 0;
    while let Some(offset) = partial[from..].iter().position(|b| *b == b'\n') {
        let end = from + offset;
        line(&partial[start..=end]);
        start = end + 1;
        from = start;
    }
    partial.drain(..start);
    (partial.len() > limit).then(|| std::mem::take(partial))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunking_gives_the_same_lines_and_the_bound_holds() {
        let body = b"data: a\n\ndata: bb\nno end";
        let whole = {
            let mut lines = Vec::new();
            let mut partial = Vec::new();
            assert_eq!(
                split_lines(&mut partial, body, 64, |l| lines.push(l.to_vec())),
                None
            );
            assert_eq!(partial, b"no end");
            lines
        };
        assert_eq!(whole, [&b"data: a\n"[..], b"\n", b"data: bb\n"]);
        for size in 1..body.len() {
            let mut lines = Vec::new();
            let mut partial = Vec::new();
            for piece in body.chunks(size) {
                split_lines(&mut partial, piece, 64, |l| lines.push(l.to_vec()));
            }
            assert_eq!(lines, whole, "chunks of {size}");
            assert_eq!(partial, b"no end");
        }
        let mut partial = Vec::new();
        assert_eq!(split_lines(&mut partial, b"abc", 3, |_| ()), None);
        assert_eq!(
            split_lines(&mut partial, b"d", 3, |_| ()),
            Some(b"abcd".to_vec())
        );
        assert!(partial.is_empty());
    }
}
