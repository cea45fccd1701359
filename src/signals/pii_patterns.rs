//! Validated PII detectors: candidates found by regular expressions are kept only when they pass
//! the format's own check (Luhn for cards, mod-97 for IBANs, range rules for US SSNs, octet
//! bounds for IPv4, a parse for IPv6), so digits that merely look like an identifier do not count.

use regex::{Regex, RegexBuilder};
use std::ops::Range;
use std::sync::OnceLock;

/// The entity types the validated detectors find.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PiiKind {
    /// An e-mail address.
    Email,
    /// A phone number (10–15 digits).
    Phone,
    /// A payment card number passing the Luhn check.
    CreditCard,
    /// An IBAN passing the mod-97 check.
    Iban,
    /// A US social security number outside the never-issued ranges.
    UsSsn,
    /// An IPv4 or IPv6 address.
    IpAddress,
}

impl PiiKind {
    /// Every kind, in report order.
    pub const ALL: [PiiKind; 6] = [
        Self::Email,
        Self::Phone,
        Self::CreditCard,
        Self::Iban,
        Self::UsSsn,
        Self::IpAddress,
    ];

    /// The name used in configuration, `explain` and block messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Email => "EMAIL",
            Self::Phone => "PHONE",
            Self::CreditCard => "CREDIT_CARD",
            Self::Iban => "IBAN",
            Self::UsSsn => "US_SSN",
            Self::IpAddress => "IP_ADDRESS",
        }
    }

    /// The kind called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

struct Detectors {
    email: Regex,
    phone: Regex,
    card: Regex,
    iban: Regex,
    ssn: Regex,
    ipv4: Regex,
    ipv6: Regex,
}

/// A detector pattern compiled with Unicode off: `\d`, `\s`, `\b` and `(?i)` then mean their ASCII
/// forms, so every match is ASCII (no Devanagari digit or Kelvin sign slips into a value the
/// validators below index by byte) and the formats are the ones the checksums define.
fn ascii(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(pattern).unicode(false).build().ok()
}

fn detectors() -> Option<&'static Detectors> {
    static DETECTORS: OnceLock<Option<Detectors>> = OnceLock::new();
    DETECTORS
        .get_or_init(|| {
            Some(Detectors {
                email: ascii(r"(?i)\b[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}\b")?,
                phone: ascii(
                    r"(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]?\d{2,4}){2,4}",
                )?,
                card: ascii(r"\b\d(?:[ -]?\d){12,18}\b")?,
                iban: ascii(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")?,
                ssn: ascii(r"\b(\d{3})-(\d{2})-(\d{4})\b")?,
                ipv4: ascii(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")?,
                ipv6: ascii(r"(?i)\b(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}\b")?,
            })
        })
        .as_ref()
}

fn digits(text: &str) -> Vec<u32> {
    text.chars().filter_map(|c| c.to_digit(10)).collect()
}

/// The Luhn checksum over a card number's digits.
pub fn luhn(number: &str) -> bool {
    let digits = digits(number);
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let doubled = d * 2;
                if doubled > 9 {
                    doubled - 9
                } else {
                    doubled
                }
            } else {
                d
            }
        })
        .sum();
    sum % 10 == 0
}

/// The ISO 13616 mod-97 check of an IBAN (spaces ignored). An IBAN is ASCII; anything else is
/// not one.
pub fn iban_valid(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if !compact.is_ascii() || !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder: u64 = 0;
    for c in tail.chars().chain(head.chars()) {
        let value = match c.to_digit(36) {
            Some(v) => v as u64,
            None => return false,
        };
        let width = if value >= 10 { 100 } else { 10 };
        remainder = (remainder * width + value) % 97;
    }
    remainder == 1
}

fn ssn_valid(area: &str, group: &str, serial: &str) -> bool {
    let area: u32 = area.parse().unwrap_or(0);
    area != 0 && area != 666 && area < 900 && group != "00" && serial != "0000"
}

/// Every validated entity kind found in `text`, each once, in [`PiiKind::ALL`] order.
pub fn find(text: &str) -> Vec<PiiKind> {
    let found = matches(text);
    PiiKind::ALL
        .into_iter()
        .filter(|kind| found.iter().any(|(k, _)| k == kind))
        .collect()
}

/// `text` with each validated entity (see [`spans`]) replaced by what `replace` returns for its
/// kind and value; `None` keeps the value.
pub fn replace_spans(
    text: &str,
    mut replace: impl FnMut(PiiKind, &str) -> Option<String>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (kind, range) in spans(text) {
        if let Some(replacement) = replace(kind, &text[range.clone()]) {
            out.push_str(&text[at..range.start]);
            out.push_str(&replacement);
            at = range.end;
        }
    }
    out.push_str(&text[at..]);
    out
}

/// Every validated entity in `text` with its byte range, in text order, overlaps resolved in
/// favour of the earlier (then longer) match — what masking replaces.
pub fn spans(text: &str) -> Vec<(PiiKind, Range<usize>)> {
    let mut found = matches(text);
    found.sort_by(|a, b| a.1.start.cmp(&b.1.start).then(b.1.end.cmp(&a.1.end)));
    let mut kept: Vec<(PiiKind, Range<usize>)> = Vec::new();
    for (kind, range) in found {
        if kept.last().is_none_or(|(_, last)| range.start >= last.end) {
            kept.push((kind, range));
        }
    }
    kept
}

