//! What the CLI prints: one JSON document with `--json`, readable text otherwise. Untrusted text
//! (payloads, errors, destination bodies) is escaped before it reaches the terminal.

use crate::document::{self, time};
use crate::domain::retention::states_text;
use crate::domain::text::{escape_untrusted, escape_untrusted_lines};
use crate::domain::{
    ActionRecord, Attempt, AuditEntry, Blocked, Delivery, LookupRecord, ManualCommand, ProposalRecord, PurgeRecord,
    Refusal, RefusedSubmission, WayOut,
};
use crate::error::Kind;
use crate::ledger::{ActionDetail, LedgerError, ManualOutcome, ManualRequest, PurgeReport, SubmitReport};
use crate::reconcile::{LookedUp, Settlement};
use serde_json::{Value, json};

fn print_json(value: &Value) {
    println!("{}", serde_json::to_string_pretty(value).expect("JSON values serialize"));
}

pub fn submitted(report: &SubmitReport, as_json: bool) {
    if as_json {
        print_json(&document::submitted(report));
        return;
    }
    // The outcome word alone on stdout, so scripts can test it; the explanation goes to stderr.
    println!("{}", report.outcome.as_str());
    let explanation = document::explanation(report);
    if report.outcome == crate::domain::SubmitOutcome::Conflict && report.action.proposal.is_some() {
        eprintln!(
            "{explanation} (`actionledger show {}` lists the proposals)",
            escape_untrusted(report.action.key.as_str())
        );
    } else {
        eprintln!("{explanation}");
    }
}

pub fn actions(
    actions: &[ActionRecord],
    blocked: &std::collections::BTreeMap<crate::domain::ActionKey, Blocked>,
    limit: i64,
    as_json: bool,
) {
    let next = document::next_cursor(actions.len(), limit, actions.last().map(|a| a.id));
    if as_json {
        print_json(&document::actions(actions, blocked, limit));
        return;
    }
    if actions.is_empty() {
        println!("no actions");
        return;
    }
    println!(
        "{:>6}  {:<11}  {:>3}  {:<12}  {:<16}  {:<20}  KEY",
        "ID", "STATE", "TRY", "DESTINATION", "OWNER", "UPDATED"
    );
    for a in actions {
        let owner = a.claimed_by.as_deref().or(a.assignee.as_deref()).unwrap_or("-");
        // A proposal waiting for a decision is marked in every state.
        let state = if a.proposal.is_some() { format!("{}*", a.state) } else { a.state.to_string() };
        println!(
            "{:>6}  {:<11}  {:>3}  {:<12}  {:<16}  {:<20}  {}{}{}",
            a.id,
            state,
            a.attempts,
            escape_untrusted(a.destination.as_deref().unwrap_or("-")),
            escape_untrusted(owner),
            a.updated_at.format("%Y-%m-%d %H:%M:%S"),
            escape_untrusted(a.key.as_str()),
            late_marker(a),
            blocked.get(&a.key).map(|b| format!("  [BLOCKED: {}]", escape_untrusted(&b.reason()))).unwrap_or_default()
        );
    }
    if actions.iter().any(|a| a.proposal.is_some()) {
        println!("* a proposed payload waits for approve or reject (actionledger show KEY)");
    }
    if !blocked.is_empty() {
        println!("BLOCKED: runs only once the action it waits on is retried (if failed); or cancel it");
    }
    if let Some(id) = next {
        println!("more: --before {id}");
    }
}

pub fn refused(refused: &[RefusedSubmission], limit: i64, as_json: bool) {
    let next = document::next_cursor(refused.len(), limit, refused.last().map(|r| r.id));
    if as_json {
        print_json(&document::refused(refused, limit));
        return;
    }
    if refused.is_empty() {
        println!("no refused submissions");
        return;
    }
    for r in refused {
        println!(
            "{:>6}  {}  {:<24}  key {}  source {}  event {}",
            r.id,
            r.received_at.format("%Y-%m-%d %H:%M:%S"),
            r.problem,
            r.key_excerpt.as_deref().unwrap_or("(none)"),
            r.source.as_deref().unwrap_or("-"),
            r.event_id.as_deref().unwrap_or("-"),
        );
        println!("        {}", escape_untrusted(&r.message));
    }
    if let Some(id) = next {
        println!("more: --before {id}");
    }
}

