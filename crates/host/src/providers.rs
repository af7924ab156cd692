//! Providers and their models: the built-in deterministic provider (always present) plus custom
//! OpenAI-compatible providers, kept in the host's SQLite store (tables `providers` and `provider_models`,
//! schema 5), and their API keys in a separate 0600 file ([`credentials`]).
//!
//! [`ProviderRegistry::resolve`] is the provider runtime's single entry point: it turns an optional provider and
//! model (ids, or for a provider its unique name) into a [`ResolvedModel`] carrying the endpoint and the key.
//! Every other method returns public data only: whether a key is stored, never the key.
//!
//! Shapes follow DeepChat's provider settings (`src/main/cli/providerModelAdminRoutes.ts`: providers get a random
//! UUID id, `custom: true`, an adapter `apiType` and a base URL; the built-in provider's adapter cannot change).
//! Where we differ: DeepChat keeps a provider's model catalog loaded from the provider; here a custom provider's
//! stored models are the ids enabled with [`ProviderRegistry::set_model_status`] (enabling an unknown id adds it;
//! the control plane's `models.listRuntime` shows the provider's live catalog beside them), and the built-in
//! provider's models are [`BUILTIN_MODELS`].

pub mod credentials;

use std::path::Path;

use agentwire_local_control::contract::model_config::{
    ModelType, PublicModelConfig, PublicModelConfigInput,
};
use agentwire_local_control::contract::providers::{ApiType, check_base_url};
use rusqlite::{Connection, OptionalExtension, params};

pub use credentials::{ApiKey, CredentialError, CredentialLimits, CredentialStore};

use crate::store::{Store, StoreError, db, now_ms};

/// Id of the built-in deterministic provider (no network, no key).
pub const BUILTIN_PROVIDER_ID: &str = "builtin";
/// Its display name.
pub const BUILTIN_PROVIDER_NAME: &str = "Built-in (deterministic)";
/// Its `apiType` in `providers.listPublic`.
pub const BUILTIN_API_TYPE: &str = "builtin";
/// The built-in provider's models: `(id, type)`, the models of `agentwire_provider`'s built-in provider
/// (`builtin-demo` is the chat model, the one `awp-agent` reports). Seeded on every open (missing rows are added; existing rows keep their status and configuration).
pub const BUILTIN_MODELS: &[(&str, ModelType)] = &[
    (agentwire_provider::BUILTIN_MODEL, ModelType::Chat),
    (
        agentwire_provider::BUILTIN_IMAGE_MODEL,
        ModelType::ImageGeneration,
    ),
    // DeepChat's public `ModelType` has no speech, transcription or video type: these report `chat`.
    (agentwire_provider::BUILTIN_SPEECH_MODEL, ModelType::Chat),
    (
        agentwire_provider::BUILTIN_TRANSCRIPTION_MODEL,
        ModelType::Chat,
    ),
    (agentwire_provider::BUILTIN_VIDEO_MODEL, ModelType::Chat),
];
/// Model group reported for every model (DeepChat's `group`).
pub const DEFAULT_GROUP: &str = "default";

/// Bounds of the registry. Every field documents its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryLimits {
    /// Most providers, the built-in one included; adding one more is [`ProviderError::TooMany`]. Default 1000
    /// (DeepChat's `providers.listPublic` bound).
    pub max_providers: usize,
    /// Most models per provider; adding one more is [`ProviderError::TooMany`]. Default 10 000 (DeepChat's
    /// per-provider list bound).
    pub max_models_per_provider: usize,
    /// The credential file's bounds.
    pub credentials: CredentialLimits,
}

impl Default for RegistryLimits {
    fn default() -> Self {
        RegistryLimits {
            max_providers: 1000,
            max_models_per_provider: 10_000,
            credentials: CredentialLimits::default(),
        }
    }
}

/// Why a registry call failed. Never contains a credential.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// No provider has this id (or unique name).
    #[error("provider {0} was not found")]
    ProviderNotFound(String),
    /// The provider has no model with this id.
    #[error("model {model} of provider {provider} was not found")]
    ModelNotFound {
        /// The provider id.
        provider: String,
        /// The model id.
        model: String,
    },
    /// No model was named and the provider has no enabled model.
    #[error("provider {0} has no enabled model")]
    NoEnabledModel(String),
    /// The provider is disabled ([`ResolvedModel::require_enabled`]).
    #[error("provider {0} is disabled")]
    ProviderDisabled(String),
    /// The model is disabled ([`ResolvedModel::require_enabled`]).
    #[error("model {model} of provider {provider} is disabled")]
    ModelDisabled {
        /// The provider id.
        provider: String,
        /// The model id.
        model: String,
    },
    /// The built-in provider cannot be removed, get a URL or change its adapter.
    #[error("the built-in provider cannot be {0}")]
    BuiltinImmutable(&'static str),
    /// Another provider already has this name (names are references in agents.toml).
    #[error("a provider named {0} already exists")]
    NameTaken(String),
    /// The adapter is a DeepChat one this host does not run (only OpenAI-compatible adapters are served).
    #[error("api type {0} is not served by this host (openai, openai-completions are)")]
    UnsupportedApiType(&'static str),
    /// The base URL is not a credential-free http(s) URL (plain http only to a loopback host).
    #[error("base url is not a credential-free https url (or http to a loopback host)")]
    InvalidBaseUrl,
    /// A count limit of [`RegistryLimits`] would be passed.
    #[error("more than {max} {what}")]
    TooMany {
        /// `providers` or `models`.
        what: &'static str,
        /// The limit.
        max: usize,
    },
    /// The provider's base URL is not loopback and the agent's entry does not say `remote_api_opt_in = true`
    /// (the AWP launch rule for URLs reaching an agent).
    #[error(
        "provider {0} has a non-loopback base url; set remote_api_opt_in = true on the agent to allow it"
    )]
    RemoteNotAllowed(String),
    /// A model id is empty or over its length limit.
    #[error("invalid model id")]
    InvalidModelId,
    /// A stored model configuration does not parse (written by a newer version or by hand).
    #[error("stored configuration of model {0} is corrupt")]
    CorruptConfig(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The credential file failed.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
}

