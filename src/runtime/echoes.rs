//! The echo of a pass's own write: the watch event that brings back what a pass wrote to its
//! key's own object (a status patch, usually) queues no pass when that pass ended as it chose,
//! `Done` or `RequeueAfter`.
//!
//! The rule: when a pass ends `Done` or `RequeueAfter` having written its key's own object, the
//! resourceVersion the server returned for its last such write is remembered. An update of that
//! object delivered by the watch at exactly that resourceVersion is the write coming back: the
//! pass that wrote it already knew that state and chose what comes next (nothing, or a pass at
//! the time it asked for), so it is not queued. Anything else queues as before:
//! - another resourceVersion (someone else wrote the object, or wrote it again since);
//! - an echo of a pass that failed (its retry is due anyway, and the error may be the write's);
//! - an echo of a write to a child;
//! - a list, a relist or a replay.
//!
//! An echo can arrive before its pass has ended (the write's response and its watch event race).
//! So an update of the key's own object that arrives while the key is in a pass is held
//! ([`OwnEchoes::arrived`]) until the pass ends: then it is dropped if it is the echo the pass
//! expects, and queued with its cause otherwise, as it would have been on arrival (the key was
//! processing, so it runs once more either way). An expectation that no event matches (the watch
//! relisted past it) is replaced by the key's next pass. So a pass never waits on this, and a
//! skipped event is always one whose state was known. The reconciler's side of the contract: a pass that still
//! has work to do ends `RequeueAfter`, at the time it needs the next look (a new cluster's first
//! pass, which only writes the initial status, ends `RequeueAfter(0)`). client-go,
//! controller-runtime and kube-runtime queue every such echo; controller-runtime users filter
//! with `GenerationChangedPredicate`, which also drops changes made by others to the status,
//! labels or annotations.

use dashmap::DashMap;

use crate::runtime::ObjectKey;
use crate::runtime::causes::Cause;
use crate::runtime::writes::{KindName, Write};

/// Each key's expected echo (the resourceVersion of its last pass's last write to its own
/// object), and the updates of its own object held while it is in a pass.
#[derive(Debug, Default)]
pub(crate) struct OwnEchoes {
    expected: DashMap<ObjectKey, Box<str>>,
    in_pass: DashMap<ObjectKey, Vec<HeldUpdate>>,
}

/// An update of a key's own object that arrived during the key's pass.
#[derive(Debug)]
struct HeldUpdate {
    resource_version: Option<Box<str>>,
    cause: Cause,
}

/// What becomes of an update of a key's own object on arrival.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The echo the key's last pass expects: no pass.
    Echo,
    /// Held until the key's pass ends ([`OwnEchoes::after_pass`] decides).
    Held,
    /// Queued as any other event.
    Queued,
}

/// What [`OwnEchoes::after_pass`] found.
#[derive(Debug, Default)]
pub(crate) struct AfterPass {
    /// An echo of the pass's write is expected (so that write cannot queue the key again).
    pub(crate) echo_expected: bool,
    /// The causes of the held updates that were not the pass's echo: to be queued now.
    pub(crate) to_queue: Vec<Cause>,
}

impl OwnEchoes {
    /// `key` starts a pass: updates of its own object are held until [`OwnEchoes::after_pass`].
    pub(crate) fn before_pass(&self, key: &ObjectKey) {
        self.in_pass.insert(key.clone(), Vec::new());
    }

    /// An update of `key`'s own object at `resource_version`, delivered by the watch, whose
    /// cause `cause` builds: held while the key is in a pass, skipped when it is the echo the
    /// last pass expects (used up then), queued otherwise.
    pub(crate) fn arrived(
        &self,
        key: &ObjectKey,
        resource_version: Option<&str>,
        cause: impl FnOnce() -> Cause,
    ) -> Arrival {
        if let Some(mut held) = self.in_pass.get_mut(key) {
            held.push(HeldUpdate { resource_version: resource_version.map(Into::into), cause: cause() });
            return Arrival::Held;
        }
        let Some(resource_version) = resource_version else { return Arrival::Queued };
        match self.expected.remove_if(key, |_, expected| **expected == *resource_version) {
            Some(_) => Arrival::Echo,
            None => Arrival::Queued,
        }
    }

