//! App bundles: `<app>/.agentproto/tools/<id>/TOOL.md` and `<app>/.agentproto/drivers/<id>/DRIVER.md`, loaded
//! and cross-checked; a tool call is prepared here (sans-IO: validation, secrets, argv, env) and run by `run`.
//!
//! Source: the seed `agentproto-driver-cli.txt`, "Working directory" (app-bundled drivers run in the app root;
//! `metadata.cli.cwd` resolves against it and is rejected at load time when it would resolve outside it), and
//! `protocols/cli-driver.md`, "Execution" (env: `sandbox.env.pass` + `sandbox.env.set`, nothing implicit).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::error::{ErrorCode, LoadError, LoadErrorKind, ToolError};
use crate::manifest::{DriverManifest, Implementation, ToolManifest, parse_driver, parse_tool};
use crate::redact::{Redactor, bounded};
use crate::run::Invocation;
use crate::template::{Arg, Scope};
use crate::{CallContext, Limits};

/// A loaded app bundle: its canonical root, tools and drivers by id, and the limits calls run under.
#[derive(Debug)]
pub struct AppBundle {
    root: PathBuf,
    tools: BTreeMap<String, ToolManifest>,
    drivers: BTreeMap<String, Driver>,
    limits: Limits,
}

/// A loaded driver: its manifest and its working directory, resolved and checked against the app root.
#[derive(Clone, Debug)]
pub struct Driver {
    /// The DRIVER.md.
    pub manifest: DriverManifest,
    /// The canonical working directory calls run in (the app root, or `cwd` resolved inside it).
    pub cwd: PathBuf,
}

impl AppBundle {
    /// Loads the bundle under `app` with [`Limits::default`]. See [`AppBundle::load_with`].
    ///
    /// # Errors
    ///
    /// See [`AppBundle::load_with`].
    pub fn load(app: &Path) -> Result<Self, LoadError> {
        Self::load_with(app, Limits::default())
    }

    /// Loads every `tools/<id>/TOOL.md` and `drivers/<id>/DRIVER.md` under `<app>/.agentproto`.
    ///
    /// A missing `.agentproto`, `tools` or `drivers` directory is an empty list, not an error. Directories are
    /// read in name order; a `<id>` directory without its manifest file is skipped.
    ///
    /// # Errors
    ///
    /// The first [`LoadError`]: `io_error` (the app directory or a manifest cannot be read), `manifest_too_large`
    /// (over [`Limits::max_manifest_bytes`]), any manifest error (see [`parse_tool`], [`parse_driver`]),
    /// `duplicate_id` (a manifest's `id` differs from its directory name), `unknown_tool` (a driver implements a
    /// tool that is not declared, or whose version its range does not match), `cwd_outside_app` (a driver's
    /// `cwd`, symlinks resolved, is outside the canonical app root or does not exist).
    pub fn load_with(app: &Path, limits: Limits) -> Result<Self, LoadError> {
        let root = app.canonicalize().map_err(|e| {
            LoadError::new(
                LoadErrorKind::Io,
                app,
                format!("cannot open the app directory: {e}"),
            )
        })?;
        let base = root.join(".agentproto");
        let mut tools = BTreeMap::new();
        for (dir_id, path) in manifest_files(&base.join("tools"), "TOOL.md")? {
            let tool = parse_tool(&path, &read_manifest(&path, &limits)?)?;
            if tool.id != dir_id {
                return Err(id_mismatch(&path, &tool.id, &dir_id));
            }
            tools.insert(tool.id.clone(), tool);
        }
        let mut drivers = BTreeMap::new();
        for (dir_id, path) in manifest_files(&base.join("drivers"), "DRIVER.md")? {
            let manifest = parse_driver(&path, &read_manifest(&path, &limits)?)?;
            if manifest.id != dir_id {
                return Err(id_mismatch(&path, &manifest.id, &dir_id));
            }
            for (i, imp) in manifest.implements.iter().enumerate() {
                let unknown = |message: String| {
                    LoadError::new(LoadErrorKind::UnknownTool, &path, message)
                        .at(None, Some(format!("implements.{i}.tool")))
                };
                let Some(tool) = tools.get(&imp.tool) else {
                    return Err(unknown(format!("no tool '{}' in this app", imp.tool)));
                };
                if !imp.version.matches(&tool.version) {
                    return Err(unknown(format!(
                        "tool '{}' has version {}, outside the range {}",
                        imp.tool, tool.version, imp.version
                    )));
                }
            }
            let cwd = resolve_cwd(&root, &manifest)?;
            drivers.insert(manifest.id.clone(), Driver { manifest, cwd });
        }
        Ok(Self {
            root,
            tools,
            drivers,
            limits,
        })
    }

    /// The canonical app root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The limits calls run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Every tool, in id order.
    pub fn tools(&self) -> impl Iterator<Item = &ToolManifest> {
        self.tools.values()
    }

    /// The tool `id`.
    pub fn tool(&self, id: &str) -> Option<&ToolManifest> {
        self.tools.get(id)
    }

