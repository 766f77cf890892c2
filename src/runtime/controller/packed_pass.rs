//! A pass's record as a key's history keeps it: packed into one byte string ([`PackedPass`]).
//!
//! Every key keeps its last passes for `/debug/queue/<namespace>/<name>` and the live page, so at
//! scale the history is the runtime's largest cost per key. A [`PassRecord`] is 176 bytes inline,
//! and its causes past the first, its writes and the keys they name are allocations of their own
//! (about 1 KB per pass in all at 2 000 clusters). Packed, a pass is one allocation of a few dozen
//! bytes, and the debug endpoints, which read histories rarely and one key at a time (or each
//! key's last pass), unpack it back into the same `PassRecord`.
//!
//! The packing (integers as LEB128 varints, signed ones zigzagged first):
//! - flags (the result, hot loop, error, stale-cache wait and its timeout), the start (in
//!   nanoseconds from an instant fixed for the process), the duration, the wait, the error's text;
//! - the causes: how many were dropped, how many are kept, then each one's type and what it
//!   holds: for an informer's event, the kind (its index among the interned kind names), the
//!   event type, the object and the resourceVersion; a duration; or a text;
//! - the writes: how many, then each one's verb, kind, object and resourceVersion.
//!
//! An object is the pass's own key (one byte), a name in the key's namespace, or a whole key; a
//! resourceVersion is absent, a number, or a text. The round-trip test covers every field and
//! variant.

use std::sync::{Arc, OnceLock};

use tokio::time::{Duration, Instant};

use crate::runtime::ObjectKey;
use crate::runtime::controller::PassResult;
use crate::runtime::controller::causes::{
    Cause, CauseLog, EventType, KeptCauses, ObjectEvent, ResourceVersion,
};
use crate::runtime::controller::freshness::Waited;
use crate::runtime::controller::writes::{KindName, PassWrite, Verb};
use crate::runtime::observe::introspection::PassRecord;

/// One pass of a key, packed (see the module docs). Unpacking needs the key it was packed for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedPass(Box<[u8]>);

const RESULTS: [PassResult; 6] = [
    PassResult::Success,
    PassResult::RequeueAfter,
    PassResult::Error,
    PassResult::TerminalError,
    PassResult::Panic,
    PassResult::Timeout,
];
const VERBS: [Verb; 5] = [Verb::Create, Verb::Apply, Verb::Patch, Verb::PatchStatus, Verb::Write];
const EVENTS: [EventType; 3] = [EventType::Added, EventType::Modified, EventType::Deleted];

const RESULT_BITS: u8 = 0b111;
const HOT_LOOP: u8 = 1 << 3;
const HAS_ERROR: u8 = 1 << 4;
const HAS_WAIT: u8 = 1 << 5;
const WAIT_TIMED_OUT: u8 = 1 << 6;

const KEY_OWN: u8 = 0;
const KEY_SAME_NAMESPACE: u8 = 1;
const KEY_NAMESPACED: u8 = 2;
const KEY_CLUSTER: u8 = 3;

const RV_NONE: u8 = 0;
const RV_NUMBER: u8 = 1;
const RV_TEXT: u8 = 2;

const WATCH: u8 = 0;
const MAPPED: u8 = 1;
const LISTED: u8 = 2;
const LEADER_CHANGE: u8 = 3;
const REQUEUE_AFTER: u8 = 4;
const RETRY: u8 = 5;
const EXPLICIT: u8 = 6;

impl PackedPass {
    /// `pass` of `key`, packed.
    pub fn pack(key: &ObjectKey, pass: &PassRecord) -> Self {
        let mut out = Packer { bytes: Vec::with_capacity(64), key };
        let mut flags = position(&RESULTS, &pass.result);
        flags |= if pass.hot_loop { HOT_LOOP } else { 0 };
        flags |= if pass.error.is_some() { HAS_ERROR } else { 0 };
        flags |= if pass.stale_cache_wait.is_some() { HAS_WAIT } else { 0 };
        flags |= if pass.stale_cache_wait.as_ref().is_some_and(|w| w.timed_out) { WAIT_TIMED_OUT } else { 0 };
        out.byte(flags);
        out.signed(since_base(pass.started));
        out.duration(pass.took);
        if let Some(wait) = &pass.stale_cache_wait {
            out.duration(wait.waited);
        }
        if let Some(error) = &pass.error {
            out.text(error);
        }
        out.number(pass.causes.more);
        out.number(pass.causes.kept.len() as u64);
        for cause in &pass.causes.kept {
            out.cause(cause);
        }
        out.number(pass.writes.len() as u64);
        for write in pass.writes.iter() {
            out.byte(position(&VERBS, &write.verb));
            out.kind(write.kind);
            out.object(&write.key);
            out.resource_version(Some(&write.resource_version));
        }
        Self(out.bytes.into_boxed_slice())
    }

