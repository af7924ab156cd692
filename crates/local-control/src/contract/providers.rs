//! `providers.listPublic`, `providers.testPublicConnection`, `providers.addPublic`, `providers.updatePublic`,
//! `providers.remove`, `providers.setCredential`: provider administration without secrets.
//!
//! Source: DeepChat `src/shared/contracts/routes/providers.routes.ts` (`PublicProviderSchema`,
//! `PublicProviderModelSchema`, `PublicProviderBaseUrlSchema`, `providersSetCredentialRoute` with
//! `PROVIDER_CREDENTIAL_MAX_BYTES`), `src/shared/providerImport.ts` (`PROVIDER_IMPORT_CUSTOM_API_TYPES`) and
//! `src/main/cli/providerModelAdminRoutes.ts` (`toPublicProviderSummary`). Clearing a credential is DeepChat's
//! `providers.setCredential` with `"action":"clear"`; there is no separate method.
//!
//! No result type here can hold a credential: the only place a key travels is [`SetCredentialParams::value`]
//! (request direction), whose `Debug` is redacted.

use serde::{Deserialize, Serialize};

use super::model_config::{ModelType, check_model_id, check_provider_id};
use super::serde_util::{present, trim_js};
use super::{ContractError, MAX_SAFE_INTEGER, Method, Problem, Validate, check_len};

/// Largest API key, UTF-8 bytes (`PROVIDER_CREDENTIAL_MAX_BYTES` = 64 KiB).
pub const MAX_CREDENTIAL_BYTES: usize = 64 * 1024;
/// Longest provider name, characters (`z.string().trim().min(1).max(256)`).
pub const MAX_PROVIDER_NAME_CHARS: usize = 256;
/// Longest base URL, characters (`z.url().max(4096)`).
pub const MAX_BASE_URL_CHARS: usize = 4096;
/// Most providers `providers.listPublic` returns (`.max(1_000)`).
pub const MAX_LISTED_PROVIDERS: usize = 1_000;
/// Most models per listed provider (`.max(10_000)`).
pub const MAX_LISTED_MODELS: usize = 10_000;

/// `PROVIDER_IMPORT_CUSTOM_API_TYPES`: the adapter of a custom provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum ApiType {
    OpenaiCompletions,
    Openai,
    OpenaiResponses,
    Anthropic,
    Gemini,
    Ollama,
    Mistral,
}

impl ApiType {
    /// The wire name, e.g. `openai-completions`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiType::OpenaiCompletions => "openai-completions",
            ApiType::Openai => "openai",
            ApiType::OpenaiResponses => "openai-responses",
            ApiType::Anthropic => "anthropic",
            ApiType::Gemini => "gemini",
            ApiType::Ollama => "ollama",
            ApiType::Mistral => "mistral",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<ApiType> {
        [
            ApiType::OpenaiCompletions,
            ApiType::Openai,
            ApiType::OpenaiResponses,
            ApiType::Anthropic,
            ApiType::Gemini,
            ApiType::Ollama,
            ApiType::Mistral,
        ]
        .into_iter()
        .find(|t| t.as_str() == name)
    }

    /// Whether this host's provider runtime speaks it: the OpenAI-compatible chat-completions adapters
    /// (`openai`, `openai-completions`). DeepChat's other adapters are accepted by the contract and refused by
    /// the host.
    pub fn is_openai_compatible(self) -> bool {
        matches!(self, ApiType::Openai | ApiType::OpenaiCompletions)
    }
}

/// Why a base URL is refused ([`check_base_url`]).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlProblem {
    /// Not `http(s)://host…`, or empty/over-long, or holds whitespace or control characters.
    Malformed,
    /// Userinfo (`user:pass@`), a query or a fragment: a credential could hide there.
    CarriesCredentials,
}

