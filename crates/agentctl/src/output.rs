//! The output buffer behind `/api/v1/output`: the last N lines of the agent's stderr and non-JSON stdout, plus a
//! live feed for `/api/v1/output/stream`.
//!
//! [`LineSplitter`] (sans-IO) turns stderr byte chunks into bounded lines; [`OutputBuffer`] keeps them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use serde::Serialize;
use tokio::sync::broadcast;

/// Which stream a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// The agent's stderr (logs).
    Stderr,
    /// A stdout line that is not a JSON value (banner text, …); never relayed on `/acp/stream`.
    Stdout,
}

/// One line as served: `{"timestamp":"2026-01-01T00:00:00.000Z","stream":"stderr","content":"ready"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OutputLine {
    /// When agentctl read it, RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    /// `stderr` or `stdout`.
    pub stream: OutputStream,
    /// The line without its terminator, lossy UTF-8, at most `max_output_line_bytes` (then it ends with
    /// `… [N bytes cut]`).
    pub content: String,
}

impl OutputLine {
    /// A line stamped with `now`.
    pub fn new(now: SystemTime, stream: OutputStream, content: String) -> Self {
        Self {
            timestamp: humantime::format_rfc3339_millis(now).to_string(),
            stream,
            content,
        }
    }
}

/// Cuts `text` to at most `max_bytes` bytes (at a char boundary) and says how much was cut, never silently.
pub fn bound_line(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    format!("{}… [{cut} bytes cut]", &text[..end])
}

/// Splits a byte stream into lines (sans-IO), holding at most `max_line_bytes` of an unfinished line.
///
/// A line longer than that is emitted in pieces of `max_line_bytes` bytes; nothing is dropped.
/// `\n` and `\r\n` end a line.
#[derive(Debug)]
pub struct LineSplitter {
    max_line_bytes: usize,
    partial: Vec<u8>,
}

impl LineSplitter {
    /// A splitter for lines of at most `max_line_bytes` bytes (at least 1).
    pub fn new(max_line_bytes: usize) -> Self {
        Self {
            max_line_bytes: max_line_bytes.max(1),
            partial: Vec::new(),
        }
    }

    /// Feeds `chunk`, returning the lines it completed (lossy UTF-8, terminators removed).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        for &byte in chunk {
            if byte == b'\n' {
                lines.push(self.take());
            } else {
                self.partial.push(byte);
                if self.partial.len() >= self.max_line_bytes {
                    lines.push(self.take());
                }
            }
        }
        lines
    }

    /// The unfinished last line at end of stream, if any.
    pub fn finish(&mut self) -> Option<String> {
        (!self.partial.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> String {
        let mut line = std::mem::take(&mut self.partial);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        String::from_utf8_lossy(&line).into_owned()
    }
}

#[derive(Debug)]
struct Ring {
    lines: VecDeque<OutputLine>,
    dropped: u64,
}

/// The last `capacity` output lines and a live feed of new ones. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct OutputBuffer {
    capacity: usize,
    ring: Arc<Mutex<Ring>>,
    live: broadcast::Sender<OutputLine>,
}

impl OutputBuffer {
    /// Keeps `capacity` lines (`AGENTCTL_OUTPUT_BUFFER_SIZE`); each live subscriber may lag `queue` lines before it
    /// is disconnected.
    pub fn new(capacity: usize, queue: usize) -> Self {
        let (live, _) = broadcast::channel(queue.max(1));
        Self {
            capacity,
            ring: Arc::new(Mutex::new(Ring {
                lines: VecDeque::with_capacity(capacity.min(4096)),
                dropped: 0,
            })),
            live,
        }
    }

    /// Records a line; the oldest line is dropped (and counted) once `capacity` lines are kept.
    pub fn push(&self, line: OutputLine) {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        if self.capacity == 0 {
            ring.dropped += 1;
        } else {
            if ring.lines.len() >= self.capacity {
                ring.lines.pop_front();
                ring.dropped += 1;
            }
            ring.lines.push_back(line.clone());
        }
        // No live subscriber is not an error.
        let _ = self.live.send(line);
    }