    /// The pass of `key` this was packed from.
    pub fn unpack(&self, key: &ObjectKey) -> PassRecord {
        // Invariant: the bytes were written by `pack`, which `read` reads field for field.
        self.read(key).expect("a packed pass reads back")
    }

    /// When the pass ended (read from the first fields alone, for ordering passes across keys).
    pub fn finished(&self) -> Instant {
        let mut input = Unpacker { bytes: &self.0, key: None };
        let header = input.byte().and_then(|_| Some((input.signed()?, input.duration()?)));
        // Invariant: `pack` writes the flags, the start and the duration first.
        let (started, took) = header.expect("a packed pass starts with its times");
        at_offset(started) + took
    }

    fn read(&self, key: &ObjectKey) -> Option<PassRecord> {
        let mut input = Unpacker { bytes: &self.0, key: Some(key) };
        let flags = input.byte()?;
        let result = *RESULTS.get(usize::from(flags & RESULT_BITS))?;
        let started = at_offset(input.signed()?);
        let took = input.duration()?;
        let stale_cache_wait = match flags & HAS_WAIT {
            0 => None,
            _ => Some(Waited { waited: input.duration()?, timed_out: flags & WAIT_TIMED_OUT != 0 }),
        };
        let error = match flags & HAS_ERROR {
            0 => None,
            _ => Some(Box::from(input.text()?)),
        };
        let more = input.number()?;
        let kept = (0..input.number()?).map(|_| input.cause()).collect::<Option<KeptCauses>>()?;
        let writes = (0..input.number()?)
            .map(|_| {
                Some(PassWrite {
                    verb: *VERBS.get(usize::from(input.byte()?))?,
                    kind: input.kind()?,
                    key: input.object()?,
                    resource_version: input.resource_version()??,
                })
            })
            .collect::<Option<Box<[PassWrite]>>>()?;
        input.bytes.is_empty().then_some(PassRecord {
            causes: CauseLog { kept, more },
            started,
            result,
            error,
            took,
            writes,
            stale_cache_wait,
            hot_loop: flags & HOT_LOOP != 0,
        })
    }
}

/// The index of `item` in `all` (every variant is listed), as a byte.
fn position<T: PartialEq>(all: &[T], item: &T) -> u8 {
    // Invariant: the tables above list every variant of their enum, and fewer than 256.
    all.iter().position(|known| known == item).and_then(|i| u8::try_from(i).ok()).expect("a listed variant")
}

/// The instant packed times count from: fixed once for the process.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Nanoseconds from [`base`] to `at` (negative before it).
fn since_base(at: Instant) -> i64 {
    let base = base();
    match at.checked_duration_since(base) {
        Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        None => i64::try_from(base.duration_since(at).as_nanos()).map_or(i64::MIN, |before| -before),
    }
}

/// The instant `offset` nanoseconds from [`base`].
fn at_offset(offset: i64) -> Instant {
    let base = base();
    let distance = Duration::from_nanos(offset.unsigned_abs());
    let at = if offset >= 0 { base.checked_add(distance) } else { base.checked_sub(distance) };
    // An offset `since_base` made from a real instant maps back to it.
    at.unwrap_or(base)
}

/// Writes the fields of a pass of `key`.
struct Packer<'a> {
    bytes: Vec<u8>,
    key: &'a ObjectKey,
}

