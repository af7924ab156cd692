//! TOOL.md and DRIVER.md: YAML front matter between `---` lines, then Markdown prose; parsed and validated.
//!
//! Source: `protocols/cli-driver.md`, "Manifests"; the seed `agentproto-driver-cli.txt` (the `defineCliDriver`
//! example, whose `bin` sits at the top level as in the AIP-30 draft) and the reference implementation's tests
//! (`output: { defaultFormat, exitCodes }`). Both spellings of the CLI metadata are accepted:
//!
//! | reference implementation (`metadata.cli.*`) | AIP-30 draft (top level) |
//! |---|---|
//! | `metadata.cli.bin` | `bin` |
//! | `metadata.cli.binArgs` | `bin_args` |
//! | `metadata.cli.cwd` | `cwd` |
//! | `metadata.cli.sandbox.env.{pass,set}` | `sandbox.env.{pass,set}` |
//! | `metadata.cli.output.{exitCodes,defaultFormat}` | `output.{exit_codes,default_format}` |
//! | `implements[].metadata.cli.{argv,outputFormat}` | `implements[].{argv,output_format}` |
//!
//! A field given in both spellings is an error (`manifest_invalid`), never a silent choice. Unknown fields are
//! ignored (later AIP revisions add some). Parsing is sans-IO: [`parse_tool`] and [`parse_driver`] take the text.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{ErrorCode, LoadError, LoadErrorKind};
use crate::template::Template;

/// A TOOL.md: what a tool is and what input it takes.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ToolManifest {
    /// `id`, matching `^[a-z][a-z0-9._-]{1,63}$`.
    pub id: String,
    /// `name` (defaults to the id).
    pub name: String,
    /// `description`, at most 2000 characters.
    pub description: String,
    /// `version`, semver.
    pub version: semver::Version,
    /// `inputs`: the JSON Schema calls are validated against (`None`: any input).
    pub inputs: Option<Value>,
    /// `outputs`: the JSON Schema of the output (documentation only; not enforced).
    pub outputs: Option<Value>,
    /// `mutates` (default `false`).
    pub mutates: bool,
    /// `risk_level`, 0–3 (default 0).
    pub risk_level: u8,
    /// `timeout_ms`: the tool's own timeout, if any.
    pub timeout_ms: Option<u64>,
    /// `idempotent` (default `false`).
    pub idempotent: bool,
    /// `tags`.
    pub tags: Vec<String>,
    /// The Markdown prose after the front matter.
    pub prose: String,
    /// The file it was read from.
    pub path: PathBuf,
    pub(crate) validator: Option<Arc<jsonschema::Validator>>,
}

/// How a successful run's stdout becomes the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputFormat {
    /// stdout as text (lossy UTF-8). The default.
    Text,
    /// stdout parsed as one JSON document (`output_parse_failed` otherwise).
    Json,
}

impl OutputFormat {
    /// `text` or `json`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Text => "text",
            OutputFormat::Json => "json",
        }
    }
}

/// One `implements` entry of a DRIVER.md: which tool, and how to call the binary for it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Implementation {
    /// The tool id (from `tool:`, which may be an id or a path ending in `tools/<id>/TOOL.md`).
    pub tool: String,
    /// `version`: the semver range the tool's version must match.
    pub version: semver::VersionReq,
    /// The argv tokens after `bin` and `binArgs`, as written.
    pub argv: Vec<String>,
    pub(crate) templates: Vec<Template>,
    /// `outputFormat` (else the driver's `defaultFormat`, else text).
    pub output_format: OutputFormat,
    /// `timeout_override_ms`: wins over the tool's `timeout_ms`.
    pub timeout_override_ms: Option<u64>,
}

