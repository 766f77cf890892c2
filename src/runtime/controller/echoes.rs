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
//! An echo that arrives before its pass has ended still queues (the key is then processing and
//! runs once more, as before). An expectation that no event matches (the watch relisted past it)
//! is replaced by the key's next pass. So a pass never waits on this, and a skipped event is
//! always one whose state was known. The reconciler's side of the contract: a pass that still
//! has work to do ends `RequeueAfter`, at the time it needs the next look (a new cluster's first
//! pass, which only writes the initial status, ends `RequeueAfter(0)`). client-go,
//! controller-runtime and kube-runtime queue every such echo; controller-runtime users filter
//! with `GenerationChangedPredicate`, which also drops changes made by others to the status,
//! labels or annotations.

use dashmap::DashMap;

use crate::runtime::ObjectKey;
use crate::runtime::controller::writes::{KindName, Write};

/// Each key's expected echo: the resourceVersion of its last pass's last write to its own object.
#[derive(Debug, Default)]
pub(crate) struct OwnEchoes {
    expected: DashMap<ObjectKey, Box<str>>,
}

impl OwnEchoes {
    /// After a pass of `key` (whose own object is of `kind`) that `wrote`: expects the echo of
    /// its last write to that object if the pass ended as it chose (`chose`: `Done` or
    /// `RequeueAfter`), nothing otherwise. Returns whether it expects one.
    pub(crate) fn after_pass(&self, key: &ObjectKey, kind: KindName, chose: bool, wrote: &[Write]) -> bool {
        let own = wrote.iter().rev().find(|write| write.kind == kind && &write.key == key);
        match own.filter(|_| chose) {
            Some(write) => {
                self.expected.insert(key.clone(), write.resource_version.as_str().into());
                true
            }
            None => {
                self.expected.remove(key);
                false
            }
        }
    }

    /// Whether an update of `key`'s own object at `resource_version` is the echo its last pass
    /// expects; the expectation is used up if so.
    pub(crate) fn is_echo(&self, key: &ObjectKey, resource_version: Option<&str>) -> bool {
        let Some(resource_version) = resource_version else { return false };
        self.expected.remove_if(key, |_, expected| **expected == *resource_version).is_some()
    }

    /// Drops what is expected of `key` (its object is gone).
    pub(crate) fn forget(&self, key: &ObjectKey) {
        self.expected.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::controller::writes::{Verb, kind_name};

    fn write(kind: &str, name: &str, rv: &str) -> Write {
        Write {
            labels: Default::default(),
            verb: Verb::PatchStatus,
            kind: kind_name(kind),
            key: ObjectKey::namespaced("prod", name),
            resource_version: rv.into(),
        }
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
        echoes.after_pass(&key, kind, true, &wrote);
        assert!(!echoes.is_echo(&key, Some("10")), "not the last own write");
        assert!(!echoes.is_echo(&key, Some("11")), "a child's write");
        assert!(!echoes.is_echo(&key, None));
        assert!(echoes.is_echo(&key, Some("12")));
        assert!(!echoes.is_echo(&key, Some("12")), "used up");

        echoes.after_pass(&key, kind, true, &wrote);
        echoes.after_pass(&key, kind, false, &wrote);
        assert!(!echoes.is_echo(&key, Some("12")), "the next pass failed");

        echoes.after_pass(&key, kind, true, &wrote);
        echoes.after_pass(&key, kind, true, &wrote[1..2]);
        assert!(!echoes.is_echo(&key, Some("12")), "the next pass wrote no own object");

        echoes.after_pass(&key, kind, true, &wrote);
        echoes.forget(&key);
        assert!(!echoes.is_echo(&key, Some("12")), "forgotten with the object");
    }
}
