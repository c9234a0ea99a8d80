//! Database URLs as they may be shown to people: with any password hidden.

/// Hides a password in a database URL (`postgres://user:***@host/db`, `password=***`,
/// `sslpassword=***`).
///
/// The password in the user info is hidden even when it was written without percent-encoding and
/// holds `/`, `?`, `#` or `@` (a URL no parser reads as its writer meant, which is exactly when it
/// gets printed in an error). The standard parser ends the user info at the last `@` before the
/// first `/`, `?` or `#`, so it would read `ledger:p@ss#w0rd@host` as the password `p` at the host
/// `ss` and show the rest of the password as a fragment. Here the user info ends at the last `@`
/// of the URL that does not sit in a query parameter's value (an earlier `@`, then a `?`, then a
/// `=`): a database URL has no fragment and rarely an `@` in its path, so every `@` but a query's
/// is taken to belong to the password. What this hides always covers what the standard parser
/// takes for the password. Over-hiding is the safe side: a URL whose path holds an `@` loses its
/// host from view, and a password that itself reads as `@host?name=value` is taken for a query.
pub fn redact_url(url: &str) -> String {
    let mut shown = url.to_owned();
    if let Some(scheme_end) = shown.find("://") {
        let rest_start = scheme_end + 3;
        let rest = &shown[rest_start..];
        if let Some(at) = user_info_end(rest)
            && let Some(colon) = rest[..at].find(':')
        {
            shown.replace_range(rest_start + colon + 1..rest_start + at, "***");
        }
    }
    redact_parameters(&shown)
}

/// Where the user info of `rest` (a URL after its `scheme://`) ends: its last `@` that is not in
/// a query parameter's value, if any.
fn user_info_end(rest: &str) -> Option<usize> {
    rest.match_indices('@').map(|(at, _)| at).rev().find(|&at| !in_query_value(&rest[..at]))
}

/// Whether an `@` preceded by `before` sits in a query parameter's value: an earlier `@` ended
/// a user info, a `?` after it opened the query, and a `=` after that the value.
fn in_query_value(before: &str) -> bool {
    let Some(first_at) = before.find('@') else { return false };
    let after_user_info = &before[first_at..];
    after_user_info.find('?').is_some_and(|query| after_user_info[query..].contains('='))
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
    fn a_password_holding_an_at_sign_before_a_hash_never_shows() {
        assert_eq!(redact_url("postgres://ledger:p@ss#w0rd@host/x"), "postgres://ledger:***@host/x");
        assert_eq!(redact_url("postgres://ledger:p@ss/w0rd@host:5432/x"), "postgres://ledger:***@host:5432/x");
        assert_eq!(
            redact_url("postgres://ledger:p@s?s#w@host/x?sslmode=require"),
            "postgres://ledger:***@host/x?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://ledger:#@#@host/x?application_name=a@b"),
            "postgres://ledger:***@host/x?application_name=a@b"
        );
    }

    /// Printable ASCII but the space: what a person may type into a password unencoded.
    fn password() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::string::string_regex("[!-~]{1,24}").expect("a valid pattern")
    }

    /// The one shape that reads as a query as well as a password: `@`, later `?`, later `=`.
    fn reads_as_a_query(password: &str) -> bool {
        in_query_value(&format!("{password}@"))
    }

    proptest::proptest! {
        #[test]
        fn no_unencoded_password_shows(password in password()) {
            proptest::prop_assume!(!reads_as_a_query(&password));
            for (url, shown) in [
                (format!("postgres://ledger:{password}@host:5432/db?sslmode=require"),
                 "postgres://ledger:***@host:5432/db?sslmode=require"),
                (format!("postgres://ledger:{password}@host/db?application_name=a@b"),
                 "postgres://ledger:***@host/db?application_name=a@b"),
                (format!("postgres://ledger:{password}@host"), "postgres://ledger:***@host"),
            ] {
                proptest::prop_assert_eq!(redact_url(&url), shown);
            }
        }

        /// Whatever the standard parser reads as the password is hidden too.
        #[test]
        fn what_the_standard_parser_takes_for_the_password_is_hidden(
            password in password(), tail in "[a-z@:/?#=&]{0,12}"
        ) {
            let written = format!("postgres://ledger:{password}@host{tail}");
            if let Ok(parsed) = url::Url::parse(&written)
                && let Some(parsed_password) = parsed.password()
            {
                let shown = redact_url(&written);
                proptest::prop_assert!(
                    !shown.contains(&format!("ledger:{parsed_password}@")),
                    "{} shows {}", shown, parsed_password
                );
            }
        }
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
