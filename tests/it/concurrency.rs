//! Concurrency on both stores: many deliveries of the same keys at once, then many workers
//! claiming and recovering at once. Counts what the ledger holds, not what it logged.

use crate::support::TestDb;
use actionledger::domain::RawSubmission;
use actionledger::ledger::{Claim, Recovery};
use actionledger::store::{ListFilter, Store};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const KEYS: usize = 200;
const DELIVERIES_PER_KEY: usize = 8;
const SUBMITTERS: usize = 16;
const WORKERS: usize = 8;
const LEASE: Duration = Duration::from_secs(30);

conformance!(duplicate_storm_then_concurrent_claims, concurrent_recovery_takes_each_expired_claim_once);

fn key(n: usize) -> String {
    format!("acme:order:ORD-{n:04}:create-task")
}

/// 16 tasks deliver every key 8 times: half of them walk the first half of the keys and half
/// the second, in step, so each key arrives from 8 tasks at the same moment.
async fn submit_storm<S: Store>(db: &TestDb<S>) {
    let mut tasks = Vec::new();
    for submitter in 0..SUBMITTERS {
        let ledger = db.ledger.clone();
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for delivery in 0..(KEYS * DELIVERIES_PER_KEY / SUBMITTERS) {
                let n = (delivery + (submitter % 2) * (KEYS / 2)) % KEYS;
                let raw = RawSubmission {
                    key: Some(key(n)),
                    payload: format!(r#"{{"order":"ORD-{n:04}","qty":{}}}"#, n % 5 + 1).into_bytes(),
                    event_id: Some(format!("evt-{submitter}-{delivery}")),
                    source: Some("shop".to_owned()),
                    ..Default::default()
                };
                outcomes.push(ledger.submit(&raw).await.expect("submission").outcome);
            }
            outcomes
        }));
    }
    let mut created = 0;
    for task in tasks {
        created +=
            task.await.unwrap().into_iter().filter(|o| *o == actionledger::domain::SubmitOutcome::Created).count();
    }
    assert_eq!(created, KEYS, "exactly one delivery per key created the action");
}

/// Claims in rounds: in each round every worker asks for a batch at the same moment, so each
/// round is contended and no worker can drain the queue before the others have asked. Stops
/// when a whole round comes back empty.
async fn claim_everything<S: Store>(db: &TestDb<S>) -> Vec<Claim> {
    let mut all = Vec::new();
    loop {
        let round: Vec<_> = (0..WORKERS)
            .map(|w| {
                let ledger = db.ledger.clone();
                tokio::spawn(async move { ledger.claim(&format!("worker-{w}"), LEASE, 3).await.expect("claim") })
            })
            .collect();
        let before = all.len();
        for worker in round {
            all.extend(worker.await.unwrap());
        }
        if all.len() == before {
            break all;
        }
    }
}

async fn duplicate_storm_then_concurrent_claims<S: Store>(db: TestDb<S>) {
    submit_storm(&db).await;
    let actions = db.ledger.list(&ListFilter { limit: 1000, ..Default::default() }).await.unwrap();
    assert_eq!(actions.len(), KEYS, "exactly one action per key");
    for action in &actions {
        let deliveries = db.ledger.store().deliveries(&action.key).await.unwrap();
        assert_eq!(deliveries.len(), DELIVERIES_PER_KEY, "every delivery of {} recorded", action.key);
    }

    let claims = claim_everything(&db).await;
    let mut per_version: HashMap<(String, i64), usize> = HashMap::new();
    for claim in &claims {
        *per_version.entry((claim.key().to_string(), claim.ownership_version())).or_default() += 1;
    }
    assert!(per_version.values().all(|&n| n == 1), "exactly one successful claim per ownership version");
    let keys: HashSet<&str> = claims.iter().map(|c| c.key().as_str()).collect();
    assert_eq!(keys.len(), KEYS, "no key lost, none claimed twice");
    assert_eq!(claims.len(), KEYS);
    let workers_used: HashSet<&str> = claims.iter().map(|c| c.worker.as_str()).collect();
    assert_eq!(workers_used.len(), WORKERS, "every worker won claims in the contended rounds");
}

async fn concurrent_recovery_takes_each_expired_claim_once<S: Store>(db: TestDb<S>) {
    submit_storm(&db).await;
    let first = claim_everything(&db).await;
    assert_eq!(first.len(), KEYS);
    db.ledger.store().clock().advance(LEASE * 2);
    let expired = db.ledger.store().expired_claims(1000, &actionledger::store::ClaimScope::any()).await.unwrap();
    assert_eq!(expired.len(), KEYS);

    let mut rescuers = Vec::new();
    for w in 0..WORKERS {
        let ledger = crate::support::protected_by_lookup(&db.ledger, &["crm"]);
        let expired = expired.clone();
        rescuers.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for action in expired.iter().cycle().skip(w * 25).take(expired.len()) {
                let recovery = ledger
                    .recover_expired(&action.key, action.ownership_version, &format!("rescuer-{w}"), LEASE)
                    .await
                    .expect("recovery");
                if let Recovery::Claimed(claim) = recovery {
                    won.push(claim);
                }
            }
            won
        }));
    }
    let mut recovered = Vec::new();
    for rescuer in rescuers {
        recovered.extend(rescuer.await.unwrap());
    }
    let keys: HashSet<&str> = recovered.iter().map(|c| c.key().as_str()).collect();
    assert_eq!(recovered.len(), KEYS, "each expired claim taken over exactly once");
    assert_eq!(keys.len(), KEYS);
    assert!(recovered.iter().all(|c| c.ownership_version() == 2), "one new ownership version each");
}
