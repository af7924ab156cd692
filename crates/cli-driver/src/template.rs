//! argv templating: a sans-IO parser and evaluator for `${input.a.b}` / `${secrets.NAME}` tokens with filters.
//!
//! Source: `@agentproto/driver-cli` (`expandArgv` and its tests) and this repository's
//! `protocols/cli-driver.md`, section "argv templating".
//!
//! One argv entry of a DRIVER.md is one *token*. A token that is exactly one placeholder (`${input.tags}`) is a
//! *whole token*: it expands to zero, one or several arguments. A token mixing literal text and placeholders
//! (`release-${input.version}`) is a *mixed token*: it always expands to exactly one argument, undefined or null
//! values becoming the empty string.
//!
//! Grammar inside `${ … }` (spaces around `|`, `(`, `)` and `,` are allowed):
//!
//! ```text
//! expr    = path *( "|" filter )
//! path    = ("input" *( "." key )) | ("secrets" "." NAME)
//! filter  = "default(" quoted ")" | "optional(" quoted "," path ")" | "flag(" quoted ")" | "json"
//! quoted  = "'" chars "'" | '"' chars '"'           (no escapes; the other quote kind may appear inside)
//! ```
//!
//! `optional` and `flag` produce a flag plus a value or a bare flag, so they are accepted in whole tokens only
//! (a parse error elsewhere). Nothing here touches a process or a file.

use std::fmt;

use serde_json::Value;

/// A parsed argv token. Parse once at load time with [`Template::parse`], evaluate per call with
/// [`Template::expand`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Expr(Expr),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Expr {
    path: Path,
    filters: Vec<Filter>,
}

/// A dotted reference into the call's inputs or secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Path {
    root: Root,
    keys: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Root {
    Input,
    Secrets,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Filter {
    Default(String),
    Optional(String, Path),
    Flag(String),
    Json,
}

/// Why a token does not parse: the byte offset inside the token and what was expected there.
///
/// Display: `at byte 7: expected ')' after the filter argument`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at byte {at}: {message}")]
pub struct TemplateError {
    /// Byte offset inside the token where the problem was found.
    pub at: usize,
    /// What was wrong (lowercase, no trailing period).
    pub message: String,
}

/// One expanded argument, remembering whether a secret went into it (then it is shown as `***`).
#[derive(Clone, PartialEq, Eq)]
pub struct Arg {
    /// The argument text.
    pub text: String,
    /// Whether a `${secrets.…}` value is part of `text`.
    pub secret: bool,
}

impl fmt::Debug for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.secret {
            f.write_str("\"***\"")
        } else {
            fmt::Debug::fmt(&self.text, f)
        }
    }
}

/// What a template is evaluated against: the call's input object and a lookup for secret values.
pub trait Scope {
    /// The input document (a JSON object for tools with an object schema).
    fn input(&self) -> &Value;
    /// The value of secret `name`, or `None` when it is not available.
    fn secret(&self, name: &str) -> Option<&str>;
}