impl ProviderError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::ProviderNotFound(_) => "provider_not_found",
            ProviderError::ModelNotFound { .. } => "model_not_found",
            ProviderError::NoEnabledModel(_) => "no_enabled_model",
            ProviderError::ProviderDisabled(_) => "provider_disabled",
            ProviderError::ModelDisabled { .. } => "model_disabled",
            ProviderError::BuiltinImmutable(_) => "builtin_provider_immutable",
            ProviderError::NameTaken(_) => "provider_name_taken",
            ProviderError::UnsupportedApiType(_) => "unsupported_api_type",
            ProviderError::InvalidBaseUrl => "invalid_base_url",
            ProviderError::TooMany { .. } => "too_many",
            ProviderError::RemoteNotAllowed(_) => "remote_url_not_allowed",
            ProviderError::InvalidModelId => "invalid_model_id",
            ProviderError::CorruptConfig(_) => "store_corrupt",
            ProviderError::Store(e) => e.code(),
            ProviderError::Credentials(e) => e.code(),
        }
    }
}

/// One provider as stored (no credential).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRecord {
    /// Id (a UUID for custom providers, [`BUILTIN_PROVIDER_ID`] for the built-in one).
    pub id: String,
    /// Display name (unique).
    pub name: String,
    /// Adapter: an [`ApiType`] wire name, or [`BUILTIN_API_TYPE`].
    pub api_type: String,
    /// Base URL (`None` for the built-in provider).
    pub base_url: Option<String>,
    /// Enabled.
    pub enabled: bool,
    /// User-added.
    pub custom: bool,
}

impl ProviderRecord {
    /// Whether this is the built-in provider.
    pub fn is_builtin(&self) -> bool {
        self.id == BUILTIN_PROVIDER_ID
    }
}

/// One model as stored, with its effective public configuration (`isUserDefined` set).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRecord {
    /// The provider id.
    pub provider_id: String,
    /// The model id.
    pub model_id: String,
    /// Display name.
    pub name: String,
    /// Enabled.
    pub enabled: bool,
    /// Added by the user (a custom provider's model).
    pub custom: bool,
    /// The user's configuration if set, else the defaults.
    pub config: PublicModelConfig,
}

/// What [`ProviderRegistry::resolve`] hands the provider runtime: endpoint, model and credential.
/// `Debug` redacts the key ([`ApiKey`]).
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    /// The provider id.
    pub provider_id: String,
    /// The model id.
    pub model_id: String,
    /// True for the built-in deterministic provider (no network, no key, no URL).
    pub builtin: bool,
    /// The adapter (`openai`, `openai-completions`, `builtin`).
    pub api_type: String,
    /// The OpenAI-compatible base URL (`None` for the built-in provider).
    pub base_url: Option<String>,
    /// The stored API key, if any.
    pub api_key: Option<ApiKey>,
    /// The provider is enabled.
    pub provider_enabled: bool,
    /// The model is enabled.
    pub model_enabled: bool,
    /// The model's effective public configuration.
    pub config: PublicModelConfig,
}

impl ResolvedModel {
    /// Provider and model both enabled.
    pub fn enabled(&self) -> bool {
        self.provider_enabled && self.model_enabled
    }

    /// `self` when [`ResolvedModel::enabled`].
    ///
    /// # Errors
    /// [`ProviderError::ProviderDisabled`] or [`ProviderError::ModelDisabled`].
    pub fn require_enabled(self) -> Result<ResolvedModel, ProviderError> {
        if !self.provider_enabled {
            return Err(ProviderError::ProviderDisabled(self.provider_id));
        }
        if !self.model_enabled {
            return Err(ProviderError::ModelDisabled {
                provider: self.provider_id,
                model: self.model_id,
            });
        }
        Ok(self)
    }
}

/// A new custom provider ([`ProviderRegistry::add`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewProvider {
    /// Display name (trimmed, checked by the contract).
    pub name: String,
    /// Adapter; must be OpenAI-compatible.
    pub api_type: ApiType,
    /// Credential-free http(s) base URL.
    pub base_url: String,
    /// Enabled.
    pub enabled: bool,
}

/// A change to a provider ([`ProviderRegistry::update`]); `None` keeps the field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderChange {
    /// New name.
    pub name: Option<String>,
    /// New adapter (custom providers only).
    pub api_type: Option<ApiType>,
    /// New base URL (custom providers only).
    pub base_url: Option<String>,
    /// Enable or disable.
    pub enabled: Option<bool>,
}

/// The defaults of a model without user configuration: 4096 reply tokens, an 8192-token context, no vision,
/// tools or reasoning, type `model_type`. (DeepChat's defaults come from its model database; we have none.)
pub fn default_config(model_type: ModelType) -> PublicModelConfig {
    PublicModelConfigInput {
        max_tokens: 4096,
        context_length: 8192,
        temperature: None,
        vision: false,
        function_call: false,
        reasoning: false,
        model_type,
        thinking_budget: None,
        force_interleaved_thinking_compat: None,
        reasoning_effort: None,
        reasoning_visibility: None,
        verbosity: None,
        max_completion_tokens: None,
        api_endpoint: None,
        endpoint_type: None,
        enable_search: None,
        forced_search: None,
        search_strategy: None,
    }
    .into_public(false)
}