    /// The last `last` lines (all kept lines when `None`), oldest first, and the number of lines kept.
    pub fn snapshot(&self, last: Option<usize>) -> (Vec<OutputLine>, usize) {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = ring.lines.len();
        let skip = kept.saturating_sub(last.unwrap_or(kept));
        (ring.lines.iter().skip(skip).cloned().collect(), kept)
    }

    /// Lines dropped from the front so far.
    pub fn dropped(&self) -> u64 {
        self.ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .dropped
    }

    /// The last `history` lines and a receiver of every line recorded after them (no gap, no duplicate).
    pub fn subscribe(&self, history: usize) -> (Vec<OutputLine>, broadcast::Receiver<OutputLine>) {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let skip = ring.lines.len().saturating_sub(history);
        let lines = ring.lines.iter().skip(skip).cloned().collect();
        (lines, self.live.subscribe())
    }

    /// Live subscribers.
    pub fn subscribers(&self) -> usize {
        self.live.receiver_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_split(max: usize, chunks: &[&[u8]], expect: &[&str]) {
        let mut splitter = LineSplitter::new(max);
        let mut got: Vec<String> = chunks.iter().flat_map(|c| splitter.push(c)).collect();
        got.extend(splitter.finish());
        assert_eq!(got, expect, "max {max}, chunks {chunks:?}");
    }

    #[test]
    fn lines_are_split_on_newlines_whatever_the_chunking() {
        check_split(
            100,
            &[b"a\nb", b"c\r\n", b"\n", b"tail"],
            &["a", "bc", "", "tail"],
        );
        check_split(100, &[b"\xff\n"], &["\u{fffd}"]);
        check_split(4, &[b"abcd", b"\n"], &["abcd", ""]);
        check_split(4, &[b"abcdef\n"], &["abcd", "ef"]);
    }

    #[test]
    fn long_lines_are_cut_with_a_marker() {
        assert_eq!(bound_line("abcdef", 6), "abcdef");
        assert_eq!(bound_line("abcdefg", 6), "abcdef… [1 bytes cut]");
        assert_eq!(bound_line("ééé", 3), "é… [4 bytes cut]");
    }

    fn line(content: &str) -> OutputLine {
        OutputLine::new(
            SystemTime::UNIX_EPOCH,
            OutputStream::Stderr,
            content.to_owned(),
        )
    }

    #[test]
    fn the_ring_keeps_the_last_lines_and_counts_the_rest() {
        let buffer = OutputBuffer::new(2, 8);
        buffer.push(line("1"));
        buffer.push(line("2"));
        assert_eq!(buffer.snapshot(None).0.len(), 2);
        assert_eq!(buffer.dropped(), 0);
        buffer.push(line("3"));
        let (lines, kept) = buffer.snapshot(None);
        assert_eq!(
            lines.iter().map(|l| l.content.as_str()).collect::<Vec<_>>(),
            ["2", "3"]
        );
        assert_eq!((kept, buffer.dropped()), (2, 1));
        assert_eq!(buffer.snapshot(Some(1)).0[0].content, "3");
        assert_eq!(buffer.snapshot(Some(0)).0.len(), 0);
        assert_eq!(lines[0].timestamp, "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn subscribers_get_history_then_live_lines() {
        let buffer = OutputBuffer::new(10, 8);
        buffer.push(line("old"));
        let (history, mut rx) = buffer.subscribe(5);
        buffer.push(line("new"));
        assert_eq!(history[0].content, "old");
        assert_eq!(rx.try_recv().unwrap().content, "new");
    }

    #[test]
    fn serializes_as_the_protocol_note_says() {
        let json = serde_json::to_string(&line("x")).unwrap();
        assert_eq!(
            json,
            r#"{"timestamp":"1970-01-01T00:00:00.000Z","stream":"stderr","content":"x"}"#
        );
    }
}
