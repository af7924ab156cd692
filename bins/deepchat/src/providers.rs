//! `deepchat provider list|test|add|update|set-credential|clear-credential|remove` and
//! `deepchat model enable|disable|config-get|config-set|config-reset`: provider and model administration.
//!
//! Source: DeepChat `src/cli/args.ts` (`COMMAND_DOMAIN_OPTIONS` of these commands, their usage rules and params)
//! and `src/cli/run.ts` (`set-credential` reads the key from stdin bounded by `PROVIDER_CREDENTIAL_MAX_BYTES`
//! and drops one trailing newline; `config-set` reads a JSON object from stdin into `config`). Timeout classes:
//! reads and `provider test` are standard (`test` long-running as in DeepChat), every mutation is an approved
//! mutation (10 min: it may wait for the approvals console).

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

use crate::command::{Globals, Invocation, TimeoutClass, rpc};

/// `deepchat provider <verb>`.
#[derive(Debug, Subcommand)]
pub(crate) enum ProviderVerb {
    /// List providers and their models, never a key (providers.listPublic).
    List(ListArgs),
    /// Test a provider's connection (providers.testPublicConnection).
    Test(TestArgs),
    /// Add a custom OpenAI-compatible provider (providers.addPublic; needs approval).
    Add(AddArgs),
    /// Change a provider's name, adapter, base URL or enabled state (providers.updatePublic; needs approval).
    Update(UpdateArgs),
    /// Store a provider's API key, read from stdin (providers.setCredential; needs approval).
    SetCredential(SetCredentialArgs),
    /// Remove a provider's stored API key (providers.setCredential action clear; needs approval).
    ClearCredential(ProviderArgs),
    /// Remove a custom provider, its models and its key (providers.remove; needs approval).
    Remove(ProviderArgs),
}