/// `PublicProviderBaseUrlSchema`: an absolute `http`/`https` URL of at most 4096 characters with a host, no
/// userinfo, no query and no fragment, and (ours) no whitespace or control characters.
///
/// # Errors
/// [`UrlProblem`].
pub fn check_base_url(url: &str) -> Result<(), UrlProblem> {
    if url.is_empty()
        || super::js_len(url) > MAX_BASE_URL_CHARS
        || url.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(UrlProblem::Malformed);
    }
    let lower = url.to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &url[7..]
    } else if lower.starts_with("https://") {
        &url[8..]
    } else {
        return Err(UrlProblem::Malformed);
    };
    if rest.contains('?') || rest.contains('#') {
        return Err(UrlProblem::CarriesCredentials);
    }
    let authority = rest.split('/').next().unwrap_or("");
    if authority.contains('@') {
        return Err(UrlProblem::CarriesCredentials);
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return Err(UrlProblem::Malformed);
        };
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(UrlProblem::Malformed);
        }
        match after {
            "" => (host, None),
            p => match p.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(UrlProblem::Malformed),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let host_ok = !host.is_empty()
        && (authority.starts_with('[')
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '%')));
    let port_ok = port.is_none_or(|p| {
        !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) && {
            p.parse::<u32>().is_ok_and(|n| n <= 65_535)
        }
    });
    if host_ok && port_ok {
        Ok(())
    } else {
        Err(UrlProblem::Malformed)
    }
}

fn base_url_field(field: &'static str, url: &str) -> Result<(), ContractError> {
    check_base_url(url).map_err(|_| ContractError::field(field, Problem::BadFormat))
}

fn check_name(field: &'static str, name: &str) -> Result<(), ContractError> {
    check_len(field, name, 1, MAX_PROVIDER_NAME_CHARS)?;
    if name.chars().any(char::is_control) {
        return Err(ContractError::field(field, Problem::BadFormat));
    }
    Ok(())
}

fn trimmed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    Ok(trim_js(&s).to_owned())
}

fn trimmed_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    trimmed(d).map(Some)
}

/// `PublicProviderModelSchema` (strict): one model of a listed provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PublicProviderModel {
    pub id: String,
    pub name: String,
    pub group: String,
    pub enabled: bool,
    pub custom: bool,
    pub vision: bool,
    pub function_call: bool,
    pub reasoning: bool,
    pub enable_search: bool,
    #[serde(
        default,
        rename = "type",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub model_type: Option<ModelType>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub context_length: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub max_tokens: Option<u64>,
}

impl Validate for PublicProviderModel {
    fn validate(&self) -> Result<(), ContractError> {
        check_model_id("models[].id", &self.id)?;
        check_len("models[].name", &self.name, 0, 256)?;
        check_len("models[].group", &self.group, 0, 128)?;
        for v in [self.context_length, self.max_tokens].into_iter().flatten() {
            super::check_range("models[].tokens", v, 0, MAX_SAFE_INTEGER)?;
        }
        Ok(())
    }
}

/// `PublicProviderSummarySchema` (strict): `{"id":"p1","name":"Local","apiType":"openai","enabled":true,
/// "custom":true,"storedCredentialConfigured":false}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublicProviderSummary {
    /// The provider id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Adapter (`openai`, …; `builtin` for the built-in provider).
    pub api_type: String,
    /// Enabled.
    pub enabled: bool,
    /// A user-added provider (false for the built-in one).
    pub custom: bool,
    /// An API key is stored (never the key).
    pub stored_credential_configured: bool,
}

impl Validate for PublicProviderSummary {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("id", &self.id)?;
        check_len("name", &self.name, 1, MAX_PROVIDER_NAME_CHARS)?;
        check_len("apiType", &self.api_type, 1, 128)
    }
}

/// `PublicProviderSchema` (strict): a summary plus its models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PublicProvider {
    pub id: String,
    pub name: String,
    pub api_type: String,
    pub enabled: bool,
    pub custom: bool,
    pub stored_credential_configured: bool,
    pub models: Vec<PublicProviderModel>,
}

impl Validate for PublicProvider {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providers[].id", &self.id)?;
        check_len("providers[].name", &self.name, 1, MAX_PROVIDER_NAME_CHARS)?;
        check_len("providers[].apiType", &self.api_type, 1, 128)?;
        if self.models.len() > MAX_LISTED_MODELS {
            return Err(ContractError::field("providers[].models", Problem::TooLong));
        }
        self.models.iter().try_for_each(Validate::validate)
    }
}

/// Params of `providers.listPublic`: `{}` or `{"enabledOnly":true}` (strict).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListParams {
    /// Only enabled providers.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub enabled_only: Option<bool>,
}

impl Validate for ListParams {
    fn validate(&self) -> Result<(), ContractError> {
        Ok(())
    }
}

/// Result of `providers.listPublic`: `{"providers":[…]}` (strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListResult {
    /// At most [`MAX_LISTED_PROVIDERS`].
    pub providers: Vec<PublicProvider>,
}

impl Validate for ListResult {
    fn validate(&self) -> Result<(), ContractError> {
        if self.providers.len() > MAX_LISTED_PROVIDERS {
            return Err(ContractError::field("providers", Problem::TooLong));
        }
        self.providers.iter().try_for_each(Validate::validate)
    }
}

