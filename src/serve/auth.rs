//! Who may call the API: bearer tokens, each with a role and a name, known to the server only by
//! their SHA-256 hashes, and a per-token rate limit. Tokens are never logged or stored in clear;
//! every refusal is logged with the token's name where it is known (see `super::observe`).
//!
//! A tokens file (`--tokens FILE`, or the same lines in `ACTIONLEDGER_TOKENS`) has one token a
//! line, `sha256:HEX ROLE NAME`, as `actionledger serve hash-token` prints it; `#` starts a
//! comment. The roles: `source` submits (actions and webhooks); `reviewer` also reads and runs
//! a person's commands, in the token's name (a person's name); `viewer` only reads;
//! `executor:DESTINATION` begins, renews, finishes and claims that destination's actions only,
//! for an automation that performs them itself, as the holder named by the token's name. A token hash
//! on two lines, or a name given two roles, refuses the whole file: which line won would decide
//! whose name a token acts in.

use super::observe::{self, Refusal};
use super::problem::Problem;
use crate::domain::Person;
use crate::domain::input::Label;
use axum::http::{HeaderMap, header};
use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Submits actions and webhook deliveries; reads nothing.
    Source,
    /// Submits, reads, and runs a person's commands as the token's named person.
    Reviewer,
    /// Reads only.
    Viewer,
    /// Performs one destination's actions itself: begins, renews, finishes and claims them, and
    /// nothing else (the destination is the grant's).
    Executor,
}

impl Role {
    /// Every role, in the order `--help` lists them.
    pub const ALL: [Self; 4] = [Self::Source, Self::Reviewer, Self::Viewer, Self::Executor];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Reviewer => "reviewer",
            Self::Viewer => "viewer",
            Self::Executor => "executor",
        }
    }

    fn allows(self, need: Need) -> bool {
        matches!(
            (self, need),
            (Self::Reviewer, Need::Submit | Need::Read | Need::Review)
                | (Self::Source, Need::Submit)
                | (Self::Viewer, Need::Read)
                | (Self::Executor, Need::Perform)
        )
    }
}

/// A token line's role that is none of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?}; use source, reviewer, viewer or executor:DESTINATION")]
pub struct UnknownRole(String);

impl std::str::FromStr for Role {
    type Err = UnknownRole;

    fn from_str(text: &str) -> Result<Self, UnknownRole> {
        match text {
            "source" => Ok(Self::Source),
            "reviewer" => Ok(Self::Reviewer),
            "viewer" => Ok(Self::Viewer),
            "executor" => Ok(Self::Executor),
            other => Err(UnknownRole(other.to_owned())),
        }
    }
}

/// What a request needs its token to allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Submit,
    Read,
    /// A person's command on an action.
    Review,
    /// Beginning, renewing, finishing or claiming an action the caller performs itself.
    Perform,
}

impl Need {
    fn words(self) -> &'static str {
        match self {
            Self::Submit => "submitting",
            Self::Read => "reading",
            Self::Review => "a person's command",
            Self::Perform => "performing an action (begin, heartbeat, finish, claims)",
        }
    }
}

/// A token's role and name, and the key its rate is counted under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub role: Role,
    pub name: String,
    /// The one destination an executor's token performs; `None` for the other roles.
    pub destination: Option<String>,
    /// The token's hash: the rate limit's key, and never the token itself.
    pub hash: String,
}

impl Grant {
    /// The person a reviewer's commands are recorded under.
    pub fn person(&self) -> Result<Person, crate::domain::InputError> {
        Person::parse(&self.name)
    }
}

/// Why a tokens file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    #[error("cannot read the tokens file {}: {source}", path.display())]
    Read { path: std::path::PathBuf, source: std::io::Error },
    #[error("{origin} line {line}: {problem}")]
    Line { origin: String, line: usize, problem: String },
    #[error(
        "{second} has the token hash {first} already has: each token has one line, one role and one name (remove one)"
    )]
    DuplicateHash { first: Place, second: Place },
    #[error(
        "{second} names {name:?} as a {second_role}, and {first} as a {first_role}: one name holds one role, so that \
         the audit trail says which one acted (rename one)"
    )]
    NameInTwoRoles { name: String, first: Place, first_role: &'static str, second: Place, second_role: &'static str },
    #[error(
        "no token is configured: give --tokens FILE or ACTIONLEDGER_TOKENS (lines from `actionledger serve hash-token`)"
    )]
    None,
}

