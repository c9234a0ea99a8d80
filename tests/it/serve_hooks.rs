//! Webhook senders as providers sign them, through `actionledger serve` on both stores: Stripe's
//! and Standard Webhooks' signatures each verified with either of two secrets (a rotation), a
//! wrong secret refused with nothing written, a replayed delivery refused while a sender's own
//! retry is taken, an event the intake ignores answered 200 with nothing written (and refused
//! unsigned), and Shopify's documented order id kept to the digit.
//!
//! The signatures are made here with HMAC-SHA256 as each provider documents it, apart from the
//! server's own code.

use actionledger::config::Config;
use actionledger::domain::ActionKey;
use actionledger::ledger::Ledger;
use actionledger::serve::auth::Tokens;
use actionledger::serve::intake::Intake;
use actionledger::serve::{App, ConnectionLimits, ServeOptions};
use actionledger::store::Store;
use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Value, json};

use crate::support::TestDb;

conformance!(
    stripe_deliveries_verify_with_either_secret_and_a_replay_is_refused,
    standard_webhooks_deliveries_verify_keep_wide_ids_and_a_ping_is_ignored,
);

const STRIPE_NEW: &str = "whsec_stripe_new_0123456789";
const STRIPE_OLD: &str = "whsec_stripe_old_0123456789";
/// `whsec_` and the base64 of the key, as Standard Webhooks senders hand out their secrets.
const STANDARD_NEW_KEY: &[u8] = b"standard-webhooks-new-key-0123";
const STANDARD_OLD_KEY: &[u8] = b"standard-webhooks-old-key-0123";

fn config() -> Config {
    Config::parse(
        r#"
        [intake.stripe]
        key = "stripe:{{body.data.object.id}}:record"
        event_id = "{{body.id}}"
        destination = "crm"
        signature = { scheme = "stripe", secret_env = ["STRIPE_NEW", "STRIPE_OLD"], delivery_id = "{{body.id}}" }

        [[intake.stripe.ignore]]
        field = "body.type"
        equals = "account.updated"

        [intake.orders]
        key = "shop:order:{{body.data.id}}:create-task"
        destination = "crm"
        signature = { scheme = "standard-webhooks", secret_env = ["ORDERS_NEW", "ORDERS_OLD"] }

        [[intake.orders.ignore]]
        field = "body.type"
        equals = "ping"
        "#,
    )
    .expect("the intakes parse")
}

fn whsec(key: &[u8]) -> String {
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key))
}

async fn start<S: Store>(ledger: &Ledger<S>) -> String {
    let mut intakes = config().intake;
    let stripe = intakes.remove("stripe").unwrap();
    let orders = intakes.remove("orders").unwrap();
    let (standard_new, standard_old) = (whsec(STANDARD_NEW_KEY), whsec(STANDARD_OLD_KEY));
    let intakes = vec![
        Intake::with_secrets("stripe", stripe, &[STRIPE_NEW.as_bytes(), STRIPE_OLD.as_bytes()]).unwrap(),
        Intake::with_secrets("orders", orders, &[standard_new.as_bytes(), standard_old.as_bytes()]).unwrap(),
    ];
    let options = ServeOptions { rate: 0.0, ..ServeOptions::default() };
    let router = App::new(ledger.clone(), Tokens::default(), intakes, options).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(actionledger::connections::serve(
        listener,
        router,
        ConnectionLimits::default(),
        std::future::pending(),
    ));
    format!("http://{addr}")
}

