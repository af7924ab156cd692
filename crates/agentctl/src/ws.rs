//! A minimal server side of RFC 6455 WebSocket for `/api/v1/acp/stream`: the opening handshake check, unmasked
//! text and control frames written straight from the shared message buffer, and the client's frames read without
//! keeping their payloads.
//!
//! Why not axum's WebSocket: tungstenite copies every outgoing frame into a per-socket buffer and keeps that
//! buffer's capacity afterwards, so one 60 MB message fanned out to 64 subscribers held 64 copies (4.3 GB, issue
//! 12). Here every subscriber writes from the one `Bytes` the agent's line arrived in; the kernel copies it into
//! each socket's send buffer piece by piece.
//!
//! Source: RFC 6455 §4.2 (server handshake), §5.2 (base framing), §5.5 (control frames), §7.1 (closing).

use std::io;

use axum::http::{HeaderMap, Method};
use base64::Engine as _;
use sha1::{Digest as _, Sha1};
use tokio::io::{AsyncRead, AsyncReadExt as _};

/// The GUID of RFC 6455 §1.3, appended to the client's key for `Sec-WebSocket-Accept`.
pub const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Opcode of a text frame.
pub const OP_TEXT: u8 = 0x1;
/// Opcode of a close frame.
pub const OP_CLOSE: u8 = 0x8;
/// Opcode of a ping frame.
pub const OP_PING: u8 = 0x9;
/// Opcode of a pong frame.
pub const OP_PONG: u8 = 0xA;

/// Largest control-frame payload (RFC 6455 §5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// Why an upgrade request is not a WebSocket opening handshake.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// Not a GET.
    #[error("websocket upgrade requires GET")]
    NotGet,
    /// No `Upgrade: websocket`.
    #[error("missing upgrade: websocket header")]
    NoUpgrade,
    /// No `upgrade` token in `Connection`.
    #[error("missing connection: upgrade header")]
    NoConnectionUpgrade,
    /// `Sec-WebSocket-Version` is not 13.
    #[error("sec-websocket-version must be 13")]
    BadVersion,
    /// No `Sec-WebSocket-Key`.
    #[error("missing sec-websocket-key header")]
    NoKey,
}

impl HandshakeError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            HandshakeError::NotGet => "not_get",
            HandshakeError::NoUpgrade => "no_upgrade",
            HandshakeError::NoConnectionUpgrade => "no_connection_upgrade",
            HandshakeError::BadVersion => "bad_version",
            HandshakeError::NoKey => "no_key",
        }
    }
}

/// Checks an opening handshake (RFC 6455 §4.2.1) and returns the `Sec-WebSocket-Accept` value.
///
/// # Errors
/// [`HandshakeError`] naming the first thing missing.
pub fn accept_key(method: &Method, headers: &HeaderMap) -> Result<String, HandshakeError> {
    if method != Method::GET {
        return Err(HandshakeError::NotGet);
    }
    let has_token = |name: &str, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value
                .to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if !has_token("upgrade", "websocket") {
        return Err(HandshakeError::NoUpgrade);
    }
    if !has_token("connection", "upgrade") {
        return Err(HandshakeError::NoConnectionUpgrade);
    }
    if headers
        .get("sec-websocket-version")
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(HandshakeError::BadVersion);
    }
    let key = headers
        .get("sec-websocket-key")
        .ok_or(HandshakeError::NoKey)?;
    let mut sha1 = Sha1::new();
    sha1.update(key.as_bytes());
    sha1.update(GUID.as_bytes());
    Ok(base64::engine::general_purpose::STANDARD.encode(sha1.finalize()))
}

/// Appends the header of an unmasked, final server frame of `opcode` carrying `len` payload bytes (§5.2).
pub fn frame_header(opcode: u8, len: usize, out: &mut Vec<u8>) {
    out.push(0x80 | (opcode & 0x0F));
    if len < 126 {
        // Fits the 7-bit length: the cast cannot truncate.
        out.push(len as u8);
    } else if let Ok(len) = u16::try_from(len) {
        out.push(126);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

/// A complete close frame with `code` and `reason` (cut to fit the 125-byte control payload at a char boundary).
pub fn close_frame(code: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_CONTROL_PAYLOAD - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let reason = &reason.as_bytes()[..end];
    let mut frame = Vec::with_capacity(4 + 2 + reason.len());
    frame_header(OP_CLOSE, 2 + reason.len(), &mut frame);
    frame.extend_from_slice(&code.to_be_bytes());
    frame.extend_from_slice(reason);
    frame
}

/// A complete pong frame echoing a ping's payload.
pub fn pong_frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(2 + payload.len());
    frame_header(OP_PONG, payload.len(), &mut frame);
    frame.extend_from_slice(payload);
    frame
}

/// What the client sent, as far as the stream cares (it is one-way: data frames are read and discarded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFrame {
    /// A text, binary or continuation frame (discarded) or a pong.
    Ignored,
    /// A ping: answer with a pong carrying this payload.
    Ping(Vec<u8>),
    /// A close frame: the client is leaving.
    Close,
}