/// The list's marker of late results waiting for a person, after the key.
fn late_marker(a: &ActionRecord) -> String {
    match a.late_results {
        0 => String::new(),
        1 => "  [1 late result]".to_owned(),
        n => format!("  [{n} late results]"),
    }
}

pub fn detail(d: &ActionDetail, as_json: bool) {
    if as_json {
        print_json(&document::detail(d));
        return;
    }
    print_record(&d.action);
    if let Some(blocked) = &d.blocked {
        println!(
            "  {:<18} {}; {}",
            "BLOCKED",
            escape_untrusted(&blocked.reason()),
            blocked_way_out(&d.action, blocked)
        );
    }
    if d.retry_needs_check {
        println!(
            "  {:<18} could create a second record: an earlier request may have written, and the destination \
             cannot recognise a repeat; check it, then retry with --confirm-not-written (or resolve as completed)",
            "retry"
        );
    }
    for update in &d.updates {
        let line = crate::domain::manual::describe_update(update, &d.action);
        println!("  {:<18} {}", "update", escape_untrusted(&line));
    }
    if let Some(guard) = d.update_guard {
        let record = d.action.updates_destination_id.as_deref().unwrap_or("?");
        println!("  {:<18} {}", "update", escape_untrusted(&guard.describe(record)));
    }
    print_late_results(d);
    if let Some(purge) = &d.purge {
        print_purge(&d.action, purge);
    } else {
        print_payloads(d);
    }
    print_deliveries(&d.deliveries);
    print_attempts(&d.attempts);
    print_lookups(&d.lookups);
    print_audit(&d.audit);
}

/// What a person can do about a blocked action, in the command line's terms.
fn blocked_way_out(a: &ActionRecord, blocked: &Blocked) -> String {
    let after = escape_untrusted(blocked.after.as_str());
    let cancel = format!("actionledger cancel {} --owner NAME --reason TEXT", escape_untrusted(a.key.as_str()));
    if blocked.after_can_be_retried() {
        format!(
            "it runs once {after} completes: retry that (actionledger retry {after} --owner NAME --reason TEXT), or \
             cancel this one ({cancel})"
        )
    } else {
        format!("it can never run: cancel it ({cancel})")
    }
}

fn print_record(a: &ActionRecord) {
    let field = |name: &str, value: &str| println!("  {name:<18} {}", escape_untrusted(value));
    println!("{}", escape_untrusted(a.key.as_str()));
    field("state", a.state.as_str());
    field("version", &a.revision.to_string());
    field("ownership version", &a.ownership_version.to_string());
    field("destination", a.destination.as_deref().unwrap_or("-"));
    if let Some(after) = &a.after {
        field("runs after", after.as_str());
    }
    if let Some(updated) = &a.updates {
        field("updates", &format!("{updated} (destination id {})", a.updates_destination_id.as_deref().unwrap_or("-")));
    }
    field("payload revision", &a.payload_revision.to_string());
    if a.idempotency_key.is_some() {
        field("idempotency key", a.sending_key());
    }
    if let Some(worker) = &a.claimed_by {
        field("claimed by", worker);
        field("lease until", &a.lease_expires_at.map(time).unwrap_or_default());
    }
    if let Some(assignee) = &a.assignee {
        field("assigned to", assignee);
    }
    field("attempts", &a.attempts.to_string());
    if let Some(id) = &a.destination_id {
        field("destination id", id);
    }
    if let Some(sent) = a.first_sent_at {
        field("first sent", &time(sent));
    }
    if let Some(not_before) = a.not_before {
        field("not before", &time(not_before));
    }
    if let Some(error) = &a.last_error {
        field("last error", error);
    }
    if a.old_worker_may_act {
        field("old worker", "may still act: confirm it stopped (--old-worker-stopped) to run this action again");
    }
    field(
        "source",
        &format!(
            "{} (version {})",
            a.source.as_deref().unwrap_or("-"),
            a.source_version.map_or("-".to_owned(), |v| v.to_string())
        ),
    );
    field("created", &time(a.created_at));
    field("updated", &time(a.updated_at));
}

