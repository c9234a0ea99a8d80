//! Replayed webhook deliveries: the ones an intake accepted lately, by delivery id and signed
//! timestamp, so that a captured delivery sent again while its signature is still fresh is
//! refused. Kept in the process's memory, each only as long as its signature stays acceptable;
//! the ledger's own duplicate detection (the event id) still stops a replay any other process
//! takes, or one after a restart, from becoming a second action.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

/// Most deliveries one intake remembers; beyond, the one expiring first is forgotten first.
pub const MOST_REMEMBERED: usize = 100_000;

/// One delivery as its sender named it, with the timestamp it signed: a sender's own retry
/// signs anew, so it is another delivery.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Delivery {
    pub id: String,
    pub timestamp: Option<i64>,
}

/// A delivery already accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the delivery {id:?} was already received with this signature's timestamp; nothing more was recorded (a sender's \
     own retry is signed anew and is accepted)"
)]
pub struct Replayed {
    pub id: String,
}

/// The deliveries one intake accepted lately.
#[derive(Debug)]
pub struct Deliveries {
    /// How long a signature stays acceptable: a delivery is remembered until then.
    window: i64,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    expiry: HashMap<Delivery, i64>,
    by_expiry: BTreeSet<(i64, Delivery)>,
}

impl Deliveries {
    pub fn new(window: Duration) -> Self {
        Self { window: i64::try_from(window.as_secs()).unwrap_or(i64::MAX), seen: Mutex::default() }
    }

    /// Accepts `delivery` at `now` (Unix seconds) and remembers it, unless it was accepted
    /// before. Checking and remembering are one step, so two copies sent at once are one delivery.
    pub fn accept(&self, delivery: &Delivery, now: i64) -> Result<(), Replayed> {
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.forget_expired(now);
        if seen.expiry.contains_key(delivery) {
            return Err(Replayed { id: delivery.id.clone() });
        }
        if seen.expiry.len() >= MOST_REMEMBERED
            && let Some(first) = seen.by_expiry.pop_first()
        {
            seen.expiry.remove(&first.1);
        }
        // A signed timestamp is refused as stale once the window has passed it; without one, the
        // window runs from now.
        let expires = delivery.timestamp.unwrap_or(now).saturating_add(self.window);
        seen.expiry.insert(delivery.clone(), expires);
        seen.by_expiry.insert((expires, delivery.clone()));
        Ok(())
    }

    /// Forgets `delivery`, accepted but not recorded (the ledger's database failed), so that the
    /// same delivery sent again is taken.
    pub fn forget(&self, delivery: &Delivery) {
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(expires) = seen.expiry.remove(delivery) {
            seen.by_expiry.remove(&(expires, delivery.clone()));
        }
    }

    /// How many deliveries are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).expiry.len()
    }
}

impl Seen {
    fn forget_expired(&mut self, now: i64) {
        while let Some((expires, _)) = self.by_expiry.first()
            && *expires < now
        {
            let (_, delivery) = self.by_expiry.pop_first().expect("looked at above");
            self.expiry.remove(&delivery);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(id: &str, timestamp: Option<i64>) -> Delivery {
        Delivery { id: id.to_owned(), timestamp }
    }

    #[test]
    fn a_delivery_is_accepted_once_while_its_signature_is_fresh() {
        let deliveries = Deliveries::new(Duration::from_mins(5));
        assert_eq!(deliveries.accept(&delivery("msg_1", Some(1000)), 1000), Ok(()));
        let replayed = deliveries.accept(&delivery("msg_1", Some(1000)), 1200);
        assert_eq!(replayed, Err(Replayed { id: "msg_1".into() }));
        assert_eq!(deliveries.accept(&delivery("msg_1", Some(1100)), 1200), Ok(()), "a retry signs anew");
        assert_eq!(deliveries.accept(&delivery("msg_2", Some(1000)), 1200), Ok(()));
        // Past the window the signature itself is stale: nothing needs remembering.
        assert_eq!(deliveries.accept(&delivery("msg_3", None), 1301), Ok(()));
        assert_eq!(deliveries.len(), 2, "msg_1 at 1000 and msg_2 expired at 1300");
        // Without a signed timestamp the window runs from acceptance.
        assert!(deliveries.accept(&delivery("msg_3", None), 1601).is_err());
        assert_eq!(deliveries.accept(&delivery("msg_3", None), 1602), Ok(()));
    }

    #[test]
    fn a_forgotten_delivery_is_taken_again_and_memory_is_bounded() {
        let deliveries = Deliveries::new(Duration::from_mins(5));
        let one = delivery("evt_1", Some(1000));
        deliveries.accept(&one, 1000).unwrap();
        deliveries.forget(&one);
        assert_eq!(deliveries.accept(&one, 1001), Ok(()));
        for n in 0..MOST_REMEMBERED {
            deliveries.accept(&delivery(&format!("evt_many_{n}"), Some(2000)), 1002).unwrap();
        }
        assert_eq!(deliveries.len(), MOST_REMEMBERED);
        assert_eq!(deliveries.accept(&one, 1002), Ok(()), "the one expiring first was forgotten first");
    }
}
