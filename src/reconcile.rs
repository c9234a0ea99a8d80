//! Reconciliation: what a destination holds for an action, found through its lookup by external
//! reference, and what the ledger does with it. The worker's settling of uncertain outcomes, the
//! console's and the CLI's `lookup`, and `reconcile` all go through [`look_up`] and [`inspect`],
//! so that each judges and settles a lookup the same way.

use crate::destination::{Destination, Destinations, Found};
use crate::domain::{
    ActionKey, ActionRecord, ActorKind, DestinationCatalog, Evidence, LookupDue, LookupVerdict, Person, Reason,
    Refusal, State, Timestamp,
};
use crate::error::Error;
use crate::ledger::{Claim, Ledger, LedgerError, LookupReport, Outcome, Recorded, Report, StartedAttempt};
use crate::store::{ListFilter, Store};
use serde::Serialize;
use std::collections::HashMap;

/// Unknown actions looked at per sweep.
const SETTLE_BATCH: i64 = 50;

/// What a lookup at the destination found, judged against the action.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub found: Found,
    pub report: LookupReport,
    /// Where exactly one record was found: the `compare` fields on which it differs from what
    /// the action sends, by the same comparison that makes the lookup's `mismatch`.
    pub changed_fields: Vec<String>,
}

/// Asks the destination now what it holds for `action`, and judges it: found and matching, not
/// there, different, or duplicated. Changes nothing.
pub async fn inspect<S: Store>(
    ledger: &Ledger<S>,
    destination: &Destination,
    action: &ActionRecord,
) -> Result<Inspection, Error> {
    let after = match &action.after {
        Some(key) => ledger.store().find(key).await?,
        None => None,
    };
    let found = destination.lookup(action, after.as_ref()).await?;
    let report = destination.judge(action, after.as_ref(), &found)?;
    let changed_fields = match found.records.as_slice() {
        [one] => destination.changed_fields(action, after.as_ref(), &one.record)?,
        _ => Vec::new(),
    };
    Ok(Inspection { found, report, changed_fields })
}

/// What [`look_up`] did to the action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// It was `unknown` and is now settled: completed, back to pending, or in conflict.
    Settled(Box<ActionRecord>),
    /// It is not `unknown`: the lookup only reports what the destination holds.
    NotUncertain,
    /// It is not `unknown`, and a person's lookup was kept as evidence and in the audit trail.
    Kept,
    /// It changed after it was read; nothing was applied.
    ChangedMeanwhile,
}

/// What a lookup found, and what it did.
#[derive(Debug, Clone)]
pub struct LookedUp {
    pub report: LookupReport,
    /// The id of each record found, as the destination names them.
    pub found_ids: Vec<String>,
    pub settlement: Settlement,
}

impl LookedUp {
    /// One line for a person, the same from the console and the CLI.
    pub fn describe(&self, action: &ActionRecord) -> String {
        let key = &action.key;
        let found = match self.found_ids.as_slice() {
            [] => format!("{}, no record", self.report.verdict.as_str()),
            [one] => format!("{}, record {one}", self.report.verdict.as_str()),
            many => format!("{}, {} records: {}", self.report.verdict.as_str(), many.len(), many.join(", ")),
        };
        match &self.settlement {
            Settlement::Settled(settled) => format!("looked up {key}: {found}; now {}", settled.state),
            Settlement::NotUncertain => format!("looked up {key}: {found}; it stays {}", action.state),
            Settlement::Kept => format!("looked up {key}: {found}; kept as evidence, it stays {}", action.state),
            Settlement::ChangedMeanwhile => {
                format!("looked up {key}: {found}; it changed meanwhile, nothing applied")
            }
        }
    }
}

/// Looks `action` (as the caller read it) up at its destination now and, if it is `unknown`,
/// settles it from what was found, audited under `actor`; `note` (a person's reason, or what ran
/// the lookup) heads the detail kept in the audit trail.
pub async fn look_up<S: Store>(
    ledger: &Ledger<S>,
    destination: &Destination,
    action: &ActionRecord,
    actor: &str,
    actor_kind: ActorKind,
    note: Option<&str>,
) -> Result<LookedUp, Error> {
    let Inspection { report, found, .. } = inspect(ledger, destination, action).await?;
    let settlement = settle(ledger, action, report.clone(), actor, actor_kind, note).await?;
    Ok(LookedUp { report, found_ids: found.ids(), settlement })
}