impl Packer<'_> {
    fn byte(&mut self, byte: u8) {
        self.bytes.push(byte);
    }

    fn number(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.bytes.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.bytes.push(value as u8);
    }

    fn signed(&mut self, value: i64) {
        self.number(((value << 1) ^ (value >> 63)) as u64);
    }

    fn duration(&mut self, duration: Duration) {
        self.number(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }

    fn text(&mut self, text: &str) {
        self.number(text.len() as u64);
        self.bytes.extend_from_slice(text.as_bytes());
    }

    fn kind(&mut self, kind: KindName) {
        self.number(kind.index() as u64);
    }

    fn object(&mut self, object: &ObjectKey) {
        if object == self.key {
            self.byte(KEY_OWN);
        } else if object.namespace() == self.key.namespace() {
            self.byte(KEY_SAME_NAMESPACE);
            self.text(object.name());
        } else if let Some(namespace) = object.namespace() {
            self.byte(KEY_NAMESPACED);
            self.text(namespace);
            self.text(object.name());
        } else {
            self.byte(KEY_CLUSTER);
            self.text(object.name());
        }
    }

    fn resource_version(&mut self, version: Option<&ResourceVersion>) {
        match version {
            None => self.byte(RV_NONE),
            Some(ResourceVersion::Number(number)) => {
                self.byte(RV_NUMBER);
                self.number(*number);
            }
            Some(ResourceVersion::Text(text)) => {
                self.byte(RV_TEXT);
                self.text(text);
            }
        }
    }

    fn event(&mut self, tag: u8, event: &ObjectEvent) {
        self.byte(tag);
        self.kind(event.informer);
        self.byte(position(&EVENTS, &event.event));
        self.object(&event.object);
        self.resource_version(event.resource_version.as_ref());
    }

    fn cause(&mut self, cause: &Cause) {
        match cause {
            Cause::Watch(event) => self.event(WATCH, event),
            Cause::Mapped(event) => self.event(MAPPED, event),
            Cause::Listed(event) => self.event(LISTED, event),
            Cause::LeaderChange(event) => self.event(LEADER_CHANGE, event),
            Cause::RequeueAfter(after) => {
                self.byte(REQUEUE_AFTER);
                self.duration(*after);
            }
            Cause::Retry(error) => {
                self.byte(RETRY);
                self.text(error);
            }
            Cause::Explicit(reason) => {
                self.byte(EXPLICIT);
                self.text(reason);
            }
        }
    }
}

/// Reads what [`Packer`] wrote; `None` where the bytes end early or hold no such value. `key` is
/// the pass's own key (`None` while reading the times alone).
struct Unpacker<'a> {
    bytes: &'a [u8],
    key: Option<&'a ObjectKey>,
}

