//! Per-key notes kept in the queue's own slots: whatever a caller wants to remember about a key
//! between its adds and its next pass (the controller keeps why the key was queued, see
//! `runtime::causes`).
//!
//! The contract:
//! - Notes live and die with the key's slot: written under the queue's lock by the add that
//!   carries them (no second map, no second hash, no second lock), dropped when the slot is
//!   released (the key idle, nothing pending: [`KeyNotes::reset`], which notes that know they
//!   are empty make a no-op).
//! - The add's note closure gets the key ([`NoteKey`]) beside the slot's notes: a note that
//!   keeps the key takes the adder's copy when the queue already had one (the add would
//!   drop it), or else clones the queue's. What the closure returns is dropped after the lock
//!   is released (a cause it did not build may still hold shared data).
//! - When a worker claims the key, [`KeyNotes::take`] hands what is due to the claim, under the
//!   same lock: what is recorded after that belongs to the next pass.
//! - When the key's timer fires (a delayed add, or a retry released from the retry line),
//!   [`KeyNotes::timer_fired`] is called, so notes can wait for the timer they belong to; when
//!   it is cancelled ([`WorkQueue::settle`](super::WorkQueue::settle)),
//!   [`KeyNotes::timer_cancelled`].
//! - A duplicate add through [`WorkQueue::add_with_note_or_count`](super::WorkQueue::add_with_note_or_count)
//!   that finds the lock contended writes no note: it is counted in the slot, and the claim that
//!   takes the key hands the count over ([`KeyNotes::counted`]) just before [`KeyNotes::take`].
//! - `()` is the empty note: a queue without notes stores and does nothing.

/// The key an add's note is written for: the queue's copy, and the adder's own copy when the
/// queue already tracked the key (the add would drop it after the lock). A note that keeps the
/// key takes [`NoteKey::into_owned`], which hands over the adder's copy when there is one: no
/// clone, and no drop for the add (each writes a shared key's reference count).
#[derive(Debug)]
pub struct NoteKey<'a, K> {
    /// The queue's copy, looked up only when the adder has no spare one (the adder's is equal).
    tracked: Option<&'a K>,
    spare: &'a mut Option<K>,
}

impl<'a, K: Clone> NoteKey<'a, K> {
    /// The key `tracked` by the slot, and the adder's `spare` copy if the add did not store it;
    /// at least one of them is given.
    pub(crate) fn new(tracked: Option<&'a K>, spare: &'a mut Option<K>) -> Self {
        debug_assert!(tracked.is_some() || spare.is_some(), "a note key needs a copy of the key");
        Self { tracked, spare }
    }

    /// An owned copy of the key: the adder's if the queue did not need it, else a clone.
    pub fn into_owned(self) -> K {
        match self.spare.take() {
            Some(key) => key,
            // Invariant: `new` was given one copy or the other.
            None => self.tracked.expect("a note key has a copy of the key").clone(),
        }
    }
}

impl<K> std::ops::Deref for NoteKey<'_, K> {
    type Target = K;

    fn deref(&self) -> &K {
        // Invariant: `new` was given one copy or the other, and the spare is taken only by
        // `into_owned`, which consumes the note key.
        self.spare.as_ref().or(self.tracked).expect("a note key has a copy of the key")
    }
}

/// What a queue keeps per key beside its own state (see the module docs).
pub trait KeyNotes: Default + Send + 'static {
    /// What a claim receives (kept beside the claim's slot, see `claimed.rs`).
    type Taken: Default + Send + Sync + 'static;

    /// The key's pending timer fired: what waited for it is due now.
    fn timer_fired(&mut self);

    /// The key's pending timer was cancelled ([`WorkQueue::settle`]): what waited for it is
    /// dropped.
    ///
    /// [`WorkQueue::settle`]: super::WorkQueue::settle
    fn timer_cancelled(&mut self);

    /// A worker claimed the key: what is due goes to its claim; the rest stays.
    fn take(&mut self) -> Self::Taken;

    /// `count` duplicate adds were counted without the lock since the last claim (see the
    /// module docs); due with this claim. Notes that never take that path ignore it.
    fn counted(&mut self, count: u32) {
        let _ = count;
    }

    /// The key's slot is released: back to the empty note. Notes that can tell they are empty
    /// (the usual case: the last claim took them) skip the rewrite.
    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// No notes.
impl KeyNotes for () {
    type Taken = ();

    fn timer_fired(&mut self) {}

    fn timer_cancelled(&mut self) {}

    fn take(&mut self) {}

    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_note_key_reads_and_hands_over_the_adders_copy_or_else_clones_the_queues() {
        let queues: Arc<str> = "team/pg".into();
        let mut spare = Some(Arc::<str>::from("team/pg"));
        let adders = spare.clone().unwrap();
        let key = NoteKey::new(None, &mut spare);
        assert_eq!(&**key, "team/pg");
        assert!(Arc::ptr_eq(&key.into_owned(), &adders), "the adder's copy, not a clone of the queue's");
        assert!(spare.is_none(), "taken, so the add has nothing left to drop");

        let mut none = None;
        let key = NoteKey::new(Some(&queues), &mut none);
        assert_eq!(&**key, "team/pg");
        assert!(Arc::ptr_eq(&key.into_owned(), &queues), "a clone of the queue's copy");
    }
}
