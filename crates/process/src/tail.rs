//! `TailBuffer`: a sans-IO bounded ring that keeps the last N bytes written to it and counts all of them.

use std::collections::VecDeque;

use bytes::Bytes;

/// Keeps the last `capacity` bytes pushed into it and the total number of bytes ever pushed.
///
/// Pushing never allocates beyond `capacity` bytes; older bytes are dropped from the front (counted in
/// [`TailBuffer::dropped_bytes`], never silently). A capacity of 0 keeps nothing and only counts.
#[derive(Debug, Clone)]
pub(crate) struct TailBuffer {
    capacity: usize,
    kept: VecDeque<u8>,
    total: u64,
}

impl TailBuffer {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            kept: VecDeque::new(),
            total: 0,
        }
    }

    /// Appends `data`, dropping the oldest bytes beyond the capacity.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.total = self.total.saturating_add(data.len() as u64);
        let keep_from_data = data.len().min(self.capacity);
        let tail = data.get(data.len() - keep_from_data..).unwrap_or_default();
        let overflow = (self.kept.len() + tail.len()).saturating_sub(self.capacity);
        self.kept.drain(..overflow.min(self.kept.len()));
        self.kept.extend(tail);
    }

    /// The bytes kept (at most `capacity`), oldest first.
    pub(crate) fn kept(&self) -> Bytes {
        let (a, b) = self.kept.as_slices();
        let mut out = Vec::with_capacity(a.len() + b.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b);
        Bytes::from(out)
    }

    /// How many bytes are kept (at most `capacity`).
    pub(crate) fn kept_len(&self) -> usize {
        self.kept.len()
    }

    /// Every byte ever pushed.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Bytes pushed but no longer kept.
    #[cfg(test)]
    pub(crate) fn dropped_bytes(&self) -> u64 {
        self.total - self.kept.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes `chunks` into a buffer of `capacity` and checks the kept tail and the total.
    fn check(capacity: usize, chunks: &[&[u8]], expect_kept: &[u8], expect_total: u64) {
        let mut tail = TailBuffer::new(capacity);
        for chunk in chunks {
            tail.push(chunk);
        }
        assert_eq!(
            &tail.kept()[..],
            expect_kept,
            "capacity {capacity}, chunks {chunks:?}"
        );
        assert_eq!(tail.total(), expect_total);
        assert_eq!(
            tail.dropped_bytes(),
            expect_total - expect_kept.len() as u64
        );
    }

    #[test]
    fn keeps_everything_up_to_the_capacity() {
        check(4, &[b"ab", b"cd"], b"abcd", 4);
        check(4, &[b"abcd"], b"abcd", 4);
    }

    #[test]
    fn one_byte_past_the_capacity_drops_the_oldest_byte() {
        check(4, &[b"ab", b"cde"], b"bcde", 5);
        check(4, &[b"abcde"], b"bcde", 5);
    }

    #[test]
    fn a_chunk_larger_than_the_capacity_keeps_its_tail() {
        check(3, &[b"xy", b"0123456789"], b"789", 12);
    }

    #[test]
    fn zero_capacity_only_counts() {
        check(0, &[b"abc", b"", b"d"], b"", 4);
    }

    #[test]
    fn empty_pushes_change_nothing() {
        check(2, &[b"", b"a", b""], b"a", 1);
    }
}
