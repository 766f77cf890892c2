//! Per-slot storage that never moves: elements in segments of doubling size, each allocated
//! once (on the first id that falls in it) and kept until the storage is dropped. A `Vec` would
//! move its elements as it grows; the queue's slots (`slots.rs`) and its claim cells
//! (`claimed.rs`) are read without the queue's lock, so neither may move.

use std::sync::OnceLock;

/// The first segment's length in bits; segment `s` holds `1 << (FIRST_SEGMENT_BITS + s)`.
const FIRST_SEGMENT_BITS: u32 = 5;
/// Segments enough for every `u32` id.
const SEGMENTS: usize = 33 - FIRST_SEGMENT_BITS as usize;

/// Elements by `u32` id, in segments that never move (see the module docs).
pub(crate) struct Segments<T> {
    segments: [OnceLock<Box<[T]>>; SEGMENTS],
}

impl<T: Default> Segments<T> {
    /// No segment yet.
    pub(crate) fn new() -> Self {
        Self { segments: std::array::from_fn(|_| OnceLock::new()) }
    }

    /// Element `id`, its segment allocated (with default elements) if needed.
    pub(crate) fn get_or_alloc(&self, id: u32) -> &T {
        let (segment, at) = locate(id);
        &self.segments[segment].get_or_init(|| (0..segment_len(segment)).map(|_| T::default()).collect())[at]
    }

    /// Element `id`, whose segment must be allocated.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> &T {
        let (segment, at) = locate(id);
        // Invariant (the caller's): `id` was passed to `get_or_alloc` before.
        &self.segments[segment].get().expect("an id names an allocated segment")[at]
    }
}

/// How many elements segment `segment` holds.
fn segment_len(segment: usize) -> usize {
    1 << (FIRST_SEGMENT_BITS as usize + segment)
}

/// The segment and the place in it of element `id`.
#[inline]
fn locate(id: u32) -> (usize, usize) {
    let n = u64::from(id) + (1 << FIRST_SEGMENT_BITS);
    let top = 63 - n.leading_zeros();
    ((top - FIRST_SEGMENT_BITS) as usize, (n - (1 << top)) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_to_consecutive_places_in_doubling_segments() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(31), (0, 31));
        assert_eq!(locate(32), (1, 0));
        assert_eq!(locate(95), (1, 63));
        assert_eq!(locate(96), (2, 0));
        assert_eq!(locate(u32::MAX).0, SEGMENTS - 1);
        let mut last = locate(0);
        for id in 1..100_000u32 {
            let next = locate(id);
            let size = segment_len(last.0);
            assert!(next == (last.0, last.1 + 1) || (next == (last.0 + 1, 0) && last.1 == size - 1), "{id}");
            last = next;
        }
    }

    #[test]
    fn an_element_stays_where_it_was_while_later_segments_are_allocated() {
        let segments = Segments::<u64>::new();
        let first: *const u64 = segments.get_or_alloc(0);
        for id in [31, 32, 95, 96, 100_000] {
            assert_eq!(*segments.get_or_alloc(id), 0, "a new element is the default");
        }
        assert!(std::ptr::eq(segments.get(0), first), "segment 0 did not move");
    }
}
