//! The protobuf wire format: varints and tagged fields, read without copying.

use super::ProtobufError;

/// One field value as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireValue<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: strings, bytes, messages, packed repeated.
    Len(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// A cursor over protobuf bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for i in 0..10 {
            let (&byte, rest) = self.buf.split_first().ok_or_else(|| truncated("varint"))?;
            self.buf = rest;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::Malformed("varint longer than 10 bytes".into()))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if self.buf.len() < n {
            return Err(truncated("field"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next `(field number, value)`, or `None` at the end.
    pub(crate) fn next_field(&mut self) -> Result<Option<(u32, WireValue<'a>)>, ProtobufError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| ProtobufError::Malformed("field number too large".into()))?;
        if tag == 0 {
            return Err(ProtobufError::Malformed("field number 0".into()));
        }
        let value = match key & 7 {
            0 => WireValue::Varint(self.varint()?),
            1 => WireValue::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| truncated("fixed64"))?)),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| truncated("length"))?;
                WireValue::Len(self.take(len)?)
            }
            5 => WireValue::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| truncated("fixed32"))?)),
            other => return Err(ProtobufError::Malformed(format!("unsupported wire type {other}"))),
        };
        Ok(Some((tag, value)))
    }
}

fn truncated(what: &str) -> ProtobufError {
    ProtobufError::Malformed(format!("truncated {what}"))
}
