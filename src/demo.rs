//! `actionledger demo`: a ledger, a simulated CRM with faults, a realistic stream of order and
//! enquiry events, live workers, and the review console opened on what they leave for a person.

use crate::config::Config;
use crate::console::ConsoleOptions;
use crate::destination::Destinations;
use crate::domain::{Person, RawSubmission, State};
use crate::error::Error;
use crate::ledger::{Ledger, LedgerError};
use crate::sim_crm::{Fault, FaultPlan, Options, SimCrm};
use crate::store::Store;
use crate::worker::{self, WorkerOptions};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Leases are short in the demo so that a dead worker's claim goes stale while you watch.
const DEMO_LEASE: Duration = Duration::from_secs(4);

/// What the demo left behind.
#[derive(Debug, Clone, Serialize)]
pub struct DemoSummary {
    pub states: BTreeMap<String, i64>,
    pub refused: i64,
    pub crm_records: u64,
    pub crm_max_records_per_external_ref: u64,
    pub crm_idempotent_replays: u64,
    pub crm_duplicates_refused: u64,
    pub faults_injected: BTreeMap<String, u64>,
}

/// Three destinations on one simulated CRM: a protected CRM (idempotency keys, lookup), a mailer
/// with idempotency keys but no lookup, and a legacy ERP with neither.
fn destinations(crm: &SimCrm) -> Result<Destinations, Error> {
    let base = format!("http://{}", crm.addr());
    let text = format!(
        r#"{crm_block}
backoff_base = "200ms"
backoff_max = "2s"

[destinations.mailer]
base_url = "{base}"
timeout = "2s"
backoff_base = "200ms"
backoff_max = "2s"
create = {{ url = "{{{{base_url}}}}/emails", body = {{ external_ref = "{{{{external_ref}}}}", data = "{{{{payload}}}}", task = "{{{{after.destination_id}}}}" }} }}
idempotency = {{ header = "Idempotency-Key", retention = "24h" }}

[destinations.erp]
base_url = "{base}"
timeout = "2s"
create = {{ url = "{{{{base_url}}}}/invoices", body = {{ external_ref = "{{{{external_ref}}}}", data = "{{{{payload}}}}" }} }}
"#,
        crm_block = crm.destination_config("crm")
    );
    Ok(Destinations::from_config(&Config::parse(&text)?)?)
}

fn event(key: Option<&str>, payload: &str, destination: &str, source: &str, event_id: &str) -> RawSubmission {
    RawSubmission {
        key: key.map(str::to_owned),
        payload: payload.as_bytes().to_vec(),
        event_id: Some(event_id.to_owned()),
        source: Some(source.to_owned()),
        source_version: Some(1),
        destination: Some(destination.to_owned()),
        after: None,
    }
}

