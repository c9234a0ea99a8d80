//! What each destination declares it can do against a second effect, and how often it may be
//! sent to: the facts from which the ledger decides whether a repeat may go out (docs/RULES.md,
//! rules 3 to 5).

use super::record::{ActionRecord, Timestamp};
use std::collections::BTreeMap;
use std::time::Duration;

/// The protections one destination declares, and its retry budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// How long the destination recognises a repeated idempotency key; `None` when it takes none.
    pub idempotency_retention: Option<Duration>,
    /// The destination can find a record by the action's external reference.
    pub lookup: bool,
    /// How long after an attempt that may still be under way a lookup may conclude anything
    /// (the lookup's `settle`): a request still in flight at the destination has that long to
    /// land before "no record" means not written.
    pub lookup_settle: Duration,
    /// How an update request is made conditional on the record being as this ledger last wrote
    /// it; `None`: updates are unconditional and overwrite whatever the destination holds.
    pub update_condition: Option<UpdateCondition>,
    /// How many sends a round may make, and how long to wait between them (rule 3).
    pub retry: RetryPolicy,
}

/// A condition an update request carries, so that a change made at the destination since the
/// ledger last wrote the record is never overwritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateCondition {
    /// `If-Match` with the version (entity tag) the destination answered the last write with;
    /// the destination refuses (412) a record whose version moved on.
    IfMatch,
}

impl UpdateCondition {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IfMatch => "if-match",
        }
    }
}

/// Whether an update action's request may overwrite a change made at the destination, as its
/// destination is declared here: what `show`, its JSON and the console say of every update action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateGuard {
    /// The request carries the condition: a changed record is refused, never overwritten, and the
    /// update goes to `conflict`.
    Conditional(UpdateCondition),
    /// The destination declares no condition: the update overwrites whatever the destination holds.
    Unconditional,
    /// The action's destination is not in the configuration this front end was given.
    NotKnownHere,
}

impl UpdateGuard {
    /// Whether the update request may overwrite a change made at the destination: `None` when
    /// the destination is not known here.
    pub fn overwrites(self) -> Option<bool> {
        match self {
            Self::Conditional(_) => Some(false),
            Self::Unconditional => Some(true),
            Self::NotKnownHere => None,
        }
    }

    /// What it means for the update of destination record `record`, in words every front end
    /// shows.
    pub fn describe(self, record: &str) -> String {
        match self {
            Self::Conditional(UpdateCondition::IfMatch) => format!(
                "conditional (If-Match): if record {record} changed at the destination since this ledger last \
                 wrote it, the update is refused and goes to conflict; nothing is overwritten"
            ),
            Self::Unconditional => format!(
                "unconditional: the destination declares no conditional update, so this update overwrites \
                 whatever record {record} holds at the destination, including changes made there since"
            ),
            Self::NotKnownHere => {
                "not known here: the destination's configuration was not given, so whether this update is \
                 conditional cannot be said"
                    .to_owned()
            }
        }
    }

    /// The value `show --json` gives: `if-match`, `unconditional` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Conditional(condition) => condition.as_str(),
            Self::Unconditional => "unconditional",
            Self::NotKnownHere => "unknown",
        }
    }
}

/// Rule 3's bound: the sends one round of an action may make, and the backoff between them. A
/// round starts when the action is submitted and again at a person's retry, resolution or
/// approval; every send counts, whatever settled the one before (a failure before writing, or
/// an uncertain outcome a lookup proved unwritten).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: i64,
    /// The first wait; each later one doubles, up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: 5, backoff_base: Duration::from_millis(500), backoff_max: Duration::from_mins(1) }
    }
}

/// Whether an uncertain action's automatic lookup may go out now, after the lookups of it that
/// got no answer since it became uncertain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupDue {
    Now,
    /// Not before this time: the backoff after the last failed lookup.
    After(Timestamp),
    /// The failed lookups reached the round's bound: only a person looks it up again, or
    /// resolves it.
    GivenUp,
}