/// The environment an agent referencing host provider `reference` (`agents.toml` `provider`) gets at launch:
/// `OPENAI_BASE_URL`, `OPENAI_MODEL` and, when a key is stored, `OPENAI_API_KEY` (the variables `awp-agent`
/// reads, see `bins/awp-agent/src/provider.rs`). `model` is the turn's model (`--model`, else the entry's
/// `model`); `None` picks the provider's first enabled model. The built-in provider gives only `OPENAI_MODEL`
/// (an agent without `OPENAI_BASE_URL` uses its own built-in provider).
///
/// # Errors
/// Those of [`ProviderRegistry::resolve`] and [`ResolvedModel::require_enabled`];
/// [`ProviderError::RemoteNotAllowed`] for a non-loopback base URL without `remote_api_opt_in`.
pub fn agent_env(
    data_dir: &Path,
    reference: &str,
    model: Option<&str>,
    remote_api_opt_in: bool,
) -> Result<Vec<(String, String)>, ProviderError> {
    let registry = ProviderRegistry::open(data_dir)?;
    let resolved = registry
        .resolve(Some(reference), model)?
        .require_enabled()?;
    let mut env = Vec::with_capacity(3);
    if let Some(url) = &resolved.base_url {
        if !remote_api_opt_in && agentwire_awp::launch::contains_remote_url(url) {
            return Err(ProviderError::RemoteNotAllowed(resolved.provider_id));
        }
        env.push(("OPENAI_BASE_URL".to_owned(), url.clone()));
    }
    env.push(("OPENAI_MODEL".to_owned(), resolved.model_id.clone()));
    if let Some(key) = &resolved.api_key {
        env.push(("OPENAI_API_KEY".to_owned(), key.expose().to_owned()));
    }
    Ok(env)
}

fn random_uuid() -> Result<String, ProviderError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|_| {
        ProviderError::Store(StoreError::Id(crate::ids::IdError::RandomUnavailable))
    })?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

/// DeepChat's URL rule ([`check_base_url`]) and the provider runtime's (`agentwire_provider::validate_base_url`:
/// plain `http` only to a loopback host), so a provider that could never be called is refused when it is added.
fn check_url(url: &str) -> Result<(), ProviderError> {
    check_base_url(url).map_err(|_| ProviderError::InvalidBaseUrl)?;
    agentwire_provider::validate_base_url(url).map_err(|_| ProviderError::InvalidBaseUrl)?;
    Ok(())
}

/// [`ProviderError::NameTaken`] for a violation of the unique provider name (two adds racing past
/// `check_name_free`); the error back otherwise.
fn name_taken(e: rusqlite::Error, name: &str) -> Result<ProviderError, rusqlite::Error> {
    match &e {
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            Ok(ProviderError::NameTaken(name.to_owned()))
        }
        _ => Err(e),
    }
}

fn provider_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ProviderRecord> {
    Ok(ProviderRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        api_type: r.get(2)?,
        base_url: r.get(3)?,
        enabled: r.get::<_, i64>(4)? != 0,
        custom: r.get::<_, i64>(5)? != 0,
    })
}

const PROVIDER_COLUMNS: &str = "id, name, api_type, base_url, enabled, custom";
const MODEL_COLUMNS: &str =
    "provider_id, model_id, name, enabled, custom, default_config, user_config";

type ModelRow = (String, String, String, bool, bool, String, Option<String>);

fn model_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ModelRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get::<_, i64>(3)? != 0,
        r.get::<_, i64>(4)? != 0,
        r.get(5)?,
        r.get(6)?,
    ))
}

fn into_model(row: ModelRow) -> Result<ModelRecord, ProviderError> {
    let (provider_id, model_id, name, enabled, custom, default, user) = row;
    let corrupt = || ProviderError::CorruptConfig(model_id.clone());
    let config = match &user {
        Some(text) => serde_json::from_str::<PublicModelConfigInput>(text)
            .map_err(|_| corrupt())?
            .into_public(true),
        None => serde_json::from_str::<PublicModelConfigInput>(&default)
            .map_err(|_| corrupt())?
            .into_public(false),
    };
    Ok(ModelRecord {
        provider_id,
        model_id,
        name,
        enabled,
        custom,
        config,
    })
}

fn config_text(config: &PublicModelConfig) -> Result<String, ProviderError> {
    let mut value = serde_json::to_value(config)
        .map_err(|_| ProviderError::CorruptConfig("(serialize)".to_owned()))?;
    if let Some(map) = value.as_object_mut() {
        map.remove("isUserDefined");
    }
    Ok(value.to_string())
}

/// The providers, models and credentials of one data directory.
#[derive(Debug)]
pub struct ProviderRegistry {
    conn: Connection,
    credentials: CredentialStore,
    limits: RegistryLimits,
}

impl ProviderRegistry {
    /// Opens the registry of `data_dir` with default limits: the store (created and migrated as [`Store::open`]
    /// does) and the credential directory; adds the built-in provider and [`BUILTIN_MODELS`] when missing.
    ///
    /// # Errors
    /// [`ProviderError::Store`], [`ProviderError::Credentials`].
    pub fn open(data_dir: &Path) -> Result<ProviderRegistry, ProviderError> {
        ProviderRegistry::open_with(data_dir, RegistryLimits::default())
    }

    /// [`ProviderRegistry::open`] with explicit limits.
    ///
    /// # Errors
    /// As [`ProviderRegistry::open`].
    pub fn open_with(
        data_dir: &Path,
        limits: RegistryLimits,
    ) -> Result<ProviderRegistry, ProviderError> {
        let conn = Store::open(data_dir)?.into_connection();
        let credentials = CredentialStore::open(data_dir, limits.credentials)?;
        let mut registry = ProviderRegistry {
            conn,
            credentials,
            limits,
        };
        registry.seed_builtin()?;
        Ok(registry)
    }

