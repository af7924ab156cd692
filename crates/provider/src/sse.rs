//! A sans-IO, bounded Server-Sent Events decoder (the subset chat-completion streams use).
//!
//! Source: WHATWG HTML "Server-sent events", §9.2.6 "Interpreting an event stream": lines end with `\n`,
//! `\r\n` or `\r`… (this decoder accepts `\n` and `\r\n`, which every OpenAI-compatible server sends);
//! `data:` lines of one event are joined with `\n`; a blank line dispatches; `:` starts a comment; other
//! fields (`event`, `id`, `retry`) are ignored.

use bytes::{Buf, BytesMut};

/// Slack a pending line may have beyond the event limit, for its field name (`data: `) and `\r`.
const LINE_OVERHEAD_BYTES: usize = 16;

/// Why the stream could not be decoded.
#[non_exhaustive]
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    /// One event (or one line) grew past the limit before it was dispatched.
    #[error("server-sent event over {max_event_bytes} bytes")]
    EventTooLong {
        /// The limit that was exceeded.
        max_event_bytes: usize,
    },
    /// A line was not UTF-8.
    #[error("server-sent event line is not utf-8")]
    NotUtf8,
}

/// Decodes `data` payloads of server-sent events from bytes the caller feeds in.
#[derive(Debug)]
pub struct SseDecoder {
    max_event_bytes: usize,
    buf: BytesMut,
    /// Bytes of `buf` already searched for `\n`.
    scanned: usize,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder holding at most `max_event_bytes` of one event (its data plus the pending line).
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            max_event_bytes,
            buf: BytesMut::new(),
            scanned: 0,
            data: String::new(),
            has_data: false,
        }
    }

    /// Appends bytes received from the server.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event's data, `Ok(None)` when more bytes are needed.
    ///
    /// # Errors
    /// [`SseError`] when an event is over the limit or a line is not UTF-8; the stream is then unusable.
    pub fn next_event(&mut self) -> Result<Option<String>, SseError> {
        loop {
            let Some(offset) = self
                .buf
                .get(self.scanned..)
                .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
            else {
                self.scanned = self.buf.len();
                if self.buf.len() > self.max_event_bytes + LINE_OVERHEAD_BYTES {
                    return Err(SseError::EventTooLong {
                        max_event_bytes: self.max_event_bytes,
                    });
                }
                return Ok(None);
            };
            let line_end = self.scanned + offset;
            let line = self.buf.split_to(line_end);
            self.buf.advance(1);
            self.scanned = 0;
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
            if line.is_empty() {
                if self.has_data {
                    self.has_data = false;
                    return Ok(Some(std::mem::take(&mut self.data)));
                }
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            if field == "data" {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                if self.data.len() > self.max_event_bytes {
                    return Err(SseError::EventTooLong {
                        max_event_bytes: self.max_event_bytes,
                    });
                }
            }
        }
    }

    /// At end of stream: the data of an event that was not followed by a blank line, if any.
    pub fn finish(&mut self) -> Option<String> {
        if !self.buf.is_empty() {
            let rest = self.buf.split();
            // A final line that is not UTF-8 or not `data:` adds nothing (the caller then sees an unfinished reply).
            if let Ok(line) = std::str::from_utf8(&rest)
                && let Some(value) = line.trim_end_matches('\r').strip_prefix("data:")
            {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value.strip_prefix(' ').unwrap_or(value));
                self.has_data = true;
            }
        }
        self.has_data.then(|| {
            self.has_data = false;
            std::mem::take(&mut self.data)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, max: usize, expect: Result<Vec<&str>, SseError>) {
        // Every split of the input gives the same events.
        for split in 0..=input.len() {
            let mut decoder = SseDecoder::new(max);
            let mut events = Vec::new();
            let mut outcome = Ok(());
            for part in [&input.as_bytes()[..split], &input.as_bytes()[split..]] {
                decoder.feed(part);
                loop {
                    match decoder.next_event() {
                        Ok(Some(event)) => events.push(event),
                        Ok(None) => break,
                        Err(error) => {
                            outcome = Err(error);
                            break;
                        }
                    }
                }
                if outcome.is_err() {
                    break;
                }
            }
            if outcome.is_ok() {
                events.extend(decoder.finish());
            }
            let got = outcome.map(|()| events);
            let want = expect
                .clone()
                .map(|v| v.into_iter().map(str::to_owned).collect::<Vec<_>>());
            assert_eq!(got, want, "split at {split} of {input:?}");
        }
    }

    #[test]
    fn events() {
        check("data: a\n\ndata: b\r\n\r\n", 100, Ok(vec!["a", "b"]));
        check(
            ": comment\nevent: x\nid: 1\ndata:{\"k\":1}\n\n",
            100,
            Ok(vec!["{\"k\":1}"]),
        );
        check("data: a\ndata: b\n\n\n\n", 100, Ok(vec!["a\nb"]));
        check("data: [DONE]", 100, Ok(vec!["[DONE]"]));
        check("retry: 5\n\n", 100, Ok(vec![]));
    }

    #[test]
    fn event_limit_at_and_one_past() {
        check("data: 12345\n\n", 5, Ok(vec!["12345"]));
        check(
            "data: 123456\n\n",
            5,
            Err(SseError::EventTooLong { max_event_bytes: 5 }),
        );
    }

    #[test]
    fn an_unterminated_flood_is_refused() {
        let mut decoder = SseDecoder::new(16);
        decoder.feed(&[b'x'; 32]);
        assert_eq!(decoder.next_event(), Ok(None));
        decoder.feed(b"x");
        assert_eq!(
            decoder.next_event(),
            Err(SseError::EventTooLong {
                max_event_bytes: 16
            })
        );
    }
}