impl<'a> Unpacker<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(first)
    }

    fn number(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn signed(&mut self) -> Option<i64> {
        let zigzag = self.number()?;
        Some((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64))
    }

    fn duration(&mut self) -> Option<Duration> {
        self.number().map(Duration::from_nanos)
    }

    fn text(&mut self) -> Option<&'a str> {
        let len = usize::try_from(self.number()?).ok()?;
        let (text, rest) = self.bytes.split_at_checked(len)?;
        self.bytes = rest;
        std::str::from_utf8(text).ok()
    }

    fn kind(&mut self) -> Option<KindName> {
        KindName::by_index(usize::try_from(self.number()?).ok()?)
    }

    fn object(&mut self) -> Option<ObjectKey> {
        let key = self.key?;
        Some(match self.byte()? {
            KEY_OWN => key.clone(),
            KEY_SAME_NAMESPACE => ObjectKey::new(key.namespace(), self.text()?),
            KEY_NAMESPACED => {
                let namespace = self.text()?;
                ObjectKey::namespaced(namespace, self.text()?)
            }
            KEY_CLUSTER => ObjectKey::cluster(self.text()?),
            _ => return None,
        })
    }

    /// `Some(None)` for an absent resourceVersion.
    fn resource_version(&mut self) -> Option<Option<ResourceVersion>> {
        Some(match self.byte()? {
            RV_NONE => None,
            RV_NUMBER => Some(ResourceVersion::Number(self.number()?)),
            RV_TEXT => Some(ResourceVersion::Text(Arc::new(self.text()?.to_owned()))),
            _ => return None,
        })
    }

    fn event(&mut self) -> Option<ObjectEvent> {
        Some(ObjectEvent {
            informer: self.kind()?,
            event: *EVENTS.get(usize::from(self.byte()?))?,
            object: self.object()?,
            resource_version: self.resource_version()?,
        })
    }

    fn cause(&mut self) -> Option<Cause> {
        Some(match self.byte()? {
            WATCH => Cause::Watch(self.event()?),
            MAPPED => Cause::Mapped(self.event()?),
            LISTED => Cause::Listed(self.event()?),
            LEADER_CHANGE => Cause::LeaderChange(self.event()?),
            REQUEUE_AFTER => Cause::RequeueAfter(self.duration()?),
            RETRY => Cause::Retry(Arc::from(self.text()?)),
            EXPLICIT => Cause::Explicit(Arc::from(self.text()?)),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::controller::writes::kind_name;

    fn event(object: ObjectKey, rv: Option<&str>) -> ObjectEvent {
        ObjectEvent {
            informer: kind_name("apps/StatefulSet"),
            event: EventType::Modified,
            object,
            resource_version: rv.map(ResourceVersion::from),
        }
    }

    fn write(verb: Verb, kind: &str, key: ObjectKey, rv: &str) -> PassWrite {
        PassWrite { verb, kind: kind_name(kind), key, resource_version: ResourceVersion::from(rv) }
    }

    #[test]
    fn a_pass_reads_back_as_it_was_packed() {
        let key = ObjectKey::namespaced("prod", "pg");
        let now = Instant::now();
        let child = ObjectKey::namespaced("prod", "pg-0");
        let elsewhere = ObjectKey::namespaced("other", "pg");
        let cluster_scoped = ObjectKey::cluster("node-1");
        let kept: KeptCauses = [
            Cause::Watch(event(key.clone(), Some("4312"))),
            Cause::Mapped(ObjectEvent { event: EventType::Deleted, ..event(child.clone(), Some("007")) }),
            Cause::Listed(ObjectEvent { event: EventType::Added, ..event(elsewhere.clone(), None) }),
            Cause::LeaderChange(event(cluster_scoped.clone(), Some("18446744073709551615"))),
            Cause::RequeueAfter(Duration::from_millis(1500)),
            Cause::Retry(Arc::from("connection refused: é")),
            Cause::Explicit(Arc::from("")),
        ]
        .into_iter()
        .collect();
        let writes: Box<[PassWrite]> = Box::new([
            write(Verb::Create, "StatefulSet", child, "12"),
            write(Verb::Apply, "v1/Service", elsewhere, "not-a-number"),
            write(Verb::Patch, "Secret", cluster_scoped, "0"),
            write(Verb::PatchStatus, "dbcluster.example.com/DatabaseCluster", key.clone(), "13"),
            write(Verb::Write, "Pod", key.clone(), "14"),
        ]);
        let results = RESULTS.iter().enumerate();
        for (i, &result) in results {
            let pass = PassRecord {
                causes: CauseLog { kept: kept.clone(), more: 300 + i as u64 },
                started: if i % 2 == 0 {
                    now + Duration::from_nanos(7)
                } else {
                    now - Duration::from_secs(3)
                },
                result,
                error: (i % 2 == 1).then(|| Box::from("conflict on Secret prod/pg-app")),
                took: Duration::from_nanos(1_234_567_891 * i as u64),
                writes: if i == 0 { Box::new([]) } else { writes.clone() },
                stale_cache_wait: (i > 2)
                    .then_some(Waited { waited: Duration::from_millis(40), timed_out: i == 4 }),
                hot_loop: i == 5,
            };
            let packed = PackedPass::pack(&key, &pass);
            assert_eq!(packed.unpack(&key), pass, "result {result:?}");
            assert_eq!(packed.finished(), pass.finished());
        }
    }

    #[test]
    fn a_quiet_pass_packs_into_a_few_bytes() {
        let key = ObjectKey::namespaced("team-7", "pg-cluster-42");
        let own_event = Cause::Watch(event(key.clone(), Some("4312")));
        let pass = PassRecord {
            causes: CauseLog { kept: [own_event].into_iter().collect(), more: 0 },
            started: Instant::now(),
            result: PassResult::Success,
            error: None,
            took: Duration::from_micros(850),
            writes: Box::new([write(Verb::PatchStatus, "DatabaseCluster", key.clone(), "4313")]),
            stale_cache_wait: None,
            hot_loop: false,
        };
        let packed = PackedPass::pack(&key, &pass);
        // Flags, two times, the cause (type, kind, event, own key, rv) and the write (verb, kind,
        // own key, rv): the keys are one byte each, the numbers a few.
        assert!(packed.0.len() <= 24, "{} bytes", packed.0.len());
        assert_eq!(packed.unpack(&key), pass);
    }
}