/// Where a token's line is: its file (or the environment) and its line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub origin: String,
    pub line: usize,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {}", self.origin, self.line)
    }
}

/// The known tokens, by hash, and where each line and name was read.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_hash: HashMap<String, (Grant, Place)>,
    /// Each name's role and first line, by the name folded to lower case: "Ana Lima" and
    /// "ana lima" would read as one person in the audit trail.
    roles_by_name: HashMap<String, (Role, Place)>,
}

impl Tokens {
    /// The destinations the executor tokens perform.
    pub fn executor_destinations(&self) -> impl Iterator<Item = &str> {
        self.by_hash.values().filter_map(|(grant, _)| grant.destination.as_deref())
    }

    /// The people the reviewer tokens' commands are recorded under, each once, in order: the
    /// names a serve login must be allowed to sign as.
    pub fn reviewers(&self) -> Vec<String> {
        let mut people: Vec<String> = self
            .by_hash
            .values()
            .filter(|(grant, _)| grant.role == Role::Reviewer)
            .filter_map(|(grant, _)| grant.person().ok())
            .map(|person| person.as_str().to_owned())
            .collect();
        people.sort();
        people.dedup();
        people
    }
}

/// The line a tokens file holds for `token`: `sha256:HEX ROLE NAME`.
pub fn hash_token(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.trim().as_bytes())))
}

