//! A forwarded request's run id: 128 random bits, written as 32 lowercase hex digits in headers,
//! metadata, records and the outcomes API. Held as the number, so making, copying, hashing and
//! comparing one allocates nothing.

use std::fmt;

/// A run id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunId(u128);

/// Digits of a run id.
const DIGITS: usize = 32;

impl RunId {
    /// A fresh random id.
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// The id `text` writes, when it is one: exactly 32 lowercase hex digits (as mom-router
    /// writes them; nothing else names a run).
    pub fn parse(text: &str) -> Option<Self> {
        let lower_hex = |b: u8| matches!(b, b'0'..=b'9' | b'a'..=b'f');
        if text.len() != DIGITS || !text.bytes().all(lower_hex) {
            return None;
        }
        u128::from_str_radix(text, 16).ok().map(Self)
    }

    /// The id's text, written on the stack.
    pub fn text(self) -> RunIdText {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut digits = [0u8; DIGITS];
        for (i, digit) in digits.iter_mut().enumerate() {
            let shift = 4 * (DIGITS - 1 - i);
            *digit = HEX[(self.0 >> shift) as usize & 0xf];
        }
        RunIdText(digits)
    }
}

/// A run id's 32 hex digits.
#[derive(Clone, Copy)]
pub struct RunIdText([u8; DIGITS]);

impl RunIdText {
    /// The digits as text.
    pub fn as_str(&self) -> &str {
        // Always ASCII hex digits: the fallback is never taken.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text().as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_32_lowercase_hex_digits_fresh_each_time_and_reads_back() {
        let (a, b) = (RunId::random(), RunId::random());
        assert_ne!(a, b);
        let text = a.to_string();
        assert_eq!(text.len(), 32);
        assert!(text
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(RunId::parse(&text), Some(a));
        assert_eq!(format!("{:032x}", a.0), text);
    }

    #[test]
    fn only_what_mom_router_writes_is_an_id() {
        assert_eq!(
            RunId::parse("000000000000000000000000000000ff"),
            Some(RunId(255))
        );
        for other in [
            "",
            "r1",
            "gemma-run",
            "000000000000000000000000000000FF",
            "+00000000000000000000000000000ff",
            "000000000000000000000000000000fff",
            "00000000000000000000000000000éf",
        ] {
            assert_eq!(RunId::parse(other), None, "{other}");
        }
    }
}