impl Template {
    /// Parses one argv token.
    ///
    /// # Errors
    ///
    /// [`TemplateError`] with the byte offset for an unclosed `${`, an unknown root (only `input` and `secrets`),
    /// an empty key, an unknown filter, a malformed filter argument, or `optional`/`flag` in a mixed token.
    pub fn parse(token: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = token;
        let mut offset = 0;
        while let Some(start) = rest.find("${") {
            literal.push_str(&rest[..start]);
            let body_start = start + 2;
            let Some(len) = rest[body_start..].find('}') else {
                return Err(TemplateError {
                    at: offset + start,
                    message: "unclosed '${'".to_owned(),
                });
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal)));
            }
            let body = &rest[body_start..body_start + len];
            let expr = Parser::new(body, offset + body_start).expr()?;
            parts.push(Part::Expr(expr));
            let consumed = body_start + len + 1;
            offset += consumed;
            rest = &rest[consumed..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        let template = Self { parts };
        if !template.is_whole() {
            for part in &template.parts {
                if let Part::Expr(expr) = part
                    && let Some(filter) = expr.filters.iter().find(|f| f.makes_flags())
                {
                    return Err(TemplateError {
                        at: 0,
                        message: format!(
                            "filter '{}' is allowed only when the placeholder is the whole token",
                            filter.name()
                        ),
                    });
                }
            }
        }
        Ok(template)
    }

    /// Whether the token is exactly one placeholder.
    fn is_whole(&self) -> bool {
        matches!(self.parts.as_slice(), [Part::Expr(_)])
    }

    /// Names of the secrets this token reads (`${secrets.NAME}`), for load-time checks.
    pub fn secret_names(&self) -> Vec<&str> {
        let mut names = Vec::new();
        for part in &self.parts {
            if let Part::Expr(expr) = part {
                expr.path
                    .secret_name()
                    .into_iter()
                    .for_each(|n| names.push(n));
                for filter in &expr.filters {
                    if let Filter::Optional(_, path) = filter {
                        path.secret_name().into_iter().for_each(|n| names.push(n));
                    }
                }
            }
        }
        names
    }

    /// Expands the token against `scope`, appending zero or more arguments to `out`.
    ///
    /// Whole token: undefined or null → nothing; an array → one argument per element (null elements skipped,
    /// objects and arrays as JSON text); a string as is; numbers as JSON; booleans `true`/`false`; an object as
    /// JSON text. Mixed token: exactly one argument, undefined/null → empty text, arrays and objects as JSON text.
    /// A secret that is not available expands like an undefined value (callers check secrets before expanding).
    pub fn expand(&self, scope: &dyn Scope, out: &mut Vec<Arg>) {
        if let [Part::Expr(expr)] = self.parts.as_slice() {
            let (result, secret) = expr.eval(scope);
            match result {
                Evaluated::Args(args) => {
                    out.extend(args.into_iter().map(|text| Arg { text, secret }))
                }
                Evaluated::Value(None | Some(Value::Null)) => {}
                Evaluated::Value(Some(Value::Array(items))) => {
                    for item in items {
                        if !item.is_null() {
                            out.push(Arg {
                                text: stringify(&item),
                                secret,
                            });
                        }
                    }
                }
                Evaluated::Value(Some(value)) => out.push(Arg {
                    text: stringify(&value),
                    secret,
                }),
            }
            return;
        }
        let mut text = String::new();
        let mut any_secret = false;
        for part in &self.parts {
            match part {
                Part::Literal(literal) => text.push_str(literal),
                Part::Expr(expr) => {
                    let (result, secret) = expr.eval(scope);
                    any_secret |= secret;
                    match result {
                        Evaluated::Value(Some(value)) if !value.is_null() => {
                            text.push_str(&stringify(&value));
                        }
                        // `optional`/`flag` are refused in mixed tokens at parse time.
                        Evaluated::Value(_) | Evaluated::Args(_) => {}
                    }
                }
            }
        }
        out.push(Arg {
            text,
            secret: any_secret,
        });
    }
}

enum Evaluated {
    Value(Option<Value>),
    Args(Vec<String>),
}

impl Expr {
    /// The result and whether a secret contributed to it.
    fn eval(&self, scope: &dyn Scope) -> (Evaluated, bool) {
        let mut secret = self.path.root == Root::Secrets;
        let mut current = Evaluated::Value(self.path.resolve(scope));
        for filter in &self.filters {
            current = match (filter, current) {
                (_, Evaluated::Args(args)) => Evaluated::Args(args),
                (Filter::Default(text), Evaluated::Value(None | Some(Value::Null))) => {
                    Evaluated::Value(Some(Value::String(text.clone())))
                }
                (Filter::Default(_), value) => value,
                (Filter::Optional(flag, path), Evaluated::Value(_)) => {
                    secret |= path.root == Root::Secrets;
                    match path.resolve(scope) {
                        None | Some(Value::Null) => Evaluated::Args(Vec::new()),
                        Some(value) => Evaluated::Args(vec![flag.clone(), stringify(&value)]),
                    }
                }
                (Filter::Flag(flag), Evaluated::Value(value)) => {
                    if value.as_ref().is_some_and(truthy) {
                        // The flag text itself is manifest text, not the secret.
                        secret = false;
                        Evaluated::Args(vec![flag.clone()])
                    } else {
                        Evaluated::Args(Vec::new())
                    }
                }
                (Filter::Json, Evaluated::Value(value)) => {
                    Evaluated::Value(value.map(|v| Value::String(v.to_string())))
                }
            };
        }
        (current, secret)
    }
}

