//! Database URLs as they may be shown to people: with any password hidden.

/// Hides a password in a database URL (`postgres://user:***@host/db`, `password=***`).
pub fn redact_url(url: &str) -> String {
    let mut shown = url.to_owned();
    if let Some(scheme_end) = shown.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = shown[rest_start..].find(['/', '?']).map_or(shown.len(), |i| rest_start + i);
        if let Some(at) = shown[rest_start..authority_end].rfind('@') {
            let userinfo = &shown[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                shown.replace_range(rest_start + colon + 1..rest_start + at, "***");
            }
        }
    }
    if let Some(start) = shown.find("password=") {
        let value_start = start + "password=".len();
        let value_end = shown[value_start..].find('&').map_or(shown.len(), |i| value_start + i);
        shown.replace_range(value_start..value_end, "***");
    }
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
}