/// Params of `providers.testPublicConnection`: `{"providerId":"p1"}` or with `"modelId"` (plain object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestParams {
    /// The provider.
    pub provider_id: String,
    /// The model to try; default: the provider's first enabled model.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub model_id: Option<String>,
}

impl Validate for TestParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)?;
        if let Some(m) = &self.model_id {
            check_model_id("modelId", m)?;
        }
        Ok(())
    }
}

/// Result of `providers.testPublicConnection`: `{"isOk":false,"errorMsg":"Provider connection failed"}`.
/// The message is fixed: upstream text never crosses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestResult {
    /// Whether the provider answered.
    pub is_ok: bool,
    /// `null` on success, else a fixed message.
    pub error_msg: Option<String>,
}

impl Validate for TestResult {
    fn validate(&self) -> Result<(), ContractError> {
        Ok(())
    }
}

/// Params of `providers.addPublic` (strict): `{"name":"Local","apiType":"openai",
/// "baseUrl":"http://127.0.0.1:8080/v1","enabled":true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddParams {
    /// Display name, trimmed, 1..=256 characters.
    #[serde(deserialize_with = "trimmed")]
    pub name: String,
    /// Adapter.
    pub api_type: ApiType,
    /// Credential-free base URL ([`check_base_url`]).
    pub base_url: String,
    /// Default true.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

impl Validate for AddParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_name("name", &self.name)?;
        base_url_field("baseUrl", &self.base_url)
    }
}

/// Result of `providers.addPublic`: `{"provider":{…summary…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddResult {
    /// The new provider.
    pub provider: PublicProviderSummary,
}

impl Validate for AddResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.provider.validate()
    }
}

/// The allowlisted fields `providers.updatePublic` may change (strict, at least one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderUpdates {
    /// New name.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "trimmed_opt"
    )]
    pub name: Option<String>,
    /// New adapter (custom providers only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub api_type: Option<ApiType>,
    /// New base URL.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub base_url: Option<String>,
    /// Enable or disable.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub enabled: Option<bool>,
}

impl ProviderUpdates {
    /// The names of the fields present, sorted (for audit records).
    pub fn fields(&self) -> Vec<&'static str> {
        let mut fields = Vec::new();
        if self.api_type.is_some() {
            fields.push("apiType");
        }
        if self.base_url.is_some() {
            fields.push("baseUrl");
        }
        if self.enabled.is_some() {
            fields.push("enabled");
        }
        if self.name.is_some() {
            fields.push("name");
        }
        fields
    }
}

/// Params of `providers.updatePublic` (strict): `{"providerId":"p1","updates":{"enabled":false}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateParams {
    /// The provider.
    pub provider_id: String,
    /// What to change.
    pub updates: ProviderUpdates,
}

impl Validate for UpdateParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)?;
        if self.updates.fields().is_empty() {
            return Err(ContractError::field("updates", Problem::TooShort));
        }
        if let Some(name) = &self.updates.name {
            check_name("updates.name", name)?;
        }
        if let Some(url) = &self.updates.base_url {
            base_url_field("updates.baseUrl", url)?;
        }
        Ok(())
    }
}

/// Result of `providers.updatePublic`: `{"provider":{…},"requiresRebuild":false}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateResult {
    /// The provider after the change.
    pub provider: PublicProviderSummary,
    /// Whether running agents must be restarted to see the change (true when the URL or adapter changed).
    pub requires_rebuild: bool,
}

impl Validate for UpdateResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.provider.validate()
    }
}

/// Params of `providers.remove`: `{"providerId":"p1"}` (plain object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoveParams {
    /// The provider.
    pub provider_id: String,
}

impl Validate for RemoveParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)
    }
}

/// Result of `providers.remove`: `{"removed":true}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveResult {
    /// Whether a provider was removed.
    pub removed: bool,
}

impl Validate for RemoveResult {
    fn validate(&self) -> Result<(), ContractError> {
        Ok(())
    }
}

/// `set` or `clear`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CredentialAction {
    /// Store `value`.
    Set,
    /// Remove the stored key.
    Clear,
}

/// The only credential kind of V1: `api-key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CredentialKind {
    /// An API key.
    #[serde(rename = "api-key")]
    ApiKey,
}