impl RetryPolicy {
    /// Lookups are bounded and backed off as sends are: `failures` lookups failed since the action
    /// became uncertain, the last at `last_failure`. The backoff takes the middle of its jitter,
    /// so that every worker reaches the same time.
    pub fn lookup_due(&self, failures: i64, last_failure: Option<Timestamp>, now: Timestamp) -> LookupDue {
        if failures == 0 {
            return LookupDue::Now;
        }
        if self.spent(failures) {
            return LookupDue::GivenUp;
        }
        let wait = chrono::Duration::from_std(self.backoff(failures, None, 0.5)).unwrap_or(chrono::TimeDelta::MAX);
        match last_failure {
            Some(last) if last + wait > now => LookupDue::After(last + wait),
            _ => LookupDue::Now,
        }
    }

    /// Whether a round that has made `sent` sends may make no more.
    pub fn spent(&self, sent: i64) -> bool {
        sent >= self.max_attempts
    }

    /// The wait before the send after the `sent`-th: rule 3's exponential backoff with equal
    /// jitter (docs/RULES.md says why equal), never sooner than the destination asked
    /// (`Retry-After`). `draw` is a number in [0, 1), given by the caller so that the rule stays
    /// pure.
    pub fn backoff(&self, sent: i64, retry_after: Option<Duration>, draw: f64) -> Duration {
        let exponent = u32::try_from(sent.clamp(1, 30) - 1).unwrap_or(0);
        let ceiling = self.backoff_base.saturating_mul(2u32.saturating_pow(exponent)).min(self.backoff_max);
        let jittered = ceiling.mul_f64(0.5 + draw.clamp(0.0, 1.0) / 2.0);
        retry_after.map_or(jittered, |asked| asked.max(jittered))
    }
}

impl Capabilities {
    /// When the destination stops recognising a repeat of the key first sent at `first_sent`.
    pub fn window_closes(&self, first_sent: Option<Timestamp>) -> Option<Timestamp> {
        let retention = self.idempotency_retention?;
        Some(first_sent? + chrono::Duration::from_std(retention).unwrap_or(chrono::TimeDelta::MAX))
    }

    /// Rule 4: once the idempotency window has passed since the first send, nothing is sent
    /// automatically again.
    pub fn window_passed(&self, first_sent: Option<Timestamp>, now: Timestamp) -> bool {
        self.window_closes(first_sent).is_some_and(|closes| now >= closes)
    }

    /// Rule 5: a repeat cannot take effect twice, because the key is still inside the idempotency
    /// window or a lookup can find the record before anything is sent again.
    pub fn protects_against_repeat(&self, first_sent: Option<Timestamp>, now: Timestamp) -> bool {
        let key_in_window = self.idempotency_retention.is_some() && !self.window_passed(first_sent, now);
        key_in_window || self.lookup
    }

    /// Whether a claim of an action here may start its attempt in the same commit, the idempotency
    /// window of the action starting at `window_started` (`None`: no window is running, a first
    /// attempt or the first after a person's retry).
    ///
    /// Only where "claimed but not sent" and "maybe sent" are recovered the same way: a takeover of
    /// the claim after a crash must be safe (rule 5) whether or not the request went out. A lookup
    /// finds the record before anything is sent again, whenever it is asked. An idempotency key
    /// protects a repeat only inside its window, and a running window must first pass rule 4's
    /// check (made by the worker before anything counts as sent), so a key counts only before any
    /// window has started: the window then starts at the claim, the repeat goes out inside it.
    pub fn claim_may_start(&self, window_started: Option<Timestamp>) -> bool {
        self.lookup || (self.idempotency_retention.is_some() && window_started.is_none())
    }
}