/// What a purged action keeps instead of its payload: its fingerprint, and which run purged it.
fn print_purge(a: &ActionRecord, p: &PurgeRecord) {
    println!(
        "\npurged by purge run {} on {} (owner {}: {})",
        p.id,
        time(p.at),
        escape_untrusted(&p.owner),
        escape_untrusted(&p.reason)
    );
    println!("  payload fingerprint {} (the payload itself was removed)", a.payload.fingerprint());
    println!(
        "  only the tombstone is kept: key, fingerprint, final state, destination id, settled time and the audit \
         trail; the payload, deliveries, attempts and lookups before the purge were removed"
    );
}

/// What a purge run removed, or would remove.
pub fn purged(report: &PurgeReport, as_json: bool) {
    let p = &report.record;
    if as_json {
        let mut value = document::purge(p);
        value["run"] = if report.dry_run { Value::Null } else { json!(p.id) };
        value["dry_run"] = json!(report.dry_run);
        value["kept_may_have_written"] =
            json!(report.kept_may_have_written.iter().map(crate::domain::ActionKey::as_str).collect::<Vec<_>>());
        print_json(&value);
        return;
    }
    let c = &p.counts;
    let removed = format!(
        "{} actions to their tombstone, {} deliveries, {} attempts, {} lookups",
        c.actions, c.deliveries, c.attempts, c.lookups
    );
    let scope = format!("{} actions settled before {}", states_text(&p.states), time(p.settled_before));
    if report.dry_run {
        println!("dry run: would reduce {removed} ({scope}); nothing changed");
    } else {
        println!("purge run {}: reduced {removed} ({scope})", p.id);
    }
    if !report.kept_may_have_written.is_empty() {
        let keys: Vec<String> = report.kept_may_have_written.iter().map(|k| escape_untrusted(k.as_str())).collect();
        println!(
            "kept {} action(s) whole, attempts and all: an earlier request may have written them, and their attempts \
             are the evidence of an effect that may exist at the destination: {}",
            keys.len(),
            keys.join(", ")
        );
    }
}

/// Every proposal waiting is listed, each with its fingerprint (what approve and reject name),
/// the latest last.
fn print_payloads(d: &ActionDetail) {
    let a = &d.action;
    println!("\napproved payload ({})", a.payload.fingerprint());
    println!("{}", indent(&escape_untrusted_lines(&a.payload.pretty())));
    let waiting: Vec<&ProposalRecord> = d.waiting_proposals().collect();
    let key = escape_untrusted(a.key.as_str());
    if waiting.len() > 1 {
        println!(
            "\n{} proposed payloads waiting: approve one with `actionledger approve {key} --proposal FINGERPRINT` (the \
             others are rejected), or reject one with --proposal or all without it",
            waiting.len()
        );
    }
    for (n, p) in waiting.iter().enumerate() {
        println!(
            "\nproposed payload {} of {} ({}), source {} event {} version {}, received {}, waiting for approve or reject",
            n + 1,
            waiting.len(),
            p.payload.fingerprint(),
            escape_untrusted(p.source.as_deref().unwrap_or("-")),
            escape_untrusted(p.event_id.as_deref().unwrap_or("-")),
            p.source_version.map_or("-".to_owned(), |v| v.to_string()),
            time(p.received_at)
        );
        println!("{}", indent(&escape_untrusted_lines(&p.payload.pretty())));
    }
    if !waiting.is_empty() && a.state == crate::domain::State::Completed {
        println!(
            "  approving {} records the update action {key}#update-{} (the action stays completed, and takes the new \
             payload on once that update completes)",
            if waiting.len() == 1 { "it" } else { "one" },
            d.next_update_number()
        );
    }
    let decided: Vec<&ProposalRecord> = d.proposals.iter().filter(|p| p.decision.is_some()).collect();
    if !decided.is_empty() {
        println!("\nproposals decided ({})", decided.len());
        for p in decided {
            println!(
                "  {}  {} by {} at {} (proposed {})",
                p.payload.fingerprint().short(),
                p.decision.map_or("-", crate::domain::ProposalDecision::as_str),
                escape_untrusted(p.decided_by.as_deref().unwrap_or("-")),
                p.decided_at.map_or_else(|| "-".to_owned(), time),
                time(p.received_at)
            );
        }
    }
}

