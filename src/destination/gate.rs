//! A destination's pace for one worker: its rate limit and the pauses it asks for with
//! `Retry-After`, shared by every task of the worker (and by lookups), not kept per action.
//!
//! Written here rather than on a rate limiter crate: GCRA (governor's) bounds a burst and an
//! average but not the requests in any one window, which rule 3 promises, and cannot take a turn
//! from the bucket only when the window has room; here both are one decision under one lock.

use crate::config::RateLimit;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The span in which at most `per_second` requests go out. It is a little longer than a second
/// so that requests delayed unevenly on their way (a busy machine, a queue) still arrive at most
/// `per_second` in any one second of the destination's clock.
pub const WINDOW: Duration = Duration::from_millis(1100);

/// The longest pause a `Retry-After` can impose on a destination; the action that got it still
/// waits all of it before its own retry.
pub const MAX_PAUSE: Duration = Duration::from_hours(1);

#[derive(Debug)]
pub struct Gate {
    limit: Option<RateLimit>,
    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    /// When the last requests inside the window went out, oldest first.
    sent: VecDeque<Instant>,
    /// Requests that may go out back to back now (a token bucket of `burst`).
    tokens: f64,
    refilled: Instant,
    /// Nothing goes out before this, as the destination asked.
    paused_until: Option<Instant>,
}

impl Gate {
    pub fn new(limit: Option<RateLimit>) -> Self {
        let tokens = limit.map_or(0.0, |l| f64::from(burst(l)));
        let state = GateState { sent: VecDeque::new(), tokens, refilled: Instant::now(), paused_until: None };
        Self { limit, state: Mutex::new(state) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds every request to the destination back for `wait` (at most [`MAX_PAUSE`]); a
    /// shorter pause never shortens a longer one already in force.
    pub fn pause(&self, wait: Duration) {
        let until = Instant::now() + wait.min(MAX_PAUSE);
        let mut state = self.state();
        state.paused_until = Some(state.paused_until.map_or(until, |u| u.max(until)));
    }

    /// Whether a `Retry-After` holds the destination back now.
    pub fn paused(&self) -> bool {
        self.state().paused_until.is_some_and(|until| until > Instant::now())
    }

    /// How long a `Retry-After` still holds the destination back (zero when none does).
    pub fn pause_left(&self) -> Duration {
        self.state().paused_until.map_or(Duration::ZERO, |until| until.saturating_duration_since(Instant::now()))
    }

    /// Waits until a request may go out, and counts it as sent.
    pub async fn acquire(&self) {
        loop {
            let Some(wait) = self.try_take(Instant::now()) else { return };
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes a turn at `now`, or says how long to wait before asking again.
    fn try_take(&self, now: Instant) -> Option<Duration> {
        let mut state = self.state();
        if let Some(until) = state.paused_until {
            if until > now {
                return Some(until - now);
            }
            state.paused_until = None;
        }
        // Without a rate limit, the turn is taken at once.
        let limit = self.limit?;
        let rate = f64::from(limit.per_second);
        let elapsed = now.saturating_duration_since(state.refilled).as_secs_f64();
        state.tokens = (state.tokens + elapsed * rate).min(f64::from(burst(limit)));
        state.refilled = now;
        while state.sent.front().is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW) {
            state.sent.pop_front();
        }
        let window_full = state.sent.len() >= usize::try_from(limit.per_second).unwrap_or(usize::MAX);
        if !window_full && state.tokens >= 1.0 {
            state.tokens -= 1.0;
            state.sent.push_back(now);
            return None;
        }
        let for_window = match state.sent.front() {
            Some(oldest) if window_full => (*oldest + WINDOW).saturating_duration_since(now),
            _ => Duration::ZERO,
        };
        let for_token = Duration::from_secs_f64(((1.0 - state.tokens) / rate).max(0.0));
        Some(for_window.max(for_token).max(Duration::from_millis(1)))
    }
}

fn burst(limit: RateLimit) -> u32 {
    limit.burst.unwrap_or(limit.per_second).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The times at which `n` requests get their turn, asking again exactly when told to.
    fn turns(gate: &Gate, start: Instant, n: usize) -> Vec<Duration> {
        let mut now = start;
        let mut times = Vec::new();
        while times.len() < n {
            match gate.try_take(now) {
                None => times.push(now - start),
                Some(wait) => now += wait,
            }
        }
        times
    }

    #[test]
    fn never_more_than_the_limit_in_any_window() {
        let gate = Gate::new(Some(RateLimit { per_second: 4, burst: Some(2) }));
        let start = gate.state().refilled;
        let times = turns(&gate, start, 20);
        // Two back to back (the burst), then about one a quarter second apart.
        assert_eq!(times[1], Duration::ZERO, "{times:?}");
        for (i, t) in times.iter().enumerate() {
            let in_window = times[i..].iter().take_while(|u| u.saturating_sub(*t) < WINDOW).count();
            assert!(in_window <= 4, "{in_window} requests within {WINDOW:?} from {t:?}: {times:?}");
        }
        assert!(times[19] >= Duration::from_secs(4), "{times:?}");
        assert!(times[19] <= Duration::from_secs(6), "{times:?}");
    }

    #[test]
    fn a_pause_holds_everything_back_and_is_never_shortened() {
        let gate = Gate::new(None);
        let now = Instant::now();
        gate.pause(Duration::from_secs(3));
        gate.pause(Duration::from_secs(1));
        let wait = gate.try_take(now).expect("paused");
        assert!(wait >= Duration::from_secs(3) && wait <= Duration::from_millis(3100), "{wait:?}");
        assert_eq!(gate.try_take(now + wait), None, "no limit once the pause is over");
        assert_eq!(gate.try_take(now + wait), None);
    }
}
