//! SPDY/3.1 framing, as far as `kubectl exec` uses it (client-go's `spdy` round tripper over
//! moby/spdystream; what kubectl up to 1.29 speaks, and 1.30+ falls back to): pure parsing and
//! writing of frames, and the compressed header blocks.
//!
//! Rules (draft-mbelshe-httpbis-spdy-00, SPDY/3):
//! 1. A control frame: `1 | version(15) | type(16) | flags(8) | length(24) | data`; a data frame:
//!    `0 | stream(31) | flags(8) | length(24) | data`; flag 0x01 is FIN on both. Only version 3.
//! 2. A header block is `count(32)` then `name-length(32) name value-length(32) value` pairs,
//!    compressed as one zlib stream per direction for the whole connection, the client's with the
//!    SPDY/3 dictionary (whose zlib id is [`DICTIONARY_ID`]).
//! 3. The server's header blocks are zlib without a dictionary, in stored (uncompressed) deflate
//!    blocks each followed by a sync flush (an empty stored block): valid zlib that Go's
//!    `zlib.NewReaderDict` reads (a dictionary is used only when the stream names one).
//! 4. Frames not used by exec (SETTINGS, WINDOW_UPDATE, HEADERS, …) are read and ignored;
//!    spdystream enforces no flow control.

use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};

/// The SPDY/3 header dictionary (the draft's section 2.6.10.1), byte for byte.
pub const DICTIONARY: &[u8] = include_bytes!("spdy_dictionary.bin");

/// The zlib id (Adler-32) of [`DICTIONARY`], as a compressed stream names it.
pub const DICTIONARY_ID: u32 = 0xe3c6_a7c2;

/// FIN, on data and control frames.
pub const FLAG_FIN: u8 = 0x01;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;

/// One frame read from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A new stream, with its headers.
    SynStream {
        /// The stream's id.
        stream: u32,
        /// Its headers (names lowercase).
        headers: Vec<(String, String)>,
    },
    /// Data on a stream.
    Data {
        /// The stream.
        stream: u32,
        /// The client's last data on it.
        fin: bool,
        /// The bytes.
        data: Vec<u8>,
    },
    /// A stream reset.
    RstStream {
        /// The stream.
        stream: u32,
    },
    /// A ping to answer.
    Ping {
        /// Its id, sent back.
        id: u32,
    },
    /// The client is going away.
    GoAway,
    /// Anything else (rule 4).
    Ignored,
}

/// Why the client's bytes are not SPDY/3.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpdyError {
    /// A control frame of another version.
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    /// A frame too short for its type.
    #[error("invalid control frame")]
    Invalid,
    /// A header block that does not inflate.
    #[error("header block does not inflate: {0}")]
    Inflate(String),
    /// A zlib stream with another dictionary.
    #[error("header block names dictionary {0:#x}")]
    Dictionary(u32),
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

/// The client's header blocks, inflated as one stream (rule 2).
pub struct HeaderInflater {
    state: Box<DecompressorOxide>,
    /// The dictionary, then everything inflated so far (back-references reach into both).
    window: Vec<u8>,
    pos: usize,
    started: bool,
}

impl std::fmt::Debug for HeaderInflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderInflater").field("inflated", &(self.pos - DICTIONARY.len())).finish()
    }
}

impl Default for HeaderInflater {
    fn default() -> Self {
        Self { state: Box::default(), window: DICTIONARY.to_vec(), pos: DICTIONARY.len(), started: false }
    }
}

impl HeaderInflater {
    /// Inflates the next header block.
    pub fn inflate(&mut self, mut block: &[u8]) -> Result<Vec<u8>, SpdyError> {
        if !self.started {
            let (&[_cmf, flg], rest) = block.split_first_chunk::<2>().ok_or(SpdyError::Invalid)?;
            block = rest;
            if flg & 0x20 != 0 {
                let id = u32_at(block, 0).ok_or(SpdyError::Invalid)?;
                if id != DICTIONARY_ID {
                    return Err(SpdyError::Dictionary(id));
                }
                block = &block[4..];
            }
            self.started = true;
        }
        let start = self.pos;
        let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF
            | inflate_flags::TINFL_FLAG_HAS_MORE_INPUT;
        loop {
            if self.window.len() - self.pos < 4096 {
                self.window.resize(self.window.len() + 16 * 1024, 0);
            }
            let (status, used, made) = decompress(&mut self.state, block, &mut self.window, self.pos, flags);
            block = &block[used..];
            self.pos += made;
            match status {
                TINFLStatus::HasMoreOutput => continue,
                TINFLStatus::NeedsMoreInput | TINFLStatus::Done if block.is_empty() => break,
                TINFLStatus::NeedsMoreInput => continue,
                other => return Err(SpdyError::Inflate(format!("{other:?}"))),
            }
        }
        Ok(self.window[start..self.pos].to_vec())
    }
}

