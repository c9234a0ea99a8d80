//! The register over HTTP on both stores: automations that perform the effect themselves begin,
//! renew and finish through `serve`, each effect counted at the simulated CRM: the seed list on
//! this path (five deliveries, two callers at once, a caller paused past its lease, a caller
//! killed after the destination wrote, a finished key begun again), a queue drained through
//! `/v1/claims` under the worker's rules, and what an executor's token may not do.

use crate::serve::{SOURCE, client, post, submission, unlimited};
use crate::support::TestDb;
use actionledger::config::Config;
use actionledger::domain::State;
use actionledger::serve::App;
use actionledger::serve::auth::{Role, Tokens};
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::store::Store;
use serde_json::{Value, json};
use std::time::Duration;

conformance!(
    the_same_event_begun_five_times_gives_one_record,
    two_callers_beginning_at_once_get_one_proceed,
    a_caller_paused_past_its_lease_is_fenced_and_the_rescuer_follows_rule_5,
    a_caller_killed_after_the_destination_wrote_is_held_or_its_send_replayed,
    the_keeper_recovers_a_dead_callers_claim_by_its_destinations_protection,
    a_lookup_waits_its_settle_delay_after_a_lease_ends,
    the_console_shows_who_holds_an_executors_claim,
    a_queue_drained_through_claims_keeps_the_attempt_budget,
    an_executor_token_performs_its_own_destination_only,
    a_repeated_finish_changes_nothing_and_a_heartbeat_extends_the_lease,
    the_python_example_sends_each_receipt_once,
);

const MAILER: &str = "mailer-token-0123456789";
const MAILER_TWO: &str = "mailer-two-token-0123456789";
const ERP: &str = "erp-token-0123456789";

/// How the executor `mailer` is declared: with the CRM's idempotency key, with the CRM's lookup
/// by external reference (which the ledger makes itself), or with nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Declared {
    Keyed,
    LookedUp,
    Bare,
}

/// A served register and what stands behind it.
struct Served<S> {
    base: String,
    crm: SimCrm,
    /// The ledger as `serve` decides with it (the executors' capabilities in its catalogue).
    ledger: actionledger::Ledger<S>,
    destinations: actionledger::destination::Destinations,
}

/// A served register for `mailer` (and `erp`) in front of a simulated CRM that honours the key
/// only where the executor declares it; returns the base URL and the CRM.
async fn register<S: Store>(db: &TestDb<S>, declared: Declared) -> (String, SimCrm) {
    let served = serve_register(db, declared).await;
    (served.base, served.crm)
}

async fn serve_register<S: Store>(db: &TestDb<S>, declared: Declared) -> Served<S> {
    serve_register_settling(db, declared, "200ms").await
}

/// [`serve_register`] with the lookup's settle delay given.
async fn serve_register_settling<S: Store>(db: &TestDb<S>, declared: Declared, settle: &str) -> Served<S> {
    let crm_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let retention = match declared {
        Declared::Keyed => Options::default().retention,
        Declared::LookedUp | Declared::Bare => None,
    };
    let crm = SimCrm::start(crm_listener, Options { retention, unique_refs: false, ..Options::default() }).unwrap();
    let protection = match declared {
        Declared::Keyed => "idempotency = { header = \"Idempotency-Key\", retention = \"24h\" }".to_owned(),
        Declared::LookedUp => format!(
            "base_url = \"http://{}\"\nlookup = {{ url = \"{{{{base_url}}}}/tasks?external_ref={{{{external_ref}}}}\", \
             records_pointer = \"/records\", settle = \"{settle}\" }}",
            crm.addr()
        ),
        Declared::Bare => String::new(),
    };
    let config = Config::parse(&format!(
        "[executors.mailer]\n{protection}\nmax_attempts = 2\nbackoff_base = \"10ms\"\nbackoff_max = \"20ms\"\n\
         review_owner = \"Ana Lima\"\n\n[executors.erp]\n"
    ))
    .unwrap();
    let destinations = actionledger::destination::Destinations::from_config(&config).unwrap();
    let ledger = db.ledger.clone().with_destinations(destinations.catalog());
    let mut tokens = Tokens::default();
    tokens.insert_executor(MAILER, "mailer", "mail-script").unwrap();
    tokens.insert_executor(MAILER_TWO, "mailer", "mail-script-2").unwrap();
    tokens.insert_executor(ERP, "erp", "erp-flow").unwrap();
    tokens.insert(SOURCE, Role::Source, "shop").unwrap();
    let router = App::new(ledger.clone(), tokens, Vec::new(), unlimited())
        .with_executors(config.executors)
        .with_destinations(destinations.clone())
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(actionledger::connections::serve(
        listener,
        router,
        actionledger::serve::ConnectionLimits::default(),
        std::future::pending(),
    ));
    Served { base: format!("http://{addr}"), crm, ledger, destinations }
}

