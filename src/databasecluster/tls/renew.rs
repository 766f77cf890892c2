//! When a certificate is issued again, decided purely ([`leaf_action`]), and how long the
//! operator's certificates live ([`Lifetimes`]).
//!
//! Defaults: the CA 10 years, a leaf 90 days, renewed 30 days before it expires (so a leaf is
//! replaced every 60 days, with a month to notice a renewal that fails). The operator's flags
//! `--certificate-validity` and `--certificate-renew-before` (env `CERTIFICATE_VALIDITY`,
//! `CERTIFICATE_RENEW_BEFORE`, in seconds) change the leaves' figures, so tests can use minutes.

use std::sync::OnceLock;
use std::time::Duration;

use jiff::Timestamp;

/// How long the operator's certificates live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    /// The CA's validity.
    pub ca: Duration,
    /// A leaf certificate's validity.
    pub leaf: Duration,
    /// How long before its expiry a leaf is issued again (less than [`Lifetimes::leaf`]).
    pub renew_before: Duration,
}

const DAY: u64 = 86_400;

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            ca: Duration::from_secs(3650 * DAY),
            leaf: Duration::from_secs(90 * DAY),
            renew_before: Duration::from_secs(30 * DAY),
        }
    }
}

impl Lifetimes {
    /// With the leaves' validity and margin in seconds; `None` when the margin is not below the
    /// validity (every pass would renew), or twice the validity is not below the CA's (its
    /// rotation starts that long before it expires: [`super::rotation`]).
    pub fn with_leaves(validity_secs: u64, renew_before_secs: u64) -> Option<Lifetimes> {
        let ca = Lifetimes::default().ca.as_secs();
        let fits = validity_secs.checked_mul(2).is_some_and(|twice| twice < ca);
        (renew_before_secs < validity_secs && validity_secs > 0 && fits).then(|| Lifetimes {
            leaf: Duration::from_secs(validity_secs),
            renew_before: Duration::from_secs(renew_before_secs),
            ..Lifetimes::default()
        })
    }
}

static LIFETIMES: OnceLock<Lifetimes> = OnceLock::new();

/// Records the operator's lifetimes at start; the first call wins (returns whether it did).
pub fn set_lifetimes(lifetimes: Lifetimes) -> bool {
    LIFETIMES.set(lifetimes).is_ok()
}

/// The lifetimes in force: what [`set_lifetimes`] recorded, else the defaults.
pub fn lifetimes() -> Lifetimes {
    LIFETIMES.get().copied().unwrap_or_default()
}

/// What is known of a leaf certificate's live Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveLeaf {
    /// Whether its certificate was signed by the live signing CA.
    pub signed_by_ca: bool,
    /// Its certificate's expiry, when it holds a readable certificate and key.
    pub not_after: Option<Timestamp>,
}

/// Why a leaf is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssueReason {
    /// No Secret yet.
    Missing,
    /// The Secret holds no readable certificate or key.
    Unreadable,
    /// Signed by another CA than the live one.
    OtherCa,
    /// Within the renewal margin of its expiry (or expired).
    Expiring,
}

impl IssueReason {
    /// In words, for the log and the Event.
    pub fn as_str(self) -> &'static str {
        match self {
            IssueReason::Missing => "missing",
            IssueReason::Unreadable => "unreadable",
            IssueReason::OtherCa => "signed by another CA",
            IssueReason::Expiring => "close to its expiry",
        }
    }
}

/// What to do with a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafAction {
    /// Keep it; look again at `renew_at`.
    Keep {
        /// When it enters the renewal margin.
        renew_at: Timestamp,
    },
    /// Issue a new one.
    Issue(IssueReason),
}

/// Whether the leaf `live` is kept at `now`.
pub fn leaf_action(live: Option<&LiveLeaf>, now: Timestamp, lifetimes: Lifetimes) -> LeafAction {
    let Some(live) = live else { return LeafAction::Issue(IssueReason::Missing) };
    let Some(not_after) = live.not_after else { return LeafAction::Issue(IssueReason::Unreadable) };
    if !live.signed_by_ca {
        return LeafAction::Issue(IssueReason::OtherCa);
    }
    let margin = jiff::SignedDuration::try_from(lifetimes.renew_before).unwrap_or(jiff::SignedDuration::MAX);
    let renew_at = not_after.checked_sub(margin).unwrap_or(Timestamp::MIN);
    if now >= renew_at { LeafAction::Issue(IssueReason::Expiring) } else { LeafAction::Keep { renew_at } }
}