impl Tokens {
    /// Reads the lines of a tokens file; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, TokensError> {
        let mut tokens = Self::default();
        tokens.add_lines(text, origin)?;
        Ok(tokens)
    }

    /// Adds the lines of another file (or of the environment).
    pub fn add_lines(&mut self, text: &str, origin: &str) -> Result<(), TokensError> {
        for (index, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let problem = |problem: String| TokensError::Line { origin: origin.to_owned(), line: index + 1, problem };
            let mut parts = line.splitn(3, char::is_whitespace);
            let (Some(hash), Some(role), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(problem("expected `sha256:HEX ROLE NAME`".to_owned()));
            };
            let digits = hash.strip_prefix("sha256:").unwrap_or_default();
            if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(problem("the hash must be sha256: and 64 hex digits (never the token itself)".to_owned()));
            }
            let (role, destination) = match role.split_once(':') {
                Some(("executor", destination)) => {
                    crate::domain::input::validate_destination_name(destination)
                        .map_err(|e| problem(format!("executor:DESTINATION names the destination it performs: {e}")))?;
                    (Role::Executor, Some(destination.to_owned()))
                }
                _ if role == "executor" => {
                    return Err(problem(
                        "an executor token names the destination it performs: executor:DESTINATION".to_owned(),
                    ));
                }
                _ => (role.parse().map_err(|e: UnknownRole| problem(e.to_string()))?, None),
            };
            let name = name.trim().to_owned();
            match role {
                Role::Reviewer => {
                    Person::parse(&name).map_err(|e| problem(format!("a reviewer token names a person: {e}")))?;
                }
                // A source's name is the source of what it submits, so it must be one; an
                // executor's is the holder its claims are recorded under.
                Role::Source | Role::Viewer | Role::Executor => {
                    Label::parse("token name", &name).map_err(|e| problem(e.to_string()))?;
                }
            }
            let hash = format!("sha256:{}", digits.to_ascii_lowercase());
            let place = Place { origin: origin.to_owned(), line: index + 1 };
            self.add(Grant { role, name, destination, hash }, place)?;
        }
        Ok(())
    }

    /// Adds one line's grant; a second line for the same token, or a name already given another
    /// role, is refused: the last line winning would let one token act under another's name.
    fn add(&mut self, grant: Grant, place: Place) -> Result<(), TokensError> {
        if let Some((_, first)) = self.by_hash.get(&grant.hash) {
            return Err(TokensError::DuplicateHash { first: first.clone(), second: place });
        }
        let folded = grant.name.to_lowercase();
        match self.roles_by_name.get(&folded) {
            Some((role, first)) if *role != grant.role => {
                return Err(TokensError::NameInTwoRoles {
                    name: grant.name,
                    first: first.clone(),
                    first_role: role.as_str(),
                    second: place,
                    second_role: grant.role.as_str(),
                });
            }
            Some(_) => {}
            None => {
                self.roles_by_name.insert(folded, (grant.role, place.clone()));
            }
        }
        self.by_hash.insert(grant.hash.clone(), (grant, place));
        Ok(())
    }

    /// Reads `--tokens FILE` and `ACTIONLEDGER_TOKENS`; refuses to run without any token.
    pub fn load(file: Option<&std::path::Path>, env: Option<&str>) -> Result<Self, TokensError> {
        let mut tokens = Self::default();
        if let Some(path) = file {
            let text =
                std::fs::read_to_string(path).map_err(|source| TokensError::Read { path: path.to_owned(), source })?;
            tokens.add_lines(&text, &path.display().to_string())?;
        }
        if let Some(text) = env {
            tokens.add_lines(text, "ACTIONLEDGER_TOKENS")?;
        }
        if tokens.by_hash.is_empty() {
            return Err(TokensError::None);
        }
        Ok(tokens)
    }

    /// Adds one token, for tests and the benchmark, under the rules a tokens file's line follows.
    pub fn insert(&mut self, token: &str, role: Role, name: &str) -> Result<(), TokensError> {
        let hash = hash_token(token);
        let place = Place { origin: "inserted".to_owned(), line: self.by_hash.len() + 1 };
        let destination = None;
        self.add(Grant { role, name: name.to_owned(), destination, hash }, place)
    }

    /// Adds one executor token for `destination`, for tests, as a tokens file's
    /// `executor:DESTINATION` line does.
    pub fn insert_executor(&mut self, token: &str, destination: &str, name: &str) -> Result<(), TokensError> {
        let hash = hash_token(token);
        let place = Place { origin: "inserted".to_owned(), line: self.by_hash.len() + 1 };
        let destination = Some(destination.to_owned());
        self.add(Grant { role: Role::Executor, name: name.to_owned(), destination, hash }, place)
    }

    /// The grant of the request's bearer token, if it allows `need`: 401 without a known token,
    /// 403 outside its role, each refusal logged.
    pub fn authorize(&self, headers: &HeaderMap, need: Need) -> Result<Grant, Problem> {
        let Some(presented) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            // The scheme's name is case-insensitive (RFC 9110).
            .and_then(|v| v.get(..7).filter(|s| s.eq_ignore_ascii_case("bearer ")).map(|_| &v[7..]))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            observe::refused(&Refusal::NoToken);
            return Err(Problem::unauthorized("send a token: Authorization: Bearer TOKEN"));
        };
        let hash = hash_token(presented);
        let Some((grant, _)) = self.by_hash.get(&hash) else {
            observe::refused(&Refusal::UnknownToken { hash: &hash });
            return Err(Problem::unauthorized("the token is not known"));
        };
        observe::note_token(&grant.name);
        if !grant.role.allows(need) {
            let needs = match need {
                Need::Submit => "a source or reviewer token",
                Need::Read => "a viewer or reviewer token",
                Need::Review => "a reviewer token",
                Need::Perform => "an executor:DESTINATION token",
            };
            observe::refused(&Refusal::Role { role: grant.role.as_str(), doing: need.words(), needs });
            return Err(Problem::forbidden(format!(
                "a {} token may not do this ({} needs {needs})",
                grant.role.as_str(),
                need.words(),
            )));
        }
        Ok(grant.clone())
    }
}

/// How many requests pass between two sweeps of the callers whose bucket is full again: often
/// enough that the map holds only the callers of recent moments, rarely enough that the sweep (a
/// pass over the whole map) costs nothing per request.
const SWEEP_EVERY: u32 = 1024;

/// A bucket per caller (governor's GCRA): `rate` requests a second on average, `burst` at once.
/// A caller whose bucket is full again is as good as unknown, so the sweeps forget it.
#[derive(Debug)]
pub struct RateLimiter {
    /// `None`: no limit.
    buckets: Option<DefaultKeyedRateLimiter<String>>,
    checks: AtomicU32,
}

