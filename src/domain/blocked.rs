//! Blocked dependents: a pending action that waits (`after`) on an action that will not complete
//! unless a person moves it on, and so would otherwise wait unseen for ever.

use super::key::ActionKey;
use super::record::ActionRecord;
use super::state::State;

/// Whether an action in `state` keeps the actions waiting on it from ever running by itself.
/// `cancelled` never completes; `failed` completes only after a person retries it. Every other
/// state either moves on without anyone (pending, in progress), has completed, or is already in
/// front of a person whose decision may complete it (unknown, conflict, held).
pub fn blocks_dependents(state: State) -> bool {
    matches!(state, State::Cancelled | State::Failed)
}

/// A pending action that cannot run until a person acts: the action it waits on is `after_state`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Blocked {
    /// The action this one waits on.
    pub after: ActionKey,
    /// Where that action stands.
    pub after_state: State,
}

impl Blocked {
    /// Whether `action` is blocked, given the state of the action it waits on (`None` when that
    /// action is not recorded, yet or at all: it may still arrive, so nothing is blocked).
    pub fn of(action: &ActionRecord, after_state: Option<State>) -> Option<Self> {
        let after = action.after.as_ref()?;
        let after_state = after_state?;
        (action.state == State::Pending && blocks_dependents(after_state))
            .then(|| Self { after: after.clone(), after_state })
    }

    /// Why, in the same words on every front end: "waits on KEY, which is cancelled".
    pub fn reason(&self) -> String {
        format!("waits on {}, which is {}", self.after, self.after_state)
    }

    /// Whether retrying the action it waits on would let this one run: a failed predecessor can
    /// be retried; a cancelled one never completes, so this one can only be cancelled.
    pub fn after_can_be_retried(&self) -> bool {
        self.after_state == State::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Payload;

    fn dependent(state: State) -> ActionRecord {
        let key = ActionKey::parse("shop:order:1:send-confirmation").unwrap();
        let mut action =
            ActionRecord::pending(key, Payload::parse(b"{}").unwrap(), crate::domain::Timestamp::default());
        action.after = Some(ActionKey::parse("shop:order:1:create-task").unwrap());
        action.state = state;
        action
    }

    #[test]
    fn a_pending_action_is_blocked_only_by_a_cancelled_or_failed_predecessor() {
        let pending = dependent(State::Pending);
        for after_state in State::ALL {
            let blocked = Blocked::of(&pending, Some(after_state));
            assert_eq!(blocked.is_some(), matches!(after_state, State::Cancelled | State::Failed), "{after_state}");
        }
        let blocked = Blocked::of(&pending, Some(State::Cancelled)).unwrap();
        assert_eq!(blocked.reason(), "waits on shop:order:1:create-task, which is cancelled");
        assert!(!blocked.after_can_be_retried());
        assert!(Blocked::of(&pending, Some(State::Failed)).unwrap().after_can_be_retried());
        assert_eq!(Blocked::of(&pending, None), None, "a predecessor not recorded yet may still arrive");
        assert_eq!(Blocked::of(&dependent(State::Cancelled), Some(State::Cancelled)), None, "only pending waits");
        let mut alone = dependent(State::Pending);
        alone.after = None;
        assert_eq!(Blocked::of(&alone, Some(State::Cancelled)), None);
    }
}