/// A DRIVER.md of `kind: cli`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DriverManifest {
    /// `id`, matching `^[a-z0-9][a-z0-9._-]{1,79}$`.
    pub id: String,
    /// `name` (defaults to the id).
    pub name: String,
    /// `description` (may be empty).
    pub description: String,
    /// What it implements, in file order.
    pub implements: Vec<Implementation>,
    /// `bin`: a program name looked up on the host's `PATH`, or a path (relative: to the app root).
    pub bin: String,
    /// `binArgs`: arguments before every call's argv (literal, not templated).
    pub bin_args: Vec<String>,
    /// `cwd` as written (relative to the app root), if any.
    pub cwd: Option<String>,
    /// `sandbox.env.pass`: names copied from the host environment.
    pub env_pass: Vec<String>,
    /// `sandbox.env.set`: fixed entries.
    pub env_set: BTreeMap<String, String>,
    /// `output.exitCodes`: exit code → semantic code overrides (`ok` entries are `None`: success).
    pub exit_codes: BTreeMap<i32, Option<ErrorCode>>,
    /// `auth.state.env`: secrets read from the host environment at dispatch.
    pub secrets: Vec<String>,
    /// The Markdown prose after the front matter.
    pub prose: String,
    /// The file it was read from.
    pub path: PathBuf,
    /// 1-based line of the `cwd` field, for errors raised when the bundle resolves it.
    pub(crate) cwd_line: Option<usize>,
}

// ---------------------------------------------------------------------------------------------------------------
// front matter

