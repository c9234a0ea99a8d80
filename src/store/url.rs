//! Database URLs as they may be shown to people: with any password hidden.

/// Hides a password in a database URL (`postgres://user:***@host/db`, `password=***`,
/// `sslpassword=***`).
///
/// The password in the user info is hidden even when it was written without percent-encoding and
/// holds `/`, `?`, `#` or `@` (a URL no parser accepts, which is exactly when it gets printed in an
/// error): the user info ends at the last `@` before the host, that is before the first `/`, `?`
/// or `#` that follows the first `@` (so an unencoded `@` in a password is covered only where no
/// `/`, `?` or `#` follows it). A URL without user info but with a port, whose path or query holds
/// an `@`, loses more than a password: over-hiding is the safe side.
pub fn redact_url(url: &str) -> String {
    let mut shown = url.to_owned();
    if let Some(scheme_end) = shown.find("://") {
        let rest_start = scheme_end + 3;
        let rest = &shown[rest_start..];
        if let Some(first_at) = rest.find('@') {
            let host_end = rest[first_at..].find(['/', '?', '#']).map_or(rest.len(), |i| first_at + i);
            let at = rest[..host_end].rfind('@').unwrap_or(first_at);
            if let Some(colon) = rest[..at].find(':') {
                shown.replace_range(rest_start + colon + 1..rest_start + at, "***");
            }
        }
    }
    redact_parameters(&shown)
}

/// Hides the value of every query parameter whose name ends in `password` (`password`,
/// `sslpassword`), whatever its case; the value ends at the next `&`.
fn redact_parameters(url: &str) -> String {
    let lower = url.to_ascii_lowercase();
    let mut shown = String::with_capacity(url.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find("password=") {
        let value_start = from + found + "password=".len();
        let value_end = url[value_start..].find('&').map_or(url.len(), |i| value_start + i);
        shown.push_str(&url[copied..value_start]);
        shown.push_str("***");
        copied = value_end;
        from = value_end;
    }
    shown.push_str(&url[copied..]);
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact_url("postgres://al:s3cret@db:5432/ledger"), "postgres://al:***@db:5432/ledger");
        assert_eq!(
            redact_url("postgres://al@db/ledger?password=s3cret&x=1"),
            "postgres://al@db/ledger?password=***&x=1"
        );
        assert_eq!(redact_url("sqlite://actionledger.db"), "sqlite://actionledger.db");
        assert_eq!(redact_url("postgres://a:b:c@h/d"), "postgres://a:***@h/d");
    }

    #[test]
    fn a_password_holding_url_delimiters_never_shows() {
        // Base64 passwords hold `/`, `+` and `=`; people paste them unencoded.
        assert_eq!(redact_url("postgres://ledger:Zm9v/YmFy+cXV4==@host/x"), "postgres://ledger:***@host/x");
        assert_eq!(
            redact_url("postgres://ledger:a?b#c/d@host:5432/x?sslmode=require"),
            "postgres://ledger:***@host:5432/x?sslmode=require"
        );
        assert_eq!(redact_url("postgres://al:p@ss@host/x"), "postgres://al:***@host/x");
        assert_eq!(redact_url("postgres://al:p/w?d@host"), "postgres://al:***@host");
        // An `@` after the host belongs to the query, not to the user info.
        assert_eq!(
            redact_url("postgres://al:pw@host/x?application_name=a@b"),
            "postgres://al:***@host/x?application_name=a@b"
        );
        assert_eq!(
            redact_url("postgres://al@host:5432/x?application_name=a@b"),
            "postgres://al@host:5432/x?application_name=a@b"
        );
        assert_eq!(redact_url("postgres://host/x?user=a@b"), "postgres://host/x?user=a@b");
    }

    #[test]
    fn encoded_passwords_and_every_password_parameter_are_hidden() {
        assert_eq!(redact_url("postgres://al:p%40ss%2Fw%3F@host/x"), "postgres://al:***@host/x");
        assert_eq!(
            redact_url("postgres://al@host/x?sslmode=verify-full&sslpassword=k3y&password=pw&sslcert=/c.pem"),
            "postgres://al@host/x?sslmode=verify-full&sslpassword=***&password=***&sslcert=/c.pem"
        );
        assert_eq!(redact_url("postgres://al@host/x?PASSWORD=pw"), "postgres://al@host/x?PASSWORD=***");
        assert_eq!(redact_url("postgres://al:one@host/x?password=two"), "postgres://al:***@host/x?password=***");
    }
}
