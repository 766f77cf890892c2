//! Per-key notes kept in the key's entry: whatever a caller wants to remember about a key
//! between its adds and its next pass (the controller keeps why the key was queued, see
//! `runtime::causes`).
//!
//! The contract:
//! - Notes live and die with the key's entry: written under the queue's lock by the add that
//!   carries them, dropped with the entry once the key tracks nothing.
//! - The add's note closure gets the key ([`NoteKey`]) beside the notes; what the closure
//!   returns is dropped after the lock is released.
//! - When a worker claims the key, [`KeyNotes::take`] hands what is due to the claim, under the
//!   same lock: what is recorded after that belongs to the next pass.
//! - When the key's timer fires (a delayed add, or a retry released from the retry line),
//!   [`KeyNotes::timer_fired`] is called; when [`WorkQueue::settle`](super::WorkQueue::settle)
//!   cancels it, [`KeyNotes::timer_cancelled`].
//! - `()` is the empty note: a queue without notes stores and does nothing.

/// The key an add's note is written for: the queue's copy, and the adder's own copy when the
/// queue had the key already (the add would drop it after the lock).
#[derive(Debug)]
pub struct NoteKey<'a, K> {
    queued: &'a K,
    spare: &'a mut Option<K>,
}

impl<'a, K: Clone> NoteKey<'a, K> {
    /// The key `queued` in the entry, and the adder's `spare` copy if the add did not store it.
    pub(crate) fn new(queued: &'a K, spare: &'a mut Option<K>) -> Self {
        Self { queued, spare }
    }

    /// An owned copy of the key: the adder's spare one if there is one, else a clone.
    pub fn into_owned(self) -> K {
        self.spare.take().unwrap_or_else(|| self.queued.clone())
    }
}

impl<K> std::ops::Deref for NoteKey<'_, K> {
    type Target = K;

    fn deref(&self) -> &K {
        self.queued
    }
}

/// What a queue keeps per key beside its own state (see the module docs).
pub trait KeyNotes: Default + Send + 'static {
    /// What a claim receives.
    type Taken: Default + Send + Sync + 'static;

    /// The key's pending timer fired: what waited for it is due now.
    fn timer_fired(&mut self);

    /// The key's pending timer was cancelled: what waited for it is dropped.
    fn timer_cancelled(&mut self);

    /// A worker claimed the key: what is due goes to its claim; the rest stays.
    fn take(&mut self) -> Self::Taken;
}

/// No notes.
impl KeyNotes for () {
    type Taken = ();

    fn timer_fired(&mut self) {}

    fn timer_cancelled(&mut self) {}

    fn take(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_note_key_hands_over_the_adders_copy_or_else_clones_the_queues() {
        let queued: Arc<str> = "team/pg".into();
        let adders: Arc<str> = "team/pg".into();
        let mut spare = Some(Arc::clone(&adders));
        let key = NoteKey::new(&queued, &mut spare);
        assert_eq!(&**key, "team/pg");
        assert!(Arc::ptr_eq(&key.into_owned(), &adders), "the adder's copy, not a clone");
        assert!(spare.is_none(), "taken, so the add has nothing left to drop");

        let mut none = None;
        assert!(Arc::ptr_eq(&NoteKey::new(&queued, &mut none).into_owned(), &queued));
    }
}