/// Reads one client frame (§5.2): client frames must be masked; reserved bits must be 0; a control frame's
/// payload is at most 125 bytes; a data frame's payload is at most `max_payload` bytes and is discarded as it is
/// read.
///
/// # Errors
/// `InvalidData` for a protocol violation, `UnexpectedEof` when the connection ends, other IO errors as they come.
pub async fn read_client_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_payload: usize,
) -> io::Result<ClientFrame> {
    let mut head = [0u8; 2];
    reader.read_exact(&mut head).await?;
    let opcode = head[0] & 0x0F;
    if head[0] & 0x70 != 0 {
        return Err(invalid("reserved bits set"));
    }
    if head[1] & 0x80 == 0 {
        return Err(invalid("client frames must be masked"));
    }
    let len = match head[1] & 0x7F {
        126 => u64::from(reader.read_u16().await?),
        127 => reader.read_u64().await?,
        short => u64::from(short),
    };
    let mut mask = [0u8; 4];
    reader.read_exact(&mut mask).await?;
    match opcode {
        OP_CLOSE | OP_PING | OP_PONG => {
            if len > MAX_CONTROL_PAYLOAD as u64 || head[0] & 0x80 == 0 {
                return Err(invalid("control frame too long or fragmented"));
            }
            let mut payload = vec![0u8; len as usize];
            reader.read_exact(&mut payload).await?;
            for (i, byte) in payload.iter_mut().enumerate() {
                *byte ^= mask[i % 4];
            }
            Ok(match opcode {
                OP_PING => ClientFrame::Ping(payload),
                OP_CLOSE => ClientFrame::Close,
                _ => ClientFrame::Ignored,
            })
        }
        0x0..=0x2 => {
            if len > max_payload as u64 {
                return Err(invalid("data frame larger than AGENTCTL_MAX_MESSAGE_BYTES"));
            }
            let skipped =
                tokio::io::copy(&mut (&mut *reader).take(len), &mut tokio::io::sink()).await?;
            if skipped < len {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            Ok(ClientFrame::Ignored)
        }
        _ => Err(invalid("unknown opcode")),
    }
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_matches_rfc_6455_section_1_3() {
        let mut headers = HeaderMap::new();
        headers.insert("upgrade", "websocket".parse().unwrap());
        headers.insert("connection", "keep-alive, Upgrade".parse().unwrap());
        headers.insert("sec-websocket-version", "13".parse().unwrap());
        headers.insert(
            "sec-websocket-key",
            "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap(),
        );
        assert_eq!(
            accept_key(&Method::GET, &headers).unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(
            accept_key(&Method::POST, &headers),
            Err(HandshakeError::NotGet)
        );
        headers.insert("sec-websocket-version", "8".parse().unwrap());
        assert_eq!(
            accept_key(&Method::GET, &headers).unwrap_err().code(),
            "bad_version"
        );
        assert_eq!(
            accept_key(&Method::GET, &HeaderMap::new()),
            Err(HandshakeError::NoUpgrade)
        );
    }

    #[test]
    fn frame_headers_use_the_shortest_length_encoding() {
        for (len, expect) in [
            (0usize, vec![0x81, 0]),
            (125, vec![0x81, 125]),
            (126, vec![0x81, 126, 0, 126]),
            (65_535, vec![0x81, 126, 0xFF, 0xFF]),
            (65_536, vec![0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
        ] {
            let mut out = Vec::new();
            frame_header(OP_TEXT, len, &mut out);
            assert_eq!(out, expect, "{len}");
        }
        let close = close_frame(1008, &"é".repeat(100));
        assert_eq!(close[1] as usize, close.len() - 2);
        assert!(close.len() - 2 <= MAX_CONTROL_PAYLOAD);
        assert!(
            std::str::from_utf8(&close[4..]).is_ok(),
            "cut at a char boundary"
        );
    }

    fn masked(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut frame = Vec::new();
        frame_header(opcode, payload.len(), &mut frame);
        frame[1] |= 0x80;
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        frame
    }

    #[tokio::test]
    async fn client_frames_are_read_and_data_is_discarded_within_the_limit() {
        let mut bytes = masked(OP_TEXT, &[b'x'; 70_000]);
        bytes.extend(masked(OP_PING, b"hi"));
        bytes.extend(masked(OP_CLOSE, &1000u16.to_be_bytes()));
        let mut reader = bytes.as_slice();
        assert_eq!(
            read_client_frame(&mut reader, 70_000).await.unwrap(),
            ClientFrame::Ignored
        );
        assert_eq!(
            read_client_frame(&mut reader, 70_000).await.unwrap(),
            ClientFrame::Ping(b"hi".to_vec())
        );
        assert_eq!(
            read_client_frame(&mut reader, 70_000).await.unwrap(),
            ClientFrame::Close
        );
        let too_big = masked(OP_TEXT, &[b'x'; 11]);
        let error = read_client_frame(&mut too_big.as_slice(), 10)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        let mut unmasked = Vec::new();
        frame_header(OP_TEXT, 1, &mut unmasked);
        unmasked.push(b'x');
        let error = read_client_frame(&mut unmasked.as_slice(), 10)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }
}
