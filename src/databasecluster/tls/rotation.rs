//! The cluster's CA renewed before it expires, decided purely ([`plan_ca`]), without breaking a
//! client mid-rotation.
//!
//! Every `ca.crt` the operator writes (the leaves' Secrets, which the instances and backups trust,
//! and the login Secrets, which applications trust) is the [`CaSet::trust_bundle`]: the signing
//! CA, and during a rotation the next one or the previous one too. With `E` the signing CA's
//! expiry, `V` a leaf's validity and `R` its renewal margin ([`Lifetimes`]):
//!
//! 1. **Publish** at `E - 2V`: a new CA is made and stored beside the signing one (`next.crt`,
//!    `next.key` in `<name>-ca`). It signs nothing yet; every `ca.crt` now carries both, so
//!    clients learn to trust it while every certificate they meet is still the old CA's.
//! 2. **Promote** at `E - V`, and no sooner than `V - R` after the publication (time for every
//!    copy of `ca.crt` to be refreshed, mounted Secrets included), but always before `E - R`: the
//!    next CA signs from now on (`ca.crt`, `ca.key`) and the old one stays trusted as
//!    `previous.crt`. Every leaf is then issued again under the new CA (it is no longer signed by
//!    the live one: [`super::renew::leaf_action`]); a client holding either bundle verifies
//!    either certificate.
//! 3. **Retire**: the previous CA leaves the bundles once it has expired.
//!
//! A leaf never outlives its CA ([`super::issue::issue_leaf`]); since promotion comes before
//! `E - R`, a leaf capped at `E` is never within its margin before the CA is replaced, so no
//! pass re-issues it in a loop. A CA that is missing or unreadable is made anew (a new cluster, or
//! a Secret the user emptied): then there is no overlap, as there is nothing to overlap with.

use jiff::{SignedDuration, Timestamp};

use super::issue::{BACKDATE, IssueError, KeyPem, not_after, not_before};
use super::renew::Lifetimes;

/// The CAs of a cluster: the one that signs, and during a rotation the next or the previous one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaSet {
    /// The signing CA.
    pub current: KeyPem,
    /// The CA published ahead of its promotion (trusted, signing nothing yet).
    pub next: Option<KeyPem>,
    /// The CA replaced, trusted until it expires (its certificate only: its key is dropped).
    pub previous: Option<String>,
}

impl CaSet {
    /// A set of one CA.
    pub fn new(current: KeyPem) -> CaSet {
        CaSet { current, next: None, previous: None }
    }

    /// Every CA to trust, PEM concatenated: the signing one first.
    pub fn trust_bundle(&self) -> String {
        let mut pems = vec![self.current.cert.trim_end()];
        pems.extend(self.next.as_ref().map(|next| next.cert.trim_end()));
        pems.extend(self.previous.as_deref().map(str::trim_end));
        let mut bundle = pems.join("\n");
        bundle.push('\n');
        bundle
    }
}

/// What [`plan_ca`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaStep {
    /// Nothing: the set is as it was (but a previous CA that expired is dropped).
    Keep,
    /// A new CA, none being usable.
    Issued,
    /// A next CA published.
    Published,
    /// The next CA promoted to signing.
    Promoted,
}