/// Rule 2: the pairs of an inflated header block.
fn header_pairs(block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let count = u32_at(block, 0).ok_or(SpdyError::Invalid)?;
    let mut at = 4;
    let field = |at: &mut usize| -> Result<String, SpdyError> {
        let len = u32_at(block, *at).ok_or(SpdyError::Invalid)? as usize;
        let bytes = block.get(*at + 4..*at + 4 + len).ok_or(SpdyError::Invalid)?;
        *at += 4 + len;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    };
    (0..count).map(|_| Ok((field(&mut at)?.to_ascii_lowercase(), field(&mut at)?))).collect()
}

/// Rule 1: the first frame in `buf` and its length, `None` until it is all there.
pub fn parse(buf: &[u8], inflater: &mut HeaderInflater) -> Result<Option<(Frame, usize)>, SpdyError> {
    let (Some(first), Some(flags)) = (u32_at(buf, 0), buf.get(4)) else { return Ok(None) };
    let length = u32_at(buf, 4).unwrap_or_default() as usize & 0x00ff_ffff;
    let Some(body) = buf.get(8..8 + length) else { return Ok(None) };
    let fin = flags & FLAG_FIN != 0;
    let frame = if first & 0x8000_0000 == 0 {
        Frame::Data { stream: first & 0x7fff_ffff, fin, data: body.to_vec() }
    } else {
        let version = ((first >> 16) & 0x7fff) as u16;
        if version != 3 {
            return Err(SpdyError::Version(version));
        }
        let stream = u32_at(body, 0).map(|s| s & 0x7fff_ffff);
        match (first & 0xffff) as u16 {
            SYN_STREAM => {
                let block = body.get(10..).ok_or(SpdyError::Invalid)?;
                let headers = header_pairs(&inflater.inflate(block)?)?;
                Frame::SynStream { stream: stream.ok_or(SpdyError::Invalid)?, headers }
            }
            RST_STREAM => Frame::RstStream { stream: stream.ok_or(SpdyError::Invalid)? },
            PING => Frame::Ping { id: u32_at(body, 0).ok_or(SpdyError::Invalid)? },
            GOAWAY => Frame::GoAway,
            _ => Frame::Ignored,
        }
    };
    Ok(Some((frame, 8 + length)))
}

/// The server's header blocks (rule 3).
#[derive(Debug, Default)]
pub struct HeaderDeflater {
    started: bool,
}