/// A named person's lookup, from the console or the CLI: reads the action, refuses if it changed
/// since the version the person saw or a purge reduced it to its tombstone, and looks it up at
/// its configured destination with the person's reason in the audit trail. Returns the action as it was read, and what happened.
pub async fn look_up_for_person<S: Store>(
    ledger: &Ledger<S>,
    destinations: &Destinations,
    key: &ActionKey,
    seen_revision: Option<i64>,
    person: &Person,
    reason: &Reason,
) -> Result<(ActionRecord, LookedUp), Error> {
    let action = ledger.store().find(key).await?.ok_or_else(|| LedgerError::NotFound(key.to_string()))?;
    if let Some(seen) = seen_revision
        && action.revision != seen
    {
        return Err(LedgerError::from(Refusal::changed_since_read("look up", &action, seen)).into());
    }
    // Refused before the destination is asked: a tombstone has nothing to compare with.
    ledger.refuse_if_purged("look up", &action).await?;
    let destination = destinations.require(&action)?;
    let looked = look_up(ledger, destination, &action, person.as_str(), ActorKind::Person, Some(reason.as_str())).await;
    let mut looked = match looked {
        // A lookup of an uncertain action that got no answer is evidence too, as the worker's are.
        Err(Error::Destination(failure)) => {
            let kept = format!("{} (lookup failed: {failure})", reason.as_str());
            ledger.keep_failed_lookup(&action.key, person.as_str(), &kept, &crate::domain::Evidence::default()).await?;
            return Err(failure.into());
        }
        other => other?,
    };
    if looked.settlement == Settlement::NotUncertain {
        // Nothing to settle, but what the person found is evidence all the same: kept with the
        // action and in its audit trail, in the person's name.
        let mut report = looked.report.clone();
        report.detail = Some(format!("{} ({})", reason.as_str(), report.detail.unwrap_or_default()));
        looked.settlement = match ledger.keep_lookup(&action.key, action.revision, person, &report).await? {
            Some(_) => Settlement::Kept,
            None => Settlement::ChangedMeanwhile,
        };
    }
    Ok((action, looked))
}

/// Settles an `unknown` action from a lookup made elsewhere (by a worker's effect),
/// audited under `actor`: the same judgement as [`look_up`]'s.
pub async fn settle_reported<S: Store>(
    ledger: &Ledger<S>,
    action: &ActionRecord,
    report: LookupReport,
    actor: &str,
    actor_kind: ActorKind,
) -> Result<Settlement, Error> {
    settle(ledger, action, report, actor, actor_kind, None).await
}

async fn settle<S: Store>(
    ledger: &Ledger<S>,
    action: &ActionRecord,
    mut report: LookupReport,
    actor: &str,
    actor_kind: ActorKind,
    note: Option<&str>,
) -> Result<Settlement, Error> {
    if action.state != State::Unknown {
        return Ok(Settlement::NotUncertain);
    }
    if let Some(note) = note {
        report.detail = Some(format!("{note} ({})", report.detail.unwrap_or_default()));
    }
    Ok(match ledger.settle_unknown(&action.key, action.revision, actor, actor_kind, &report).await? {
        Some(settled) => Settlement::Settled(Box::new(settled)),
        None => Settlement::ChangedMeanwhile,
    })
}

/// What a lookup made before performing an action again (where
/// [`DestinationCatalog::looks_before_repeat`] asks for one) concludes: `None` when the
/// destination holds no record, so the attempt goes ahead; otherwise the attempt's report, a
/// completion by the record found or, for anything else, an uncertain outcome.
pub fn before_repeat<E: std::fmt::Display>(looked: Result<LookupReport, E>) -> Option<Report> {
    let uncertain = |error: String, evidence| Some(Report { outcome: Outcome::Unknown, error: Some(error), evidence });
    match looked {
        Ok(LookupReport { verdict: LookupVerdict::NotFound, .. }) => None,
        Ok(LookupReport { verdict: LookupVerdict::Found, destination_id: Some(id), evidence, .. }) => {
            Some(Report { outcome: Outcome::Completed { destination_id: id }, error: None, evidence })
        }
        Ok(report) => uncertain(
            format!("before performing again, the lookup found {}", report.detail.unwrap_or_default()),
            report.evidence,
        ),
        Err(error) => uncertain(format!("before performing again: {error}"), Evidence::default()),
    }
}