/// The front matter text, the line (1-based) its first line has in the file, and the prose.
fn split_front_matter<'a>(path: &Path, text: &'a str) -> Result<(&'a str, &'a str), LoadError> {
    let missing = || {
        LoadError::new(
            LoadErrorKind::FrontMatterMissing,
            path,
            "expected YAML front matter between '---' lines at the start of the file",
        )
        .at(Some(1), None)
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(missing)?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let trimmed = line.trim_end_matches(['\n', '\r']);
        if trimmed == "---" || trimmed == "..." {
            return Ok((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    Err(missing())
}

/// Line offset of the front matter inside the file: it starts on line 2.
const FRONT_MATTER_FIRST_LINE: usize = 2;

/// Best-effort 1-based file line of the field at dotted `field` (`implements.1.version`) in `yaml`.
///
/// Keys are found as `key:` (or `- key:`) lines below their parent, indexes as the n-th `-` item below theirs.
fn locate(yaml: &str, field: &str) -> Option<usize> {
    let lines: Vec<&str> = yaml.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut from = 0;
    let mut min_indent = 0;
    let mut found = None;
    for segment in field.split('.') {
        if let Ok(index) = segment.parse::<usize>() {
            let mut item_indent = None;
            let mut count = 0;
            let mut hit = None;
            for (i, line) in lines.iter().enumerate().skip(from) {
                let content = line.trim_start();
                if content.is_empty() || content.starts_with('#') {
                    continue;
                }
                if indent(line) < min_indent
                    || (indent(line) == min_indent && !content.starts_with('-'))
                {
                    break;
                }
                if content.starts_with('-') && item_indent.is_none_or(|ind| ind == indent(line)) {
                    item_indent = Some(indent(line));
                    if count == index {
                        hit = Some(i);
                        break;
                    }
                    count += 1;
                }
            }
            let i = hit?;
            found = Some(i);
            from = i;
            min_indent = indent(lines[i]) + 1;
            continue;
        }
        let key = format!("{segment}:");
        let i = (from..lines.len()).find(|&i| {
            let content = lines[i].trim_start();
            let content = content.strip_prefix("- ").unwrap_or(content).trim_start();
            content.starts_with(&key) || content.starts_with(&format!("\"{segment}\":"))
        })?;
        found = Some(i);
        from = i + 1;
        min_indent = indent(lines[i]) + 1;
    }
    found.map(|i| i + FRONT_MATTER_FIRST_LINE)
}

/// [`locate`] of `field`, else of its nearest ancestor that can be found (flow-style YAML puts several fields on
/// one line).
fn locate_nearest(yaml: &str, field: &str) -> Option<usize> {
    let mut path = field;
    loop {
        if let Some(line) = locate(yaml, path) {
            return Some(line);
        }
        path = path.rsplit_once('.')?.0;
    }
}

struct Ctx<'a> {
    path: &'a Path,
    yaml: &'a str,
}

impl Ctx<'_> {
    fn invalid(&self, field: &str, message: impl Into<String>) -> LoadError {
        LoadError::new(LoadErrorKind::Invalid, self.path, message)
            .at(locate_nearest(self.yaml, field), Some(field.to_owned()))
    }

    fn parse<T: for<'de> Deserialize<'de>>(&self) -> Result<T, LoadError> {
        serde_norway::from_str(self.yaml).map_err(|e| {
            let line = e.location().map(|l| l.line() + FRONT_MATTER_FIRST_LINE - 1);
            let message = e.to_string();
            // serde_norway appends " at line N column M"; the line is reported separately.
            let message = message.split(" at line ").next().unwrap_or(&message);
            // "implements[0].argv: invalid type: …" → field `implements.0.argv`, message "invalid type: …";
            // "missing field `kind`" names the field inside the path.
            let (path, message) = match message.split_once(": ") {
                Some((path, rest)) if !path.contains(' ') => (Some(path), rest),
                _ => (None, message),
            };
            let path = path.map(|p| p.replace('[', ".").replace(']', ""));
            let missing = message
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split('`').next());
            let field = match (path, missing) {
                (Some(path), Some(name)) => Some(format!("{path}.{name}")),
                (None, Some(name)) => Some(name.to_owned()),
                (path, None) => path,
            };
            LoadError::new(LoadErrorKind::Invalid, self.path, message).at(line, field)
        })
    }
}

fn check_id(
    ctx: &Ctx<'_>,
    id: &str,
    first: fn(char) -> bool,
    max_rest: usize,
) -> Result<(), LoadError> {
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(first);
    let rest: Vec<char> = chars.collect();
    let rest_ok = (1..=max_rest).contains(&rest.len())
        && rest
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if first_ok && rest_ok {
        Ok(())
    } else {
        let pattern = if max_rest == 63 {
            "^[a-z][a-z0-9._-]{1,63}$"
        } else {
            "^[a-z0-9][a-z0-9._-]{1,79}$"
        };
        Err(ctx.invalid("id", format!("'{id}' does not match {pattern}")))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// TOOL.md

#[derive(Deserialize)]
struct RawTool {
    schema: Option<String>,
    id: String,
    name: Option<String>,
    description: String,
    version: String,
    inputs: Option<Value>,
    outputs: Option<Value>,
    #[serde(default)]
    mutates: bool,
    #[serde(default)]
    risk_level: u8,
    timeout_ms: Option<u64>,
    #[serde(default)]
    idempotent: bool,
    #[serde(default)]
    tags: Vec<String>,
}

/// The schema value a TOOL.md may declare.
pub const TOOL_SCHEMA: &str = "agentproto/tool/v1";
/// The schema value a DRIVER.md declares.
pub const DRIVER_SCHEMA: &str = "agentproto/driver/v1";
/// Longest accepted `description`, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 2000;

/// Parses and validates a TOOL.md read from `path` (used in errors only).
///
/// # Errors
///
/// [`LoadError`] naming the file, line and field: `front_matter_missing`, or `manifest_invalid` for YAML errors,
/// missing or mistyped fields, a bad id, a description over 2000 characters, a version that is not semver, a
/// `risk_level` above 3, a `timeout_ms` of 0, or an `inputs` value that is not a valid JSON Schema.
pub fn parse_tool(path: &Path, text: &str) -> Result<ToolManifest, LoadError> {
    let (yaml, prose) = split_front_matter(path, text)?;
    let ctx = Ctx { path, yaml };
    let raw: RawTool = ctx.parse()?;
    if let Some(schema) = &raw.schema
        && schema != TOOL_SCHEMA
    {
        return Err(ctx.invalid(
            "schema",
            format!("expected '{TOOL_SCHEMA}', found '{schema}'"),
        ));
    }
    check_id(&ctx, &raw.id, |c| c.is_ascii_lowercase(), 63)?;
    if raw.description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ctx.invalid(
            "description",
            format!("longer than {MAX_DESCRIPTION_CHARS} characters"),
        ));
    }
    let version = semver::Version::parse(&raw.version)
        .map_err(|e| ctx.invalid("version", format!("'{}' is not semver: {e}", raw.version)))?;
    if raw.risk_level > 3 {
        return Err(ctx.invalid("risk_level", "must be 0, 1, 2 or 3"));
    }
    if raw.timeout_ms == Some(0) {
        return Err(ctx.invalid("timeout_ms", "must be at least 1"));
    }
    let validator = match &raw.inputs {
        None => None,
        Some(schema) => Some(Arc::new(jsonschema::validator_for(schema).map_err(
            |e| ctx.invalid("inputs", format!("not a valid JSON Schema: {e}")),
        )?)),
    };
    Ok(ToolManifest {
        name: raw.name.unwrap_or_else(|| raw.id.clone()),
        id: raw.id,
        description: raw.description,
        version,
        inputs: raw.inputs,
        outputs: raw.outputs,
        mutates: raw.mutates,
        risk_level: raw.risk_level,
        timeout_ms: raw.timeout_ms,
        idempotent: raw.idempotent,
        tags: raw.tags,
        prose: prose.to_owned(),
        path: path.to_owned(),
        validator,
    })
}

// ---------------------------------------------------------------------------------------------------------------
// DRIVER.md

#[derive(Deserialize, Default)]
struct RawEnv {
    #[serde(default)]
    pass: Vec<String>,
    #[serde(default)]
    set: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
struct RawSandbox {
    env: Option<RawEnv>,
}

/// An exit-code key: YAML may write it as a number or a string.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct ExitKey(String);

impl<'de> Deserialize<'de> for ExitKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ExitKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an exit code")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ExitKey, E> {
                Ok(ExitKey(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ExitKey, E> {
                Ok(ExitKey(v.to_string()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ExitKey, E> {
                Ok(ExitKey(v.to_owned()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[derive(Deserialize, Default)]
struct RawOutput {
    #[serde(rename = "exitCodes", alias = "exit_codes")]
    exit_codes: Option<BTreeMap<ExitKey, String>>,
    #[serde(rename = "defaultFormat", alias = "default_format")]
    default_format: Option<String>,
}

#[derive(Deserialize, Default)]
struct RawCli {
    bin: Option<String>,
    #[serde(rename = "binArgs", alias = "bin_args")]
    bin_args: Option<Vec<String>>,
    cwd: Option<String>,
    sandbox: Option<RawSandbox>,
    output: Option<RawOutput>,
}

#[derive(Deserialize, Default)]
struct RawMetadata {
    cli: Option<RawCli>,
}

#[derive(Deserialize, Default)]
struct RawImplCli {
    argv: Option<Vec<String>>,
    #[serde(rename = "outputFormat", alias = "output_format")]
    output_format: Option<String>,
}

#[derive(Deserialize, Default)]
struct RawImplMetadata {
    cli: Option<RawImplCli>,
}

#[derive(Deserialize)]
struct RawImpl {
    tool: String,
    version: String,
    metadata: Option<RawImplMetadata>,
    argv: Option<Vec<String>>,
    output_format: Option<String>,
    timeout_override_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
struct RawAuthState {
    #[serde(default)]
    env: Vec<String>,
}

#[derive(Deserialize, Default)]
struct RawAuth {
    state: Option<RawAuthState>,
}

#[derive(Deserialize)]
struct RawDriver {
    schema: Option<String>,
    id: String,
    name: Option<String>,
    #[serde(default)]
    description: String,
    kind: String,
    implements: Vec<RawImpl>,
    metadata: Option<RawMetadata>,
    // AIP-30 draft spelling, at the top level.
    bin: Option<String>,
    bin_args: Option<Vec<String>>,
    cwd: Option<String>,
    sandbox: Option<RawSandbox>,
    output: Option<RawOutput>,
    auth: Option<RawAuth>,
}

/// One of two spellings, or an error naming both when both are given.
fn one_of<T>(
    ctx: &Ctx<'_>,
    nested: Option<T>,
    nested_name: &str,
    top: Option<T>,
    top_name: &str,
) -> Result<Option<T>, LoadError> {
    match (nested, top) {
        (Some(_), Some(_)) => Err(ctx.invalid(
            top_name,
            format!("given both as '{nested_name}' and as '{top_name}'; keep one"),
        )),
        (nested, top) => Ok(nested.or(top)),
    }
}

fn output_format(ctx: &Ctx<'_>, field: &str, text: &str) -> Result<OutputFormat, LoadError> {
    match text {
        "text" => Ok(OutputFormat::Text),
        "json" => Ok(OutputFormat::Json),
        other => Err(ctx.invalid(field, format!("expected 'text' or 'json', found '{other}'"))),
    }
}

fn env_name_ok(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// The tool id an `implements[].tool` names: an id, or a path whose parent directory is the id
/// (`./tools/create-pr/TOOL.md` → `create-pr`).
fn tool_reference(reference: &str) -> Option<String> {
    if !reference.contains('/') {
        return Some(reference.to_owned());
    }
    let path = Path::new(reference);
    if path.file_name()? != "TOOL.md" {
        return None;
    }
    Some(path.parent()?.file_name()?.to_str()?.to_owned())
}

/// Parses and validates a DRIVER.md read from `path` (used in errors only).
///
/// # Errors
///
/// [`LoadError`] naming the file, line and field: `front_matter_missing`, or `manifest_invalid` for YAML errors,
/// missing or mistyped fields, a bad id, a `kind` other than `cli`, no `bin`, a field given in both spellings, a
/// bad version range, an argv token that does not parse (with its byte offset), a `${secrets.X}` whose `X` is not
/// in `auth.state.env`, an output format other than `text`/`json`, an exit code key that is not an integer in
/// 1–255 or a semantic code that is not known, or an invalid environment variable name.
pub fn parse_driver(path: &Path, text: &str) -> Result<DriverManifest, LoadError> {
    let (yaml, prose) = split_front_matter(path, text)?;
    let ctx = Ctx { path, yaml };
    let raw: RawDriver = ctx.parse()?;
    if let Some(schema) = &raw.schema
        && schema != DRIVER_SCHEMA
    {
        return Err(ctx.invalid(
            "schema",
            format!("expected '{DRIVER_SCHEMA}', found '{schema}'"),
        ));
    }
    check_id(
        &ctx,
        &raw.id,
        |c| c.is_ascii_lowercase() || c.is_ascii_digit(),
        79,
    )?;
    if raw.kind != "cli" {
        return Err(ctx.invalid("kind", format!("expected 'cli', found '{}'", raw.kind)));
    }
    let cli = raw.metadata.and_then(|m| m.cli).unwrap_or_default();
    let bin = one_of(&ctx, cli.bin, "metadata.cli.bin", raw.bin, "bin")?
        .ok_or_else(|| ctx.invalid("bin", "missing: set 'metadata.cli.bin' or 'bin'"))?;
    if bin.is_empty() || bin.contains('\0') {
        return Err(ctx.invalid("bin", "must be a non-empty program name or path"));
    }
    let bin_args = one_of(
        &ctx,
        cli.bin_args,
        "metadata.cli.binArgs",
        raw.bin_args,
        "bin_args",
    )?
    .unwrap_or_default();
    let cwd = one_of(&ctx, cli.cwd, "metadata.cli.cwd", raw.cwd, "cwd")?;
    let cwd_line = locate(yaml, "metadata.cli.cwd").or_else(|| locate_nearest(yaml, "cwd"));
    let sandbox = one_of(
        &ctx,
        cli.sandbox,
        "metadata.cli.sandbox",
        raw.sandbox,
        "sandbox",
    )?
    .unwrap_or_default();
    let env = sandbox.env.unwrap_or_default();
    for name in env.pass.iter().chain(env.set.keys()) {
        if !env_name_ok(name) {
            return Err(ctx.invalid("sandbox.env", format!("invalid variable name '{name}'")));
        }
    }
    let output = one_of(
        &ctx,
        cli.output,
        "metadata.cli.output",
        raw.output,
        "output",
    )?
    .unwrap_or_default();
    let default_format = match &output.default_format {
        Some(text) => output_format(&ctx, "output.defaultFormat", text)?,
        None => OutputFormat::Text,
    };
    let mut exit_codes = BTreeMap::new();
    for (ExitKey(key), semantic) in output.exit_codes.unwrap_or_default() {
        let field = format!("output.exitCodes.{key}");
        let code: i32 = key
            .parse()
            .ok()
            .filter(|c| (0..=255).contains(c))
            .ok_or_else(|| {
                ctx.invalid("exitCodes", format!("'{key}' is not an exit code (0–255)"))
            })?;
        let mapped = if semantic == "ok" {
            None
        } else {
            Some(ErrorCode::parse(&semantic).ok_or_else(|| {
                ctx.invalid(
                    "exitCodes",
                    format!("{field}: unknown semantic code '{semantic}'"),
                )
            })?)
        };
        if code == 0 && mapped.is_some() {
            return Err(ctx.invalid("exitCodes", "exit code 0 is success and cannot be remapped"));
        }
        exit_codes.insert(code, mapped);
    }
    let secrets = raw.auth.and_then(|a| a.state).unwrap_or_default().env;
    for name in &secrets {
        if !env_name_ok(name) {
            return Err(ctx.invalid("auth.state.env", format!("invalid variable name '{name}'")));
        }
    }
    if raw.implements.is_empty() {
        return Err(ctx.invalid("implements", "must list at least one tool"));
    }
    let mut implements = Vec::with_capacity(raw.implements.len());
    for (i, imp) in raw.implements.into_iter().enumerate() {
        let field = |name: &str| format!("implements.{i}.{name}");
        let tool = tool_reference(&imp.tool).ok_or_else(|| {
            ctx.invalid(
                &field("tool"),
                format!(
                    "'{}' is neither a tool id nor a path to a TOOL.md",
                    imp.tool
                ),
            )
        })?;
        let version = semver::VersionReq::parse(&imp.version).map_err(|e| {
            ctx.invalid(
                &field("version"),
                format!("'{}' is not a semver range: {e}", imp.version),
            )
        })?;
        let nested = imp.metadata.and_then(|m| m.cli).unwrap_or_default();
        let argv = one_of(
            &ctx,
            nested.argv,
            "metadata.cli.argv",
            imp.argv,
            &field("argv"),
        )?
        .unwrap_or_default();
        let format = one_of(
            &ctx,
            nested.output_format,
            "metadata.cli.outputFormat",
            imp.output_format,
            &field("output_format"),
        )?;
        let output_format = match format {
            Some(text) => output_format(&ctx, &field("outputFormat"), &text)?,
            None => default_format,
        };
        if imp.timeout_override_ms == Some(0) {
            return Err(ctx.invalid(&field("timeout_override_ms"), "must be at least 1"));
        }
        let mut templates = Vec::with_capacity(argv.len());
        for (j, token) in argv.iter().enumerate() {
            let template = Template::parse(token).map_err(|e| {
                ctx.invalid(
                    &format!("{}.{j}", field("argv")),
                    format!("argv token '{token}' {e}"),
                )
            })?;
            for name in template.secret_names() {
                if !secrets.iter().any(|s| s == name) {
                    return Err(ctx.invalid(
                        &format!("{}.{j}", field("argv")),
                        format!("secret '{name}' is not declared in auth.state.env"),
                    ));
                }
            }
            templates.push(template);
        }
        implements.push(Implementation {
            tool,
            version,
            argv,
            templates,
            output_format,
            timeout_override_ms: imp.timeout_override_ms,
        });
    }
    Ok(DriverManifest {
        name: raw.name.unwrap_or_else(|| raw.id.clone()),
        id: raw.id,
        description: raw.description,
        implements,
        bin,
        bin_args,
        cwd,
        env_pass: env.pass,
        env_set: env.set,
        exit_codes,
        secrets,
        prose: prose.to_owned(),
        path: path.to_owned(),
        cwd_line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOL: &str = "---\nid: echo\nname: Echo\ndescription: Echoes.\nversion: 1.2.0\n\
inputs:\n  type: object\n  properties:\n    msg: {type: string}\n  required: [msg]\n---\n# Echo\nprose\n";

    fn tool_err(text: &str) -> LoadError {
        parse_tool(Path::new("TOOL.md"), text).expect_err("must fail")
    }

    fn driver_err(text: &str) -> LoadError {
        parse_driver(Path::new("DRIVER.md"), text).expect_err("must fail")
    }

    #[test]
    fn a_tool_parses_with_prose() {
        let tool = parse_tool(Path::new("TOOL.md"), TOOL).unwrap();
        assert_eq!(tool.id, "echo");
        assert_eq!(tool.version, semver::Version::new(1, 2, 0));
        assert_eq!(tool.prose, "# Echo\nprose\n");
        assert!(tool.validator.is_some());
        assert!(!tool.mutates);
    }

    #[test]
    fn tool_errors_name_line_and_field() {
        let e = tool_err("---\nid: Echo\ndescription: d\nversion: 1.0.0\n---\n");
        assert_eq!(
            (e.line, e.field.as_deref(), e.code()),
            (Some(2), Some("id"), "manifest_invalid")
        );
        let e = tool_err("---\nid: echo\ndescription: d\nversion: one\n---\n");
        assert_eq!((e.line, e.field.as_deref()), (Some(4), Some("version")));
        let e = tool_err("---\nid: echo\ndescription: d\nversion: 1.0.0\nrisk_level: 4\n---\n");
        assert_eq!((e.line, e.field.as_deref()), (Some(5), Some("risk_level")));
        let e = tool_err("---\nid: echo\ndescription: d\nversion: 1.0.0\nmutates: maybe\n---\n");
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.to_string().contains("mutates"), "{e}");
        let e = tool_err("---\nid: echo\nversion: 1.0.0\n---\n");
        assert_eq!(
            (e.field.as_deref(), e.message.as_str()),
            (Some("description"), "missing field `description`")
        );
        let e =
            tool_err("---\nid: echo\ndescription: d\nversion: 1.0.0\ninputs: {type: 12}\n---\n");
        assert_eq!(e.field.as_deref(), Some("inputs"), "{e}");
        let e = tool_err("no front matter\n");
        assert_eq!(e.code(), "front_matter_missing");
        let e = tool_err("---\nid: echo\n");
        assert_eq!(e.code(), "front_matter_missing");
    }

    #[test]
    fn description_limit_is_2000_characters() {
        let at = format!(
            "---\nid: echo\ndescription: {}\nversion: 1.0.0\n---\n",
            "é".repeat(2000)
        );
        assert!(parse_tool(Path::new("TOOL.md"), &at).is_ok());
        let over = format!(
            "---\nid: echo\ndescription: {}\nversion: 1.0.0\n---\n",
            "é".repeat(2001)
        );
        assert_eq!(tool_err(&over).field.as_deref(), Some("description"));
    }

    #[test]
    fn id_length_limits() {
        let id = |n: usize| {
            format!(
                "---\nid: a{}\ndescription: d\nversion: 1.0.0\n---\n",
                "b".repeat(n)
            )
        };
        assert!(parse_tool(Path::new("TOOL.md"), &id(63)).is_ok());
        assert_eq!(tool_err(&id(64)).field.as_deref(), Some("id"));
        assert_eq!(tool_err(&id(0)).field.as_deref(), Some("id"));
    }

    const CAMEL: &str = r#"---
schema: agentproto/driver/v1
id: echo-cli
kind: cli
implements:
  - tool: ./tools/echo/TOOL.md
    version: ^1
    metadata:
      cli:
        argv: ["${input.msg}"]
        outputFormat: json
metadata:
  cli:
    bin: echo
    binArgs: [-n]
    cwd: sub
    sandbox:
      env:
        pass: [PATH]
        set: {LANG: C}
    output:
      exitCodes:
        4: auth_required
        "9": rate_limited
auth:
  state:
    env: [TOKEN]
---
prose
"#;

    const SNAKE: &str = r#"---
id: echo-cli
kind: cli
bin: echo
bin_args: [-n]
cwd: sub
sandbox:
  env:
    pass: [PATH]
    set: {LANG: C}
output:
  exit_codes:
    4: auth_required
    9: rate_limited
implements:
  - tool: echo
    version: ^1
    argv: ["${input.msg}"]
    output_format: json
auth:
  state:
    env: [TOKEN]
---
"#;

    #[test]
    fn both_spellings_give_the_same_driver() {
        let a = parse_driver(Path::new("DRIVER.md"), CAMEL).unwrap();
        let b = parse_driver(Path::new("DRIVER.md"), SNAKE).unwrap();
        for d in [&a, &b] {
            assert_eq!(d.bin, "echo");
            assert_eq!(d.bin_args, ["-n"]);
            assert_eq!(d.cwd.as_deref(), Some("sub"));
            assert_eq!(d.env_pass, ["PATH"]);
            assert_eq!(d.env_set.get("LANG").map(String::as_str), Some("C"));
            assert_eq!(
                d.exit_codes,
                BTreeMap::from([
                    (4, Some(ErrorCode::AuthRequired)),
                    (9, Some(ErrorCode::RateLimited))
                ])
            );
            assert_eq!(d.secrets, ["TOKEN"]);
            assert_eq!(d.implements[0].tool, "echo");
            assert_eq!(d.implements[0].argv, ["${input.msg}"]);
            assert_eq!(d.implements[0].output_format, OutputFormat::Json);
        }
        assert_eq!(a.cwd_line, Some(16));
        assert_eq!(b.cwd_line, Some(6));
    }

    #[test]
    fn driver_errors_name_line_and_field() {
        let both = SNAKE.replace("kind: cli\n", "kind: cli\nmetadata:\n  cli:\n    bin: gh\n");
        let e = driver_err(&both);
        assert_eq!(e.field.as_deref(), Some("bin"), "{e}");
        assert!(e.message.contains("both"), "{e}");
        let e = driver_err(&SNAKE.replace("version: ^1", "version: \"^^1\""));
        assert_eq!(
            (e.field.as_deref(), e.line),
            (Some("implements.0.version"), Some(17)),
            "{e}"
        );
        let e = driver_err(&SNAKE.replace("${input.msg}", "${input.msg | upper}"));
        assert_eq!(e.field.as_deref(), Some("implements.0.argv.0"), "{e}");
        assert!(e.message.contains("at byte 14"), "{e}");
        let e = driver_err(&SNAKE.replace("${input.msg}", "${secrets.OTHER}"));
        assert!(e.message.contains("not declared in auth.state.env"), "{e}");
        let e = driver_err(&SNAKE.replace("kind: cli", "kind: http"));
        assert_eq!((e.field.as_deref(), e.line), (Some("kind"), Some(3)));
        let e = driver_err(&SNAKE.replace("9: rate_limited", "9: exploded"));
        assert!(
            e.message.contains("unknown semantic code 'exploded'"),
            "{e}"
        );
        let e = driver_err(&SNAKE.replace("9: rate_limited", "256: internal"));
        assert!(e.message.contains("not an exit code"), "{e}");
        let e = driver_err(&SNAKE.replace("9: rate_limited", "0: internal"));
        assert!(e.message.contains("cannot be remapped"), "{e}");
        let e = driver_err(&SNAKE.replace("bin: echo\n", ""));
        assert_eq!(e.field.as_deref(), Some("bin"));
        let e = driver_err(&SNAKE.replace("output_format: json", "output_format: xml"));
        assert!(e.message.contains("'xml'"), "{e}");
        let e = driver_err(&SNAKE.replace("pass: [PATH]", "pass: [\"A=B\"]"));
        assert_eq!(e.field.as_deref(), Some("sandbox.env"));
        let e = driver_err(&SNAKE.replace("    version: ^1\n", ""));
        assert_eq!(e.field.as_deref(), Some("implements.0.version"), "{e}");
        assert_eq!(e.message, "missing field `version`");
        let e = driver_err(&SNAKE.replace("argv: [\"${input.msg}\"]", "argv: 12"));
        assert_eq!(
            (e.field.as_deref(), e.line),
            (Some("implements.0.argv"), Some(18)),
            "{e}"
        );
        assert!(e.message.starts_with("invalid type: integer `12`"), "{e}");
        let flow = SNAKE.replace(
            "argv: [\"${input.msg}\"]",
            "metadata: {cli: {argv: [\"${input.x\"]}}",
        );
        let e = driver_err(&flow);
        assert_eq!(
            (e.field.as_deref(), e.line),
            (Some("implements.0.argv.0"), Some(16)),
            "{e}"
        );
        let e = driver_err(&SNAKE.replace("tool: echo", "tool: ./tools/echo/README.md"));
        assert_eq!(e.field.as_deref(), Some("implements.0.tool"));
    }

    #[test]
    fn locate_finds_list_items() {
        let yaml =
            "a: 1\nimplements:\n  - tool: x\n    version: ^1\n  - tool: y\n    version: ^2\nz: 3\n";
        assert_eq!(locate(yaml, "implements.1.version"), Some(7));
        assert_eq!(locate(yaml, "implements.0.version"), Some(5));
        assert_eq!(locate(yaml, "z"), Some(8));
        assert_eq!(locate(yaml, "implements.2.version"), None);
    }
}