/// The administration verbs of `deepchat model <verb>`.
#[derive(Debug, Subcommand)]
pub(crate) enum ModelAdminVerb {
    /// Enable a model; for a custom provider an unknown model id is added (models.setStatus; needs approval).
    Enable(ModelArgs),
    /// Disable a model (models.setStatus; needs approval).
    Disable(ModelArgs),
    /// Show a model's public configuration (models.getPublicConfig).
    ConfigGet(ModelArgs),
    /// Replace a model's public configuration with the JSON object on stdin (models.setPublicConfig; needs
    /// approval).
    ConfigSet(ConfigSetArgs),
    /// Drop a model's user configuration (models.resetConfig; needs approval).
    ConfigReset(ModelArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only enabled providers.
    #[arg(long)]
    enabled_only: bool,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
pub(crate) struct TestArgs {
    /// Provider id.
    #[arg(long, value_name = "ID")]
    provider: String,
    /// Model id.
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    #[command(flatten)]
    globals: Globals,
}

/// `true` or `false` (DeepChat `parseBoolean`).
fn boolean(value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("must be true or false".to_owned()),
    }
}

#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// Display name.
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    name: String,
    /// Adapter: openai or openai-completions (DeepChat's other adapters are refused by this host).
    #[arg(long, value_name = "TYPE")]
    api_type: String,
    /// Credential-free base URL (https, or http to a loopback host).
    #[arg(long, value_name = "URL")]
    base_url: String,
    /// true or false (default true).
    #[arg(long, value_name = "BOOL", value_parser = boolean)]
    enabled: Option<bool>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    /// Provider id.
    #[arg(long, value_name = "ID")]
    provider: String,
    /// New display name.
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    name: Option<String>,
    /// New adapter (custom providers only).
    #[arg(long, value_name = "TYPE")]
    api_type: Option<String>,
    /// New base URL (custom providers only).
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// true or false.
    #[arg(long, value_name = "BOOL", value_parser = boolean)]
    enabled: Option<bool>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
pub(crate) struct SetCredentialArgs {
    /// Provider id.
    #[arg(long, value_name = "ID")]
    provider: String,
    /// Read the API key from standard input (required; ≤ 64 KiB, one trailing newline dropped).
    #[arg(long)]
    stdin: bool,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
pub(crate) struct ProviderArgs {
    /// Provider id.
    #[arg(long, value_name = "ID")]
    provider: String,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// Provider id.
    #[arg(long, value_name = "ID")]
    provider: String,
    /// Model id.
    #[arg(long, value_name = "ID")]
    model: String,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
pub(crate) struct ConfigSetArgs {
    /// Provider id.
    #[arg(long, value_name = "ID")]
    provider: String,
    /// Model id.
    #[arg(long, value_name = "ID")]
    model: String,
    /// Read the configuration (a JSON object) from standard input (required).
    #[arg(long)]
    stdin: bool,
    #[command(flatten)]
    globals: Globals,
}

/// One built command.
pub(crate) type Built = (Globals, Invocation, TimeoutClass);

/// The call of a `provider` verb.
///
/// # Errors
/// A usage message.
pub(crate) fn provider(verb: ProviderVerb) -> Result<Built, String> {
    use TimeoutClass::{ApprovedMutation, LongRunning, Standard};
    Ok(match verb {
        ProviderVerb::List(a) => {
            let params = json!({ "enabledOnly": a.enabled_only });
            (
                a.globals,
                rpc("provider list", "providers.listPublic", params),
                Standard,
            )
        }
        ProviderVerb::Test(a) => {
            let mut params = Map::new();
            params.insert("providerId".into(), a.provider.into());
            if let Some(model) = a.model {
                params.insert("modelId".into(), model.into());
            }
            (
                a.globals,
                rpc(
                    "provider test",
                    "providers.testPublicConnection",
                    Value::Object(params),
                ),
                LongRunning,
            )
        }
        ProviderVerb::Add(a) => {
            let mut params = Map::new();
            params.insert("name".into(), a.name.into());
            params.insert("apiType".into(), a.api_type.into());
            params.insert("baseUrl".into(), a.base_url.into());
            if let Some(enabled) = a.enabled {
                params.insert("enabled".into(), enabled.into());
            }
            (
                a.globals,
                rpc("provider add", "providers.addPublic", Value::Object(params)),
                ApprovedMutation,
            )
        }
        ProviderVerb::Update(a) => {
            let mut updates = Map::new();
            if let Some(v) = a.name {
                updates.insert("name".into(), v.into());
            }
            if let Some(v) = a.api_type {
                updates.insert("apiType".into(), v.into());
            }
            if let Some(v) = a.base_url {
                updates.insert("baseUrl".into(), v.into());
            }
            if let Some(v) = a.enabled {
                updates.insert("enabled".into(), v.into());
            }
            if updates.is_empty() {
                return Err(
                    "deepchat provider update requires --provider and at least one update".into(),
                );
            }
            let params = json!({ "providerId": a.provider, "updates": updates });
            (
                a.globals,
                rpc("provider update", "providers.updatePublic", params),
                ApprovedMutation,
            )
        }
        ProviderVerb::SetCredential(a) => {
            if !a.stdin {
                return Err("deepchat provider set-credential requires --stdin".into());
            }
            let params = json!({ "providerId": a.provider, "action": "set", "kind": "api-key" });
            let mut invocation = rpc("provider set-credential", "providers.setCredential", params);
            invocation.stdin_field = Some("value");
            (a.globals, invocation, ApprovedMutation)
        }
        ProviderVerb::ClearCredential(a) => {
            let params = json!({ "providerId": a.provider, "action": "clear", "kind": "api-key" });
            (
                a.globals,
                rpc(
                    "provider clear-credential",
                    "providers.setCredential",
                    params,
                ),
                ApprovedMutation,
            )
        }
        ProviderVerb::Remove(a) => (
            a.globals,
            rpc(
                "provider remove",
                "providers.remove",
                json!({ "providerId": a.provider }),
            ),
            ApprovedMutation,
        ),
    })
}

/// The call of a `model` administration verb.
///
/// # Errors
/// A usage message.
pub(crate) fn model(verb: ModelAdminVerb) -> Result<Built, String> {
    use TimeoutClass::{ApprovedMutation, Standard};
    let status = |a: ModelArgs, command: &'static str, enabled: bool| {
        let params = json!({ "providerId": a.provider, "modelId": a.model, "enabled": enabled });
        (
            a.globals,
            rpc(command, "models.setStatus", params),
            ApprovedMutation,
        )
    };
    Ok(match verb {
        ModelAdminVerb::Enable(a) => status(a, "model enable", true),
        ModelAdminVerb::Disable(a) => status(a, "model disable", false),
        ModelAdminVerb::ConfigGet(a) => {
            let params = json!({ "providerId": a.provider, "modelId": a.model });
            (
                a.globals,
                rpc("model config-get", "models.getPublicConfig", params),
                Standard,
            )
        }
        ModelAdminVerb::ConfigSet(a) => {
            if !a.stdin {
                return Err("deepchat model config-set requires --stdin".into());
            }
            let params = json!({ "providerId": a.provider, "modelId": a.model });
            let mut invocation = rpc("model config-set", "models.setPublicConfig", params);
            invocation.stdin_field = Some("config");
            (a.globals, invocation, ApprovedMutation)
        }
        ModelAdminVerb::ConfigReset(a) => {
            let params = json!({ "providerId": a.provider, "modelId": a.model });
            (
                a.globals,
                rpc("model config-reset", "models.resetConfig", params),
                ApprovedMutation,
            )
        }
    })
}

/// `deepchat help` lines of these commands.
pub(crate) const HELP_LINES: &[&str] = &[
    "  provider list        List providers and their models (no keys)",
    "  provider test        Test a provider's connection",
    "  provider add         Add a custom OpenAI-compatible provider",
    "  provider update      Change a provider",
    "  provider set-credential  Store a provider's API key (from --stdin)",
    "  provider clear-credential  Remove a provider's API key",
    "  provider remove      Remove a custom provider",
    "  model enable         Enable (or add) a model",
    "  model disable        Disable a model",
    "  model config-get     Show a model's public configuration",
    "  model config-set     Replace a model's configuration (JSON on --stdin)",
    "  model config-reset   Drop a model's user configuration",
];

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn yes_no(v: &Value, key: &str) -> &'static str {
    if v.get(key).and_then(Value::as_bool) == Some(true) {
        "yes"
    } else {
        "no"
    }
}

fn provider_line(out: &mut String, p: &Value) {
    let _ = writeln!(
        out,
        "{}  {}  {}  enabled={}  custom={}  key={}",
        s(p, "id"),
        s(p, "name"),
        s(p, "apiType"),
        yes_no(p, "enabled"),
        yes_no(p, "custom"),
        if p.get("storedCredentialConfigured").and_then(Value::as_bool) == Some(true) {
            "stored"
        } else {
            "none"
        },
    );
}

/// Human text of a result of these methods; `None` for other methods.
pub(crate) fn render(method: &str, result: &Value) -> Option<String> {
    let mut out = String::new();
    match method {
        "providers.listPublic" => {
            let providers = result["providers"].as_array().cloned().unwrap_or_default();
            if providers.is_empty() {
                out.push_str("No providers\n");
            }
            for p in &providers {
                provider_line(&mut out, p);
                for m in p["models"].as_array().into_iter().flatten() {
                    let _ = writeln!(out, "  {}  enabled={}", s(m, "id"), yes_no(m, "enabled"));
                }
            }
        }
        "providers.testPublicConnection" => {
            if result["isOk"].as_bool() == Some(true) {
                out.push_str("Connection OK\n");
            } else {
                let _ = writeln!(out, "Connection failed: {}", s(result, "errorMsg"));
            }
        }
        "providers.addPublic" | "providers.updatePublic" => {
            provider_line(&mut out, &result["provider"]);
            if result["requiresRebuild"].as_bool() == Some(true) {
                out.push_str(
                    "Agents launched before this change keep the old endpoint until restarted\n",
                );
            }
        }
        "providers.remove" => {
            out.push_str(if result["removed"].as_bool() == Some(true) {
                "Removed\n"
            } else {
                "No such provider\n"
            });
        }
        "providers.setCredential" => {
            let _ = writeln!(
                out,
                "{}: API key {}",
                s(result, "providerId"),
                if result["storedApiKeyConfigured"].as_bool() == Some(true) {
                    "stored"
                } else {
                    "not stored"
                }
            );
        }
        "models.listRuntime" => {
            for m in result["models"].as_array().into_iter().flatten() {
                let _ = writeln!(out, "{}  enabled={}", s(m, "id"), yes_no(m, "enabled"));
            }
        }
        "models.setStatus" => {
            let _ = writeln!(
                out,
                "{} / {}: {}",
                s(result, "providerId"),
                s(result, "modelId"),
                if result["enabled"].as_bool() == Some(true) {
                    "enabled"
                } else {
                    "disabled"
                }
            );
        }
        "models.getPublicConfig" | "models.setPublicConfig" => {
            if let Some(config) = result["config"].as_object() {
                for (key, value) in config {
                    let _ = writeln!(out, "{key}: {value}");
                }
            }
        }
        "models.resetConfig" => {
            out.push_str(if result["reset"].as_bool() == Some(true) {
                "Configuration reset to the defaults\n"
            } else {
                "No user configuration to reset\n"
            });
        }
        _ => return None,
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use crate::command::{
        DEFAULT_TIMEOUT, LONG_RUNNING_TIMEOUT, MUTATION_TIMEOUT, OutputMode, Parsed, StdinFormat,
        parse,
    };
    use serde_json::json;

    fn argv(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn check(line: &str, method: &str, params: serde_json::Value, timeout: std::time::Duration) {
        match parse(&argv(line), &|_| None) {
            Ok(Parsed::Call {
                invocation,
                mode,
                timeout: got,
            }) => {
                assert_eq!(invocation.method, method, "{line}");
                assert_eq!(invocation.params, params, "{line}");
                assert_eq!(got, timeout, "{line}");
                assert_eq!(mode, OutputMode::Json, "{line}");
            }
            other => panic!("{line}: {other:?}"),
        }
    }

    fn usage(line: &str) -> String {
        match parse(&argv(line), &|_| None) {
            Err(e) => e.message,
            other => panic!("{line}: expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn provider_commands_build_deepchat_params() {
        check(
            "provider list --json",
            "providers.listPublic",
            json!({"enabledOnly": false}),
            DEFAULT_TIMEOUT,
        );
        check(
            "provider list --enabled-only --json",
            "providers.listPublic",
            json!({"enabledOnly": true}),
            DEFAULT_TIMEOUT,
        );
        check(
            "provider test --provider p --model m --json",
            "providers.testPublicConnection",
            json!({"providerId": "p", "modelId": "m"}),
            LONG_RUNNING_TIMEOUT,
        );
        check(
            "provider add --name n --api-type openai --base-url http://127.0.0.1:1/v1 --enabled false --json",
            "providers.addPublic",
            json!({"name": "n", "apiType": "openai", "baseUrl": "http://127.0.0.1:1/v1", "enabled": false}),
            MUTATION_TIMEOUT,
        );
        check(
            "provider update --provider p --enabled true --json",
            "providers.updatePublic",
            json!({"providerId": "p", "updates": {"enabled": true}}),
            MUTATION_TIMEOUT,
        );
        check(
            "provider clear-credential --provider p --json",
            "providers.setCredential",
            json!({"providerId": "p", "action": "clear", "kind": "api-key"}),
            MUTATION_TIMEOUT,
        );
        check(
            "provider remove --provider p --json",
            "providers.remove",
            json!({"providerId": "p"}),
            MUTATION_TIMEOUT,
        );
        check(
            "model disable --provider p --model m --json",
            "models.setStatus",
            json!({"providerId": "p", "modelId": "m", "enabled": false}),
            MUTATION_TIMEOUT,
        );
        check(
            "model config-get --provider p --model m --json",
            "models.getPublicConfig",
            json!({"providerId": "p", "modelId": "m"}),
            DEFAULT_TIMEOUT,
        );
        check(
            "model config-reset --provider p --model m --json",
            "models.resetConfig",
            json!({"providerId": "p", "modelId": "m"}),
            MUTATION_TIMEOUT,
        );
    }

    #[test]
    fn stdin_commands_say_how_stdin_is_read() {
        for (line, field, format) in [
            (
                "provider set-credential --provider p --stdin",
                "value",
                StdinFormat::Credential,
            ),
            (
                "model config-set --provider p --model m --stdin",
                "config",
                StdinFormat::JsonObject,
            ),
        ] {
            match parse(&argv(line), &|_| None) {
                Ok(Parsed::Call { invocation, .. }) => {
                    assert_eq!(invocation.stdin_field, Some(field));
                    assert_eq!(StdinFormat::of(invocation.method), format);
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn usage_rules_follow_deepchat() {
        assert!(usage("provider set-credential --provider p").contains("requires --stdin"));
        assert!(usage("model config-set --provider p --model m").contains("requires --stdin"));
        assert!(usage("provider update --provider p").contains("at least one update"));
        assert!(usage("provider add --name n --api-type openai").contains("--base-url"));
        assert!(
            usage("provider add --name n --api-type openai --base-url u --enabled yes")
                .contains("true or false")
        );
        assert!(usage("model enable --provider p").contains("--model"));
        assert!(usage("provider test").contains("--provider"));
        assert!(usage("provider list --provider p").contains("--provider"));
    }

    #[test]
    fn human_text_never_invents_fields() {
        let text = super::render(
            "providers.listPublic",
            &json!({"providers": [{"id": "p", "name": "n", "apiType": "openai", "enabled": true,
                "custom": true, "storedCredentialConfigured": true,
                "models": [{"id": "m", "enabled": false}]}]}),
        )
        .expect("rendered");
        assert_eq!(
            text,
            "p  n  openai  enabled=yes  custom=yes  key=stored\n  m  enabled=no\n"
        );
        assert_eq!(
            super::render(
                "providers.testPublicConnection",
                &json!({"isOk": true, "errorMsg": null})
            ),
            Some("Connection OK\n".to_owned())
        );
        assert!(super::render("cli.status", &json!({})).is_none());
    }
}
