//! A protobuf message read field by field, as its bytes lie: enough to rewrite some fields of an
//! ONNX model and copy every other one untouched (fields the decoded subset of
//! [`super::onnx_graph`] skips would be lost by decoding and encoding it again).

use std::ops::Range;

/// One field of a message: its number, the bytes it takes (key included) and its value's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Field {
    pub(super) number: u32,
    pub(super) whole: Range<usize>,
    pub(super) value: Range<usize>,
}

/// The fields of `message`, in order.
pub(super) fn fields(message: &[u8]) -> Result<Vec<Field>, String> {
    let mut found = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let start = at;
        let key = varint(message, &mut at)?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("field number {} at byte {start}", key >> 3))?;
        let value_start = |at: usize, len: usize| {
            at.checked_add(len)
                .filter(|end| *end <= message.len())
                .ok_or_else(|| format!("field {number} at byte {start} runs past the end"))
        };
        let value = match key & 7 {
            0 => {
                let begin = at;
                varint(message, &mut at)?;
                begin..at
            }
            1 => at..value_start(at, 8)?,
            2 => {
                let len = usize::try_from(varint(message, &mut at)?)
                    .map_err(|_| format!("field {number} at byte {start} is too long"))?;
                at..value_start(at, len)?
            }
            5 => at..value_start(at, 4)?,
            wire => return Err(format!("field {number} at byte {start}: wire type {wire}")),
        };
        at = value.end;
        found.push(Field {
            number,
            whole: start..at,
            value,
        });
    }
    Ok(found)
}

/// Appends a length-delimited field `number` holding `value`.
pub(super) fn put_bytes(out: &mut Vec<u8>, number: u32, value: &[u8]) {
    put_header(out, number, value.len());
    out.extend_from_slice(value);
}

/// Appends the key and length of a length-delimited field `number` whose `len` bytes follow.
pub(super) fn put_header(out: &mut Vec<u8>, number: u32, len: usize) {
    put_varint(out, (u64::from(number) << 3) | 2);
    put_varint(out, len as u64);
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, String> {
    let start = *at;
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes
            .get(*at)
            .ok_or_else(|| format!("varint at byte {start} runs past the end"))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(format!("varint at byte {start} is longer than ten bytes"))
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_type_is_read_with_its_place_and_written_back_the_same() {
        // 1: varint 300; 2: bytes "hi"; 3: fixed64; 4: fixed32.
        let mut message = vec![0x08, 0xac, 0x02];
        put_bytes(&mut message, 2, b"hi");
        message.extend_from_slice(&[0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x25, 9, 9, 9, 9]);
        let found = fields(&message).unwrap();
        let numbers: Vec<u32> = found.iter().map(|f| f.number).collect();
        assert_eq!(numbers, [1, 2, 3, 4]);
        assert_eq!(&message[found[0].value.clone()], &[0xac, 0x02]);
        assert_eq!(&message[found[1].value.clone()], b"hi");
        assert_eq!(found[2].value.len(), 8);
        assert_eq!(found[3].whole, 16..21);
        let copied: Vec<u8> = found
            .iter()
            .flat_map(|f| message[f.whole.clone()].to_vec())
            .collect();
        assert_eq!(copied, message);
        // A long value's length takes two bytes.
        let mut long = Vec::new();
        put_bytes(&mut long, 5, &[7; 200]);
        assert_eq!(&long[..3], &[0x2a, 0xc8, 0x01]);
        assert_eq!(fields(&long).unwrap()[0].value, 3..203);
    }

    #[test]
    fn a_cut_or_malformed_message_is_an_error_not_a_panic() {
        for bad in [
            &[0x12, 0x05, b'a'][..], // length past the end
            &[0x08, 0x80][..],       // varint cut
            &[0x19, 1, 2][..],       // fixed64 cut
            &[0x0b][..],             // group start: not read
            &[0x00, 0x00][..],       // field number 0
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ][..],
        ] {
            assert!(fields(bad).is_err(), "{bad:?}");
        }
    }
}
