//! Per-slot storage that never moves: elements in segments of doubling size, each allocated
//! once (on the first id that falls in it) and kept until the storage is dropped. A `Vec` would
//! move its elements as it grows; the queue's slots (`slots.rs`) and its claim cells
//! (`claimed.rs`) are read without the queue's lock, so neither may move.
//!
//! Every add reads its slot up to three times, so an element is one load away: a segment is a
//! pointer to its first element (its length follows from its number), with no bounds check and
//! no once-cell state to test (the README's work-queue section has what that saved).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The first segment's length in bits; segment `s` holds `1 << (FIRST_SEGMENT_BITS + s)`.
const FIRST_SEGMENT_BITS: u32 = 5;
/// Segments enough for every `u32` id.
const SEGMENTS: usize = 33 - FIRST_SEGMENT_BITS as usize;

/// Elements by `u32` id, in segments that never move (see the module docs). A segment is a
/// pointer to its first element, null until allocated: its length follows from its number, so
/// reading an element costs one load and no bounds check.
pub(crate) struct Segments<T> {
    segments: [AtomicPtr<T>; SEGMENTS],
    /// The segments' elements are owned here.
    owns: PhantomData<Box<[T]>>,
}

// SAFETY: the elements are owned (dropped with the storage) and reached through `&self`; that is
// what `OnceLock<Box<[T]>>` per segment would allow.
unsafe impl<T: Send> Send for Segments<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Segments<T> {}

impl<T: Default> Segments<T> {
    /// No segment yet.
    pub(crate) fn new() -> Self {
        Self { segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())), owns: PhantomData }
    }

    /// Element `id`, its segment allocated (with default elements) if needed.
    pub(crate) fn get_or_alloc(&self, id: u32) -> &T {
        let (segment, at) = locate(id);
        let mut first = self.segments[segment].load(Ordering::Acquire);
        if first.is_null() {
            let made = Box::into_raw((0..segment_len(segment)).map(|_| T::default()).collect::<Box<[T]>>());
            let made = made.cast::<T>();
            first = match self.segments[segment].compare_exchange(
                std::ptr::null_mut(),
                made,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => made,
                Err(theirs) => {
                    // SAFETY: made just above for this segment and never shared.
                    unsafe { free(made, segment) };
                    theirs
                }
            };
        }
        // SAFETY: `first` heads an allocated segment of `segment_len(segment)` elements, and
        // `at` is below that length (`locate`); segments are freed only with `self`.
        unsafe { &*first.add(at) }
    }

    /// Element `id`, whose segment must be allocated.
    #[inline(always)]
    pub(crate) fn get(&self, id: u32) -> &T {
        let (segment, at) = locate(id);
        let first = self.segments[segment].load(Ordering::Acquire);
        // Invariant (the caller's): `id` was passed to `get_or_alloc` before.
        assert!(!first.is_null(), "an id names an allocated segment");
        // SAFETY: as in `get_or_alloc`.
        unsafe { &*first.add(at) }
    }
}

impl<T> Drop for Segments<T> {
    fn drop(&mut self) {
        for (segment, first) in self.segments.iter_mut().enumerate() {
            let first = *first.get_mut();
            if !first.is_null() {
                // SAFETY: allocated by `get_or_alloc` for this segment, freed once, here.
                unsafe { free(first, segment) };
            }
        }
    }
}

/// Drops the elements of segment `segment`, which start at `first`, and frees them.
///
/// # Safety
/// `first` came from `get_or_alloc`'s boxed slice for `segment`, and nothing uses it after.
unsafe fn free<T>(first: *mut T, segment: usize) {
    // SAFETY: the caller's.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(first, segment_len(segment))) });
}

/// How many elements segment `segment` holds.
fn segment_len(segment: usize) -> usize {
    1 << (FIRST_SEGMENT_BITS as usize + segment)
}

/// The segment and the place in it of element `id`.
#[inline(always)]
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

    #[test]
    fn dropping_the_storage_drops_every_element_of_every_allocated_segment_once() {
        use std::sync::Arc;
        let counted = Arc::new(());
        let segments = Segments::<std::sync::OnceLock<Arc<()>>>::new();
        for id in [0, 40, 100] {
            segments.get_or_alloc(id).set(Arc::clone(&counted)).unwrap();
        }
        assert_eq!(Arc::strong_count(&counted), 4);
        drop(segments);
        assert_eq!(Arc::strong_count(&counted), 1, "each element dropped once");
    }
}