impl RateLimiter {
    /// A limiter; a rate of zero or less (or one that is not a number) limits nothing.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self { buckets: quota(rate, burst).map(DefaultKeyedRateLimiter::keyed), checks: AtomicU32::new(0) }
    }

    /// Takes one request from `who`'s bucket, or refuses it 429, logged with the caller noted
    /// for the request (the token's name, or the intake).
    pub fn admit(&self, who: &str) -> Result<(), Problem> {
        self.take(who).map_err(|wait| {
            observe::refused(&Refusal::Rate { wait });
            Problem::rate_limited(wait)
        })
    }

    /// Takes one request from `who`'s bucket, or says how long until one is there.
    pub fn take(&self, who: &str) -> Result<(), Duration> {
        let Some(buckets) = &self.buckets else { return Ok(()) };
        let checked = buckets.check_key(&who.to_owned());
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            buckets.retain_recent();
            buckets.shrink_to_fit();
        }
        checked.map_err(|refused| refused.wait_time_from(buckets.clock().now()))
    }

    /// How many callers' buckets are held.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.buckets.as_ref().map_or(0, DefaultKeyedRateLimiter::len)
    }
}

/// The quota of `rate` requests a second in bursts of `burst`; none (no limit) for a rate that is
/// not a positive number, or is infinite.
fn quota(rate: f64, burst: u32) -> Option<Quota> {
    if rate.is_nan() || rate <= 0.0 {
        return None;
    }
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    // governor counts in nanoseconds in a u64 and panics beyond (584 years). A bucket that takes
    // longer than half of that to fill never refills in a server's life, so the slowest rate it
    // can count is as good.
    let slowest = Duration::from_nanos(u64::MAX / 2 / u64::from(burst.get()));
    let period = Duration::try_from_secs_f64(1.0 / rate).unwrap_or(Duration::MAX).min(slowest);
    Quota::with_period(period).map(|quota| quota.allow_burst(burst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_holds_hashes_roles_and_names() {
        let line = format!("{} reviewer Ana Lima  # the night shift\n\n", hash_token("s3cret"));
        let tokens = Tokens::parse(&line, "tokens").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "bearer s3cret".parse().unwrap());
        let grant = tokens.authorize(&headers, Need::Review).unwrap();
        assert_eq!((grant.role, grant.name.as_str()), (Role::Reviewer, "Ana Lima"));
        assert!(Tokens::parse("s3cret reviewer Ana", "tokens").is_err(), "a token in clear is refused");
        assert!(Tokens::parse(&format!("{} admin x", hash_token("t")), "tokens").is_err());
    }

    #[test]
    fn tokens_come_from_the_file_and_the_environment_and_are_required() {
        let dir = std::env::temp_dir().join(format!("actionledger-tokens-{}", std::process::id()));
        std::fs::write(&dir, format!("{} source shop\n", hash_token("file-token"))).unwrap();
        let env = format!("{} viewer dashboard", hash_token("env-token"));
        let tokens = Tokens::load(Some(&dir), Some(&env)).unwrap();
        let _ = std::fs::remove_file(&dir);
        let bearer = |token: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
            headers
        };
        assert_eq!(tokens.authorize(&bearer("file-token"), Need::Submit).unwrap().name, "shop");
        assert_eq!(tokens.authorize(&bearer("env-token"), Need::Read).unwrap().name, "dashboard");
        assert_eq!(tokens.authorize(&bearer("env-token"), Need::Submit).unwrap_err().status.as_u16(), 403);
        assert_eq!(tokens.authorize(&bearer("other"), Need::Read).unwrap_err().status.as_u16(), 401);
        assert!(matches!(Tokens::load(None, None), Err(TokensError::None)));
    }

    #[test]
    fn a_token_on_two_lines_or_a_name_in_two_roles_refuses_to_start() {
        let viewer = format!("{} viewer dashboard", hash_token("shared-token"));
        let twin = format!("{} reviewer Evil Twin", hash_token("shared-token"));
        let error = Tokens::parse(&format!("{viewer}\n# rotated\n{twin}\n"), "tokens").unwrap_err();
        assert!(
            matches!(&error, TokensError::DuplicateHash { first, second } if first.line == 1 && second.line == 3),
            "{error}"
        );
        assert!(error.to_string().contains("tokens line 3 has the token hash tokens line 1 already has"), "{error}");
        // The same line once in the file and once in the environment is the same token twice.
        let dir = std::env::temp_dir().join(format!("actionledger-twice-{}", std::process::id()));
        std::fs::write(&dir, format!("{viewer}\n")).unwrap();
        let loaded = Tokens::load(Some(&dir), Some(&viewer));
        let _ = std::fs::remove_file(&dir);
        assert!(matches!(loaded, Err(TokensError::DuplicateHash { .. })), "{loaded:?}");

        let reviewer = format!("{} reviewer Ana Lima", hash_token("ana-reviews"));
        let as_viewer = format!("{} viewer ana lima", hash_token("ana-reads"));
        let error = Tokens::parse(&format!("{reviewer}\n{as_viewer}"), "tokens").unwrap_err();
        assert!(
            matches!(&error, TokensError::NameInTwoRoles { first_role: "reviewer", second_role: "viewer", .. }),
            "{error}"
        );
        // Two tokens for one person in one role (a rotation) are two lines, both valid.
        let rotated = format!("{reviewer}\n{} reviewer Ana Lima", hash_token("ana-reviews-new"));
        assert!(Tokens::parse(&rotated, "tokens").is_ok());
        let mut inserted = Tokens::default();
        inserted.insert("one-token", Role::Viewer, "dashboard").unwrap();
        assert!(inserted.insert("one-token", Role::Reviewer, "Evil Twin").is_err());
    }

    #[test]
    fn a_malformed_line_refuses_to_start_naming_its_line() {
        let good = format!("{} source shop", hash_token("shop-token"));
        for (bad, says) in [
            (format!("{} source", hash_token("x")), "expected `sha256:HEX ROLE NAME`"),
            (format!("{}  source shop", hash_token("x")), "unknown role"),
            (format!("sha256:{} viewer x", "g".repeat(64)), "64 hex digits"),
            (format!("{} viewer da\u{7}sh", hash_token("x")), "token name"),
            (format!("{} reviewer \u{200b}", hash_token("x")), "a reviewer token names a person"),
        ] {
            let error = Tokens::parse(&format!("{good}\n{bad}\n"), "tokens").unwrap_err();
            let text = error.to_string();
            assert!(text.starts_with("tokens line 2: ") && text.contains(says), "{bad:?}: {text}");
        }
    }

    #[test]
    fn roles_allow_what_they_say() {
        assert!(Role::Source.allows(Need::Submit) && !Role::Source.allows(Need::Read));
        assert!(!Role::Source.allows(Need::Review) && !Role::Viewer.allows(Need::Submit));
        assert!(Role::Viewer.allows(Need::Read) && !Role::Viewer.allows(Need::Review));
        assert!(Role::Reviewer.allows(Need::Submit) && Role::Reviewer.allows(Need::Review));
    }

    #[test]
    fn the_bucket_refills_at_the_rate() {
        let limiter = RateLimiter::new(10.0, 2);
        assert!(limiter.take("a").is_ok() && limiter.take("a").is_ok());
        let wait = limiter.take("a").unwrap_err();
        assert!(wait <= Duration::from_millis(100) && wait > Duration::ZERO, "{wait:?}");
        assert!(limiter.take("b").is_ok(), "each caller has its own bucket");
    }

    #[test]
    fn callers_whose_bucket_is_full_again_are_forgotten() {
        let limiter = RateLimiter::new(1000.0, 1);
        for n in 0..SWEEP_EVERY - 1 {
            assert!(limiter.take(&format!("caller-{n}")).is_ok());
        }
        assert_eq!(limiter.held(), usize::try_from(SWEEP_EVERY - 1).unwrap());
        // Each bucket (one request, refilled in a millisecond) is full again.
        std::thread::sleep(Duration::from_millis(20));
        assert!(limiter.take("busy").is_ok());
        assert_eq!(limiter.held(), 1, "only the caller whose bucket is in use is held");
        assert!(limiter.take("busy").is_err(), "a held caller keeps its used bucket");
    }

    #[test]
    fn rates_beyond_the_clock_neither_panic_nor_lift_the_limit() {
        for (rate, burst) in [(f64::MIN_POSITIVE, 1), (1e-9, u32::MAX), (f64::MIN_POSITIVE, u32::MAX)] {
            let limiter = RateLimiter::new(rate, burst);
            assert!(limiter.take("a").is_ok());
            if burst == 1 {
                let wait = limiter.take("a").unwrap_err();
                assert!(wait > Duration::from_hours(24 * 365), "{rate}: {wait:?}");
            }
        }
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let limiter = RateLimiter::new(rate, 1);
            assert!((0..10).all(|_| limiter.take("a").is_ok()), "{rate} limits nothing");
        }
    }
}