/// The certificates (`(Secret, expiry)`) that, after a pass renewed what it could, are still
/// within the renewal margin of their expiry at `now` (or expired): the operator could not renew
/// them (the user's, or the operator's whose renewal failed).
pub fn expiring(
    expiries: &[(String, Timestamp)],
    now: Timestamp,
    lifetimes: Lifetimes,
) -> Vec<(String, Timestamp)> {
    let margin = jiff::SignedDuration::try_from(lifetimes.renew_before).unwrap_or(jiff::SignedDuration::MAX);
    expiries
        .iter()
        .filter(|(_, at)| at.checked_sub(margin).is_ok_and(|renew_at| now >= renew_at) || *at <= now)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_leaf_is_issued_when_missing_unreadable_from_another_ca_or_in_its_margin() {
        let lifetimes = Lifetimes::default();
        let expires = at("2027-03-07T00:00:00Z");
        let leaf = |ca: &str, not_after: Option<Timestamp>| LiveLeaf { signed_by_ca: ca == "CA", not_after };
        let renew_at = at("2027-02-05T00:00:00Z");
        let cases = [
            (None, "2026-12-07T00:00:00Z", LeafAction::Issue(IssueReason::Missing)),
            (Some(leaf("CA", None)), "2026-12-07T00:00:00Z", LeafAction::Issue(IssueReason::Unreadable)),
            (
                Some(leaf("OTHER", Some(expires))),
                "2026-12-07T00:00:00Z",
                LeafAction::Issue(IssueReason::OtherCa),
            ),
            (Some(leaf("CA", Some(expires))), "2027-02-04T23:59:59Z", LeafAction::Keep { renew_at }),
            (
                Some(leaf("CA", Some(expires))),
                "2027-02-05T00:00:00Z",
                LeafAction::Issue(IssueReason::Expiring),
            ),
            (
                Some(leaf("CA", Some(expires))),
                "2028-01-01T00:00:00Z",
                LeafAction::Issue(IssueReason::Expiring),
            ),
        ];
        for (live, now, want) in cases {
            assert_eq!(leaf_action(live.as_ref(), at(now), lifetimes), want, "{live:?} at {now}");
        }
    }

    #[test]
    fn a_certificate_still_in_its_margin_after_the_pass_is_expiring() {
        let lifetimes = Lifetimes::default();
        let expiries = vec![
            ("db-ca".to_owned(), at("2027-01-01T00:00:00Z")),
            ("db-server".to_owned(), at("2027-03-01T00:00:00Z")),
        ];
        assert_eq!(expiring(&expiries, at("2026-12-01T23:59:59Z"), lifetimes), []);
        assert_eq!(expiring(&expiries, at("2026-12-02T00:00:00Z"), lifetimes), [expiries[0].clone()]);
        assert_eq!(expiring(&expiries, at("2028-01-01T00:00:00Z"), lifetimes), expiries, "expired");
    }

    #[test]
    fn lifetimes_default_to_ninety_days_renewed_thirty_days_ahead_and_must_leave_room() {
        let defaults = Lifetimes::default();
        assert_eq!((defaults.leaf.as_secs() / DAY, defaults.renew_before.as_secs() / DAY), (90, 30));
        assert_eq!(defaults.ca.as_secs() / DAY, 3650);
        let short = Lifetimes::with_leaves(600, 300).unwrap();
        assert_eq!((short.leaf, short.renew_before), (Duration::from_secs(600), Duration::from_secs(300)));
        assert_eq!(Lifetimes::with_leaves(300, 300), None);
        assert_eq!(Lifetimes::with_leaves(0, 0), None);
        assert_eq!(Lifetimes::with_leaves(1826 * DAY, DAY), None, "two leaves' lives must fit in the CA's");
    }
}