/// Params of `providers.setCredential` (strict, discriminated by `action`):
/// `{"providerId":"p1","action":"set","kind":"api-key","value":"…"}` or
/// `{"providerId":"p1","action":"clear","kind":"api-key"}`. `Debug` never shows `value`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetCredentialParams {
    /// The provider.
    pub provider_id: String,
    /// `set` or `clear`.
    pub action: CredentialAction,
    /// `api-key`.
    pub kind: CredentialKind,
    /// The key: required for `set` (1..=64 KiB UTF-8, not blank), absent for `clear`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub value: Option<String>,
}

impl std::fmt::Debug for SetCredentialParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetCredentialParams")
            .field("provider_id", &self.provider_id)
            .field("action", &self.action)
            .field("kind", &self.kind)
            .field("value", &self.value.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// `StoredProviderCredentialSchema`: 1..=[`MAX_CREDENTIAL_BYTES`] UTF-8 bytes, not blank; and (ours) no control
/// characters, since the key travels in an HTTP header and an environment variable.
///
/// # Errors
/// [`Problem::TooShort`], [`Problem::TooLong`], [`Problem::Blank`], [`Problem::BadFormat`] on field `value`.
pub fn check_credential(value: &str) -> Result<(), ContractError> {
    if value.is_empty() {
        return Err(ContractError::field("value", Problem::TooShort));
    }
    if value.len() > MAX_CREDENTIAL_BYTES {
        return Err(ContractError::field("value", Problem::TooLong));
    }
    if trim_js(value).is_empty() {
        return Err(ContractError::field("value", Problem::Blank));
    }
    if value.chars().any(char::is_control) {
        return Err(ContractError::field("value", Problem::BadFormat));
    }
    Ok(())
}

impl Validate for SetCredentialParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)?;
        match (self.action, &self.value) {
            (CredentialAction::Set, Some(value)) => check_credential(value),
            (CredentialAction::Set, None) => Err(ContractError::field("value", Problem::TooShort)),
            (CredentialAction::Clear, None) => Ok(()),
            (CredentialAction::Clear, Some(_)) => {
                Err(ContractError::field("value", Problem::Inconsistent))
            }
        }
    }
}

/// Result of `providers.setCredential`: `{"providerId":"p1","action":"set","kind":"api-key",
/// "storedApiKeyConfigured":true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetCredentialResult {
    /// The provider.
    pub provider_id: String,
    /// What was done.
    pub action: CredentialAction,
    /// `api-key`.
    pub kind: CredentialKind,
    /// Whether a key is stored now.
    pub stored_api_key_configured: bool,
}

impl Validate for SetCredentialResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)
    }
}

/// `providers.listPublic`.
#[derive(Debug)]
pub struct ListPublic;
impl Method for ListPublic {
    const NAME: &'static str = "providers.listPublic";
    type Params = ListParams;
    type Result = ListResult;
}

/// `providers.testPublicConnection`.
#[derive(Debug)]
pub struct TestPublicConnection;
impl Method for TestPublicConnection {
    const NAME: &'static str = "providers.testPublicConnection";
    type Params = TestParams;
    type Result = TestResult;
}

/// `providers.addPublic`.
#[derive(Debug)]
pub struct AddPublic;
impl Method for AddPublic {
    const NAME: &'static str = "providers.addPublic";
    type Params = AddParams;
    type Result = AddResult;
}

/// `providers.updatePublic`.
#[derive(Debug)]
pub struct UpdatePublic;
impl Method for UpdatePublic {
    const NAME: &'static str = "providers.updatePublic";
    type Params = UpdateParams;
    type Result = UpdateResult;
}

/// `providers.remove`.
#[derive(Debug)]
pub struct Remove;
impl Method for Remove {
    const NAME: &'static str = "providers.remove";
    type Params = RemoveParams;
    type Result = RemoveResult;
}

/// `providers.setCredential`.
#[derive(Debug)]
pub struct SetCredential;
impl Method for SetCredential {
    const NAME: &'static str = "providers.setCredential";
    type Params = SetCredentialParams;
    type Result = SetCredentialResult;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::decode_params;
    use serde_json::json;