/// Which claims start their attempt in the claim's own commit, as a store applies it inside the
/// claim: the destinations by name, split by whether a running idempotency window matters. Built
/// from [`Capabilities::claim_may_start`] only ([`DestinationCatalog::starts_at_claim`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartsAtClaim {
    /// Destinations whose claims always start their attempt (they declare a lookup).
    pub always: Vec<String>,
    /// Destinations whose claims start their attempt only while no idempotency window is running.
    pub before_window: Vec<String>,
    /// The destination of actions submitted without one.
    pub default_destination: Option<String>,
}

impl StartsAtClaim {
    /// Whether the claim of `action` starts its attempt: what the store's claim statement applies
    /// to each row it claims.
    pub fn starts(&self, action: &ActionRecord) -> bool {
        let Some(name) = action.destination.as_deref().or(self.default_destination.as_deref()) else {
            return false;
        };
        let named = |list: &[String]| list.iter().any(|d| d == name);
        named(&self.always) || (named(&self.before_window) && action.window_started_at.is_none())
    }

    /// Whether no claim starts its attempt: the claim is the plain one.
    pub fn is_empty(&self) -> bool {
        self.always.is_empty() && self.before_window.is_empty()
    }
}

/// What the ledger establishes inside its transaction, from the claim as locked, before a claim
/// passes to a new owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimFacts {
    /// An attempt was started under the claim: a request may have reached the destination.
    pub sent_under_claim: bool,
    /// The action's destination declares a protection that makes a repeat harmless (rule 5).
    pub repeat_protected: bool,
}

impl ClaimFacts {
    /// The worst case, for describing a takeover before the ledger has looked.
    pub const WORST_CASE: Self = Self { sent_under_claim: true, repeat_protected: false };

    /// Rule 5: an expired claim may run again under a new owner only when nothing was sent under
    /// it or a repeat cannot take effect twice; otherwise a person must decide.
    pub fn takeover_is_safe(self) -> bool {
        !self.sent_under_claim || self.repeat_protected
    }

    /// Why a takeover decided from these facts goes where it goes, worded for a person.
    pub fn takeover_why(self) -> &'static str {
        if !self.sent_under_claim {
            "nothing was sent under its claim"
        } else if self.repeat_protected {
            "a request may have been sent, but the destination protects against a repeat"
        } else {
            "a request may have been sent, and the destination cannot tell a repeat: a person checks first"
        }
    }
}

/// The declared capabilities of every destination a front end was configured with, and the
/// destination of actions submitted without one. An action whose destination is not in the
/// catalogue is treated as unprotected: nothing is assumed that was not declared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestinationCatalog {
    by_name: BTreeMap<String, Capabilities>,
    default_destination: Option<String>,
    review_owners: ReviewOwners,
    /// The destinations of `by_name` whose effect an automation performs itself, through
    /// `serve`'s register: decided with like any other, never claimed by a worker.
    executors: std::collections::BTreeSet<String>,
}

/// Who reviews what: the person each destination names, and key prefixes mapped to a person.
/// Names are checked as persons' names when the configuration is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewOwners {
    /// `review_owner` of each destination that declares one.
    pub by_destination: BTreeMap<String, String>,
    /// `[[review_owners]]`: a key prefix and its owner, in the order given.
    pub by_prefix: Vec<(String, String)>,
}

/// The person an action that needs a person is routed to, and the rule that named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing<'a> {
    pub owner: &'a str,
    /// The rule, worded for the audit trail: `key prefix "acme:"` or `destination crm`.
    pub rule: String,
}

impl ReviewOwners {
    /// Whether any rule is declared.
    pub fn is_empty(&self) -> bool {
        self.by_destination.is_empty() && self.by_prefix.is_empty()
    }

    /// The owner of `key` going to `destination`: the longest key prefix that matches, else the
    /// destination's own review owner. A prefix names the work (a customer, a flow) more
    /// precisely than the system it goes to, so it wins.
    pub fn route<'a>(&'a self, key: &str, destination: Option<&str>) -> Option<Routing<'a>> {
        let by_prefix = self
            .by_prefix
            .iter()
            .filter(|(prefix, _)| key.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(prefix, owner)| Routing { owner, rule: format!("key prefix {prefix:?}") });
        by_prefix.or_else(|| {
            let destination = destination?;
            let owner = self.by_destination.get(destination)?;
            Some(Routing { owner, rule: format!("review owner of destination {destination}") })
        })
    }
}