impl Path {
    fn resolve(&self, scope: &dyn Scope) -> Option<Value> {
        match self.root {
            Root::Secrets => {
                let name = self.keys.first()?;
                scope.secret(name).map(|v| Value::String(v.to_owned()))
            }
            Root::Input => {
                let mut value = scope.input();
                for key in &self.keys {
                    value = match value {
                        Value::Object(map) => map.get(key)?,
                        Value::Array(items) => items.get(key.parse::<usize>().ok()?)?,
                        _ => return None,
                    };
                }
                Some(value.clone())
            }
        }
    }

    fn secret_name(&self) -> Option<&str> {
        match self.root {
            Root::Secrets => self.keys.first().map(String::as_str),
            Root::Input => None,
        }
    }
}

impl Filter {
    fn makes_flags(&self) -> bool {
        matches!(self, Filter::Optional(..) | Filter::Flag(_))
    }

    fn name(&self) -> &'static str {
        match self {
            Filter::Default(_) => "default",
            Filter::Optional(..) => "optional",
            Filter::Flag(_) => "flag",
            Filter::Json => "json",
        }
    }
}

/// JavaScript truthiness, as the reference implementation's `flag` filter uses it.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// A string as is; anything else as its JSON text (numbers, booleans, arrays, objects).
fn stringify(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A small recursive-descent parser over one placeholder body; `base` is the body's offset in the token.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
    base: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, base: usize) -> Self {
        Self { text, pos: 0, base }
    }

    fn error(&self, message: impl Into<String>) -> TemplateError {
        TemplateError {
            at: self.base + self.pos,
            message: message.into(),
        }
    }

    fn skip_spaces(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_spaces();
        if self.text[self.pos..].starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char, what: &str) -> Result<(), TemplateError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(format!("expected '{c}' {what}")))
        }
    }

    fn ident(&mut self) -> &'a str {
        self.skip_spaces();
        let rest = &self.text[self.pos..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn expr(mut self) -> Result<Expr, TemplateError> {
        let path = self.path()?;
        let mut filters = Vec::new();
        while self.eat('|') {
            filters.push(self.filter()?);
        }
        self.skip_spaces();
        if self.pos != self.text.len() {
            return Err(self.error("expected '|' or the end of the placeholder"));
        }
        Ok(Expr { path, filters })
    }

    fn path(&mut self) -> Result<Path, TemplateError> {
        let start = self.pos;
        let root = match self.ident() {
            "input" => Root::Input,
            "secrets" => Root::Secrets,
            "" => return Err(self.error("expected 'input' or 'secrets'")),
            other => {
                self.pos = start;
                return Err(self.error(format!(
                    "unknown root '{other}' (expected 'input' or 'secrets')"
                )));
            }
        };
        let mut keys = Vec::new();
        while self.text[self.pos..].starts_with('.') {
            self.pos += 1;
            let key = self.ident();
            if key.is_empty() {
                return Err(self.error("expected a key after '.'"));
            }
            keys.push(key.to_owned());
        }
        if root == Root::Secrets && keys.len() != 1 {
            return Err(self.error("a secret is named as 'secrets.NAME'"));
        }
        Ok(Path { root, keys })
    }

    fn quoted(&mut self) -> Result<String, TemplateError> {
        self.skip_spaces();
        let quote = match self.text[self.pos..].chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(self.error("expected a quoted string")),
        };
        let open = self.pos;
        self.pos += 1;
        let Some(len) = self.text[self.pos..].find(quote) else {
            self.pos = open;
            return Err(self.error("unclosed quoted string"));
        };
        let value = self.text[self.pos..self.pos + len].to_owned();
        self.pos += len + 1;
        Ok(value)
    }

    fn filter(&mut self) -> Result<Filter, TemplateError> {
        let start = self.pos;
        let name = self.ident();
        let filter = match name {
            "json" => return Ok(Filter::Json),
            "default" => {
                self.expect('(', "after 'default'")?;
                let value = self.quoted()?;
                Filter::Default(value)
            }
            "flag" => {
                self.expect('(', "after 'flag'")?;
                Filter::Flag(self.quoted()?)
            }
            "optional" => {
                self.expect('(', "after 'optional'")?;
                let flag = self.quoted()?;
                self.expect(',', "between the arguments of 'optional'")?;
                self.skip_spaces();
                let path = self.path()?;
                Filter::Optional(flag, path)
            }
            "" => return Err(self.error("expected a filter name")),
            other => {
                self.pos = start;
                self.skip_spaces();
                return Err(self.error(format!(
                    "unknown filter '{other}' (expected default, optional, flag or json)"
                )));
            }
        };
        self.expect(')', "after the filter argument")?;
        Ok(filter)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    struct TestScope {
        input: Value,
        secrets: BTreeMap<String, String>,
    }

    impl Scope for TestScope {
        fn input(&self) -> &Value {
            &self.input
        }
        fn secret(&self, name: &str) -> Option<&str> {
            self.secrets.get(name).map(String::as_str)
        }
    }

    fn scope(input: Value) -> TestScope {
        TestScope {
            input,
            secrets: BTreeMap::from([("TOKEN".to_owned(), "s3cr3t".to_owned())]),
        }
    }

    fn check(tokens: &[&str], input: Value, expect: &[&str]) {
        let scope = scope(input);
        let mut out = Vec::new();
        for token in tokens {
            Template::parse(token)
                .unwrap_or_else(|e| panic!("{token}: {e}"))
                .expand(&scope, &mut out);
        }
        let texts: Vec<&str> = out.iter().map(|a| a.text.as_str()).collect();
        assert_eq!(texts, expect, "{tokens:?}");
    }

    fn check_error(token: &str, at: usize, contains: &str) {
        let err = Template::parse(token).expect_err(token);
        assert_eq!(err.at, at, "{token}: {err}");
        assert!(err.message.contains(contains), "{token}: {err}");
    }

    #[test]
    fn whole_tokens_substitute_drop_and_expand() {
        check(
            &["pr", "create", "--title", "${input.title}"],
            json!({"title": "Fix bug"}),
            &["pr", "create", "--title", "Fix bug"],
        );
        check(&["a", "${input.missing}", "b"], json!({}), &["a", "b"]);
        check(&["${input.n}"], json!({"n": null}), &[]);
        check(
            &["${input.tags}"],
            json!({"tags": ["x", "y z", 3, null]}),
            &["x", "y z", "3"],
        );
        check(
            &["${input.a.b.c}"],
            json!({"a": {"b": {"c": 1.5}}}),
            &["1.5"],
        );
        check(
            &["${input.on}", "${input.off}"],
            json!({"on": true, "off": false}),
            &["true", "false"],
        );
        check(&["${input.list.1}"], json!({"list": ["a", "b"]}), &["b"]);
        check(&["${input.obj}"], json!({"obj": {"k": 1}}), &[r#"{"k":1}"#]);
        check(&["${ input.title }"], json!({"title": "t"}), &["t"]);
    }

    #[test]
    fn mixed_tokens_make_exactly_one_argument() {
        check(
            &["release-${input.version}"],
            json!({"version": "1.2.3"}),
            &["release-1.2.3"],
        );
        check(&["--x=${input.missing}"], json!({}), &["--x="]);
        check(
            &["${input.a}-${input.b}"],
            json!({"a": 1, "b": null}),
            &["1-"],
        );
        check(
            &["--tags=${input.t}"],
            json!({"t": ["a", "b"]}),
            &[r#"--tags=["a","b"]"#],
        );
        check(&["plain"], json!({}), &["plain"]);
        check(&[""], json!({}), &[""]);
    }

    #[test]
    fn filters_behave_as_the_reference_implementation() {
        check(&["${input.base | default('main')}"], json!({}), &["main"]);
        check(
            &["${input.base | default(\"main\")}"],
            json!({"base": "dev"}),
            &["dev"],
        );
        check(
            &["create", "${input.draft | flag('--draft')}"],
            json!({"draft": true}),
            &["create", "--draft"],
        );
        check(
            &["create", "${input.draft | flag('--draft')}"],
            json!({"draft": false}),
            &["create"],
        );
        check(&["${input.d | flag('--d')}"], json!({"d": ""}), &[]);
        check(&["${input.d | flag('--d')}"], json!({"d": 0}), &[]);
        check(&["${input.d | flag('--d')}"], json!({"d": []}), &["--d"]);
        check(
            &["${input.head | optional('--head', input.head)}"],
            json!({"head": "feature/x"}),
            &["--head", "feature/x"],
        );
        check(
            &["${input.head | optional('--head', input.head)}"],
            json!({}),
            &[],
        );
        check(
            &["${input.body | json}"],
            json!({"body": {"a": [1]}}),
            &[r#"{"a":[1]}"#],
        );
        check(&["${input.s | json}"], json!({"s": "x"}), &[r#""x""#]);
        check(&["${input.s | json}"], json!({}), &[]);
        check(
            &["--data=${input.s | json}"],
            json!({"s": [1]}),
            &["--data=[1]"],
        );
        check(
            &["${input.x | default('1') | json}"],
            json!({}),
            &[r#""1""#],
        );
    }

    #[test]
    fn secrets_are_substituted_and_marked() {
        let scope = scope(json!({}));
        let mut out = Vec::new();
        Template::parse("--token=${secrets.TOKEN}")
            .unwrap()
            .expand(&scope, &mut out);
        Template::parse("${secrets.TOKEN}")
            .unwrap()
            .expand(&scope, &mut out);
        Template::parse("${secrets.TOKEN | flag('--auth')}")
            .unwrap()
            .expand(&scope, &mut out);
        Template::parse("${secrets.MISSING}")
            .unwrap()
            .expand(&scope, &mut out);
        let got: Vec<(&str, bool)> = out.iter().map(|a| (a.text.as_str(), a.secret)).collect();
        assert_eq!(
            got,
            [
                ("--token=s3cr3t", true),
                ("s3cr3t", true),
                ("--auth", false)
            ]
        );
        let debug = format!("{out:?}");
        assert!(!debug.contains("s3cr3t"), "{debug}");
        let template = Template::parse("${input.a | optional('--t', secrets.TOKEN)}").unwrap();
        assert_eq!(template.secret_names(), ["TOKEN"]);
    }

    #[test]
    fn parse_errors_say_where() {
        check_error("abc${input.x", 3, "unclosed");
        check_error("${env.HOME}", 2, "unknown root 'env'");
        check_error("${}", 2, "expected 'input' or 'secrets'");
        check_error("${input.}", 8, "expected a key");
        check_error("${input.x | upper}", 12, "unknown filter 'upper'");
        check_error("${input.x | default(main)}", 20, "expected a quoted string");
        check_error("${input.x | default('main'}", 26, "expected ')'");
        check_error("${input.x | default('main)}", 20, "unclosed quoted string");
        check_error("${input.x | optional('--x')}", 26, "expected ','");
        check_error("${input.x y}", 10, "expected '|' or the end");
        check_error("${secrets.A.B}", 13, "secrets.NAME");
        check_error("${secrets}", 9, "secrets.NAME");
        check_error("--x=${input.x | flag('--x')}", 0, "whole token");
        check_error("a${input.x | optional('--x', input.x)}", 0, "whole token");
    }

    proptest::proptest! {
        /// Any token either parses or fails with an offset inside it; never a panic. A parsed mixed token always
        /// expands to exactly one argument, and a literal token to itself.
        #[test]
        fn any_token_parses_or_fails_cleanly(token in "(\\$\\{|\\}|input|secrets\\.TOKEN|\\.|[a-z]|\\||default\\('x'\\)|flag\\('-f'\\)|json|optional\\('-o', input\\.a\\)|[ ('\",)]|é|-){0,24}") {
            match Template::parse(&token) {
                Err(e) => proptest::prop_assert!(e.at <= token.len()),
                Ok(template) => {
                    let mut out = Vec::new();
                    template.expand(&scope(json!({"a": [1, "x"], "b": {"c": true}})), &mut out);
                    if !template.is_whole() {
                        proptest::prop_assert_eq!(out.len(), 1);
                    }
                    if !token.contains("${") {
                        proptest::prop_assert_eq!(out[0].text.as_str(), token.as_str());
                    }
                }
            }
        }
    }
}