fn action_key(key: &str) -> actionledger::domain::ActionKey {
    actionledger::domain::ActionKey::parse(key).unwrap()
}

async fn begin(base: &str, token: &str, key: &str, lease_seconds: u64) -> Value {
    let body = json!({ "payload": { "to": "ana@example.com" }, "event_id": "ev-1", "lease_seconds": lease_seconds });
    let (status, _, answer) = post(&client(), &format!("{base}/v1/actions/{key}:begin"), Some(token), &body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The effect itself, as the automation performs it: a record at the CRM, sent with the key
/// `:begin` answered in the header it names. Returns the record's id.
async fn perform(crm: &SimCrm, key: &str, claim: &Value) -> String {
    let mut request = client()
        .post(format!("http://{}/tasks", crm.addr()))
        .header("content-type", "application/json")
        .body(json!({ "external_ref": key, "data": "receipt" }).to_string());
    if let Some(header) = claim["idempotency_header"].as_str() {
        request = request.header(header, claim["idempotency_key"].as_str().unwrap());
    }
    let answer: Value = serde_json::from_str(&request.send().await.unwrap().text().await.unwrap()).unwrap();
    answer["id"].as_str().expect("the CRM names its record").to_owned()
}

async fn finish(base: &str, token: &str, key: &str, body: &Value) -> (u16, Value) {
    let (status, _, answer) = post(&client(), &format!("{base}/v1/actions/{key}:finish"), Some(token), body).await;
    (status, answer)
}

fn completed(claim: &Value, id: &str) -> Value {
    json!({ "ownership_version": claim["ownership_version"], "outcome": "completed", "destination_id": id,
            "evidence": { "status": 201 } })
}

/// One automation run for `key`: begin, and where told to proceed, act and finish.
async fn run_once(base: &str, crm: &SimCrm, key: &str) -> Value {
    let answer = begin(base, MAILER, key, 30).await;
    if answer["decision"] == "proceed" {
        let id = perform(crm, key, &answer["claim"]).await;
        let (status, finished) = finish(base, MAILER, key, &completed(&answer["claim"], &id)).await;
        assert_eq!((status, finished["recorded"].as_str()), (200, Some("applied")), "{finished}");
    }
    answer
}

async fn the_same_event_begun_five_times_gives_one_record<S: Store>(db: TestDb<S>) {
    let (base, crm) = register(&db, Declared::Bare).await;
    let key = "shop:order:7:send-receipt";
    let mut decisions = Vec::new();
    for _ in 0..5 {
        decisions.push(run_once(&base, &crm, key).await);
    }
    let words: Vec<&str> = decisions.iter().map(|d| d["decision"].as_str().unwrap()).collect();
    assert_eq!(words, ["proceed", "done", "done", "done", "done"]);
    assert_eq!(decisions[0]["submitted"], "created");
    assert_eq!(decisions[0]["claim"]["attempt"], 1);
    assert_eq!(decisions[0]["action"]["attempts"], 1, "the action as it stands, its attempt started");
    let record = crm.records_for(key);
    assert_eq!(record.len(), 1, "one record at the CRM");
    // A finished key begun again answers what the effect produced.
    let done = &decisions[4];
    assert_eq!(done["destination_id"], record[0]["id"]);
    assert_eq!(done["evidence"]["status"], 201);
    assert_eq!(done["state"], "completed");
    let detail = db.ledger.detail(&action_key(key)).await.unwrap();
    assert_eq!(detail.deliveries.len(), 5, "every delivery is recorded");
    assert_eq!(detail.attempts.len(), 1);
    assert_eq!(detail.attempts[0].worker, "mail-script");
}

async fn two_callers_beginning_at_once_get_one_proceed<S: Store>(db: TestDb<S>) {
    let (base, crm) = register(&db, Declared::Bare).await;
    let key = "shop:order:8:send-receipt";
    let callers: Vec<_> = (0..8)
        .map(|n| {
            let base = base.clone();
            let token = if n % 2 == 0 { MAILER } else { MAILER_TWO };
            tokio::spawn(async move { begin(&base, token, key, 30).await })
        })
        .collect();
    let mut answers = Vec::new();
    for caller in callers {
        answers.push(caller.await.unwrap());
    }
    let proceeding: Vec<&Value> = answers.iter().filter(|a| a["decision"] == "proceed").collect();
    assert_eq!(proceeding.len(), 1, "{answers:?}");
    for other in answers.iter().filter(|a| a["decision"] != "proceed") {
        assert_eq!(other["decision"], "wait", "{other}");
        assert!(other["until"].is_string() && other["why"].as_str().unwrap().contains("holds it"), "{other}");
    }
    let claim = &proceeding[0]["claim"];
    let token = if answers.iter().any(|a| a["decision"] == "proceed" && a["action"]["claimed_by"] == "mail-script") {
        MAILER
    } else {
        MAILER_TWO
    };
    let id = perform(&crm, key, claim).await;
    assert_eq!(finish(&base, token, key, &completed(claim, &id)).await.0, 200);
    assert_eq!(begin(&base, MAILER, key, 30).await["decision"], "done");
    assert_eq!(crm.records_for(key).len(), 1);
}

async fn a_caller_paused_past_its_lease_is_fenced_and_the_rescuer_follows_rule_5<S: Store>(db: TestDb<S>) {
    for declared in [Declared::Keyed, Declared::Bare] {
        let (base, crm) = register(&db, declared).await;
        let key = format!("shop:order:9:send-receipt-{declared:?}");
        let paused = begin(&base, MAILER, &key, 1).await;
        assert_eq!(paused["decision"], "proceed");
        let paused_claim = &paused["claim"];
        let paused_id = perform(&crm, &key, paused_claim).await;
        // The caller stops (a GC pause, a suspended laptop) past its lease.
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let rescue = begin(&base, MAILER_TWO, &key, 30).await;
        match declared {
            Declared::Keyed => {
                // Rule 5: the destination recognises a repeat of the key, so it is taken over
                // under a new ownership version and sent again with the same key.
                assert_eq!(rescue["decision"], "proceed", "{rescue}");
                let claim = &rescue["claim"];
                assert_eq!(claim["ownership_version"], paused_claim["ownership_version"].as_i64().unwrap() + 1);
                assert_eq!(claim["idempotency_key"], paused_claim["idempotency_key"]);
                let id = perform(&crm, &key, claim).await;
                assert_eq!(id, paused_id, "the CRM replayed its answer to the repeated key");
                assert_eq!(finish(&base, MAILER_TWO, &key, &completed(claim, &id)).await.0, 200);
            }
            Declared::LookedUp => unreachable!("declared only where a test says so"),
            Declared::Bare => {
                // Rule 5: a request may have gone out and nothing stops a second effect: held.
                assert_eq!(rescue["decision"], "review", "{rescue}");
                assert_eq!(rescue["state"], "held");
                assert_eq!(rescue["assignee"], "Ana Lima", "routed to the executor's review owner");
            }
        }
        // The paused caller wakes: its heartbeat and its finish are refused; the finish is kept
        // for review and changes nothing.
        let (status, _, renewal) = post(
            &client(),
            &format!("{base}/v1/actions/{key}:heartbeat"),
            Some(MAILER),
            &json!({ "ownership_version": paused_claim["ownership_version"] }),
        )
        .await;
        assert_eq!(status, 409, "{renewal}");
        let before = db.ledger.detail(&action_key(&key)).await.unwrap().action;
        let (status, late) = finish(&base, MAILER, &key, &completed(paused_claim, &paused_id)).await;
        assert_eq!((status, late["type"].as_str()), (409, Some("urn:actionledger:problem:late_result")), "{late}");
        let detail = db.ledger.detail(&action_key(&key)).await.unwrap();
        assert_eq!(detail.action.destination_id, before.destination_id, "a late result never changes the record");
        // Rule 8: it reaches review. A completion that names the record the action completed
        // with contradicts nothing; one reported while a person must decide (held) sends the
        // action to conflict, with the late result beside it.
        let expected = if declared == Declared::Keyed { State::Completed } else { State::Conflict };
        assert_eq!(detail.action.state, expected);
        assert_eq!(detail.late_results().count(), 1, "the late result waits for a person");
        assert_eq!(crm.records_for(&key).len(), 1, "{declared:?}: one record");
    }
}

async fn a_caller_killed_after_the_destination_wrote_is_held_or_its_send_replayed<S: Store>(db: TestDb<S>) {
    for declared in [Declared::Keyed, Declared::LookedUp, Declared::Bare] {
        let (base, crm) = register(&db, declared).await;
        let key = format!("shop:order:10:send-receipt-{declared:?}");
        let killed = begin(&base, MAILER, &key, 1).await;
        perform(&crm, &key, &killed["claim"]).await;
        // Killed before :finish: nothing more from it, ever.
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let next = run_once(&base, &crm, &key).await;
        let action = db.ledger.detail(&action_key(&key)).await.unwrap().action;
        match declared {
            Declared::Keyed => {
                assert_eq!(next["decision"], "proceed");
                assert_eq!(action.state, State::Completed);
            }
            Declared::LookedUp => {
                // The ledger looked the key up before handing it out again: the record is there.
                assert_eq!(next["decision"], "done", "{next}");
                assert_eq!(action.state, State::Completed);
                let record = &crm.records_for(&key)[0];
                assert_eq!(next["destination_id"], record["id"], "the record the killed caller made");
            }
            Declared::Bare => {
                assert_eq!(next["decision"], "review");
                assert_eq!(action.state, State::Held);
                assert!(action.old_worker_may_act, "a person confirms the old caller stopped before a retry");
            }
        }
        assert_eq!(crm.records_for(&key).len(), 1, "{declared:?}: one record");
    }
}

/// A caller whose lease just ended may still have a request under way at the destination: until
/// the lookup's settle delay has passed after the lease, the key is neither handed out nor
/// concluded unwritten; then the lookup decides.
async fn a_lookup_waits_its_settle_delay_after_a_lease_ends<S: Store>(db: TestDb<S>) {
    let Served { base, crm, .. } = serve_register_settling(&db, Declared::LookedUp, "2s").await;
    let key = "shop:order:40:send-receipt";
    let gone = begin(&base, MAILER, key, 1).await;
    assert_eq!(gone["decision"], "proceed");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let early = begin(&base, MAILER_TWO, key, 30).await;
    assert_eq!(early["decision"], "wait", "{early}");
    assert!(early["why"].as_str().unwrap().contains("may still be under way"), "{early}");
    let until = chrono::DateTime::parse_from_rfc3339(early["until"].as_str().unwrap()).unwrap();
    let lease_end = chrono::DateTime::parse_from_rfc3339(gone["claim"]["lease_until"].as_str().unwrap()).unwrap();
    assert_eq!(until - lease_end, chrono::Duration::seconds(2), "the lease's end plus the settle delay");
    let (status, _, claims) =
        post(&client(), &format!("{base}/v1/claims"), Some(MAILER_TWO), &json!({ "limit": 5 })).await;
    assert_eq!((status, claims["claims"].as_array().map(Vec::len)), (200, Some(0)), "{claims}");
    // The request lands meanwhile; once the delay has passed the lookup finds it.
    perform(&crm, key, &gone["claim"]).await;
    let left = (until.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(100)).await;
    let late = begin(&base, MAILER_TWO, key, 30).await;
    assert_eq!(late["decision"], "done", "{late}");
    assert_eq!(crm.records_for(key).len(), 1);
}

/// Nobody begins the key again: `serve`'s keeper recovers what a dead caller left, by rule 5 and
/// the executor's declaration, and settles an uncertain finish by the lookup (rule 2).
async fn the_keeper_recovers_a_dead_callers_claim_by_its_destinations_protection<S: Store>(db: TestDb<S>) {
    // The lookup first: declared later, it would settle what the others leave uncertain.
    for declared in [Declared::LookedUp, Declared::Keyed, Declared::Bare] {
        let Served { base, crm, ledger, destinations } = serve_register(&db, declared).await;
        let sweep = || actionledger::serve::keeper::sweep(&ledger, &destinations);
        let wrote = format!("shop:order:20:wrote-{declared:?}");
        let silent = format!("shop:order:20:silent-{declared:?}");
        let uncertain = format!("shop:order:20:uncertain-{declared:?}");
        let killed = begin(&base, MAILER, &wrote, 1).await;
        perform(&crm, &wrote, &killed["claim"]).await;
        begin(&base, MAILER, &silent, 1).await;
        let unsure = begin(&base, MAILER, &uncertain, 30).await;
        perform(&crm, &uncertain, &unsure["claim"]).await;
        let version = unsure["claim"]["ownership_version"].clone();
        let (status, _) = finish(
            &base,
            MAILER,
            &uncertain,
            &json!({ "ownership_version": version,
            "outcome": "unknown", "reason": "the CRM timed out" }),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            sweep().await.unwrap(),
            actionledger::serve::keeper::Swept::default(),
            "{declared:?}: leases still run: nothing to do"
        );
        // Past the lease, and past the lookup's settle delay after it.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let swept = sweep().await.unwrap();
        let state = |key: String| {
            let ledger = db.ledger.clone();
            async move { ledger.detail(&action_key(&key)).await.unwrap().action }
        };
        let (wrote_now, silent_now, uncertain_now) =
            (state(wrote.clone()).await, state(silent.clone()).await, state(uncertain.clone()).await);
        match declared {
            Declared::Keyed => {
                // Its automation's next :begin sends the same key: the CRM answers the stored record.
                assert_eq!((wrote_now.state, silent_now.state), (State::Pending, State::Pending));
                assert_eq!(swept.released, 2, "{swept:?}");
                assert_eq!(uncertain_now.state, State::Unknown, "no lookup: a person decides");
                let next = run_once(&base, &crm, &wrote).await;
                assert_eq!(next["decision"], "proceed");
            }
            Declared::LookedUp => {
                assert_eq!(wrote_now.state, State::Completed, "the record the dead caller made, found");
                assert_eq!(
                    wrote_now.destination_id.as_ref(),
                    crm.records_for(&wrote)[0]["id"].as_str().map(str::to_owned).as_ref()
                );
                assert_eq!(silent_now.state, State::Pending, "no record: its automation may act");
                assert_eq!(uncertain_now.state, State::Completed, "the uncertain finish settled by the lookup");
                assert_eq!((swept.settled, swept.released, swept.looked_up), (1, 1, 1), "{swept:?}");
                let next = run_once(&base, &crm, &silent).await;
                assert_eq!(next["decision"], "proceed");
            }
            Declared::Bare => {
                for action in [&wrote_now, &silent_now] {
                    assert_eq!(action.state, State::Held, "{}: nothing tells a repeat: a person decides", action.key);
                    assert_eq!(action.assignee.as_deref(), Some("Ana Lima"));
                }
                assert_eq!(swept.held, 2, "{swept:?}");
                assert_eq!(uncertain_now.state, State::Unknown);
            }
        }
        assert_eq!(crm.records_for(&wrote).len(), 1, "{declared:?}: one record");
        assert_eq!(crm.records_for(&uncertain).len(), 1, "{declared:?}: one record");
        assert!(crm.records_for(&silent).len() <= 1, "{declared:?}");
    }
}

/// An executor's claim is shown like a worker's: its holder, its lease, and whether taking it
/// over would be safe, as the executor declares it (rule 5), in the review console at 80x24.
async fn the_console_shows_who_holds_an_executors_claim<S: Store>(db: TestDb<S>) {
    for declared in [Declared::Keyed, Declared::Bare] {
        let Served { base, ledger, destinations, .. } = serve_register(&db, declared).await;
        let key = format!("shop:order:30:held-{declared:?}");
        let began = begin(&base, MAILER, &key, 2).await;
        assert_eq!(began["decision"], "proceed");
        let options = actionledger::console::ConsoleOptions {
            owner: actionledger::domain::Person::parse("Ana Lima").unwrap(),
            ledger_label: "test-ledger".to_owned(),
            destinations: destinations.clone(),
            refresh: Duration::from_hours(1),
            hint: None,
            filter: None,
        };
        let mut console = actionledger::console::ScriptedConsole::start(&ledger, &options, 80, 24).await.unwrap();
        console.press("2").await.unwrap();
        let row = console.screen().unwrap().lines().find(|line| line.contains(&key)).map(str::to_owned);
        let row = row.unwrap_or_else(|| panic!("{key} in the in-progress pane:\n{}", console.screen().unwrap()));
        let repeat = if declared == Declared::Keyed { "protected" } else { "UNSAFE" };
        assert!(row.contains("mail-script") && row.contains("left") && row.contains(repeat), "{declared:?}: {row}");
        console.press("<Enter>").await.unwrap();
        let detail = console.screen().unwrap();
        assert!(detail.contains("claimed by mail-script  lease"), "{detail}");
        // Once its lease runs out, the row says so.
        tokio::time::sleep(Duration::from_millis(2200)).await;
        for line in ["<Esc>", "1", "2"] {
            console.press(line).await.unwrap();
        }
        let screen = console.screen().unwrap();
        let row = screen.lines().find(|line| line.contains(&key)).unwrap_or_default();
        assert!(row.contains("STALE") && row.contains("mail-script"), "{declared:?}:\n{screen}");
    }
}

async fn a_queue_drained_through_claims_keeps_the_attempt_budget<S: Store>(db: TestDb<S>) {
    let (base, crm) = register(&db, Declared::Keyed).await;
    let client = client();
    for n in 0..12 {
        let mut body = submission(&format!("queue:{n}"), &json!({ "n": n }));
        body["destination"] = json!("mailer");
        assert_eq!(post(&client, &format!("{base}/v1/actions"), Some(SOURCE), &body).await.0, 201);
    }
    // queue:3 is refused by the destination twice: with max_attempts = 2 it ends `failed`.
    let mut refusals = 0;
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 200, "the queue drains");
        let (status, _, claimed) =
            post(&client, &format!("{base}/v1/claims"), Some(MAILER), &json!({ "limit": 5, "lease_seconds": 30 }))
                .await;
        assert_eq!(status, 200, "{claimed}");
        let claims = claimed["claims"].as_array().unwrap();
        if claims.is_empty() {
            let pending = db.ledger.counts().await.unwrap().iter().any(|(s, n)| *s == State::Pending && *n > 0);
            if !pending {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        for claim in claims {
            let key = claim["key"].as_str().unwrap();
            assert_eq!(claim["payload"]["n"], claim["action"]["payload"]["n"]);
            let body = if key == "queue:3" {
                refusals += 1;
                json!({ "ownership_version": claim["ownership_version"], "outcome": "not_written",
                        "reason": "mailbox full", "evidence": { "status": 503 } })
            } else {
                let id = perform(&crm, key, claim).await;
                completed(claim, &id)
            };
            assert_eq!(finish(&base, MAILER, key, &body).await.0, 200);
        }
    }
    assert_eq!(refusals, 2, "sent twice, as max_attempts says");
    let failed = db.ledger.detail(&action_key("queue:3")).await.unwrap().action;
    assert_eq!(failed.state, State::Failed);
    assert!(failed.last_error.as_deref().unwrap().contains("attempt 2 of 2"), "{:?}", failed.last_error);
    for n in (0..12).filter(|n| *n != 3) {
        assert_eq!(crm.records_for(&format!("queue:{n}")).len(), 1);
    }
}

async fn an_executor_token_performs_its_own_destination_only<S: Store>(db: TestDb<S>) {
    let (base, crm) = register(&db, Declared::Bare).await;
    let client = client();
    let erp = begin(&base, ERP, "erp:order:1:post-invoice", 30).await;
    assert_eq!(erp["decision"], "proceed");
    // Another destination's action: not begun, renewed, finished or claimed.
    let (status, _, problem) = post(
        &client,
        &format!("{base}/v1/actions/erp:order:1:post-invoice:begin"),
        Some(MAILER),
        &json!({ "payload": {} }),
    )
    .await;
    assert_eq!(status, 403, "{problem}");
    let (status, _) = finish(&base, MAILER, "erp:order:1:post-invoice", &completed(&erp["claim"], "x")).await;
    assert_eq!(status, 403);
    let (status, _, _) = post(
        &client,
        &format!("{base}/v1/actions/shop:1:begin"),
        Some(MAILER),
        &json!({ "payload": {}, "destination": "erp" }),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _, _) =
        post(&client, &format!("{base}/v1/claims"), Some(MAILER), &json!({ "destination": "erp" })).await;
    assert_eq!(status, 403);
    // Other roles may not perform; an executor may not submit; a POST with a verb that is none is
    // a POST to the action itself, which takes GET only (405).
    let (status, _, _) =
        post(&client, &format!("{base}/v1/actions/shop:2:begin"), Some(SOURCE), &json!({ "payload": {} })).await;
    assert_eq!(status, 403);
    let (status, _, _) =
        post(&client, &format!("{base}/v1/actions"), Some(MAILER), &submission("shop:3", &json!({}))).await;
    assert_eq!(status, 403);
    let (status, _, problem) =
        post(&client, &format!("{base}/v1/actions/shop:4:finsh"), Some(MAILER), &json!({ "payload": {} })).await;
    assert_eq!(status, 405);
    assert!(problem["detail"].as_str().unwrap().contains("KEY:finish"), "a mistyped verb is named: {problem}");
    // A finish without what its outcome needs changes nothing.
    let (status, _) = finish(
        &base,
        ERP,
        "erp:order:1:post-invoice",
        &json!({ "ownership_version": erp["claim"]["ownership_version"], "outcome": "unknown" }),
    )
    .await;
    assert_eq!(status, 422);
    let action = db.ledger.detail(&action_key("erp:order:1:post-invoice")).await.unwrap().action;
    assert_eq!(action.state, State::InProgress);
    assert!(db.ledger.store().find(&action_key("shop:1")).await.unwrap().is_none(), "nothing recorded");
    assert_eq!(crm.stats().records, 0);
}

async fn a_repeated_finish_changes_nothing_and_a_heartbeat_extends_the_lease<S: Store>(db: TestDb<S>) {
    let (base, crm) = register(&db, Declared::Bare).await;
    let key = "shop:order:11:send-receipt";
    let begun = begin(&base, MAILER, key, 2).await;
    let claim = &begun["claim"];
    let first_end = chrono::DateTime::parse_from_rfc3339(claim["lease_until"].as_str().unwrap()).unwrap();
    let (status, _, renewed) = post(
        &client(),
        &format!("{base}/v1/actions/{key}:heartbeat"),
        Some(MAILER),
        &json!({ "ownership_version": claim["ownership_version"], "lease_seconds": 60 }),
    )
    .await;
    assert_eq!(status, 200, "{renewed}");
    let renewed_end = chrono::DateTime::parse_from_rfc3339(renewed["lease_until"].as_str().unwrap()).unwrap();
    assert!(renewed_end - first_end > chrono::Duration::seconds(50), "{first_end} then {renewed_end}");
    // Past the first lease, the renewed claim is still live: nobody may take it.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(begin(&base, MAILER_TWO, key, 30).await["decision"], "wait");
    let id = perform(&crm, key, claim).await;
    let body = completed(claim, &id);
    assert_eq!(finish(&base, MAILER, key, &body).await.1["recorded"], "applied");
    let revision = db.ledger.detail(&action_key(key)).await.unwrap().action.revision;
    let (status, again) = finish(&base, MAILER, key, &body).await;
    assert_eq!((status, again["recorded"].as_str()), (200, Some("already_finished")));
    let detail = db.ledger.detail(&action_key(key)).await.unwrap();
    assert_eq!(detail.action.revision, revision, "nothing changed");
    assert_eq!(detail.late_results().count(), 0);
}

/// The Python example (`examples/python/send_receipt.py`, the standard library only) run as its
/// users run it, against the binary's `serve` and a simulated CRM, under the failures the seeds
/// list: five runs, two runs at once, a run paused past its lease, a run killed after the CRM
/// wrote. One record per order at the CRM in each case.
async fn the_python_example_sends_each_receipt_once<S: Store>(db: TestDb<S>) {
    if !python_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let keyed = SimCrm::start(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Options { unique_refs: false, ..Options::default() },
    )
    .unwrap();
    let bare = SimCrm::start(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Options { retention: None, unique_refs: false, ..Options::default() },
    )
    .unwrap();
    let found = SimCrm::start(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Options { retention: None, unique_refs: false, ..Options::default() },
    )
    .unwrap();
    write_register_files(dir.path(), found.addr());
    let (_server, ledger_url) = crate::serve::serving(dir.path(), &db.url).await;
    let run = |crm: &SimCrm, token: &str, order: &str| python_run(&ledger_url, crm, token, order);

    // Five runs of one order: one record, the same id printed each time.
    let mut printed = Vec::new();
    for _ in 0..5 {
        let output = run(&keyed, MAILER, "1").output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        printed.push(String::from_utf8(output.stdout).unwrap());
    }
    assert!(printed.iter().all(|p| *p == printed[0]), "{printed:?}");
    assert_eq!(keyed.records_for("shop:order:1:send-receipt").len(), 1);

    // Two runs at once: one sends, the other is told to wait (exit 75).
    keyed.set_faults(slow_create(800));
    let first = run(&keyed, MAILER, "2").spawn().unwrap();
    held_by_someone(&db.ledger, "shop:order:2:send-receipt").await;
    let second = run(&keyed, MAILER, "2").output().unwrap();
    assert_eq!(second.status.code(), Some(75), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(first.wait_with_output().unwrap().status.success());
    assert_eq!(keyed.records_for("shop:order:2:send-receipt").len(), 1);

    // A run paused (SIGSTOP) while the CRM writes, past its lease: another run takes over with
    // the same idempotency key (rule 5) and gets the CRM's stored answer; the paused run, resumed,
    // has its report refused and kept for review (exit 3).
    keyed.set_faults(slow_create(600));
    let before = keyed.stats().requests;
    let paused = run(&keyed, MAILER, "3").env("ACTIONLEDGER_LEASE_SECONDS", "1").spawn().unwrap();
    stop_once_the_crm_wrote(&paused, &keyed, before, "shop:order:3:send-receipt").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let rescue = run(&keyed, MAILER, "3").output().unwrap();
    assert!(rescue.status.success(), "{}", String::from_utf8_lossy(&rescue.stderr));
    signal(&paused, "-CONT");
    let late = paused.wait_with_output().unwrap();
    assert_eq!(late.status.code(), Some(3), "{}", String::from_utf8_lossy(&late.stderr));
    assert_eq!(keyed.records_for("shop:order:3:send-receipt").len(), 1);
    let detail = db.ledger.detail(&action_key("shop:order:3:send-receipt")).await.unwrap();
    assert_eq!((detail.action.state, detail.late_results().count()), (State::Completed, 1));

    // A run killed after the CRM wrote and before it reported: the next run sends again under the
    // same key where the CRM recognises it, is told `done` with the record the ledger's lookup
    // found where the CRM can be asked, and leaves it held for a person where neither holds.
    let killed_runs = [
        (&keyed, MAILER, "4", State::Completed),
        (&found, MAILER_TWO, "7", State::Completed),
        (&bare, ERP, "5", State::Held),
    ];
    for (crm, token, order, after) in killed_runs {
        crm.set_faults(slow_create(600));
        let before = crm.stats().requests;
        let mut killed = run(crm, token, order).env("ACTIONLEDGER_LEASE_SECONDS", "1").spawn().unwrap();
        let key = format!("shop:order:{order}:send-receipt");
        stop_once_the_crm_wrote(&killed, crm, before, &key).await;
        signal(&killed, "-KILL");
        killed.wait().unwrap();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let next = run(crm, token, order).output().unwrap();
        let expected = if after == State::Completed { Some(0) } else { Some(3) };
        assert_eq!(next.status.code(), expected, "{}", String::from_utf8_lossy(&next.stderr));
        assert_eq!(db.ledger.detail(&action_key(&key)).await.unwrap().action.state, after);
        assert_eq!(crm.records_for(&key).len(), 1, "{key}: one record");
        if order == "7" {
            let id = crm.records_for(&key)[0]["id"].as_str().unwrap().to_owned();
            assert_eq!(String::from_utf8(next.stdout).unwrap().trim(), id, "the record the killed run made");
        }
    }

    // The shell recipe (curl and jq), as an automation platform's HTTP steps: three runs, one
    // record, the same id each time.
    if tool_available("jq") {
        let mut printed = Vec::new();
        for _ in 0..3 {
            let output = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/register.sh"))
                .arg("6")
                .env("ACTIONLEDGER_URL", &ledger_url)
                .env("ACTIONLEDGER_TOKEN", MAILER)
                .env("CRM_URL", format!("http://{}", keyed.addr()))
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            printed.push(String::from_utf8(output.stdout).unwrap());
        }
        assert!(printed.iter().all(|p| *p == printed[0] && !p.trim().is_empty()), "{printed:?}");
        assert_eq!(keyed.records_for("shop:order:6:send-receipt").len(), 1);
    }
}

/// The served register's configuration and tokens: `receipts` (an idempotency key), `receipts-bare`
/// (nothing) and `receipts-found` (a lookup at the CRM at `found`).
fn write_register_files(dir: &std::path::Path, found: std::net::SocketAddr) {
    std::fs::write(
        dir.join("actionledger.toml"),
        format!(
            "[executors.receipts]\nidempotency = {{ header = \"Idempotency-Key\", retention = \"24h\" }}\n\n\
             [executors.receipts-bare]\n\n\
             [executors.receipts-found]\nbase_url = \"http://{found}\"\n\
             lookup = {{ url = \"{{{{base_url}}}}/tasks?external_ref={{{{external_ref}}}}\", records_pointer = \"/records\", \
             settle = \"200ms\" }}\n"
        ),
    )
    .unwrap();
    let hash = actionledger::serve::auth::hash_token;
    std::fs::write(
        dir.join("tokens.txt"),
        format!(
            "{} executor:receipts receipt-script\n{} executor:receipts-bare receipt-script-bare\n\
             {} executor:receipts-found receipt-script-found\n",
            hash(MAILER),
            hash(ERP),
            hash(MAILER_TWO)
        ),
    )
    .unwrap();
}

/// Waits until `key` is claimed (a run began it), however slowly the run started.
async fn held_by_someone<S: Store>(ledger: &actionledger::Ledger<S>, key: &str) {
    for _ in 0..1000 {
        let action = ledger.store().find(&action_key(key)).await.unwrap();
        if action.is_some_and(|a| a.state == State::InProgress) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("nobody began {key}");
}

/// Whether python3 runs here; in CI its absence fails the test, elsewhere it is skipped loudly.
fn python_available() -> bool {
    tool_available("python3")
}

/// Whether `tool` runs here (`tool --version`); in CI its absence fails the test (`.ci/run`
/// installs it), elsewhere what needs it is skipped loudly.
fn tool_available(tool: &str) -> bool {
    let found = std::process::Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var("CI").is_err(), "{tool} is needed for the register's examples in CI");
        eprintln!("SKIPPED: {tool} is not installed; the example that needs it was not run");
    }
    found
}

fn python_run(base: &str, crm: &SimCrm, token: &str, order: &str) -> std::process::Command {
    let mut command = std::process::Command::new("python3");
    command
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/python/send_receipt.py"))
        .arg(order)
        .env("ACTIONLEDGER_URL", base)
        .env("ACTIONLEDGER_TOKEN", token)
        .env("CRM_URL", format!("http://{}", crm.addr()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

fn slow_create(ms: u64) -> actionledger::sim_crm::FaultPlan {
    actionledger::sim_crm::FaultPlan {
        script: std::collections::VecDeque::from([actionledger::sim_crm::Fault::Delay(ms)]),
        rates: Vec::new(),
    }
}

fn signal(child: &std::process::Child, signal: &str) {
    let sent = std::process::Command::new("kill").arg(signal).arg(child.id().to_string()).status().unwrap();
    assert!(sent.success());
}

/// Stops `run` (SIGSTOP) while its request to the CRM is in flight (the CRM counted it, `before`
/// being its count before the run started, and takes its time over the create), then waits for
/// the CRM to have written the record: a caller that will not answer, after the destination acted.
async fn stop_once_the_crm_wrote(run: &std::process::Child, crm: &SimCrm, before: u64, key: &str) {
    for _ in 0..1000 {
        if crm.stats().requests > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    signal(run, "-STOP");
    for _ in 0..400 {
        if !crm.records_for(key).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the CRM never wrote {key}");
}

/// `serve hash-token` makes an executor's line only for a destination name a line can hold.
#[test]
fn hash_token_makes_an_executor_line_for_a_valid_destination_only() {
    let dir = tempfile::tempdir().unwrap();
    let made = |destination: &str| {
        let args = ["--role", "executor", "--destination", destination, "--name", "mailer"];
        crate::serve::hash_token_with(dir.path(), MAILER, &args)
    };
    let good = made("receipts");
    assert!(good.status.success(), "{}", String::from_utf8_lossy(&good.stderr));
    assert!(String::from_utf8(good.stdout).unwrap().ends_with(" executor:receipts mailer\n"));
    let bad = made("bad name");
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty(), "no line is printed");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--destination"), "{}", String::from_utf8_lossy(&bad.stderr));
}