fn mac(key: &[u8], signed: &str) -> Vec<u8> {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(signed.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// `Stripe-Signature` as Stripe sends it: `t=`, then HMAC-SHA256 of `t.body` in hex, with the
/// secret's text as the key.
fn stripe_signed(secret: &str, at: i64, body: &str) -> Vec<(String, String)> {
    vec![(
        "Stripe-Signature".to_owned(),
        format!("t={at},v1={}", hex::encode(mac(secret.as_bytes(), &format!("{at}.{body}")))),
    )]
}

/// Standard Webhooks' headers: HMAC-SHA256 of `id.timestamp.body` in base64, keyed with the
/// secret's decoded base64.
fn standard_signed(key: &[u8], id: &str, at: i64, body: &str) -> Vec<(String, String)> {
    let signature = base64::engine::general_purpose::STANDARD.encode(mac(key, &format!("{id}.{at}.{body}")));
    vec![
        ("webhook-id".to_owned(), id.to_owned()),
        ("webhook-timestamp".to_owned(), at.to_string()),
        ("webhook-signature".to_owned(), format!("v1,{signature}")),
    ]
}

async fn deliver(base: &str, intake: &str, body: &str, headers: &[(String, String)]) -> (u16, Value) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut request = reqwest::Client::new()
        .post(format!("{base}/v1/hooks/{intake}"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null))
}

/// Actions, refused submissions, and the deliveries recorded for `key`.
async fn written<S: Store>(ledger: &Ledger<S>, key: &str) -> (i64, usize, usize) {
    let actions = ledger.counts().await.unwrap().iter().map(|(_, n)| n).sum();
    let refused = ledger.list_refused(None, 1000).await.unwrap().len();
    let deliveries = match ledger.detail(&ActionKey::parse(key).unwrap()).await {
        Ok(detail) => detail.deliveries.len(),
        Err(_) => 0,
    };
    (actions, refused, deliveries)
}

async fn stripe_deliveries_verify_with_either_secret_and_a_replay_is_refused<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger).await;
    let now = chrono::Utc::now().timestamp();
    let event = |id: &str, kind: &str, charge: &str| {
        json!({"id": id, "type": kind, "data": {"object": {"id": charge, "amount": 2000}}}).to_string()
    };
    let first = event("evt_1", "charge.succeeded", "ch_1");
    let key = "stripe:ch_1:record";

    for (what, headers) in [
        ("no signature", Vec::new()),
        ("a wrong secret", stripe_signed("whsec_not_ours", now, &first)),
        ("a stale t", stripe_signed(STRIPE_NEW, now - 301, &first)),
    ] {
        let (status, problem) = deliver(&base, "stripe", &first, &headers).await;
        assert_eq!(status, 401, "{what}: {problem}");
        assert_eq!(problem["type"], "urn:actionledger:problem:unauthorized", "{what}");
    }
    assert_eq!(written(&db.ledger, key).await, (0, 0, 0), "an unproven sender writes nothing");

    let signed = stripe_signed(STRIPE_NEW, now, &first);
    let (status, created) = deliver(&base, "stripe", &first, &signed).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!((created["action"]["key"].as_str(), created["action"]["source"].as_str()), (Some(key), Some("stripe")));
    assert_eq!(written(&db.ledger, key).await, (1, 0, 1));

    // The same delivery again, signature and all, is refused before the ledger sees it.
    let (status, problem) = deliver(&base, "stripe", &first, &signed).await;
    assert_eq!(status, 409, "{problem}");
    assert_eq!(problem["type"], "urn:actionledger:problem:replayed_delivery");
    assert!(problem["detail"].as_str().unwrap().contains("evt_1"), "{problem}");
    assert_eq!(written(&db.ledger, key).await, (1, 0, 1), "a replay records no delivery");
    // Stripe's own retry is signed anew: a delivery of its own, a duplicate of the action.
    let (status, duplicate) = deliver(&base, "stripe", &first, &stripe_signed(STRIPE_NEW, now + 1, &first)).await;
    assert_eq!((status, duplicate["outcome"].as_str()), (200, Some("duplicate")), "{duplicate}");
    assert_eq!(written(&db.ledger, key).await, (1, 0, 2));

    // During a rotation the old secret verifies too.
    let second = event("evt_2", "charge.succeeded", "ch_2");
    let (status, created) = deliver(&base, "stripe", &second, &stripe_signed(STRIPE_OLD, now, &second)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(written(&db.ledger, "stripe:ch_2:record").await, (2, 0, 1));

    // An event the intake ignores: 200, saying why, and nothing written; unsigned it is refused.
    let ignored = event("evt_3", "account.updated", "ch_3");
    let (status, answer) = deliver(&base, "stripe", &ignored, &stripe_signed(STRIPE_NEW, now, &ignored)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!((answer["outcome"].as_str(), answer["field"].as_str()), (Some("ignored"), Some("body.type")));
    let (status, _) = deliver(&base, "stripe", &ignored, &stripe_signed("whsec_not_ours", now, &ignored)).await;
    assert_eq!(status, 401, "an ignored event is still proven first");
    assert_eq!(written(&db.ledger, "stripe:ch_3:record").await, (2, 0, 0));
}

async fn standard_webhooks_deliveries_verify_keep_wide_ids_and_a_ping_is_ignored<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger).await;
    let now = chrono::Utc::now().timestamp();
    // Shopify's documented order id: beyond what a 64-bit float keeps.
    let body = r#"{"type": "order.created", "data": {"id": 820982911946154508, "total": "99.50"}}"#;
    let key = "shop:order:820982911946154508:create-task";

    let (status, problem) = deliver(&base, "orders", body, &standard_signed(b"not-our-key", "msg_1", now, body)).await;
    assert_eq!(status, 401, "{problem}");
    assert_eq!(written(&db.ledger, key).await, (0, 0, 0));

    let signed = standard_signed(STANDARD_NEW_KEY, "msg_1", now, body);
    let (status, created) = deliver(&base, "orders", body, &signed).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["action"]["key"], key);
    assert_eq!(created["action"]["payload"]["data"]["id"], "820982911946154508", "kept as its exact digits");
    assert_eq!(written(&db.ledger, key).await, (1, 0, 1));

    let (status, problem) = deliver(&base, "orders", body, &signed).await;
    assert_eq!((status, problem["type"].as_str()), (409, Some("urn:actionledger:problem:replayed_delivery")));
    // The same message retried by the sender carries a new timestamp; here under Svix's header
    // names and signed with the old secret of a rotation.
    let retry: Vec<(String, String)> = standard_signed(STANDARD_OLD_KEY, "msg_1", now + 2, body)
        .into_iter()
        .map(|(name, value)| (name.replace("webhook-", "svix-"), value))
        .collect();
    let (status, duplicate) = deliver(&base, "orders", body, &retry).await;
    assert_eq!((status, duplicate["outcome"].as_str()), (200, Some("duplicate")), "{duplicate}");
    assert_eq!(written(&db.ledger, key).await, (1, 0, 2));

    let ping = r#"{"type": "ping"}"#;
    let (status, answer) = deliver(&base, "orders", ping, &standard_signed(STANDARD_NEW_KEY, "msg_2", now, ping)).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("ignored")), "{answer}");
    let (status, _) = deliver(&base, "orders", ping, &[]).await;
    assert_eq!(status, 401, "an unsigned ping is refused");
    assert_eq!(written(&db.ledger, key).await, (1, 0, 2), "an ignored delivery writes nothing");
}
