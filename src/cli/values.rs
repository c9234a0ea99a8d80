//! Flags that take one of a fixed set of words, as clap value enums over the domain's own words:
//! `--help` lists the words, a typo gets clap's suggestion and exit 2, and the words themselves are
//! the domain's ([`State::as_str`]), never a second list that could drift from it.

use crate::domain::State;
use crate::serve::auth::Role;
use clap::ValueEnum;
use clap::builder::PossibleValue;
use std::sync::LazyLock;

/// Any state, as `--state` takes it (`list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateArg(pub State);

static EVERY_STATE: LazyLock<Vec<StateArg>> = LazyLock::new(|| State::ALL.into_iter().map(StateArg).collect());

impl ValueEnum for StateArg {
    fn value_variants<'a>() -> &'a [Self] {
        &EVERY_STATE
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.as_str()))
    }
}

/// A final state, as `purge --states` takes it: only settled actions are purged, so `--help` lists
/// only the states that are final ([`State::is_terminal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalStateArg(pub State);

static FINAL_STATES: LazyLock<Vec<FinalStateArg>> =
    LazyLock::new(|| State::ALL.into_iter().filter(|s| s.is_terminal()).map(FinalStateArg).collect());

impl ValueEnum for FinalStateArg {
    fn value_variants<'a>() -> &'a [Self] {
        &FINAL_STATES
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.as_str()))
    }
}

/// A token's role, as `serve hash-token --role` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleArg(pub Role);

static EVERY_ROLE: LazyLock<Vec<RoleArg>> = LazyLock::new(|| Role::ALL.into_iter().map(RoleArg).collect());

impl ValueEnum for RoleArg {
    fn value_variants<'a>() -> &'a [Self] {
        &EVERY_ROLE
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_is_a_value_and_the_words_are_the_domains() {
        for state in State::ALL {
            let arg = StateArg::from_str(state.as_str(), false).unwrap();
            assert_eq!(arg, StateArg(state));
            let word = arg.to_possible_value().unwrap();
            assert_eq!(word.get_name().parse::<State>(), Ok(state), "the domain reads the word back");
        }
        assert_eq!(StateArg::value_variants().len(), State::ALL.len());
        assert!(StateArg::from_str("done", false).is_err());
    }

    #[test]
    fn purge_states_are_exactly_the_final_ones() {
        for state in State::ALL {
            assert_eq!(FinalStateArg::from_str(state.as_str(), false).is_ok(), state.is_terminal(), "{state}");
        }
        let words: Vec<_> = FinalStateArg::value_variants()
            .iter()
            .map(|v| v.to_possible_value().unwrap().get_name().to_owned())
            .collect();
        assert_eq!(words, ["completed", "cancelled"]);
    }

    #[test]
    fn every_role_is_a_value_and_the_token_file_reads_it_back() {
        for role in Role::ALL {
            let arg = RoleArg::from_str(role.as_str(), false).unwrap();
            assert_eq!(arg, RoleArg(role));
            assert_eq!(arg.to_possible_value().unwrap().get_name().parse::<Role>(), Ok(role));
        }
        assert!(RoleArg::from_str("admin", false).is_err());
    }
}