fn span(duration: std::time::Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

fn before(at: Timestamp, duration: SignedDuration) -> Timestamp {
    at.checked_sub(duration).unwrap_or(Timestamp::MIN)
}

/// When a next CA is published: `E - 2V`.
pub fn publish_at(expiry: Timestamp, lifetimes: Lifetimes) -> Timestamp {
    before(expiry, span(lifetimes.leaf) * 2)
}

/// When a next CA published at `published` is promoted: `E - V`, no sooner than `V - R` after
/// its publication, and no later than `E - R`.
pub fn promote_at(expiry: Timestamp, published: Timestamp, lifetimes: Lifetimes) -> Timestamp {
    let (leaf, margin) = (span(lifetimes.leaf), span(lifetimes.renew_before));
    let overlap_end = published.checked_add(leaf - margin).unwrap_or(Timestamp::MAX);
    before(expiry, leaf).max(overlap_end).min(before(expiry, margin))
}

/// When a CA was published: its validity's start, which [`super::issue::issue_ca`] backdates.
fn published(next: &KeyPem) -> Timestamp {
    not_before(&next.cert).map(|at| at.checked_add(span(BACKDATE)).unwrap_or(at)).unwrap_or(Timestamp::MIN)
}

/// `set` with its next CA signing and its current one kept as the previous; when its rotation is
/// next due (the new CA's publication, or the old one's retirement).
fn promote(
    mut set: CaSet,
    next: KeyPem,
    expiry: Timestamp,
    lifetimes: Lifetimes,
) -> (CaSet, Option<Timestamp>) {
    let old = std::mem::replace(&mut set.current, next);
    set.previous = Some(old.cert);
    let due = not_after(&set.current.cert).ok().map(|at| publish_at(at, lifetimes)).min(Some(expiry));
    (set, due)
}

/// The CA set after this pass, what was done, and when the next step is due. `live` is what the
/// CA's Secret holds; `issue` makes a new CA (the only impure part: its key).
pub fn plan_ca(
    live: Option<CaSet>,
    now: Timestamp,
    lifetimes: Lifetimes,
    issue: impl FnOnce() -> Result<KeyPem, IssueError>,
) -> Result<(CaSet, CaStep, Option<Timestamp>), IssueError> {
    let live = live.and_then(|set| not_after(&set.current.cert).ok().map(|expiry| (set, expiry)));
    let Some((mut set, expiry)) = live else {
        let set = CaSet::new(issue()?);
        let due = not_after(&set.current.cert).ok().map(|expiry| publish_at(expiry, lifetimes));
        return Ok((set, CaStep::Issued, due));
    };
    let previous_expiry = set.previous.as_deref().and_then(|pem| not_after(pem).ok());
    if previous_expiry.is_none_or(|at| at <= now) {
        set.previous = None;
    }
    let retire = set.previous.as_ref().and(previous_expiry);
    let (next, step) = match set.next.take() {
        Some(next) => (next, CaStep::Keep),
        None if now >= publish_at(expiry, lifetimes) => (issue()?, CaStep::Published),
        None => {
            return Ok((
                set,
                CaStep::Keep,
                Some(publish_at(expiry, lifetimes)).into_iter().chain(retire).min(),
            ));
        }
    };
    let promote_at = promote_at(expiry, published(&next), lifetimes);
    if now >= promote_at {
        // Published this pass too late for an overlap (the CA is within the leaves' margin):
        // promoted at once, as there is no time left to wait.
        let (set, due) = promote(set, next, expiry, lifetimes);
        return Ok((set, CaStep::Promoted, due));
    }
    set.next = Some(next);
    Ok((set, step, Some(promote_at).into_iter().chain(retire).min()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::databasecluster::tls::issue::issue_ca;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// Leaves of 60 s renewed 40 s ahead: publish at E - 120 s, promote at E - 60 s.
    fn lifetimes() -> Lifetimes {
        Lifetimes::with_leaves(60, 40).unwrap()
    }

    fn ca(now: Timestamp, secs: u64) -> KeyPem {
        issue_ca("default/db", now, Duration::from_secs(secs)).unwrap()
    }

    #[test]
    fn a_ca_is_published_then_promoted_then_its_predecessor_retired() {
        let start = at("2026-12-07T12:00:00Z");
        let first = ca(start, 300); // E = start + 300 s
        let plan = |set: &CaSet, now: Timestamp, made: Timestamp| {
            plan_ca(Some(set.clone()), now, lifetimes(), || Ok(ca(made, 3600))).unwrap()
        };
        let sec = |s: i64| start + SignedDuration::from_secs(s);
        let set = CaSet::new(first.clone());
        assert_eq!(plan(&set, sec(179), sec(179)), (set.clone(), CaStep::Keep, Some(sec(180))));

        let (published, step, due) = plan(&set, sec(180), sec(180));
        assert_eq!((step, due), (CaStep::Published, Some(sec(240))), "promoted at E - V");
        assert_eq!(published.current, first, "the old CA still signs");
        let next = published.next.clone().unwrap();
        let bundle = published.trust_bundle();
        assert!(bundle.starts_with(first.cert.trim_end()) && bundle.contains(next.cert.trim_end()));

        assert_eq!(plan(&published, sec(239), sec(239)), (published.clone(), CaStep::Keep, Some(sec(240))));
        let (promoted, step, _) = plan(&published, sec(240), sec(240));
        assert_eq!(step, CaStep::Promoted);
        assert_eq!(
            (promoted.current.clone(), promoted.previous.clone()),
            (next.clone(), Some(first.cert.clone()))
        );
        assert!(promoted.trust_bundle().contains(first.cert.trim_end()), "the old CA stays trusted");

        let (kept, step, due) = plan(&promoted, sec(299), sec(299));
        assert_eq!((step, due), (CaStep::Keep, Some(sec(300))), "the old CA's expiry is the next look");
        assert_eq!(kept.previous, Some(first.cert.clone()));
        let (retired, _, _) = plan(&promoted, sec(300), sec(300));
        assert_eq!(retired, CaSet::new(next), "retired once expired");
    }

    #[test]
    fn a_late_publication_still_overlaps_and_promotion_comes_before_the_margin() {
        let start = at("2026-12-07T12:00:00Z");
        let expiry = start + SignedDuration::from_secs(100);
        let sec = |s: i64| start + SignedDuration::from_secs(s);
        // Published at E - 100 s (later than E - 2V): V - R = 20 s of overlap, so E - V = E - 60 s.
        assert_eq!(promote_at(expiry, sec(0), lifetimes()), sec(40));
        // Published at E - 50 s: 20 s of overlap would end at E - 30 s, past E - R = E - 40 s.
        assert_eq!(promote_at(expiry, sec(50), lifetimes()), sec(60));
        // Published at E - 75 s: the overlap ends at E - 55 s.
        assert_eq!(promote_at(expiry, sec(25), lifetimes()), sec(45));
    }

    #[test]
    fn a_ca_already_within_the_margin_is_replaced_at_once() {
        let now = at("2026-12-07T12:00:00Z");
        let old = ca(now, 30); // within R = 40 s
        let new = ca(now, 3600);
        let (set, step, _) =
            plan_ca(Some(CaSet::new(old.clone())), now, lifetimes(), || Ok(new.clone())).unwrap();
        assert_eq!(step, CaStep::Promoted);
        assert_eq!(set, CaSet { current: new, next: None, previous: Some(old.cert) });
    }

    #[test]
    fn a_missing_or_unreadable_ca_is_made_anew() {
        let now = at("2026-12-07T12:00:00Z");
        let fresh = ca(now, 3600);
        let (set, step, due) = plan_ca(None, now, lifetimes(), || Ok(fresh.clone())).unwrap();
        assert_eq!((set, step), (CaSet::new(fresh.clone()), CaStep::Issued));
        assert_eq!(due, Some(now + SignedDuration::from_secs(3600 - 120)));
        let broken = CaSet::new(KeyPem { cert: "garbage".into(), key: "garbage".into() });
        let (set, step, _) = plan_ca(Some(broken), now, lifetimes(), || Ok(fresh.clone())).unwrap();
        assert_eq!((set, step), (CaSet::new(fresh), CaStep::Issued));
    }
}