impl DestinationCatalog {
    pub fn new(by_name: BTreeMap<String, Capabilities>, default_destination: Option<String>) -> Self {
        Self {
            by_name,
            default_destination,
            review_owners: ReviewOwners::default(),
            executors: std::collections::BTreeSet::new(),
        }
    }

    /// The catalogue with these destinations performed by automations through `serve`, each with
    /// what it declares.
    #[must_use]
    pub fn with_executors(mut self, executors: BTreeMap<String, Capabilities>) -> Self {
        self.executors.extend(executors.keys().cloned());
        self.by_name.extend(executors);
        self
    }

    /// The destinations performed by automations through `serve`.
    pub fn executor_names(&self) -> impl Iterator<Item = &str> {
        self.executors.iter().map(String::as_str)
    }

    /// Whether `name` is performed by an automation through `serve`, not by a worker.
    pub fn is_executor(&self, name: &str) -> bool {
        self.executors.contains(name)
    }

    /// The catalogue with these review owners.
    #[must_use]
    pub fn with_review_owners(mut self, review_owners: ReviewOwners) -> Self {
        self.review_owners = review_owners;
        self
    }

    /// Whom `action` goes to for review, if it needs a person, has nobody assigned and a rule
    /// names someone: decided here once, applied by the ledger wherever it writes an action.
    pub fn review_routing<'a>(&'a self, action: &ActionRecord) -> Option<Routing<'a>> {
        if !action.state.needs_person() || action.assignee.is_some() {
            return None;
        }
        self.review_owners.route(action.key.as_str(), self.destination_name(action))
    }

    /// The destinations declared here that a worker performs (not the executors').
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str).filter(|name| !self.executors.contains(*name))
    }

    /// Whether any destination here declares a lookup.
    pub fn any_lookup(&self) -> bool {
        self.by_name.values().any(|c| c.lookup)
    }

    /// The destination of actions submitted without one.
    pub fn default_destination(&self) -> Option<&str> {
        self.default_destination.as_deref()
    }

    /// The name of the destination an action goes to: its own, else the default.
    pub fn destination_name<'a>(&'a self, action: &'a ActionRecord) -> Option<&'a str> {
        action.destination.as_deref().or(self.default_destination.as_deref())
    }

    /// The capabilities of the action's destination, if it is known here.
    pub fn of(&self, action: &ActionRecord) -> Option<&Capabilities> {
        self.by_name.get(self.destination_name(action)?)
    }

    /// For an update action (`None` for any other), whether its request may overwrite a change
    /// made at the destination since this ledger last wrote the record.
    pub fn update_guard(&self, action: &ActionRecord) -> Option<UpdateGuard> {
        action.updates.as_ref()?;
        Some(match self.of(action) {
            None => UpdateGuard::NotKnownHere,
            Some(Capabilities { update_condition: Some(condition), .. }) => UpdateGuard::Conditional(*condition),
            Some(_) => UpdateGuard::Unconditional,
        })
    }

    /// The retry budget of the action's destination; the default budget where it is not known
    /// here, so that no action is sent without a bound.
    pub fn retry_policy(&self, action: &ActionRecord) -> RetryPolicy {
        self.of(action).map(|c| c.retry).unwrap_or_default()
    }

    /// Rule 5 for one action at database time `now`: whether its destination, as declared here,
    /// makes a repeat harmless. The key's window counts from the start of the current window.
    pub fn protects_against_repeat(&self, action: &ActionRecord, now: Timestamp) -> bool {
        self.of(action).is_some_and(|c| c.protects_against_repeat(action.window_started_at, now))
    }

    /// Rule 6: whether a person's retry of `action` now would be recognised as a repeat at its
    /// destination, as the worker would treat it: a lookup finds the record before anything goes
    /// out again, or the earlier requests went under the key the retry sends, inside a window the
    /// retry keeps running (a retry from `held` starts a new one, and a derived key does not
    /// cover the requests sent under the key before it).
    pub fn retry_recognised(&self, action: &ActionRecord, now: Timestamp) -> bool {
        self.of(action).is_some_and(|c| {
            c.lookup
                || (c.idempotency_retention.is_some()
                    && action.state != super::state::State::Held
                    && action.idempotency_key.is_none()
                    && !c.window_passed(action.window_started_at, now))
        })
    }

    /// Rule 5's promise, kept before `action` is performed again under a claim: where an earlier
    /// attempt may have been performed and no idempotency key protects a repeat, its destination
    /// is looked up first (a record found completes the action, none found lets the attempt go
    /// ahead). A key protects only a repeat inside the window in which the earlier attempts went
    /// out (checked before the attempt started); a derived key (rule 9) does not protect against
    /// the attempts sent under the key before it. `action` is as claimed, before the claim's
    /// attempt started. The worker's sends, the register's beginnings and claims, and `serve`'s
    /// keeper all ask here.
    pub fn looks_before_repeat(&self, action: &ActionRecord) -> bool {
        self.of(action).is_some_and(|c| {
            let key_protects = c.idempotency_retention.is_some()
                && action.window_started_at.is_some()
                && action.idempotency_key.is_none();
            action.first_sent_at.is_some() && !key_protects && c.lookup
        })
    }

    /// How long after an uncertain attempt of `action` its destination's lookup may conclude
    /// anything (an effect still under way there has that long to land): the worker's settler,
    /// `serve`'s keeper and the register all wait it. Zero without a lookup.
    pub fn lookup_settle(&self, action: &ActionRecord) -> Duration {
        self.of(action).map_or(Duration::ZERO, |c| c.lookup_settle)
    }

    /// Where a lookup decides whether `action`'s expired claim may be acted on again
    /// ([`DestinationCatalog::looks_before_repeat`]), the time from which it may: its lease's end
    /// plus the lookup's settle delay, since a request its holder sent may still be under way at
    /// the destination until then. The register answers `wait` until then, and `serve`'s keeper
    /// leaves the claim alone. `None` where no lookup decides.
    pub fn lookup_settles_at(&self, action: &ActionRecord) -> Option<Timestamp> {
        if !self.looks_before_repeat(action) {
            return None;
        }
        let settle = chrono::Duration::from_std(self.lookup_settle(action)).unwrap_or_default();
        Some(action.lease_expires_at? + settle)
    }

    /// Whether the claim of `action` may start its attempt in the same commit
    /// ([`Capabilities::claim_may_start`] of its destination as declared here).
    pub fn claim_may_start(&self, action: &ActionRecord) -> bool {
        self.of(action).is_some_and(|c| c.claim_may_start(action.window_started_at))
    }

    /// [`DestinationCatalog::claim_may_start`] as lists a store applies inside its claim
    /// statement: each destination classed by asking the one function with and without a running
    /// window.
    pub fn starts_at_claim(&self) -> StartsAtClaim {
        let running = Some(Timestamp::default());
        let mut starts = StartsAtClaim::default();
        for (name, capabilities) in &self.by_name {
            if capabilities.claim_may_start(running) {
                starts.always.push(name.clone());
            } else if capabilities.claim_may_start(None) {
                starts.before_window.push(name.clone());
            }
        }
        if !starts.is_empty() {
            starts.default_destination.clone_from(&self.default_destination);
        }
        starts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::input::{RawSubmission, Submission};

    fn action(destination: Option<&str>, first_sent: Option<Timestamp>) -> ActionRecord {
        let raw = RawSubmission {
            key: Some("k".into()),
            payload: b"{}".to_vec(),
            destination: destination.map(str::to_owned),
            ..Default::default()
        };
        let mut action = ActionRecord::new_pending(&Submission::validate(&raw).unwrap(), Timestamp::default());
        action.first_sent_at = first_sent;
        action.window_started_at = first_sent;
        action
    }

    #[test]
    fn failed_lookups_are_backed_off_and_bounded() {
        let retry =
            RetryPolicy { max_attempts: 3, backoff_base: Duration::from_secs(10), backoff_max: Duration::from_mins(1) };
        let t0 = Timestamp::default();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        assert_eq!(retry.lookup_due(0, None, t0), LookupDue::Now);
        // After the first failure: half-way through a 10 s ceiling's jitter, 7.5 s.
        assert_eq!(retry.lookup_due(1, Some(t0), at(5)), LookupDue::After(t0 + chrono::Duration::milliseconds(7_500)));
        assert_eq!(retry.lookup_due(1, Some(t0), at(8)), LookupDue::Now);
        assert_eq!(retry.lookup_due(2, Some(t0), at(8)), LookupDue::After(at(15)), "the wait doubles");
        assert_eq!(retry.lookup_due(3, Some(t0), at(3_600)), LookupDue::GivenUp);
    }

    #[test]
    fn the_jitter_is_equal_jitter_never_below_half_the_ceiling() {
        let retry =
            RetryPolicy { max_attempts: 6, backoff_base: Duration::from_secs(1), backoff_max: Duration::from_secs(8) };
        for sent in 1..=6_i64 {
            let ceiling = Duration::from_secs(1 << (sent - 1)).min(retry.backoff_max);
            let waits: Vec<Duration> = (0..2_000).map(|_| retry.backoff(sent, None, fastrand::f64())).collect();
            let shortest = *waits.iter().min().unwrap();
            let longest = *waits.iter().max().unwrap();
            // Full jitter would reach near zero; no jitter would not spread.
            assert!(shortest >= ceiling / 2, "send {sent}: {shortest:?} is below half of {ceiling:?}");
            assert!(shortest < ceiling.mul_f64(0.55), "send {sent}: the draws never came near half: {shortest:?}");
            assert!(longest > ceiling.mul_f64(0.95) && longest <= ceiling, "send {sent}: {longest:?} of {ceiling:?}");
        }
    }

    #[test]
    fn a_round_is_spent_at_its_bound() {
        let retry = RetryPolicy { max_attempts: 3, ..RetryPolicy::default() };
        assert!(!retry.spent(2));
        assert!(retry.spent(3));
        assert!(retry.spent(4));
    }

    #[test]
    fn only_a_declared_protection_counts() {
        let t0 = Timestamp::default();
        let keyed = Capabilities {
            idempotency_retention: Some(Duration::from_mins(1)),
            lookup: false,
            ..Capabilities::default()
        };
        let looked = Capabilities { idempotency_retention: None, lookup: true, ..Capabilities::default() };
        let catalog = DestinationCatalog::new(
            BTreeMap::from([("keyed".to_owned(), keyed), ("looked".to_owned(), looked)]),
            Some("looked".to_owned()),
        );
        let in_window = t0 + chrono::Duration::seconds(59);
        let past_window = t0 + chrono::Duration::seconds(60);
        assert!(catalog.protects_against_repeat(&action(Some("keyed"), Some(t0)), in_window));
        assert!(!catalog.protects_against_repeat(&action(Some("keyed"), Some(t0)), past_window));
        assert!(catalog.protects_against_repeat(&action(None, Some(t0)), past_window), "the default destination");
        assert!(!catalog.protects_against_repeat(&action(Some("elsewhere"), Some(t0)), in_window));
        assert!(!DestinationCatalog::default().protects_against_repeat(&action(None, None), t0));
    }

    #[test]
    fn a_lookup_decides_an_expired_claim_only_after_its_settle_delay() {
        let t0 = Timestamp::default();
        let mut looked =
            Capabilities { lookup: true, lookup_settle: Duration::from_secs(2), ..Capabilities::default() };
        let mut catalog = DestinationCatalog::new(BTreeMap::from([("looked".to_owned(), looked)]), None);
        let mut held = action(Some("looked"), Some(t0));
        held.lease_expires_at = Some(t0 + chrono::Duration::seconds(30));
        assert_eq!(catalog.lookup_settles_at(&held), Some(t0 + chrono::Duration::seconds(32)));
        // Nothing sent before the claim: no request can be under way, so nothing waits.
        assert_eq!(catalog.lookup_settles_at(&action(Some("looked"), None)), None);
        // A key in its window protects a repeat: no lookup decides.
        looked.idempotency_retention = Some(Duration::from_hours(1));
        catalog = DestinationCatalog::new(BTreeMap::from([("looked".to_owned(), looked)]), None);
        assert_eq!(catalog.lookup_settles_at(&held), None);
        assert_eq!(catalog_of_each_kind().lookup_settles_at(&action(Some("bare"), Some(t0))), None);
    }

    fn catalog_of_each_kind() -> DestinationCatalog {
        let keyed = Capabilities {
            idempotency_retention: Some(Duration::from_mins(1)),
            lookup: false,
            ..Capabilities::default()
        };
        let looked = Capabilities { idempotency_retention: None, lookup: true, ..Capabilities::default() };
        let both = Capabilities {
            idempotency_retention: Some(Duration::from_mins(1)),
            lookup: true,
            ..Capabilities::default()
        };
        DestinationCatalog::new(
            BTreeMap::from([
                ("keyed".to_owned(), keyed),
                ("looked".to_owned(), looked),
                ("both".to_owned(), both),
                ("bare".to_owned(), Capabilities::default()),
            ]),
            Some("keyed".to_owned()),
        )
    }

    #[test]
    fn a_claim_starts_its_attempt_only_where_a_takeover_is_safe_whatever_was_sent() {
        let t0 = Timestamp::default();
        let catalog = catalog_of_each_kind();
        // A lookup protects whenever it is asked: running window or not.
        assert!(catalog.claim_may_start(&action(Some("looked"), None)));
        assert!(catalog.claim_may_start(&action(Some("looked"), Some(t0))));
        assert!(catalog.claim_may_start(&action(Some("both"), Some(t0))));
        // A key protects only before any window runs: a running one passes rule 4 first.
        assert!(catalog.claim_may_start(&action(Some("keyed"), None)));
        assert!(!catalog.claim_may_start(&action(Some("keyed"), Some(t0))));
        // The default destination for an action without one; nothing assumed for others.
        assert!(catalog.claim_may_start(&action(None, None)));
        assert!(!catalog.claim_may_start(&action(None, Some(t0))));
        assert!(!catalog.claim_may_start(&action(Some("bare"), None)));
        assert!(!catalog.claim_may_start(&action(Some("elsewhere"), None)));
        assert!(!DestinationCatalog::default().claim_may_start(&action(None, None)));
    }

    #[test]
    fn the_lists_a_store_applies_decide_as_the_function_does() {
        let t0 = Timestamp::default();
        let catalog = catalog_of_each_kind();
        let starts = catalog.starts_at_claim();
        assert_eq!(starts.always, ["both", "looked"]);
        assert_eq!(starts.before_window, ["keyed"]);
        for destination in [None, Some("keyed"), Some("looked"), Some("both"), Some("bare"), Some("elsewhere")] {
            for window in [None, Some(t0)] {
                let action = action(destination, window);
                assert_eq!(starts.starts(&action), catalog.claim_may_start(&action), "{destination:?} {window:?}");
            }
        }
        let none = DestinationCatalog::new(BTreeMap::from([("bare".to_owned(), Capabilities::default())]), None);
        assert!(none.starts_at_claim().is_empty());
        assert_eq!(none.starts_at_claim(), StartsAtClaim::default());
    }
}