    #[test]
    fn base_urls_must_be_credential_free_http() {
        for good in [
            "http://127.0.0.1:8080/v1",
            "https://api.example.com",
            "HTTPS://api.example.com/v1/",
            "http://[::1]:9/v1",
            "http://localhost",
        ] {
            assert_eq!(check_base_url(good), Ok(()), "{good}");
        }
        for (bad, problem) in [
            (
                "https://user:pw@api.example.com/v1",
                UrlProblem::CarriesCredentials,
            ),
            (
                "https://api.example.com/v1?key=sk-1",
                UrlProblem::CarriesCredentials,
            ),
            (
                "https://api.example.com/v1#frag",
                UrlProblem::CarriesCredentials,
            ),
            ("ftp://api.example.com", UrlProblem::Malformed),
            ("api.example.com", UrlProblem::Malformed),
            ("http://", UrlProblem::Malformed),
            ("http://a b", UrlProblem::Malformed),
            ("http://host:99999", UrlProblem::Malformed),
            ("http://[zz]:1", UrlProblem::Malformed),
            ("", UrlProblem::Malformed),
        ] {
            assert_eq!(check_base_url(bad), Err(problem), "{bad}");
        }
        let at = format!("http://h/{}", "a".repeat(MAX_BASE_URL_CHARS - 9));
        assert_eq!(at.len(), MAX_BASE_URL_CHARS);
        assert_eq!(check_base_url(&at), Ok(()));
        assert_eq!(
            check_base_url(&format!("{at}a")),
            Err(UrlProblem::Malformed)
        );
    }

    #[test]
    fn add_is_strict_and_trims_the_name() {
        let ok = decode_params::<AddPublic>(
            json!({"name":"  Local ","apiType":"openai","baseUrl":"http://127.0.0.1:1/v1"}),
        )
        .expect("valid");
        assert_eq!(ok.name, "Local");
        assert!(ok.enabled);
        assert!(
            decode_params::<AddPublic>(
                json!({"name":"L","apiType":"openai","baseUrl":"http://h","apiKey":"sk"})
            )
            .is_err()
        );
        assert!(
            decode_params::<AddPublic>(json!({"name":"L","apiType":"vertex","baseUrl":"http://h"}))
                .is_err()
        );
        let at = "n".repeat(MAX_PROVIDER_NAME_CHARS);
        let past = "n".repeat(MAX_PROVIDER_NAME_CHARS + 1);
        assert!(
            decode_params::<AddPublic>(json!({"name":at,"apiType":"openai","baseUrl":"http://h"}))
                .is_ok()
        );
        assert!(
            decode_params::<AddPublic>(
                json!({"name":past,"apiType":"openai","baseUrl":"http://h"})
            )
            .is_err()
        );
        assert!(
            decode_params::<AddPublic>(
                json!({"name":"  ","apiType":"openai","baseUrl":"http://h"})
            )
            .is_err()
        );
    }

    #[test]
    fn update_needs_one_allowlisted_field() {
        assert!(decode_params::<UpdatePublic>(json!({"providerId":"p","updates":{}})).is_err());
        assert!(
            decode_params::<UpdatePublic>(json!({"providerId":"p","updates":{"apiKey":"x"}}))
                .is_err()
        );
        assert!(
            decode_params::<UpdatePublic>(
                json!({"providerId":"p","updates":{"baseUrl":"https://u:p@h"}})
            )
            .is_err()
        );
        let ok =
            decode_params::<UpdatePublic>(json!({"providerId":"p","updates":{"enabled":false}}))
                .expect("valid");
        assert_eq!(ok.updates.fields(), vec!["enabled"]);
    }

    #[test]
    fn credentials_are_bounded_and_redacted_in_debug() {
        let set = |value: &str| {
            decode_params::<SetCredential>(
                json!({"providerId":"p","action":"set","kind":"api-key","value":value}),
            )
        };
        let at = "k".repeat(MAX_CREDENTIAL_BYTES);
        let past = "k".repeat(MAX_CREDENTIAL_BYTES + 1);
        let ok = set(&at).expect("at the limit");
        assert!(!format!("{ok:?}").contains("kkkk"));
        assert_eq!(set(&past).expect_err("past").code(), "too_long");
        assert_eq!(set("   ").expect_err("blank").code(), "blank");
        assert_eq!(set("").expect_err("empty").code(), "too_short");
        assert_eq!(set("a\nb").expect_err("control").code(), "bad_format");
        assert!(
            decode_params::<SetCredential>(
                json!({"providerId":"p","action":"clear","kind":"api-key"})
            )
            .is_ok()
        );
        assert!(
            decode_params::<SetCredential>(
                json!({"providerId":"p","action":"clear","kind":"api-key","value":"x"})
            )
            .is_err()
        );
        assert!(
            decode_params::<SetCredential>(
                json!({"providerId":"p","action":"set","kind":"oauth","value":"x"})
            )
            .is_err()
        );
    }
}
