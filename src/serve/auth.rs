//! Who may call the API: bearer tokens, each with a role and a name, known to the server only by
//! their SHA-256 hashes, and a per-token rate limit. Tokens are never logged or stored in clear.
//!
//! A tokens file (`--tokens FILE`, or the same lines in `ACTIONLEDGER_TOKENS`) has one token a
//! line, `sha256:HEX ROLE NAME`, as `actionledger serve hash-token` prints it; `#` starts a
//! comment. The roles: `source` submits (actions and webhooks); `reviewer` also reads and runs
//! a person's commands, in the token's name (a person's name); `viewer` only reads.

use super::problem::Problem;
use crate::domain::Person;
use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Submits actions and webhook deliveries; reads nothing.
    Source,
    /// Submits, reads, and runs a person's commands as the token's named person.
    Reviewer,
    /// Reads only.
    Viewer,
}

impl Role {
    /// Every role, in the order `--help` lists them.
    pub const ALL: [Self; 3] = [Self::Source, Self::Reviewer, Self::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Reviewer => "reviewer",
            Self::Viewer => "viewer",
        }
    }

    fn allows(self, need: Need) -> bool {
        matches!((self, need), (Self::Reviewer, _) | (Self::Source, Need::Submit) | (Self::Viewer, Need::Read))
    }
}

/// A token line's role that is none of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?}; use source, reviewer or viewer")]
pub struct UnknownRole(String);

impl std::str::FromStr for Role {
    type Err = UnknownRole;

    fn from_str(text: &str) -> Result<Self, UnknownRole> {
        match text {
            "source" => Ok(Self::Source),
            "reviewer" => Ok(Self::Reviewer),
            "viewer" => Ok(Self::Viewer),
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
}

impl Need {
    fn words(self) -> &'static str {
        match self {
            Self::Submit => "submitting",
            Self::Read => "reading",
            Self::Review => "a person's command",
        }
    }
}

/// A token's role and name, and the key its rate is counted under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub role: Role,
    pub name: String,
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
        "no token is configured: give --tokens FILE or ACTIONLEDGER_TOKENS (lines from `actionledger serve hash-token`)"
    )]
    None,
}

/// The known tokens, by hash.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_hash: HashMap<String, Grant>,
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
            let role: Role = role.parse().map_err(|e: UnknownRole| problem(e.to_string()))?;
            let name = name.trim().to_owned();
            if role == Role::Reviewer {
                Person::parse(&name).map_err(|e| problem(format!("a reviewer token names a person: {e}")))?;
            }
            let hash = format!("sha256:{}", digits.to_ascii_lowercase());
            self.by_hash.insert(hash.clone(), Grant { role, name, hash });
        }
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

    /// Adds one token, for tests and the benchmark.
    pub fn insert(&mut self, token: &str, role: Role, name: &str) {
        let hash = hash_token(token);
        self.by_hash.insert(hash.clone(), Grant { role, name: name.to_owned(), hash });
    }

    /// The grant of the request's bearer token, if it allows `need`: 401 without a known token,
    /// 403 outside its role.
    pub fn authorize(&self, headers: &HeaderMap, need: Need) -> Result<Grant, Problem> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            // The scheme's name is case-insensitive (RFC 9110).
            .and_then(|v| v.get(..7).filter(|s| s.eq_ignore_ascii_case("bearer ")).map(|_| &v[7..]))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Problem::unauthorized("send a token: Authorization: Bearer TOKEN"))?;
        let grant =
            self.by_hash.get(&hash_token(presented)).ok_or_else(|| Problem::unauthorized("the token is not known"))?;
        if !grant.role.allows(need) {
            return Err(Problem::forbidden(format!(
                "a {} token may not do this ({} needs {})",
                grant.role.as_str(),
                need.words(),
                match need {
                    Need::Submit => "a source or reviewer token",
                    Need::Read => "a viewer or reviewer token",
                    Need::Review => "a reviewer token",
                }
            )));
        }
        Ok(grant.clone())
    }
}

/// A token bucket per caller: `rate` requests a second on average, `burst` at once.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// A limiter; a rate of zero or less limits nothing.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self { rate, burst: f64::from(burst.max(1)), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one request from `who`'s bucket, or says how long until one is there.
    pub fn take(&self, who: &str) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tokens, at) = buckets.entry(who.to_owned()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.rate))
        }
    }
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
}