    /// Every driver, in id order.
    pub fn drivers(&self) -> impl Iterator<Item = &Driver> {
        self.drivers.values()
    }

    /// The driver that runs tool `id`, and its `implements` entry: the first driver in id order that implements
    /// it (several drivers implementing one tool are alternatives; the first wins, deterministically).
    pub fn driver_for(&self, id: &str) -> Option<(&Driver, &Implementation)> {
        self.drivers.values().find_map(|driver| {
            driver
                .manifest
                .implements
                .iter()
                .find(|imp| imp.tool == id)
                .map(|imp| (driver, imp))
        })
    }

    /// The resolved binary of every driver (see [`Driver::resolve_binary`]) using this process's `PATH`,
    /// canonicalized, sorted, without duplicates; binaries that cannot be found are left out. A task worker
    /// uses this as its executable allow-list.
    pub fn driver_binaries(&self) -> Vec<PathBuf> {
        let path_var = std::env::var_os("PATH");
        let mut bins: Vec<PathBuf> = self
            .drivers
            .values()
            .filter_map(|d| d.resolve_binary(&self.root, path_var.as_deref()))
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        bins.sort();
        bins.dedup();
        bins
    }

    /// Prepares a call of tool `id` with `input`: everything but the spawn, in the order the contract sets:
    /// the tool, its driver, input validation, secrets, argv expansion and its limits, environment, binary.
    ///
    /// # Errors
    ///
    /// [`ToolError`]: `tool_not_found`, `no_driver`, `input_invalid` (with [`ToolError::field`] the JSON pointer
    /// of the first failing instance), `missing_secret` (naming the variable, never a value), `argv_too_large`,
    /// `spawn_failed` (the binary is not found).
    pub fn prepare(
        &self,
        id: &str,
        input: &Value,
        ctx: &CallContext,
    ) -> Result<Invocation, ToolError> {
        let Some(tool) = self.tools.get(id) else {
            return Err(ToolError::new(
                ErrorCode::ToolNotFound,
                format!("no tool '{id}'"),
            ));
        };
        let Some((driver, imp)) = self.driver_for(id) else {
            return Err(ToolError::new(
                ErrorCode::NoDriver,
                format!("no driver implements tool '{id}'"),
            ));
        };
        // Secret values are known before validation so that even a schema message quoting the input is redacted.
        let mut secrets = BTreeMap::new();
        let mut missing = None;
        for name in &driver.manifest.secrets {
            match ctx.secrets.get(name).or_else(|| ctx.env.get(name)) {
                Some(value) => {
                    secrets.insert(name.clone(), value.clone());
                }
                None => missing = missing.or(Some(name)),
            }
        }
        let redactor = Redactor::new(secrets.values().cloned());
        if let Some(validator) = &tool.validator
            && let Some(error) = validator.iter_errors(input).next()
        {
            let pointer = error.instance_path.as_str().to_owned();
            let shown = if pointer.is_empty() {
                "(root)"
            } else {
                pointer.as_str()
            };
            let message = bounded(
                &redactor.redact(&format!("input {shown}: {error}")),
                self.limits.max_message_bytes,
            );
            let mut err = ToolError::new(ErrorCode::InputInvalid, message);
            err.field = Some(redactor.redact(&pointer));
            return Err(err);
        }
        if let Some(name) = missing {
            return Err(ToolError::new(
                ErrorCode::MissingSecret,
                format!("secret '{name}' (auth.state.env) is not set in the host environment"),
            ));
        }
        let scope = CallScope {
            input,
            secrets: &secrets,
        };
        let mut argv: Vec<Arg> = driver
            .manifest
            .bin_args
            .iter()
            .map(|a| Arg {
                text: a.clone(),
                secret: false,
            })
            .collect();
        for template in &imp.templates {
            template.expand(&scope, &mut argv);
        }
        let bytes: usize = argv.iter().map(|a| a.text.len() + 1).sum();
        if argv.len() > self.limits.max_args || bytes > self.limits.max_argv_bytes {
            return Err(ToolError::new(
                ErrorCode::ArgvTooLarge,
                format!(
                    "expanded argv has {} arguments and {bytes} bytes (limits {} and {})",
                    argv.len(),
                    self.limits.max_args,
                    self.limits.max_argv_bytes
                ),
            ));
        }
        let mut env = BTreeMap::new();
        for name in &driver.manifest.env_pass {
            if let Some(value) = secrets.get(name).or_else(|| ctx.env.get(name)) {
                env.insert(name.clone(), value.clone());
            }
        }
        for (name, value) in &driver.manifest.env_set {
            env.insert(name.clone(), value.clone());
        }
        let path_var = ctx.env.get("PATH").map(OsStr::new);
        let Some(program) = driver.resolve_binary(&self.root, path_var) else {
            return Err(ToolError::new(
                ErrorCode::SpawnFailed,
                format!(
                    "binary '{}' not found",
                    redactor.redact(&driver.manifest.bin)
                ),
            ));
        };
        let timeout_ms = imp
            .timeout_override_ms
            .or(tool.timeout_ms)
            .unwrap_or(u64::try_from(self.limits.default_timeout.as_millis()).unwrap_or(u64::MAX));
        Ok(Invocation {
            tool: tool.id.clone(),
            driver: driver.manifest.id.clone(),
            program,
            argv,
            env,
            cwd: driver.cwd.clone(),
            timeout: Duration::from_millis(timeout_ms),
            output_format: imp.output_format,
            exit_codes: driver.manifest.exit_codes.clone(),
            redactor,
            limits: self.limits.clone(),
        })
    }