fn print_deliveries(deliveries: &[Delivery]) {
    println!("\ndeliveries ({})", deliveries.len());
    for dl in deliveries {
        println!(
            "  {}  {:<9}  event {}  source {}  version {}  payload {}",
            time(dl.received_at),
            dl.outcome.as_str(),
            escape_untrusted(dl.event_id.as_deref().unwrap_or("-")),
            escape_untrusted(dl.source.as_deref().unwrap_or("-")),
            dl.source_version.map_or("-".to_owned(), |v| v.to_string()),
            &dl.fingerprint[..12.min(dl.fingerprint.len())]
        );
    }
}

/// The late results no person has acknowledged, with their evidence, above everything else
/// that follows the record: they are what a person must look at.
fn print_late_results(d: &ActionDetail) {
    let late: Vec<&Attempt> = d.late_results().collect();
    if late.is_empty() {
        return;
    }
    let key = escape_untrusted(d.action.key.as_str());
    println!(
        "\nlate results ({}) waiting for acknowledgement: `actionledger acknowledge {key} --owner NAME --reason TEXT`",
        late.len()
    );
    for at in late {
        print_attempt(at);
    }
}

fn print_attempts(attempts: &[Attempt]) {
    println!("\nattempts ({})", attempts.len());
    for at in attempts {
        print_attempt(at);
    }
}

fn print_attempt(at: &Attempt) {
    {
        let outcome = at.outcome.map_or("in flight", |o| o.as_str());
        let stale = match &at.acknowledged {
            _ if !at.stale => String::new(),
            None => "  LATE (a result from an obsolete owner; changed nothing)".to_owned(),
            Some(k) => format!("  LATE, acknowledged by {} at {}", escape_untrusted(&k.by), time(k.at)),
        };
        println!(
            "  #{} {}  by {} under ownership version {}  {} -> {}{stale}",
            at.number,
            outcome,
            escape_untrusted(&at.worker),
            at.ownership_version,
            time(at.started_at),
            at.ended_at.map_or("-".to_owned(), time)
        );
        if let Some(key) = &at.idempotency_key {
            println!("      idempotency key: {}", escape_untrusted(key));
        }
        if let Some(error) = &at.error {
            println!("      error: {}", escape_untrusted(error));
        }
        let ev = &at.evidence;
        if ev.status.is_some() || ev.destination_id.is_some() || ev.body.is_some() {
            println!(
                "      evidence: status {}  destination id {}",
                ev.status.map_or("-".to_owned(), |s| s.to_string()),
                escape_untrusted(ev.destination_id.as_deref().unwrap_or("-"))
            );
            if let Some(body) = &ev.body {
                println!("      body: {}", escape_untrusted(body));
            }
        }
    }
}