    /// After a pass of `key` (whose own object is of `kind`) that `wrote`: expects the echo of
    /// its last write to that object if the pass ended as it chose (`chose`: `Done` or
    /// `RequeueAfter`), nothing otherwise; then ends the hold, and returns the held updates
    /// that are not that echo.
    pub(crate) fn after_pass(
        &self,
        key: &ObjectKey,
        kind: KindName,
        chose: bool,
        wrote: &[Write],
    ) -> AfterPass {
        let own = wrote.iter().rev().find(|write| write.kind == kind && &write.key == key);
        let expected = own.filter(|_| chose).map(|write| write.resource_version.as_str());
        match expected {
            // Expected before the hold ends: an echo arriving in between is skipped either way.
            Some(expected) => {
                self.expected.insert(key.clone(), expected.into());
            }
            None => {
                self.expected.remove(key);
            }
        }
        let held = self.in_pass.remove(key).map(|(_, held)| held).unwrap_or_default();
        let mut to_queue = Vec::new();
        for update in held {
            let echo = expected.is_some() && update.resource_version.as_deref() == expected;
            if echo && self.expected.remove(key).is_some() {
                continue;
            }
            to_queue.push(update.cause);
        }
        AfterPass { echo_expected: expected.is_some(), to_queue }
    }

    /// Drops what is expected of `key` (its object is gone).
    pub(crate) fn forget(&self, key: &ObjectKey) {
        self.expected.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::writes::{Verb, kind_name};

    fn write(kind: &str, name: &str, rv: &str) -> Write {
        Write {
            labels: Default::default(),
            verb: Verb::PatchStatus,
            kind: kind_name(kind),
            key: ObjectKey::namespaced("prod", name),
            resource_version: rv.into(),
        }
    }

    fn cause() -> Cause {
        Cause::Explicit("an update".into())
    }

    #[test]
    fn only_the_last_own_write_of_a_pass_that_chose_its_next_step_is_an_echo_and_only_once() {
        let echoes = OwnEchoes::default();
        let key = ObjectKey::namespaced("prod", "pg");
        let kind = kind_name("example.com/DatabaseCluster");
        let wrote = [
            write("example.com/DatabaseCluster", "pg", "10"),
            write("StatefulSet", "pg", "11"),
            write("example.com/DatabaseCluster", "pg", "12"),
            write("example.com/DatabaseCluster", "other", "13"),
        ];
        let arrived = |rv| echoes.arrived(&key, rv, cause);
        assert!(echoes.after_pass(&key, kind, true, &wrote).echo_expected);
        assert_eq!(arrived(Some("10")), Arrival::Queued, "not the last own write");
        assert_eq!(arrived(Some("11")), Arrival::Queued, "a child's write");
        assert_eq!(arrived(None), Arrival::Queued);
        assert_eq!(arrived(Some("12")), Arrival::Echo);
        assert_eq!(arrived(Some("12")), Arrival::Queued, "used up");

        echoes.after_pass(&key, kind, true, &wrote);
        assert!(!echoes.after_pass(&key, kind, false, &wrote).echo_expected);
        assert_eq!(arrived(Some("12")), Arrival::Queued, "the next pass failed");

        echoes.after_pass(&key, kind, true, &wrote);
        assert!(!echoes.after_pass(&key, kind, true, &wrote[1..2]).echo_expected);
        assert_eq!(arrived(Some("12")), Arrival::Queued, "the next pass wrote no own object");

        echoes.after_pass(&key, kind, true, &wrote);
        echoes.forget(&key);
        assert_eq!(arrived(Some("12")), Arrival::Queued, "forgotten with the object");
    }

    #[test]
    fn updates_during_a_pass_are_held_and_only_its_echo_is_dropped_when_it_ends() {
        let echoes = OwnEchoes::default();
        let key = ObjectKey::namespaced("prod", "pg");
        let kind = kind_name("example.com/DatabaseCluster");
        let wrote = [write("example.com/DatabaseCluster", "pg", "12")];
        let arrived = |rv| echoes.arrived(&key, rv, cause);

        echoes.before_pass(&key);
        assert_eq!(arrived(Some("12")), Arrival::Held, "the echo, before its pass ended");
        assert_eq!(arrived(Some("14")), Arrival::Held, "someone else's write");
        let after = echoes.after_pass(&key, kind, true, &wrote);
        assert!(after.echo_expected);
        assert_eq!(after.to_queue.len(), 1, "the other write is queued, the echo not");
        assert_eq!(arrived(Some("12")), Arrival::Queued, "the echo was used up");

        echoes.before_pass(&key);
        assert_eq!(arrived(Some("16")), Arrival::Held);
        let after = echoes.after_pass(&key, kind, false, &[write("example.com/DatabaseCluster", "pg", "16")]);
        assert_eq!(after.to_queue.len(), 1, "a failed pass's echo is queued");
        assert_eq!(arrived(Some("17")), Arrival::Queued, "no longer in a pass");
    }
}
