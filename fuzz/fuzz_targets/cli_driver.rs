//! Fuzz target `cli_driver`: the cli-driver manifest parsers (`manifest::parse_tool`, `manifest::parse_driver`)
//! and argv templates (`Template::parse`, `Template::expand`) on arbitrary text.
//!
//! Invariants (source: `protocols/cli-driver.md` "Manifests" and "Argument templates", `template.rs` docs): no
//! panic; a parse error's byte offset lies inside the token; a token without `${` is one literal argument equal
//! to itself; a secret's value never reaches an argument that is not marked secret (so it is always shown as
//! `***`); a token that reads no secret yields no secret argument.
//!
//! Input layout: byte 0 picks the parser (0 template, 1 TOOL.md, 2 DRIVER.md); for a template the rest is
//! `token 0x00 input-json`.
#![no_main]

use std::path::Path;

use agentwire_cli_driver::manifest::{parse_driver, parse_tool};
use agentwire_cli_driver::template::{Scope, Template};
use serde_json::Value;

/// A secret value no generated input or token is likely to hold by chance; checked below when one does.
const SECRET: &str = "\u{1F512}fuzz-secret-value\u{1F512}";

struct FuzzScope {
    input: Value,
}

impl Scope for FuzzScope {
    fn input(&self) -> &Value {
        &self.input
    }

    fn secret(&self, name: &str) -> Option<&str> {
        (!name.starts_with('x')).then_some(SECRET)
    }
}

fn template(data: &[u8]) {
    let (token, input) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let token = String::from_utf8_lossy(token);
    let input: Value = serde_json::from_slice(input).unwrap_or(Value::Null);
    match Template::parse(&token) {
        Err(error) => {
            assert!(
                error.at <= token.len(),
                "error offset {} past the token",
                error.at
            );
            assert!(!error.to_string().is_empty());
        }
        Ok(template) => {
            let reads_secrets = !template.secret_names().is_empty();
            let input_holds_secret = input.to_string().contains("fuzz-secret-value")
                || token.contains("fuzz-secret-value");
            let scope = FuzzScope { input };
            let mut args = Vec::new();
            template.expand(&scope, &mut args);
            if !token.contains("${") {
                assert_eq!(args.len(), 1, "a literal token is one argument");
                assert_eq!(args[0].text, token);
                assert!(!args[0].secret);
            }
            for arg in &args {
                if !reads_secrets {
                    assert!(!arg.secret, "secret argument from a token that reads none");
                }
                if !input_holds_secret && arg.text.contains("fuzz-secret-value") {
                    assert!(
                        arg.secret,
                        "a secret's value in an argument not marked secret"
                    );
                    assert_eq!(format!("{arg:?}"), "\"***\"");
                }
            }
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => template(rest),
        1 => {
            let text = String::from_utf8_lossy(rest);
            if let Err(error) = parse_tool(Path::new("TOOL.md"), &text) {
                assert!(!error.to_string().is_empty());
            }
        }
        _ => {
            let text = String::from_utf8_lossy(rest);
            if let Err(error) = parse_driver(Path::new("DRIVER.md"), &text) {
                assert!(!error.to_string().is_empty());
            }
        }
    }
});