    /// Runs tool `id` with `input`: [`AppBundle::prepare`], then [`Invocation::run`].
    ///
    /// # Errors
    ///
    /// Those of [`AppBundle::prepare`] and [`Invocation::run`].
    pub async fn call(
        &self,
        id: &str,
        input: &Value,
        ctx: &CallContext,
    ) -> Result<crate::ToolOutput, ToolError> {
        self.prepare(id, input, ctx)?.run(&ctx.cancel).await
    }
}

impl Driver {
    /// Where the driver's `bin` is: a name without `/` is looked up in `path_var` (the host's `PATH`; the first
    /// executable regular file wins); a relative path is taken from the app `root`; an absolute path as is.
    /// `None` when nothing executable is there.
    pub fn resolve_binary(&self, root: &Path, path_var: Option<&OsStr>) -> Option<PathBuf> {
        let bin = &self.manifest.bin;
        if bin.contains('/') {
            let relative: PathBuf = Path::new(bin)
                .components()
                .filter(|c| !matches!(c, std::path::Component::CurDir))
                .collect();
            let path = root.join(relative);
            return is_executable(&path).then_some(path);
        }
        std::env::split_paths(path_var?)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(bin))
            .find(|p| is_executable(p))
    }
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        fs::metadata(path).is_ok_and(|m| m.is_file())
    }
}

struct CallScope<'a> {
    input: &'a Value,
    secrets: &'a BTreeMap<String, String>,
}

impl Scope for CallScope<'_> {
    fn input(&self) -> &Value {
        self.input
    }
    fn secret(&self, name: &str) -> Option<&str> {
        self.secrets.get(name).map(String::as_str)
    }
}

/// `(directory name, manifest path)` for each `<dir>/<id>/<file>` that exists, in name order.
fn manifest_files(dir: &Path, file: &str) -> Result<Vec<(String, PathBuf)>, LoadError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(LoadError::new(
                LoadErrorKind::Io,
                dir,
                format!("cannot list: {e}"),
            ));
        }
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry
            .map_err(|e| LoadError::new(LoadErrorKind::Io, dir, format!("cannot list: {e}")))?;
        let path = entry.path().join(file);
        if path.is_file() {
            found.push((entry.file_name().to_string_lossy().into_owned(), path));
        }
    }
    found.sort();
    Ok(found)
}

fn read_manifest(path: &Path, limits: &Limits) -> Result<String, LoadError> {
    let io =
        |e: std::io::Error| LoadError::new(LoadErrorKind::Io, path, format!("cannot read: {e}"));
    let len = fs::metadata(path).map_err(io)?.len();
    if len > limits.max_manifest_bytes as u64 {
        return Err(LoadError::new(
            LoadErrorKind::TooLarge,
            path,
            format!(
                "{len} bytes, over the limit of {} bytes",
                limits.max_manifest_bytes
            ),
        ));
    }
    fs::read_to_string(path).map_err(io)
}

fn id_mismatch(path: &Path, id: &str, dir: &str) -> LoadError {
    LoadError::new(
        LoadErrorKind::DuplicateId,
        path,
        format!("id '{id}' differs from its directory name '{dir}'"),
    )
    .at(None, Some("id".to_owned()))
}

/// The driver's working directory: the app root, or `cwd` joined to it, canonicalized (symlinks resolved) and
/// required to stay inside the canonical root.
fn resolve_cwd(root: &Path, manifest: &DriverManifest) -> Result<PathBuf, LoadError> {
    let Some(cwd) = &manifest.cwd else {
        return Ok(root.to_owned());
    };
    let error = |message: String| {
        LoadError::new(LoadErrorKind::CwdOutsideApp, &manifest.path, message)
            .at(manifest.cwd_line, Some("cwd".to_owned()))
    };
    let joined = root.join(cwd);
    let resolved = joined.canonicalize().map_err(|e| {
        error(format!(
            "'{cwd}' cannot be resolved inside the app root: {e}"
        ))
    })?;
    if !resolved.starts_with(root) {
        return Err(error(format!(
            "'{cwd}' resolves to {}, outside the app root {}",
            resolved.display(),
            root.display()
        )));
    }
    if !resolved.is_dir() {
        return Err(error(format!("'{cwd}' is not a directory")));
    }
    Ok(resolved)
}