/// Every validated match of every detector, overlaps kept.
fn matches(text: &str) -> Vec<(PiiKind, Range<usize>)> {
    let Some(d) = detectors() else {
        return Vec::new();
    };
    let mut found: Vec<(PiiKind, Range<usize>)> = Vec::new();
    if text.contains('@') {
        found.extend(d.email.find_iter(text).map(|m| (PiiKind::Email, m.range())));
    }
    // Every other kind needs several digits (or, for IPv6, colons): skip the scans otherwise.
    let digit_count = text.bytes().filter(u8::is_ascii_digit).count();
    if digit_count < 4 && !text.contains(':') {
        return found;
    }
    for m in d.card.find_iter(text).filter(|m| luhn(m.as_str())) {
        found.push((PiiKind::CreditCard, m.range()));
    }
    for m in d.phone.find_iter(text) {
        let n = digits(m.as_str()).len();
        if (10..=15).contains(&n) && !luhn(m.as_str()) {
            found.push((PiiKind::Phone, m.range()));
        }
    }
    for m in d.iban.find_iter(text).filter(|m| iban_valid(m.as_str())) {
        found.push((PiiKind::Iban, m.range()));
    }
    for c in d.ssn.captures_iter(text) {
        if let (true, Some(whole)) = (ssn_valid(&c[1], &c[2], &c[3]), c.get(0)) {
            found.push((PiiKind::UsSsn, whole.range()));
        }
    }
    for m in d.ipv4.find_iter(text) {
        if m.as_str().parse::<std::net::Ipv4Addr>().is_ok() {
            found.push((PiiKind::IpAddress, m.range()));
        }
    }
    for m in d.ipv6.find_iter(text) {
        let s = m.as_str();
        if s.matches(':').count() >= 2 && s.parse::<std::net::Ipv6Addr>().is_ok() {
            found.push((PiiKind::IpAddress, m.range()));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_locate_each_validated_entity_once() {
        let text = "Mail jane.doe@example.com or call +44 20 7946 0958; card 4111 1111 1111 1111.";
        let found: Vec<(PiiKind, &str)> = spans(text)
            .into_iter()
            .map(|(k, r)| (k, &text[r]))
            .collect();
        assert_eq!(found[0], (PiiKind::Email, "jane.doe@example.com"));
        assert!(
            found.contains(&(PiiKind::CreditCard, "4111 1111 1111 1111")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|(k, v)| *k == PiiKind::Phone && v.contains("7946 0958")),
            "{found:?}"
        );
        let kinds: Vec<PiiKind> = found.iter().map(|(k, _)| *k).collect();
        let mut listed = find(text);
        listed.sort_by_key(|k| k.name());
        let mut from_spans = kinds.clone();
        from_spans.sort_by_key(|k| k.name());
        from_spans.dedup();
        assert_eq!(from_spans, listed);
    }

    #[test]
    fn non_ascii_digits_and_letters_never_reach_a_validator() {
        // Devanagari digits are Unicode `\d`; a byte-indexed check once panicked on them.
        let text = "my account GB३३ WEST 1234 5698 7654 32 please";
        // Not an IBAN; its ASCII digit run still reads as a phone number.
        assert_eq!(find(text), vec![PiiKind::Phone]);
        assert_eq!(
            replace_spans(text, |kind, _| Some(kind.name().to_owned())),
            "my account GB३३ WEST PHONE please"
        );
        assert!(!iban_valid("GB३३WEST12345698765432"));
        // The Kelvin sign folds to `k` under Unicode case-insensitivity; an address is ASCII.
        assert!(find("mail jane@\u{212A}example.com").is_empty());
        // Every span of a mixed-script text is an ASCII value on char boundaries.
        let mixed = "ラ 4111 1111 1111 1111 ३३३-४५-६७८९ 123-45-6789 ٠٫٠٫٠٫١ 10.0.0.1 ç";
        for (_, range) in spans(mixed) {
            assert!(mixed.is_char_boundary(range.start) && mixed.is_char_boundary(range.end));
            assert!(mixed[range].is_ascii());
        }
        assert_eq!(
            find(mixed),
            vec![PiiKind::CreditCard, PiiKind::UsSsn, PiiKind::IpAddress]
        );
    }

    #[test]
    fn checksums_accept_real_formats_and_reject_near_misses() {
        assert!(luhn("4111 1111 1111 1111"));
        assert!(!luhn("4111 1111 1111 1112"));
        assert!(iban_valid("GB82 WEST 1234 5698 7654 32"));
        assert!(!iban_valid("GB82 WEST 1234 5698 7654 33"));
        assert!(ssn_valid("123", "45", "6789"));
        assert!(!ssn_valid("666", "45", "6789"));
        assert!(!ssn_valid("900", "45", "6789"));
    }

    #[test]
    fn finds_each_kind_once_and_only_when_valid() {
        let text = "Mail jane.doe@example.com or call +1 415 555 0132; card 4111-1111-1111-1111, \
                    IBAN DE89 3704 0044 0532 0130 00, SSN 123-45-6789, host 10.0.0.255";
        assert_eq!(find(text), PiiKind::ALL.to_vec());
        assert!(find("order 1234-5678 shipped in 2024, version 1.2.3.4000").is_empty());
        assert!(find("card 4111 1111 1111 1112 and ssn 000-12-3456 and 999.1.1.1").is_empty());
        assert_eq!(
            find("reach me at fe80::1ff:fe23:4567:890a"),
            vec![PiiKind::IpAddress]
        );
    }
}