    fn seed_builtin(&mut self) -> Result<(), ProviderError> {
        // The common case (everything seeded) reads only: no write lock per open.
        let placeholders = vec!["?"; BUILTIN_MODELS.len()].join(",");
        let seeded: i64 = self
            .conn
            .query_row(
                &format!(
                    "SELECT (SELECT count(*) FROM providers WHERE id=?)
                          + (SELECT count(*) FROM provider_models WHERE provider_id=? AND model_id IN ({placeholders}))"
                ),
                rusqlite::params_from_iter(
                    [BUILTIN_PROVIDER_ID, BUILTIN_PROVIDER_ID]
                        .into_iter()
                        .chain(BUILTIN_MODELS.iter().map(|(id, _)| *id)),
                ),
                |r| r.get(0),
            )
            .map_err(db("reading the built-in provider"))?;
        if usize::try_from(seeded).is_ok_and(|n| n > BUILTIN_MODELS.len()) {
            return Ok(());
        }
        let now = now_ms();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db("seeding the built-in provider"))?;
        tx.execute(
            "INSERT OR IGNORE INTO providers (id, name, api_type, base_url, enabled, custom, created_at_ms,
             updated_at_ms) VALUES (?1, ?2, ?3, NULL, 1, 0, ?4, ?4)",
            params![BUILTIN_PROVIDER_ID, BUILTIN_PROVIDER_NAME, BUILTIN_API_TYPE, now],
        )
        .map_err(db("seeding the built-in provider"))?;
        for (model, model_type) in BUILTIN_MODELS {
            let mut config = default_config(*model_type);
            // Only the demo chat model takes tools; the media models' flags stay off (their `type` reads `chat`
            // where DeepChat's ModelType has no kind for them).
            config.function_call = *model == agentwire_provider::BUILTIN_MODEL;
            tx.execute(
                "INSERT OR IGNORE INTO provider_models (provider_id, model_id, name, enabled, custom,
                 default_config, user_config, created_at_ms) VALUES (?1, ?2, ?2, 1, 0, ?3, NULL, ?4)",
                params![BUILTIN_PROVIDER_ID, model, config_text(&config)?, now],
            )
            .map_err(db("seeding the built-in provider"))?;
        }
        tx.commit().map_err(db("seeding the built-in provider"))?;
        Ok(())
    }

    /// The provider with id `id`, if any.
    ///
    /// # Errors
    /// [`ProviderError::Store`].
    pub fn provider(&self, id: &str) -> Result<Option<ProviderRecord>, ProviderError> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {PROVIDER_COLUMNS} FROM providers WHERE id=?1"),
                params![id],
                provider_row,
            )
            .optional()
            .map_err(db("reading a provider"))?)
    }

    /// The provider with id `reference`, else the one whose name is `reference`.
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::Store`].
    pub fn find(&self, reference: &str) -> Result<ProviderRecord, ProviderError> {
        if let Some(provider) = self.provider(reference)? {
            return Ok(provider);
        }
        self.conn
            .query_row(
                &format!("SELECT {PROVIDER_COLUMNS} FROM providers WHERE name=?1"),
                params![reference],
                provider_row,
            )
            .optional()
            .map_err(db("reading a provider"))?
            .ok_or_else(|| ProviderError::ProviderNotFound(reference.to_owned()))
    }

    /// The provider `reference` names: its id, else its (unique) name. Every method taking a provider takes
    /// either, so one reference works for every command (ids win over names).
    fn require(&self, reference: &str) -> Result<ProviderRecord, ProviderError> {
        self.find(reference)
    }

    /// Every provider (the built-in one first, then by creation), or only enabled ones.
    ///
    /// # Errors
    /// [`ProviderError::Store`].
    pub fn list(&self, enabled_only: bool) -> Result<Vec<ProviderRecord>, ProviderError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {PROVIDER_COLUMNS} FROM providers WHERE (?1 = 0 OR enabled = 1)
                 ORDER BY custom, created_at_ms, id"
            ))
            .map_err(db("listing providers"))?;
        let rows = stmt
            .query_map(params![i64::from(enabled_only)], provider_row)
            .map_err(db("listing providers"))?;
        Ok(rows
            .collect::<Result<_, _>>()
            .map_err(db("listing providers"))?)
    }

    /// Whether `provider_id` has a stored API key.
    ///
    /// # Errors
    /// [`ProviderError::Credentials`].
    pub fn has_api_key(&self, provider_id: &str) -> Result<bool, ProviderError> {
        Ok(self.credentials.configured()?.contains(provider_id))
    }

    /// The providers with a stored API key.
    ///
    /// # Errors
    /// [`ProviderError::Credentials`].
    pub fn providers_with_keys(&self) -> Result<std::collections::BTreeSet<String>, ProviderError> {
        Ok(self.credentials.configured()?)
    }

    /// The models of `provider_id`, in creation order.
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::Store`], [`ProviderError::CorruptConfig`].
    pub fn models(&self, provider: &str) -> Result<Vec<ModelRecord>, ProviderError> {
        let provider_id = self.require(provider)?.id;
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {MODEL_COLUMNS} FROM provider_models WHERE provider_id=?1
                 ORDER BY created_at_ms, model_id"
            ))
            .map_err(db("listing models"))?;
        let rows: Vec<ModelRow> = stmt
            .query_map(params![&provider_id], model_row)
            .map_err(db("listing models"))?
            .collect::<Result<_, _>>()
            .map_err(db("listing models"))?;
        rows.into_iter().map(into_model).collect()
    }

    /// One model of `provider_id`.
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::ModelNotFound`], store errors.
    pub fn model(&self, provider: &str, model_id: &str) -> Result<ModelRecord, ProviderError> {
        let provider_id = self.require(provider)?.id;
        self.model_row(&provider_id, model_id)?
            .ok_or_else(|| ProviderError::ModelNotFound {
                provider: provider_id,
                model: model_id.to_owned(),
            })
    }

    fn model_row(
        &self,
        provider_id: &str,
        model_id: &str,
    ) -> Result<Option<ModelRecord>, ProviderError> {
        let row = self
            .conn
            .query_row(
                &format!(
                    "SELECT {MODEL_COLUMNS} FROM provider_models WHERE provider_id=?1 AND model_id=?2"
                ),
                params![provider_id, model_id],
                model_row,
            )
            .optional()
            .map_err(db("reading a model"))?;
        row.map(into_model).transpose()
    }

    /// Resolves a provider and model for the provider runtime.
    ///
    /// `provider`: a provider id or a provider's name; `None` is the built-in provider. `model`: a model id of
    /// that provider; `None` is its first enabled model (creation order). The result says whether provider and
    /// model are enabled ([`ResolvedModel::require_enabled`] turns that into an error) and carries the stored key
    /// of a custom provider.
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::ModelNotFound`], [`ProviderError::NoEnabledModel`],
    /// store and credential errors.
    pub fn resolve(
        &self,
        provider: Option<&str>,
        model: Option<&str>,
    ) -> Result<ResolvedModel, ProviderError> {
        let provider = self.find(provider.unwrap_or(BUILTIN_PROVIDER_ID))?;
        let model = match model {
            Some(model) => self.model(&provider.id, model)?,
            None => self
                .models(&provider.id)?
                .into_iter()
                .find(|m| m.enabled)
                .ok_or_else(|| ProviderError::NoEnabledModel(provider.id.clone()))?,
        };
        let builtin = provider.is_builtin();
        let api_key = if builtin {
            None
        } else {
            self.credentials.get(&provider.id)?
        };
        Ok(ResolvedModel {
            provider_id: provider.id,
            model_id: model.model_id,
            builtin,
            api_type: provider.api_type,
            base_url: provider.base_url,
            api_key,
            provider_enabled: provider.enabled,
            model_enabled: model.enabled,
            config: model.config,
        })
    }

    /// A provider's record and stored key, for a connection test (no model needed).
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], store and credential errors.
    pub fn endpoint(
        &self,
        provider_id: &str,
    ) -> Result<(ProviderRecord, Option<ApiKey>), ProviderError> {
        let provider = self.require(provider_id)?;
        let key = if provider.is_builtin() {
            None
        } else {
            self.credentials.get(&provider.id)?
        };
        Ok((provider, key))
    }

    /// [`ProviderError::NameTaken`] when another provider than `except` (an id) has `name` as its name or id.
    ///
    /// # Errors
    /// [`ProviderError::NameTaken`], [`ProviderError::Store`].
    pub fn check_name_free(&self, name: &str, except: Option<&str>) -> Result<(), ProviderError> {
        let taken: Option<String> = self
            .conn
            .query_row(
                "SELECT id FROM providers WHERE (name=?1 OR id=?1) AND id IS NOT ?2",
                params![name, except],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("checking a provider name"))?;
        match taken {
            Some(_) => Err(ProviderError::NameTaken(name.to_owned())),
            None => Ok(()),
        }
    }

    fn check_adapter(api_type: ApiType) -> Result<(), ProviderError> {
        if api_type.is_openai_compatible() {
            Ok(())
        } else {
            Err(ProviderError::UnsupportedApiType(api_type.as_str()))
        }
    }

    /// Adds a custom provider with a new random id.
    ///
    /// # Errors
    /// [`ProviderError::UnsupportedApiType`], [`ProviderError::InvalidBaseUrl`], [`ProviderError::NameTaken`],
    /// [`ProviderError::TooMany`], store errors.
    pub fn add(&mut self, new: NewProvider) -> Result<ProviderRecord, ProviderError> {
        Self::check_adapter(new.api_type)?;
        check_url(&new.base_url)?;
        self.check_name_free(&new.name, None)?;
        let count: i64 = self
            .conn
            .query_row("SELECT count(*) FROM providers", [], |r| r.get(0))
            .map_err(db("counting providers"))?;
        if usize::try_from(count).unwrap_or(usize::MAX) >= self.limits.max_providers {
            return Err(ProviderError::TooMany {
                what: "providers",
                max: self.limits.max_providers,
            });
        }
        let id = random_uuid()?;
        let now = now_ms();
        self.conn
            .execute(
                "INSERT INTO providers (id, name, api_type, base_url, enabled, custom, created_at_ms,
                 updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?6)",
                params![
                    id,
                    new.name,
                    new.api_type.as_str(),
                    new.base_url,
                    i64::from(new.enabled),
                    now
                ],
            )
            .map_err(|e| name_taken(e, &new.name).unwrap_or_else(|e| ProviderError::Store(db("adding a provider")(e))))?;
        self.require(&id)
    }

    /// Changes a provider; returns it and whether its endpoint (URL or adapter) changed.
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::BuiltinImmutable`] (URL or adapter of the built-in
    /// provider), the checks of [`ProviderRegistry::add`].
    pub fn update(
        &mut self,
        id: &str,
        change: ProviderChange,
    ) -> Result<(ProviderRecord, bool), ProviderError> {
        let current = self.require(id)?;
        let id = current.id.as_str();
        if current.is_builtin() {
            if change.api_type.is_some() {
                return Err(ProviderError::BuiltinImmutable("given another api type"));
            }
            if change.base_url.is_some() {
                return Err(ProviderError::BuiltinImmutable("given a base url"));
            }
        }
        if let Some(api_type) = change.api_type {
            Self::check_adapter(api_type)?;
        }
        if let Some(url) = &change.base_url {
            check_url(url)?;
        }
        if let Some(name) = &change.name {
            self.check_name_free(name, Some(id))?;
        }
        let endpoint_changed = change
            .api_type
            .is_some_and(|t| t.as_str() != current.api_type)
            || change
                .base_url
                .as_ref()
                .is_some_and(|u| Some(u) != current.base_url.as_ref());
        self.conn
            .execute(
                "UPDATE providers SET name=coalesce(?2, name), api_type=coalesce(?3, api_type),
                 base_url=coalesce(?4, base_url), enabled=coalesce(?5, enabled), updated_at_ms=?6 WHERE id=?1",
                params![
                    id,
                    change.name,
                    change.api_type.map(ApiType::as_str),
                    change.base_url,
                    change.enabled.map(i64::from),
                    now_ms()
                ],
            )
            .map_err(|e| {
                let name = change.name.clone().unwrap_or_default();
                name_taken(e, &name).unwrap_or_else(|e| ProviderError::Store(db("updating a provider")(e)))
            })?;
        Ok((self.require(id)?, endpoint_changed))
    }

    /// Removes a custom provider, its models and its stored key; false when there was no such provider.
    ///
    /// # Errors
    /// [`ProviderError::BuiltinImmutable`] for the built-in provider; store and credential errors.
    pub fn remove(&mut self, reference: &str) -> Result<bool, ProviderError> {
        let id = match self.require(reference) {
            Ok(provider) => provider.id,
            Err(ProviderError::ProviderNotFound(_)) => reference.to_owned(),
            Err(e) => return Err(e),
        };
        let id = id.as_str();
        if id == BUILTIN_PROVIDER_ID {
            return Err(ProviderError::BuiltinImmutable("removed"));
        }
        let removed = self
            .conn
            .execute("DELETE FROM providers WHERE id=?1", params![id])
            .map_err(db("removing a provider"))?;
        // Also a key left behind by an earlier failed removal.
        self.credentials.clear(id)?;
        Ok(removed > 0)
    }

    /// Stores the API key of a custom provider.
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::BuiltinImmutable`] (the built-in provider takes no
    /// key), credential errors.
    pub fn set_api_key(&mut self, id: &str, key: &ApiKey) -> Result<(), ProviderError> {
        let provider = self.require(id)?;
        if provider.is_builtin() {
            return Err(ProviderError::BuiltinImmutable("given a credential"));
        }
        self.credentials.set(&provider.id, key)?;
        Ok(())
    }

    /// Removes the stored API key of a provider; false when none was stored.
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], credential errors.
    pub fn clear_api_key(&mut self, id: &str) -> Result<bool, ProviderError> {
        let id = self.require(id)?.id;
        Ok(self.credentials.clear(&id)?)
    }

    /// Enables or disables a model. For a custom provider an unknown model id is added (a custom chat model with
    /// the default configuration); for the built-in provider it is [`ProviderError::ModelNotFound`].
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::ModelNotFound`], [`ProviderError::TooMany`],
    /// [`ProviderError::InvalidModelId`], store errors.
    pub fn set_model_status(
        &mut self,
        provider_id: &str,
        model_id: &str,
        enabled: bool,
    ) -> Result<ModelRecord, ProviderError> {
        let provider = self.require(provider_id)?;
        let provider_id = provider.id.as_str();
        if self.model_row(provider_id, model_id)?.is_none() {
            if provider.is_builtin() {
                return Err(ProviderError::ModelNotFound {
                    provider: provider_id.to_owned(),
                    model: model_id.to_owned(),
                });
            }
            self.add_model(provider_id, model_id, enabled)?;
        }
        self.conn
            .execute(
                "UPDATE provider_models SET enabled=?3 WHERE provider_id=?1 AND model_id=?2",
                params![provider_id, model_id, i64::from(enabled)],
            )
            .map_err(db("setting a model's status"))?;
        self.model(provider_id, model_id)
    }

    fn add_model(
        &mut self,
        provider_id: &str,
        model_id: &str,
        enabled: bool,
    ) -> Result<(), ProviderError> {
        if model_id.is_empty()
            || model_id.encode_utf16().count()
                > agentwire_local_control::contract::model_config::MAX_MODEL_ID_CHARS
            || model_id.chars().any(char::is_control)
        {
            return Err(ProviderError::InvalidModelId);
        }
        let count: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM provider_models WHERE provider_id=?1",
                params![provider_id],
                |r| r.get(0),
            )
            .map_err(db("counting models"))?;
        if usize::try_from(count).unwrap_or(usize::MAX) >= self.limits.max_models_per_provider {
            return Err(ProviderError::TooMany {
                what: "models",
                max: self.limits.max_models_per_provider,
            });
        }
        self.conn
            .execute(
                "INSERT INTO provider_models (provider_id, model_id, name, enabled, custom, default_config,
                 user_config, created_at_ms) VALUES (?1, ?2, ?2, ?3, 1, ?4, NULL, ?5)",
                params![
                    provider_id,
                    model_id,
                    i64::from(enabled),
                    config_text(&default_config(ModelType::Chat))?,
                    now_ms()
                ],
            )
            .map_err(db("adding a model"))?;
        Ok(())
    }

    /// Replaces the user configuration of a model; returns the effective configuration (`isUserDefined: true`).
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::ModelNotFound`], store errors.
    pub fn set_model_config(
        &mut self,
        provider_id: &str,
        model_id: &str,
        config: PublicModelConfigInput,
    ) -> Result<PublicModelConfig, ProviderError> {
        let provider_id = self.model(provider_id, model_id)?.provider_id;
        let provider_id = provider_id.as_str();
        let text = config_text(&config.into_public(true))?;
        self.conn
            .execute(
                "UPDATE provider_models SET user_config=?3 WHERE provider_id=?1 AND model_id=?2",
                params![provider_id, model_id, text],
            )
            .map_err(db("setting a model's configuration"))?;
        Ok(self.model(provider_id, model_id)?.config)
    }

    /// Drops the user configuration of a model; true when there was one.
    ///
    /// # Errors
    /// [`ProviderError::ProviderNotFound`], [`ProviderError::ModelNotFound`], store errors.
    pub fn reset_model_config(
        &mut self,
        provider_id: &str,
        model_id: &str,
    ) -> Result<bool, ProviderError> {
        let provider_id = self.model(provider_id, model_id)?.provider_id;
        let changed = self
            .conn
            .execute(
                "UPDATE provider_models SET user_config=NULL
                 WHERE provider_id=?1 AND model_id=?2 AND user_config IS NOT NULL",
                params![provider_id, model_id],
            )
            .map_err(db("resetting a model's configuration"))?;
        Ok(changed > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path) -> ProviderRegistry {
        ProviderRegistry::open(dir).unwrap()
    }

    fn local(name: &str) -> NewProvider {
        NewProvider {
            name: name.to_owned(),
            api_type: ApiType::Openai,
            base_url: "http://127.0.0.1:9/v1".to_owned(),
            enabled: true,
        }
    }

    #[test]
    fn the_builtin_provider_resolves_by_default_without_a_key() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = open(tmp.path());
        let resolved = registry.resolve(None, None).unwrap();
        assert!(resolved.builtin && resolved.enabled());
        assert_eq!(resolved.provider_id, BUILTIN_PROVIDER_ID);
        assert_eq!(resolved.model_id, "builtin-demo");
        assert!(resolved.base_url.is_none() && resolved.api_key.is_none());
        // Reopening keeps one built-in provider; a missing built-in model is seeded again.
        drop(registry);
        let conn = Connection::open(tmp.path().join(crate::store::DATABASE_FILE)).unwrap();
        conn.execute(
            "DELETE FROM provider_models WHERE model_id=?1",
            params![agentwire_provider::BUILTIN_VIDEO_MODEL],
        )
        .unwrap();
        drop(conn);
        let registry = open(tmp.path());
        assert_eq!(registry.list(false).unwrap().len(), 1);
        let models: Vec<String> = registry
            .models(BUILTIN_PROVIDER_ID)
            .unwrap()
            .into_iter()
            .map(|m| m.model_id)
            .collect();
        assert_eq!(models.len(), BUILTIN_MODELS.len());
        assert!(
            models
                .iter()
                .any(|m| m == agentwire_provider::BUILTIN_VIDEO_MODEL)
        );
    }

    #[test]
    fn a_custom_provider_resolves_with_its_key_by_id_or_name() {
        let tmp = tempfile::tempdir().unwrap();
        let mut registry = open(tmp.path());
        let p = registry.add(local("local-llm")).unwrap();
        assert!(p.custom && p.id.len() == 36);
        assert_eq!(
            registry.resolve(Some(&p.id), None).unwrap_err().code(),
            "no_enabled_model"
        );
        registry.set_model_status(&p.id, "llama", true).unwrap();
        registry
            .set_api_key(&p.id, &ApiKey::new("sk-PLANTED").unwrap())
            .unwrap();
        let resolved = registry.resolve(Some("local-llm"), None).unwrap();
        assert_eq!(resolved.model_id, "llama");
        assert_eq!(resolved.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(
            resolved.api_key.as_ref().map(ApiKey::expose),
            Some("sk-PLANTED")
        );
        assert!(!format!("{resolved:?}").contains("sk-PLANTED"));
        // Disabled states are reported and turned into errors on request.
        registry.set_model_status(&p.id, "llama", false).unwrap();
        let resolved = registry.resolve(Some(&p.id), Some("llama")).unwrap();
        assert!(!resolved.enabled());
        assert_eq!(
            resolved.require_enabled().unwrap_err().code(),
            "model_disabled"
        );
        registry
            .update(
                &p.id,
                ProviderChange {
                    enabled: Some(false),
                    ..ProviderChange::default()
                },
            )
            .unwrap();
        let err = registry
            .resolve(Some(&p.id), Some("llama"))
            .unwrap()
            .require_enabled()
            .unwrap_err();
        assert_eq!(err.code(), "provider_disabled");
        assert_eq!(
            registry.resolve(Some("nope"), None).unwrap_err().code(),
            "provider_not_found"
        );
        assert_eq!(
            registry
                .resolve(Some(&p.id), Some("nope"))
                .unwrap_err()
                .code(),
            "model_not_found"
        );
        // Removal takes the models and the key with it.
        assert!(registry.remove(&p.id).unwrap());
        assert!(!registry.remove(&p.id).unwrap());
        assert!(!registry.has_api_key(&p.id).unwrap());
    }

    /// One rule for every method taking a provider: its id or its name, and the record's id in what comes back.
    #[test]
    fn every_method_takes_a_provider_by_id_or_name() {
        let tmp = tempfile::tempdir().unwrap();
        let mut registry = open(tmp.path());
        let p = registry.add(local("local-llm")).unwrap();
        let by_name = registry
            .set_model_status("local-llm", "llama", true)
            .unwrap();
        assert_eq!(by_name.provider_id, p.id);
        assert_eq!(registry.models("local-llm").unwrap().len(), 1);
        assert_eq!(
            registry.model("local-llm", "llama").unwrap().provider_id,
            p.id
        );
        assert_eq!(registry.endpoint("local-llm").unwrap().0.id, p.id);
        registry
            .set_api_key("local-llm", &ApiKey::new("sk-NAMED").unwrap())
            .unwrap();
        assert!(registry.has_api_key(&p.id).unwrap());
        assert!(registry.clear_api_key("local-llm").unwrap());
        let input: PublicModelConfigInput = serde_json::from_value(serde_json::json!({
            "maxTokens": 77, "contextLength": 200, "vision": false, "functionCall": false,
            "reasoning": false, "type": "chat"
        }))
        .unwrap();
        registry
            .set_model_config("local-llm", "llama", input)
            .unwrap();
        assert!(registry.reset_model_config("local-llm", "llama").unwrap());
        let (renamed, _) = registry
            .update(
                "local-llm",
                ProviderChange {
                    name: Some("renamed".to_owned()),
                    ..ProviderChange::default()
                },
            )
            .unwrap();
        assert_eq!(renamed.id, p.id);
        assert_eq!(
            registry.models("local-llm").unwrap_err().code(),
            "provider_not_found"
        );
        assert!(registry.remove("renamed").unwrap());
        assert!(registry.provider(&p.id).unwrap().is_none());
    }

    #[test]
    fn the_builtin_provider_keeps_its_adapter_url_and_existence() {
        let tmp = tempfile::tempdir().unwrap();
        let mut registry = open(tmp.path());
        assert_eq!(
            registry.remove(BUILTIN_PROVIDER_ID).unwrap_err().code(),
            "builtin_provider_immutable"
        );
        let change = ProviderChange {
            base_url: Some("http://127.0.0.1:1".to_owned()),
            ..ProviderChange::default()
        };
        assert_eq!(
            registry
                .update(BUILTIN_PROVIDER_ID, change)
                .unwrap_err()
                .code(),
            "builtin_provider_immutable"
        );
        assert_eq!(
            registry
                .set_api_key(BUILTIN_PROVIDER_ID, &ApiKey::new("k").unwrap())
                .unwrap_err()
                .code(),
            "builtin_provider_immutable"
        );
        assert_eq!(
            registry
                .set_model_status(BUILTIN_PROVIDER_ID, "other", true)
                .unwrap_err()
                .code(),
            "model_not_found"
        );
    }

    #[test]
    fn adapters_urls_and_names_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let mut registry = open(tmp.path());
        let mut bad = local("a");
        bad.api_type = ApiType::Anthropic;
        assert_eq!(
            registry.add(bad).unwrap_err().code(),
            "unsupported_api_type"
        );
        let mut bad = local("a");
        bad.base_url = "https://u:p@h/v1".to_owned();
        assert_eq!(registry.add(bad).unwrap_err().code(), "invalid_base_url");
        registry.add(local("a")).unwrap();
        assert_eq!(
            registry.add(local("a")).unwrap_err().code(),
            "provider_name_taken"
        );
        assert_eq!(
            registry.add(local(BUILTIN_PROVIDER_ID)).unwrap_err().code(),
            "provider_name_taken"
        );
    }

    #[test]
    fn the_store_itself_refuses_a_second_provider_of_the_same_name() {
        let tmp = tempfile::tempdir().unwrap();
        let mut registry = open(tmp.path());
        registry.add(local("dup")).unwrap();
        // Two adds racing past the name check: the unique index still refuses the second, as NameTaken.
        let err = registry
            .conn
            .execute(
                "INSERT INTO providers (id, name, api_type, base_url, enabled, custom, created_at_ms,
                 updated_at_ms) VALUES ('x', 'dup', 'openai', NULL, 1, 1, 0, 0)",
                [],
            )
            .unwrap_err();
        assert_eq!(
            name_taken(err, "dup").unwrap().code(),
            "provider_name_taken"
        );
    }

    #[test]
    fn provider_and_model_counts_are_bounded_at_the_limit_and_one_past_it() {
        let tmp = tempfile::tempdir().unwrap();
        let mut registry = ProviderRegistry::open_with(
            tmp.path(),
            RegistryLimits {
                max_providers: 2,
                max_models_per_provider: 2,
                ..RegistryLimits::default()
            },
        )
        .unwrap();
        let p = registry.add(local("a")).unwrap();
        assert_eq!(registry.add(local("b")).unwrap_err().code(), "too_many");
        registry.set_model_status(&p.id, "m1", true).unwrap();
        registry.set_model_status(&p.id, "m2", true).unwrap();
        registry.set_model_status(&p.id, "m2", false).unwrap();
        assert_eq!(
            registry
                .set_model_status(&p.id, "m3", true)
                .unwrap_err()
                .code(),
            "too_many"
        );
    }

    #[test]
    fn model_config_set_and_reset() {
        let tmp = tempfile::tempdir().unwrap();
        let mut registry = open(tmp.path());
        let m = registry.model(BUILTIN_PROVIDER_ID, "builtin-demo").unwrap();
        assert_eq!(m.config.is_user_defined, Some(false));
        let mut input: PublicModelConfigInput = serde_json::from_value(serde_json::json!({
            "maxTokens": 100, "contextLength": 200, "vision": true, "functionCall": false,
            "reasoning": false, "type": "chat", "temperature": 0.5
        }))
        .unwrap();
        input.verbosity = Some(agentwire_local_control::contract::model_config::Verbosity::Low);
        let config = registry
            .set_model_config(BUILTIN_PROVIDER_ID, "builtin-demo", input)
            .unwrap();
        assert_eq!(config.is_user_defined, Some(true));
        assert_eq!(config.max_tokens, 100);
        let resolved = registry.resolve(None, Some("builtin-demo")).unwrap();
        assert_eq!(resolved.config.temperature, Some(0.5));
        assert!(
            registry
                .reset_model_config(BUILTIN_PROVIDER_ID, "builtin-demo")
                .unwrap()
        );
        assert!(
            !registry
                .reset_model_config(BUILTIN_PROVIDER_ID, "builtin-demo")
                .unwrap()
        );
        let m = registry.model(BUILTIN_PROVIDER_ID, "builtin-demo").unwrap();
        assert_eq!(m.config.max_tokens, 4096);
    }

    #[test]
    fn the_store_file_never_holds_a_key() {
        let tmp = tempfile::tempdir().unwrap();
        let mut registry = open(tmp.path());
        let p = registry.add(local("x")).unwrap();
        registry
            .set_api_key(&p.id, &ApiKey::new("sk-PLANTED-IN-STORE-TEST").unwrap())
            .unwrap();
        drop(registry);
        for entry in std::fs::read_dir(tmp.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                let hay = String::from_utf8_lossy(&bytes);
                assert!(
                    !hay.contains("sk-PLANTED-IN-STORE-TEST"),
                    "{}",
                    path.display()
                );
            }
        }
    }
}
