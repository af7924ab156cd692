//! Random, URL-safe, typeable identifiers for threads, runs and managed tasks (`th_` / `run_` / `task_` + 16
//! lowercase hex digits).

use std::fmt;

/// Number of random hex digits after the prefix (64 bits of entropy).
const HEX_DIGITS: usize = 16;

/// Why a string is not a valid thread or run id.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdError {
    /// The string does not look like `<prefix><16 hex digits>`.
    #[error("invalid {kind} id (expected `{prefix}` followed by 16 lowercase hex digits)")]
    Malformed {
        /// `thread` or `run`.
        kind: &'static str,
        /// The expected prefix, e.g. `th_`.
        prefix: &'static str,
    },
    /// Text given where a full id or a unique prefix of one is accepted (`threads show|rename|delete|export`,
    /// `chat --thread`) that can be neither: not hex after the optional prefix, or too many digits.
    #[error(
        "invalid {kind} id (expected `{prefix}` followed by 16 lowercase hex digits, or a unique prefix of one \
         with or without `{prefix}`, e.g. `{prefix}3f9a` or `3f9a`)"
    )]
    MalformedReference {
        /// `thread`.
        kind: &'static str,
        /// The expected prefix, e.g. `th_`.
        prefix: &'static str,
    },
    /// The operating system's random source failed.
    #[error("random source unavailable")]
    RandomUnavailable,
}

impl IdError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            IdError::Malformed { .. } | IdError::MalformedReference { .. } => "invalid_id",
            IdError::RandomUnavailable => "random_unavailable",
        }
    }
}

fn random_hex() -> Result<String, IdError> {
    let mut bytes = [0u8; HEX_DIGITS / 2];
    getrandom::fill(&mut bytes).map_err(|_| IdError::RandomUnavailable)?;
    let mut out = String::with_capacity(HEX_DIGITS);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    Ok(out)
}

fn well_formed(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == HEX_DIGITS
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// The prefix every id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// A fresh random id.
            ///
            /// # Errors
            /// [`IdError::RandomUnavailable`] when the OS random source fails.
            pub fn random() -> Result<Self, IdError> {
                Ok(Self(format!("{}{}", $prefix, random_hex()?)))
            }

            /// Parses a user- or store-supplied id.
            ///
            /// # Errors
            /// [`IdError::Malformed`] unless the string is the prefix followed by 16 lowercase hex digits.
            pub fn parse(s: &str) -> Result<Self, IdError> {
                if well_formed(s, $prefix) {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(IdError::Malformed { kind: $kind, prefix: $prefix })
                }
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A conversation thread id, e.g. `th_3f9a0c1d2b4e5f60`.
    ThreadId,
    "th_",
    "thread"
);
id_type!(
    /// One turn's run id, e.g. `run_0a1b2c3d4e5f6071`.
    RunId,
    "run_",
    "run"
);
id_type!(
    /// A managed task's id, e.g. `task_0a1b2c3d4e5f6071` (see [`crate::tasks`]).
    TaskId,
    "task_",
    "task"
);

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, thread_ok: bool) {
        assert_eq!(ThreadId::parse(input).is_ok(), thread_ok, "{input:?}");
    }

    #[test]
    fn parse_accepts_exactly_prefix_and_sixteen_hex_digits() {
        check("th_0123456789abcdef", true);
        check("th_0123456789abcde", false);
        check("th_0123456789abcdef0", false);
        check("th_0123456789ABCDEF", false);
        check("run_0123456789abcdef", false);
        check("th_01234567/9abcdef", false);
        check("", false);
    }

    #[test]
    fn random_ids_parse_back_and_differ() {
        let a = ThreadId::random().unwrap();
        let b = ThreadId::random().unwrap();
        assert_ne!(a, b);
        assert_eq!(ThreadId::parse(a.as_str()).unwrap(), a);
        let r = RunId::random().unwrap();
        assert!(r.as_str().starts_with("run_"));
        assert_eq!(RunId::parse(r.as_str()).unwrap(), r);
    }

    #[test]
    fn error_code_is_stable() {
        assert_eq!(ThreadId::parse("x").unwrap_err().code(), "invalid_id");
    }
}
