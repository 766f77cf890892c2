//! What a caller keeps per key in the key's entry (the controller: why the key was queued, see
//! `runtime::controller::causes`), written by the add under the lock it takes anyway.

/// The key an add's note is written for: the queue's copy, and the adder's own copy when the
/// queue had the key already (the add would drop it after the lock).
#[derive(Debug)]
pub struct NoteKey<'a, K> {
    queued: &'a K,
    spare: &'a mut Option<K>,
}

impl<'a, K: Clone> NoteKey<'a, K> {
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

/// What a queue keeps per key beside its own state. Notes are written under the queue's lock by
/// the add that carries them (what the note closure returns is dropped after the lock), and are
/// dropped with the key's entry once the key tracks nothing. `()` is the empty note.
pub trait KeyNotes: Default + Send + 'static {
    /// What a claim receives.
    type Taken: Default + Send + Sync + 'static;

    /// The key's timer fired (a delayed add, or a retry released): what waited for it is due.
    fn timer_fired(&mut self);

    /// The key's timer was cancelled (`WorkQueue::settle`): what waited for it is dropped.
    fn timer_cancelled(&mut self);

    /// A worker claimed the key (under the lock): what is due goes to its claim; what is
    /// recorded after that belongs to the next pass.
    fn take(&mut self) -> Self::Taken;
}

/// No notes.
impl KeyNotes for () {
    type Taken = ();

    fn timer_fired(&mut self) {}

    fn timer_cancelled(&mut self) {}

    fn take(&mut self) {}
}