/// Keeps rule 5's promise for an action `claim` holds, its attempt `attempt` started, before it
/// is performed again: where [`DestinationCatalog::looks_before_repeat`] asks, the destination
/// is looked up, and a record found completes the action under the claim while anything but "no
/// record" makes it `unknown`. `None`: it may be performed. The register's beginnings and
/// claims, and `serve`'s keeper, ask here; the worker's sends keep the same rule through their
/// effect.
pub async fn look_before_repeat<S: Store>(
    ledger: &Ledger<S>,
    destinations: &Destinations,
    claim: &Claim,
    attempt: StartedAttempt,
) -> Result<Option<Recorded>, LedgerError> {
    if !ledger.destinations().looks_before_repeat(&claim.action) {
        return Ok(None);
    }
    // Whatever keeps the lookup from an answer (the destination, the configuration, reading the
    // action it follows) leaves the outcome uncertain, as a lookup that got no answer does.
    let looked = match destinations.require(&claim.action) {
        Ok(destination) => inspect(ledger, destination, &claim.action).await.map(|inspection| inspection.report),
        Err(error) => Err(error.into()),
    };
    let Some(report) = before_repeat(looked) else { return Ok(None) };
    let claim = Claim { started: Some(attempt), ..claim.clone() };
    Ok(Some(ledger.record_result(&claim, attempt, &report).await?))
}

/// An `unknown` action a lookup can settle, with when its next automatic lookup may go out and
/// how many of its lookups got no answer since it became `unknown`.
#[derive(Debug)]
pub struct UnknownLookup {
    pub action: ActionRecord,
    pub due: LookupDue,
    pub failures: i64,
}

/// The `unknown` actions whose destination declares a lookup (at most [`SETTLE_BATCH`]), each
/// with when its next automatic lookup may go out: after its destination's settle delay, which
/// gives a request still in flight there time to land, and as
/// [`RetryPolicy::lookup_due`](crate::domain::RetryPolicy::lookup_due) bounds and backs off
/// lookups that got no answer. A worker's settler and `serve`'s keeper sweep with it.
pub async fn lookups_due<S: Store>(
    ledger: &Ledger<S>,
    catalog: &DestinationCatalog,
) -> Result<Vec<UnknownLookup>, Error> {
    let store = ledger.store();
    let unknown =
        ledger.list(&ListFilter { state: Some(State::Unknown), limit: SETTLE_BATCH, ..ListFilter::default() }).await?;
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let failures: HashMap<String, (i64, Timestamp)> =
        store.unknown_lookup_failures().await?.into_iter().map(|f| (f.key, (f.failures, f.last_at))).collect();
    let now = store.now().await?;
    Ok(unknown
        .into_iter()
        .filter_map(|action| {
            let capabilities = catalog.of(&action)?;
            if !capabilities.lookup {
                return None;
            }
            let (count, last) = failures.get(action.key.as_str()).map_or((0, None), |(n, at)| (*n, Some(*at)));
            let settled =
                action.updated_at + chrono::Duration::from_std(catalog.lookup_settle(&action)).unwrap_or_default();
            let due = match capabilities.retry.lookup_due(count, last, now) {
                LookupDue::Now if settled > now => LookupDue::After(settled),
                due => due,
            };
            Some(UnknownLookup { action, due, failures: count })
        })
        .collect())
}

/// Actions compared per page.
const PAGE: i64 = 200;

/// One disagreement between the ledger and a destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub key: String,
    pub state: State,
    pub kind: FindingKind,
    pub detail: String,
    /// The destination's fields (JSON pointers) that differ from what the action sent, for a
    /// changed record.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// The state an `unknown` action was settled to, with `--apply`.
    pub settled_to: Option<State>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Completed in the ledger, but the destination has no record.
    MissingAtDestination,
    /// More than one record for one external reference.
    DuplicateRecords,
    /// The destination's record id differs from the one the ledger kept.
    DestinationIdMismatch,
    /// Completed in the ledger, but the destination's record differs from what was sent on the
    /// destination's `compare` fields: changed there since.
    ChangedAtDestination,
    /// An `unknown` action that a lookup can settle now.
    Settleable,
    /// A record exists for an action the ledger considers not performed.
    UnexpectedRecord,
}

/// The comparison for one destination.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DestinationReport {
    pub destination: String,
    pub checked: u64,
    /// Purged actions passed over: a tombstone keeps no payload to compare with.
    pub purged: u64,
    pub lookup_errors: u64,
    pub findings: Vec<Finding>,
}