impl HeaderDeflater {
    /// `pairs` as the next header block.
    pub fn deflate(&mut self, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = (pairs.len() as u32).to_be_bytes().to_vec();
        for (name, value) in pairs {
            for text in [name, value] {
                raw.extend_from_slice(&(text.len() as u32).to_be_bytes());
                raw.extend_from_slice(text.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(raw.len() + 8);
        if !self.started {
            // CMF 0x78 (deflate, 32 KiB window), FLG 0x01: no dictionary, check bits valid.
            out.extend_from_slice(&[0x78, 0x01]);
            self.started = true;
        }
        for chunk in raw.chunks(usize::from(u16::MAX)) {
            let len = chunk.len() as u16;
            out.push(0x00); // BFINAL 0, BTYPE 00 (stored), aligned.
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(chunk);
        }
        // A sync flush (an empty stored block), as Go's zlib writer ends each block: Go's inflater
        // hands out a stored block's bytes only once it reads the next block's header.
        out.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
        out
    }
}

fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x80, 0x03];
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(flags);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(body);
    frame
}

/// A SYN_REPLY accepting `stream` (no headers, as the kubelet's spdystream sends it).
pub fn syn_reply(stream: u32, deflater: &mut HeaderDeflater) -> Vec<u8> {
    let mut body = stream.to_be_bytes().to_vec();
    body.extend(deflater.deflate(&[]));
    control(SYN_REPLY, 0, &body)
}

/// A PING answering the client's `id`.
pub fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

/// A GOAWAY (status OK) naming the last stream the server accepted.
pub fn goaway(last_stream: u32) -> Vec<u8> {
    let mut body = last_stream.to_be_bytes().to_vec();
    body.extend_from_slice(&0u32.to_be_bytes());
    control(GOAWAY, 0, &body)
}

/// Data frames carrying `data` on `stream` (at most 16 MiB each; `fin` on the last).
pub fn data(stream: u32, fin: bool, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    let chunks: Vec<&[u8]> = if data.is_empty() { vec![&[]] } else { data.chunks(0x00ff_ffff).collect() };
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        out.push(if fin && i == last { FLAG_FIN } else { 0 });
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_spdy3s() {
        assert_eq!(DICTIONARY.len(), 1423);
        let (mut a, mut b) = (1u32, 0u32);
        for byte in DICTIONARY {
            a = (a + u32::from(*byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, DICTIONARY_ID);
    }

    #[test]
    fn frames_are_read_when_whole() {
        let mut inflater = HeaderInflater::default();
        let frame = data(5, true, b"hi");
        assert_eq!(parse(&frame[..9], &mut inflater), Ok(None));
        let read = parse(&frame, &mut inflater).unwrap().unwrap();
        assert_eq!(read, (Frame::Data { stream: 5, fin: true, data: b"hi".to_vec() }, 10));
        assert_eq!(parse(&ping(7), &mut inflater).unwrap().unwrap().0, Frame::Ping { id: 7 });
        assert_eq!(parse(&goaway(3), &mut inflater).unwrap().unwrap().0, Frame::GoAway);
        let mut v2 = ping(1);
        v2[1] = 2;
        assert_eq!(parse(&v2, &mut inflater), Err(SpdyError::Version(2)));
    }

    /// A SYN_STREAM whose header block is this module's own (stored) deflate: the headers read
    /// back, across two frames of one zlib stream.
    #[test]
    fn header_blocks_round_trip_through_one_stream() {
        let mut deflater = HeaderDeflater::default();
        let mut inflater = HeaderInflater::default();
        for (id, kind) in [(1u32, "error"), (3, "stdout")] {
            let mut body = id.to_be_bytes().to_vec();
            body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            body.extend(deflater.deflate(&[("streamtype", kind)]));
            let frame = control(SYN_STREAM, 0, &body);
            let (read, used) = parse(&frame, &mut inflater).unwrap().unwrap();
            assert_eq!(used, frame.len());
            assert_eq!(
                read,
                Frame::SynStream { stream: id, headers: vec![("streamtype".into(), kind.into())] }
            );
        }
        let reply = syn_reply(3, &mut deflater);
        assert_eq!(&reply[..4], &[0x80, 3, 0, 2]);
    }

    /// A block whose zlib header names the SPDY/3 dictionary is read (kubectl's compress against
    /// it: their back-references reach into it, which `tests/postgres` exercises); another
    /// dictionary is refused.
    #[test]
    fn a_block_naming_the_dictionary_is_checked_and_read() {
        let mut raw = 1u32.to_be_bytes().to_vec();
        for text in ["streamtype", "error"] {
            raw.extend_from_slice(&(text.len() as u32).to_be_bytes());
            raw.extend_from_slice(text.as_bytes());
        }
        // A zlib header naming the dictionary, then a stored block: the dictionary is checked.
        let mut block = vec![0x78, 0xbb];
        block.extend_from_slice(&DICTIONARY_ID.to_be_bytes());
        block.push(0);
        block.extend_from_slice(&(raw.len() as u16).to_le_bytes());
        block.extend_from_slice(&(!(raw.len() as u16)).to_le_bytes());
        block.extend_from_slice(&raw);
        let mut inflater = HeaderInflater::default();
        assert_eq!(
            header_pairs(&inflater.inflate(&block).unwrap()).unwrap(),
            [("streamtype".to_owned(), "error".to_owned())]
        );
        let mut wrong = block.clone();
        wrong[2] ^= 1;
        assert!(matches!(HeaderInflater::default().inflate(&wrong), Err(SpdyError::Dictionary(_))));
    }
}
