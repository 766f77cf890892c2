//! What a claim carries besides its key (the notes due when it was made, see `notes.rs`), kept
//! per slot in a place of its own instead of in the [`Claim`](super::Claim) itself: a claim is
//! then two words whatever the notes, and handing one out moves no notes through `get`'s
//! future (the controller's notes are 80 bytes, copied several times on their way out).
//!
//! The contract, which makes the unsynchronised access sound:
//! - Cell `id` is filled by the queue's lock holder as it makes the claim on slot `id`. No
//!   claim on the slot is outstanding then, so no one else touches the cell.
//! - From then on only that claim reads and writes it, until the claim is dropped. A slot has
//!   one claim at most.
//! - The claim empties the cell before it gives the slot back (its drop takes the queue's lock
//!   after that), so the next claim's filling comes after it.
//!
//! The cells live in segments that never move (`segments.rs`), allocated by the lock holder and
//! kept until the queue is dropped. A queue without notes carries `()`: zero-sized cells, no
//! memory.

use std::cell::UnsafeCell;

use super::segments::Segments;

/// One cell per slot (see the module docs).
pub(crate) struct ClaimCells<T> {
    cells: Segments<UnsafeCell<T>>,
}

// SAFETY: a cell is written by one thread at a time, as the module docs describe (the queue's
// lock holder, then the one claim); what it holds crosses threads, so it must be `Send`, and a
// claim shared between threads reads it from each, so it must be `Sync`.
unsafe impl<T: Send + Sync> Sync for ClaimCells<T> {}

impl<T: Default> ClaimCells<T> {
    /// No cells yet.
    pub(crate) fn new() -> Self {
        Self { cells: Segments::new() }
    }

    /// The cell of slot `id`, its segment allocated if needed.
    fn cell(&self, id: u32) -> &UnsafeCell<T> {
        self.cells.get_or_alloc(id)
    }

    /// Fills the cell of slot `id` for the claim being made on it.
    ///
    /// # Safety
    /// The caller holds the queue's lock and is making the claim on slot `id` (so no claim on
    /// it is outstanding).
    pub(crate) unsafe fn fill(&self, id: u32, value: T) {
        // SAFETY: see above: no one else accesses the cell now.
        unsafe { *self.cell(id).get() = value };
    }

    /// The cell of slot `id`, read by its claim.
    ///
    /// # Safety
    /// The caller is the outstanding claim on slot `id`, reading through `&self` (so no `&mut`
    /// from [`ClaimCells::claimed_mut`] lives as long as this borrow).
    pub(crate) unsafe fn claimed(&self, id: u32) -> &T {
        // SAFETY: see above: only the claim accesses the cell while it lives.
        unsafe { &*self.cell(id).get() }
    }

    /// The cell of slot `id`, written by its claim.
    ///
    /// # Safety
    /// The caller is the outstanding claim on slot `id`, writing through `&mut self` (so no
    /// other borrow of the cell lives as long as this one).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn claimed_mut(&self, id: u32) -> &mut T {
        // SAFETY: see above: only the claim accesses the cell while it lives, and exclusively.
        unsafe { &mut *self.cell(id).get() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_what_they_are_given_across_segments() {
        let cells = ClaimCells::<String>::new();
        for id in [0, 31, 32, 95, 96, 10_000] {
            // SAFETY: single-threaded: no claim exists.
            unsafe { cells.fill(id, id.to_string()) };
        }
        for id in [0, 31, 32, 95, 96, 10_000] {
            // SAFETY: as above.
            assert_eq!(unsafe { std::mem::take(cells.claimed_mut(id)) }, id.to_string());
        }
    }
}