fn print_lookups(lookups: &[LookupRecord]) {
    println!("\nlookups ({})", lookups.len());
    for l in lookups {
        println!(
            "  {}  {:<10}  {} record(s)  destination id {}  status {}  by {}",
            time(l.at),
            l.verdict.as_str(),
            l.records,
            escape_untrusted(l.destination_id.as_deref().unwrap_or("-")),
            l.evidence.status.map_or("-".to_owned(), |s| s.to_string()),
            escape_untrusted(&l.actor)
        );
        if let Some(detail) = &l.detail {
            println!("      {}", escape_untrusted(detail));
        }
        if let Some(body) = &l.evidence.body {
            println!("      body: {}", escape_untrusted(body));
        }
    }
}

fn print_audit(audit: &[AuditEntry]) {
    println!("\naudit trail ({})", audit.len());
    for e in audit {
        let from = e.from_state.map_or("(new)", |s| s.as_str());
        println!(
            "  {}  {:<20} {} -> {}  by {} {}  (version {}, ownership {})",
            time(e.at),
            e.event.as_str(),
            from,
            e.to_state,
            e.actor_kind.as_str(),
            escape_untrusted(&e.actor),
            e.revision,
            e.ownership_version
        );
        if let Some(reason) = &e.reason {
            println!("      {}", escape_untrusted(reason));
        }
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

pub fn manual(request: &ManualRequest, outcome: &ManualOutcome, as_json: bool) {
    let a = &outcome.action;
    if as_json {
        print_json(&document::manual(request, outcome));
        return;
    }
    let key = escape_untrusted(a.key.as_str());
    if let Some(t) = outcome.transition {
        println!(
            "{}: {key} {} -> {} (version {}, ownership version {}) by {}",
            request.command.verb(),
            t.from,
            t.to,
            a.revision,
            a.ownership_version,
            escape_untrusted(request.person.as_str())
        );
    } else {
        let what = match (&request.command, &outcome.update) {
            (ManualCommand::Assign { to }, _) => format!("now assigned to {}", escape_untrusted(to)),
            (ManualCommand::Approve { .. }, Some(update)) => format!(
                "payload revision {} is approved; the update action {} (pending) performs it at the destination, \
                 and this action keeps payload revision {} until that update completes",
                crate::domain::manual::update_number(update).unwrap_or(a.payload_revision + 1),
                escape_untrusted(update.key.as_str()),
                a.payload_revision
            ),
            (ManualCommand::Acknowledge, _) => "its late results are acknowledged".to_owned(),
            (ManualCommand::Recreate, _) => format!(
                "the action {} (pending) creates its record at the destination again",
                outcome.recreated.as_ref().map_or_else(|| "?".to_owned(), |r| escape_untrusted(r.key.as_str()))
            ),
            _ => "the proposed payload was discarded".to_owned(),
        };
        println!(
            "{}: {key} stays {} (version {}) by {}; {what}",
            request.command.verb(),
            a.state,
            a.revision,
            escape_untrusted(request.person.as_str())
        );
    }
}

/// What a bulk command did (or, in a dry run, would do) to each action selected: the changes,
/// then the refusals with their reasons, each sorted by key, then the counts; `--json` gives
/// both lists in one document.
pub fn bulk(
    command: &ManualCommand,
    keys: &[crate::domain::ActionKey],
    answers: &[Result<ManualOutcome, LedgerError>],
    dry_run: bool,
    as_json: bool,
) {
    let verb = command.verb();
    let change = |o: &ManualOutcome| match o.transition {
        Some(t) => format!("{} -> {}", t.from, t.to),
        None => format!("stays {}", o.action.state),
    };
    // Sorted by key, whatever order they ran in, so that two runs compare line by line.
    let mut done: Vec<_> = keys.iter().zip(answers).filter_map(|(k, a)| a.as_ref().ok().map(|o| (k, o))).collect();
    // A refusal is the ledger's answer; anything else (a database that failed) is a failure, and
    // is never called a refusal.
    let (mut refused, mut failed): (Vec<_>, Vec<_>) = keys
        .iter()
        .zip(answers)
        .filter_map(|(k, a)| a.as_ref().err().map(|e| (k, e)))
        .partition(|(_, e)| Kind::of_ledger(e) == Kind::Refused);
    done.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    refused.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    failed.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    if as_json {
        print_json(&json!({
            "command": verb,
            "dry_run": dry_run,
            "selected": keys.len(),
            "done": done.iter().map(|(k, o)| json!({
                "key": k.as_str(),
                "from": o.transition.map(|t| t.from),
                "to": o.action.state,
                "version": o.action.revision,
            })).collect::<Vec<_>>(),
            "refused": refused.iter().map(|(k, e)| json!({"key": k.as_str(), "reason": ledger_error_text(e)})).collect::<Vec<_>>(),
            "failed": failed.iter().map(|(k, e)| json!({"key": k.as_str(), "error": e.to_string()})).collect::<Vec<_>>(),
        }));
        return;
    }
    let (did, changed) = if dry_run { ("would", "would change") } else { ("", "done") };
    for (key, outcome) in &done {
        let prefix = if dry_run { format!("{did} {verb}") } else { verb.to_owned() };
        println!("{prefix}: {} {}", escape_untrusted(key.as_str()), change(outcome));
    }
    for (key, error) in &refused {
        println!("refused: {}: {}", escape_untrusted(key.as_str()), escape_untrusted(&ledger_error_text(error)));
    }
    for (key, error) in &failed {
        println!("failed: {}: {}", escape_untrusted(key.as_str()), escape_untrusted(&error.to_string()));
    }
    let nothing = if dry_run { "; nothing was changed (--dry-run)" } else { "" };
    let failures = if failed.is_empty() { String::new() } else { format!(", {} failed", failed.len()) };
    println!("{verb}: {} selected, {} {changed}, {} refused{failures}{nothing}", keys.len(), done.len(), refused.len());
}

/// A refusal as the command line says it: the ledger's words, then its way out as a flag or a
/// command to run.
pub fn refusal_text(refusal: &Refusal) -> String {
    let key = refusal.key().map_or_else(|| "KEY".to_owned(), |key| escape_untrusted(key.as_str()));
    match refusal.way_out() {
        Some(WayOut::NameProposal) => format!(
            "{refusal}; name one with --proposal FINGERPRINT (its first characters are enough; `actionledger show \
             {key}` lists them)"
        ),
        Some(WayOut::ReadAgain) => format!("{refusal}; read it again with `actionledger show {key}`"),
        Some(WayOut::ConfirmOldWorkerStopped) => format!("{refusal} with --old-worker-stopped"),
        Some(WayOut::ConfirmNotWritten) => {
            let command = if matches!(refusal, Refusal::CancelMayHaveWritten { .. }) { "cancel" } else { "retry" };
            format!("{refusal}; once it holds none, run the {command} again with --confirm-not-written")
        }
        Some(WayOut::SeeLateResults) => {
            format!("{refusal}; `actionledger show {key}` lists its late results and who acknowledged them")
        }
        None => refusal.to_string(),
    }
}

/// A ledger error as the command line says it.
fn ledger_error_text(error: &LedgerError) -> String {
    match error {
        LedgerError::Refused(refusal) => refusal_text(refusal),
        other => other.to_string(),
    }
}

pub fn reconciliation(reports: &[crate::reconcile::DestinationReport], as_json: bool) {
    if as_json {
        print_json(&json!({ "destinations": reports }));
        return;
    }
    for report in reports {
        println!(
            "{}: {} actions compared, {} disagreements, {} lookups failed{}",
            report.destination,
            report.checked,
            report.findings.len(),
            report.lookup_errors,
            if report.purged > 0 { format!(", {} purged passed over", report.purged) } else { String::new() }
        );
        for f in &report.findings {
            let settled = f.settled_to.map(|s| format!(" -> settled to {s}")).unwrap_or_default();
            let kind =
                serde_json::to_value(f.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            println!(
                "  {:<24} {} ({}): {}{settled}",
                kind,
                escape_untrusted(&f.key),
                f.state,
                escape_untrusted(&f.detail)
            );
        }
    }
}

pub fn demo_summary(summary: &crate::demo::DemoSummary) {
    let total: i64 = summary.states.values().sum();
    println!("demo finished: {total} actions recorded, {} submissions refused", summary.refused);
    let states: Vec<String> = summary.states.iter().map(|(state, n)| format!("{state} {n}")).collect();
    println!("  ledger: {}", states.join(", "));
    let faults: Vec<String> = summary.faults_injected.iter().map(|(f, n)| format!("{f} {n}")).collect();
    println!(
        "  CRM: {} records, at most {} per external reference, {} idempotent replays, {} duplicates refused",
        summary.crm_records,
        summary.crm_max_records_per_external_ref,
        summary.crm_idempotent_replays,
        summary.crm_duplicates_refused
    );
    println!("  faults injected: {}", if faults.is_empty() { "none".to_owned() } else { faults.join(", ") });
    println!("  run `actionledger demo` without --no-ui to triage what is left in the console");
}

/// What `lookup` found at the destination and did to the action.
pub fn looked_up(action: &ActionRecord, looked: &LookedUp, as_json: bool) {
    if as_json {
        let settled_to = match &looked.settlement {
            Settlement::Settled(settled) => Some(settled.state),
            Settlement::NotUncertain | Settlement::Kept | Settlement::ChangedMeanwhile => None,
        };
        print_json(&json!({
            "key": action.key.as_str(),
            "verdict": looked.report.verdict.as_str(),
            "records": looked.report.records,
            "destination_id": looked.report.destination_id,
            "record_ids": looked.found_ids,
            "detail": looked.report.detail,
            "was": action.state,
            "settled_to": settled_to,
            "changed_meanwhile": looked.settlement == Settlement::ChangedMeanwhile,
            "kept": looked.settlement == Settlement::Kept,
        }));
        return;
    }
    println!("{}", escape_untrusted(&looked.describe(action)));
    if let Some(detail) = &looked.report.detail {
        println!("  {}", escape_untrusted(detail));
    }
}

/// The ledger's figures (`stats`).
pub fn stats(stats: &crate::ledger::LedgerStats, as_json: bool) {
    if as_json {
        // Straight from the figures, keeping their order (states as the lifecycle runs).
        println!("{}", serde_json::to_string_pretty(stats).expect("figures serialize"));
        return;
    }
    let age = |seconds: Option<i64>| seconds.map_or_else(|| "none".to_owned(), age_text);
    println!("ledger figures at {}", time(stats.at));
    for (state, count) in &stats.states.0 {
        println!("  {:<16}{count:>10}", state.as_str());
    }
    println!("  {:<16}{:>10}", "total", stats.total);
    println!("stale claims (lease expired): {}", stats.stale_claims);
    println!("oldest pending:  {}", age(stats.oldest_pending_seconds));
    println!("oldest unknown:  {}", age(stats.oldest_unknown_seconds));
    println!("oldest held:     {}", age(stats.oldest_held_seconds));
    println!("oldest conflict: {}", age(stats.oldest_conflict_seconds));
    println!("blocked (waiting on a cancelled or failed action): {}", stats.blocked);
}

/// A wait in seconds as days, hours, minutes and seconds: `2h 5m 0s`.
fn age_text(seconds: i64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (hours, rest) = (rest / 3600, rest % 3600);
    let (minutes, seconds) = (rest / 60, rest % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, _) => format!("{minutes}m {seconds}s"),
        (0, _, _) => format!("{hours}h {minutes}m {seconds}s"),
        _ => format!("{days}d {hours}h {minutes}m"),
    }
}

#[cfg(test)]
mod age_tests {
    #[test]
    fn ages_read_as_units() {
        assert_eq!(super::age_text(5), "5s");
        assert_eq!(super::age_text(125), "2m 5s");
        assert_eq!(super::age_text(7500), "2h 5m 0s");
        assert_eq!(super::age_text(90_000), "1d 1h 0m");
    }
}
