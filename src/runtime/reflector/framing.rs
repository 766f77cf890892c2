//! Framing of a watch response: the body is a stream of newline-terminated JSON documents that
//! arrive in chunks of any size.

use bytes::{Bytes, BytesMut};

/// Splits a byte stream into newline-terminated lines (a watch response's framing).
#[derive(Debug, Default)]
pub struct LineBuffer {
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
}

impl LineBuffer {
    /// Appends received bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete line (without its newline), if one has arrived; blank lines are skipped.
    pub fn next_line(&mut self) -> Option<Bytes> {
        loop {
            let newline = memchr::memchr(b'\n', &self.buf[self.scanned..])?;
            let mut line = self.buf.split_to(self.scanned + newline + 1);
            self.scanned = 0;
            line.truncate(line.len() - 1);
            if line.iter().any(|b| !b.is_ascii_whitespace()) {
                return Some(line.freeze());
            }
        }
    }

    /// Marks the buffered bytes as searched (call when `next_line` returned `None`).
    pub fn searched_all(&mut self) {
        self.scanned = self.buf.len();
    }

    /// Whether a partial line is buffered.
    pub fn has_partial(&self) -> bool {
        self.buf.iter().any(|b| !b.is_ascii_whitespace())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_buffer_frames_across_chunk_boundaries_and_skips_blank_lines() {
        let mut lines = LineBuffer::default();
        lines.push(b"{\"a\":");
        assert_eq!(lines.next_line(), None);
        lines.searched_all();
        lines.push(b"1}\n\n  \n{\"b\"");
        assert_eq!(lines.next_line().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(lines.next_line(), None);
        assert!(lines.has_partial());
        lines.searched_all();
        lines.push(b":2}\n");
        assert_eq!(lines.next_line().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert!(!lines.has_partial());
    }
}