/// Submits the scenario's events, the way sources deliver them: repeated, concurrent, changed,
/// malformed.
async fn deliver<S: Store>(ledger: &Ledger<S>) -> Result<(), Error> {
    let submit = |raw: RawSubmission| async move {
        match ledger.submit(&raw).await {
            Ok(_) | Err(LedgerError::SubmissionRefused(_)) => Ok::<(), Error>(()),
            Err(other) => Err(other.into()),
        }
    };
    for n in 2001..=2012 {
        let key = format!("acme:order:ORD-{n}:create-task");
        let payload = format!(
            r#"{{"order":"ORD-{n}","customer":"CUST-{}","items":[{{"sku":"A-{}","qty":{}}}]}}"#,
            n % 7,
            n % 5,
            n % 3 + 1
        );
        submit(event(Some(&key), &payload, "crm", "shop", &format!("shop-{n}"))).await?;
        // The shop's webhook fires twice for some orders.
        if n % 4 == 0 {
            submit(event(Some(&key), &payload, "crm", "shop", &format!("shop-{n}"))).await?;
        }
    }
    // Form system and payment system report the same order at the same moment.
    let same = r#"{"order":"ORD-2013","customer":"CUST-1","items":[{"sku":"B-1","qty":1}]}"#;
    let concurrent: Vec<_> = ["forms", "payments", "forms"]
        .into_iter()
        .enumerate()
        .map(|(i, source)| {
            let ledger = ledger.clone();
            let raw = event(Some("acme:order:ORD-2013:create-task"), same, "crm", source, &format!("{source}-{i}"));
            tokio::spawn(async move { ledger.submit(&raw).await.map(|_| ()) })
        })
        .collect();
    for task in concurrent {
        task.await??;
    }
    // A two-step workflow: the confirmation e-mail waits for its task.
    for n in [2001, 2002, 2003] {
        let mut confirmation = event(
            Some(&format!("acme:order:ORD-{n}:send-confirmation")),
            &format!(r#"{{"template":"order-confirmed","order":"ORD-{n}"}}"#),
            "mailer",
            "shop",
            &format!("mail-{n}"),
        );
        confirmation.after = Some(format!("acme:order:ORD-{n}:create-task"));
        submit(confirmation).await?;
    }
    // Enquiries from the web form, one of them with an e-mail address in its key.
    submit(event(
        Some("acme:enquiry:ENQ-77:create-contact"),
        r#"{"topic":"bulk pricing"}"#,
        "crm",
        "webform",
        "web-77",
    ))
    .await?;
    submit(event(
        Some("acme:enquiry:jo@example.com:create-contact"),
        r#"{"topic":"returns"}"#,
        "crm",
        "webform",
        "web-78",
    ))
    .await?;
    // An event that lost its key on the way.
    submit(event(None, r#"{"order":"ORD-2099"}"#, "crm", "shop", "shop-2099")).await?;
    // Invoices for the legacy ERP, which has no idempotency keys and no lookup.
    for n in [3001, 3002] {
        let key = format!("acme:invoice:INV-{n}:create");
        submit(event(
            Some(&key),
            &format!(r#"{{"invoice":"INV-{n}","amount":{}}}"#, n - 2900),
            "erp",
            "billing",
            &format!("bill-{n}"),
        ))
        .await?;
    }
    Ok(())
}

/// The order whose quantity changes after it was first delivered: a conflict for a person.
async fn change_an_order<S: Store>(ledger: &Ledger<S>) -> Result<(), Error> {
    let mut changed = event(
        Some("acme:order:ORD-2011:create-task"),
        r#"{"order":"ORD-2011","customer":"CUST-2","items":[{"sku":"A-1","qty":5}]}"#,
        "crm",
        "shop",
        "shop-2011-edit",
    );
    changed.source_version = Some(2);
    ledger.submit(&changed).await.map(|_| ()).or_else(|e| match e {
        LedgerError::Refused(_) => Ok(()),
        other => Err(other.into()),
    })
}

/// A worker that claims an ERP invoice, sends it, and dies before recording anything.
async fn worker_dies_holding_a_claim<S: Store>(ledger: &Ledger<S>, destinations: &Destinations) -> Result<(), Error> {
    let scope =
        crate::store::ClaimScope { destinations: Some(vec!["erp".to_owned()]), include_unassigned: false, key: None };
    if let Some(claim) = ledger.claim_scoped("worker-7-crashed", DEMO_LEASE, 1, &scope).await?.pop() {
        ledger.start_attempt(&claim).await?;
        if let Some(erp) = destinations.get("erp") {
            let _ = erp.send(&claim.action, None).await;
        }
    }
    Ok(())
}

fn worker_options(id: &str, destinations: &Destinations, drain: bool) -> WorkerOptions {
    WorkerOptions {
        id: id.to_owned(),
        concurrency: 3,
        batch: 3,
        lease: DEMO_LEASE,
        poll_interval: Duration::from_millis(200),
        drain,
        destinations: destinations.clone(),
        progress: false,
    }
}

/// Runs the demo on `ledger`; with `ui`, opens the console and runs workers until it closes.
pub async fn run<S: Store>(
    ledger: &Ledger<S>,
    ledger_label: &str,
    owner: Person,
    ui: bool,
) -> Result<DemoSummary, Error> {
    let listener =
        tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| Error::io("cannot listen on loopback", e))?;
    let faults = FaultPlan {
        script: [Fault::Ok, Fault::DropAfterCommit].into(),
        rates: vec![(Fault::DropAfterCommit, 0.2), (Fault::Unavailable, 0.1), (Fault::Delay(400), 0.1)],
    };
    let crm = SimCrm::start(listener, Options { faults, ..Options::default() })?;
    let destinations = destinations(&crm)?;
    deliver(ledger).await?;
    worker_dies_holding_a_claim(ledger, &destinations).await?;
    change_an_order(ledger).await?;

    if ui {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut workers = Vec::new();
        for id in ["worker-1", "worker-2"] {
            let ledger = ledger.clone();
            let options = worker_options(id, &destinations, false);
            let mut stopped = stopped.clone();
            workers.push(tokio::spawn(async move {
                worker::run(ledger, options, async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
            }));
        }
        let options = ConsoleOptions {
            owner,
            ledger_label: ledger_label.to_owned(),
            destinations: destinations.clone(),
            refresh: Duration::from_secs(1),
            hint: Some(
                "Workers are running. Try 3 (unknown) or 6 (held), Enter for evidence, then r c n x; ? lists every key"
                    .to_owned(),
            ),
            filter: None,
        };
        let result = crate::console::run_terminal(ledger, &options).await;
        let _ = stop.send(true);
        for worker in workers {
            let _ = worker.await;
        }
        result?;
    } else {
        worker::run(ledger.clone(), worker_options("worker-1", &destinations, true), std::future::pending()).await?;
        // The dead worker's claim expires; recovery finds a destination that cannot tell a repeat.
        tokio::time::sleep(DEMO_LEASE + Duration::from_millis(500)).await;
        worker::run(ledger.clone(), worker_options("worker-2", &destinations, true), std::future::pending()).await?;
    }
    let effects = crm.stats();
    let states = ledger.counts().await?.into_iter().map(|(state, n)| (state.as_str().to_owned(), n)).collect();
    Ok(DemoSummary {
        states,
        refused: ledger.store().count_refused(&crate::store::ListFilter::default()).await?,
        crm_records: effects.records,
        crm_max_records_per_external_ref: effects.max_records_per_external_ref,
        crm_idempotent_replays: effects.idempotent_replays,
        crm_duplicates_refused: effects.duplicates_refused,
        faults_injected: effects.faults_injected,
    })
}

impl DemoSummary {
    /// How many actions ended in `state`.
    pub fn count(&self, state: State) -> i64 {
        self.states.get(state.as_str()).copied().unwrap_or(0)
    }
}