/// Who settles `unknown` actions when reconciliation applies what it found.
#[derive(Debug, Clone)]
pub struct Apply {
    pub person: String,
}

/// Compares every action of `destination` created since `since`.
pub async fn reconcile<S: Store>(
    ledger: &Ledger<S>,
    destination: &Destination,
    includes_unassigned: bool,
    since: Option<Timestamp>,
    apply: Option<&Apply>,
) -> Result<DestinationReport, Error> {
    if destination.config.lookup.is_none() {
        return Err(Error::Invalid(format!(
            "destination {} declares no lookup, so the ledger cannot be compared with it",
            destination.name
        )));
    }
    let mut report = DestinationReport { destination: destination.name.clone(), ..DestinationReport::default() };
    let mut before_id = None;
    loop {
        let filter = ListFilter { before_id, limit: PAGE, created_since: since, ..ListFilter::default() };
        let page = ledger.list(&filter).await?;
        let Some(last) = page.last() else { break };
        before_id = Some(last.id);
        for action in page {
            let mine = match &action.destination {
                Some(name) => *name == destination.name,
                None => includes_unassigned,
            };
            if mine && !matches!(action.state, State::InProgress) {
                match ledger.refuse_if_purged("compare", &action).await {
                    Err(LedgerError::Refused(Refusal::Purged { .. })) => {
                        report.purged += 1;
                        continue;
                    }
                    other => other?,
                }
                report.checked += 1;
                compare(ledger, destination, &action, apply, &mut report).await?;
            }
        }
    }
    Ok(report)
}

async fn compare<S: Store>(
    ledger: &Ledger<S>,
    destination: &Destination,
    action: &ActionRecord,
    apply: Option<&Apply>,
    report: &mut DestinationReport,
) -> Result<(), Error> {
    let Ok(Inspection { found, report: judged, changed_fields }) = inspect(ledger, destination, action).await else {
        report.lookup_errors += 1;
        return Ok(());
    };
    let finding = |kind, detail: String| Finding {
        key: action.key.to_string(),
        state: action.state,
        kind,
        detail,
        fields: Vec::new(),
        settled_to: None,
    };
    let ids: Vec<String> = found.records.iter().map(|r| r.id.clone().unwrap_or_else(|| "?".to_owned())).collect();
    if found.records.len() > 1 {
        report.findings.push(finding(FindingKind::DuplicateRecords, format!("records {}", ids.join(", "))));
    }
    match action.state {
        State::Completed => match (found.records.as_slice(), &action.destination_id) {
            ([], _) => report.findings.push(finding(
                FindingKind::MissingAtDestination,
                format!("the ledger says completed as {}", action.destination_id.as_deref().unwrap_or("?")),
            )),
            ([one], Some(kept)) if one.id.as_deref() != Some(kept) => report.findings.push(finding(
                FindingKind::DestinationIdMismatch,
                format!("the ledger kept {kept}, the destination holds {}", one.id.as_deref().unwrap_or("?")),
            )),
            ([one], _) if !changed_fields.is_empty() => {
                let mut changed = finding(
                    FindingKind::ChangedAtDestination,
                    format!(
                        "record {} differs from what the ledger sent at {}",
                        one.id.as_deref().unwrap_or("?"),
                        changed_fields.join(", ")
                    ),
                );
                changed.fields = changed_fields;
                report.findings.push(changed);
            }
            _ => {}
        },
        State::Unknown => {
            let mut item = finding(FindingKind::Settleable, format!("lookup: {}", judged.verdict.as_str()));
            if let Some(apply) = apply {
                let settlement =
                    settle(ledger, action, judged, &apply.person, ActorKind::Person, Some("reconcile --apply")).await?;
                if let Settlement::Settled(settled) = settlement {
                    item.settled_to = Some(settled.state);
                }
            }
            report.findings.push(item);
        }
        // An update action's record is the one the action it updates created: expected there.
        State::Failed | State::Cancelled | State::Pending | State::Held
            if !found.records.is_empty() && action.updates.is_none() =>
        {
            report.findings.push(finding(
                FindingKind::UnexpectedRecord,
                format!("the destination holds {} for an action the ledger has as {}", ids.join(", "), action.state),
            ));
        }
        _ => {}
    }
    Ok(())
}
