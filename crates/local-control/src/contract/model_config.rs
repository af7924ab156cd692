//! `models.getPublicConfig`, `models.setPublicConfig`, `models.resetConfig`, `models.listRuntime`,
//! `models.setStatus`: a model's public configuration and status.
//!
//! Source: DeepChat `src/shared/contracts/routes/models.routes.ts` (`PublicModelConfigSchema` = `ModelConfigSchema`
//! from `domainSchemas.ts` without `conversationId`/`ownedBy`, with `maxTokens`/`contextLength` positive and at most
//! `Number.MAX_SAFE_INTEGER`; the input form also drops `isUserDefined` and is `.strict()`), the enums of
//! `src/shared/model.ts` (`ModelType`, `ApiEndpointType`, `NEW_API_ENDPOINT_TYPES`) and
//! `src/shared/types/model-db.ts` (`ReasoningEffort`, `Verbosity`, `ReasoningVisibility`), and
//! `ProviderModelSummarySchema` of `src/shared/contracts/common.ts`.
//!
//! Where we are stricter than DeepChat: its output schema `.strip()`s unknown keys and its legacy renderer contract is
//! `.passthrough()`; here both the stored form and the input reject unknown fields (the spec: "public model-config
//! contracts reject unknown fields"), so a config can never smuggle a field the host does not know.

use serde::{Deserialize, Serialize};

use super::serde_util::present;
use super::{ContractError, MAX_SAFE_INTEGER, Method, Problem, Validate, check_len, check_range};

/// Longest provider id, characters (`EntityIdSchema.max(128)`).
pub const MAX_PROVIDER_ID_CHARS: usize = 128;
/// Longest model id, characters (DeepChat `z.string().min(1).max(256)` on public model ids).
pub const MAX_MODEL_ID_CHARS: usize = 256;
/// Largest `temperature` (DeepChat's model-invoke bound; the config schema itself has none).
pub const MAX_TEMPERATURE: f64 = 2.0;

/// `ModelType`: `chat`, `embedding`, `rerank` or `imageGeneration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub enum ModelType {
    Chat,
    Embedding,
    Rerank,
    ImageGeneration,
}

/// `REASONING_EFFORT_VALUES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

/// `VerbositySchema`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum Verbosity {
    Low,
    Medium,
    High,
}

/// `REASONING_VISIBILITY_VALUES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum ReasoningVisibility {
    Hidden,
    Summary,
    Full,
    Mixed,
    Omitted,
    Summarized,
}

/// `ApiEndpointType`: `chat`, `image`, `video`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum ApiEndpoint {
    Chat,
    Image,
    Video,
}

/// `NEW_API_ENDPOINT_TYPES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum EndpointType {
    Openai,
    OpenaiResponse,
    Anthropic,
    Gemini,
    ImageGeneration,
}

/// `searchStrategy`: `turbo`, `balanced`, `precise`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum SearchStrategy {
    Turbo,
    Balanced,
    Precise,
}

macro_rules! public_model_config {
    ($(#[$meta:meta])* $name:ident { $($extra:tt)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        pub struct $name {
            /// Largest reply, tokens (1..=2^53-1).
            pub max_tokens: u64,
            /// Context window, tokens (1..=2^53-1).
            pub context_length: u64,
            /// Sampling temperature, 0..=2 when set.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub temperature: Option<f64>,
            /// Accepts images.
            pub vision: bool,
            /// Supports tool calls.
            pub function_call: bool,
            /// Produces reasoning.
            pub reasoning: bool,
            /// `chat`, `embedding`, `rerank`, `imageGeneration`.
            #[serde(rename = "type")]
            pub model_type: ModelType,
            $($extra)*
            /// Reasoning budget, tokens.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub thinking_budget: Option<i64>,
            /// Interleaved-thinking compatibility switch.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub force_interleaved_thinking_compat: Option<bool>,
            /// Reasoning effort.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub reasoning_effort: Option<ReasoningEffort>,
            /// Reasoning visibility.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub reasoning_visibility: Option<ReasoningVisibility>,
            /// Verbosity.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub verbosity: Option<Verbosity>,
            /// Largest completion, tokens (1..=2^53-1).
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub max_completion_tokens: Option<u64>,
            /// `chat`, `image`, `video`.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub api_endpoint: Option<ApiEndpoint>,
            /// New-API endpoint type.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub endpoint_type: Option<EndpointType>,
            /// Web search on.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub enable_search: Option<bool>,
            /// Search forced.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub forced_search: Option<bool>,
            /// Search strategy.
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
            pub search_strategy: Option<SearchStrategy>,
        }
    };
}

public_model_config!(
    /// A model's public configuration as read (`PublicModelConfigSchema`), e.g.
    /// `{"maxTokens":4096,"contextLength":8192,"vision":false,"functionCall":false,"reasoning":false,
    /// "type":"chat","isUserDefined":false}`.
    PublicModelConfig {
        /// True when the user set this configuration (`models.setPublicConfig`), false for the defaults.
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub is_user_defined: Option<bool>,
    }
);

public_model_config!(
    /// The configuration `models.setPublicConfig` takes (`PublicModelConfigInputSchema`): the public config
    /// without `isUserDefined`, unknown fields rejected.
    PublicModelConfigInput {}
);

fn check_tokens(field: &'static str, value: u64) -> Result<(), ContractError> {
    check_range(field, value, 1, MAX_SAFE_INTEGER)
}

macro_rules! validate_config {
    ($config:expr) => {{
        let c = $config;
        check_tokens("config.maxTokens", c.max_tokens)?;
        check_tokens("config.contextLength", c.context_length)?;
        if let Some(t) = c.max_completion_tokens {
            check_tokens("config.maxCompletionTokens", t)?;
        }
        if let Some(t) = c.temperature
            && (!t.is_finite() || !(0.0..=MAX_TEMPERATURE).contains(&t))
        {
            return Err(ContractError::field(
                "config.temperature",
                Problem::OutOfRange,
            ));
        }
        if let Some(b) = c.thinking_budget {
            // `z.number().int()`: any safe integer.
            let max = i64::try_from(MAX_SAFE_INTEGER).unwrap_or(i64::MAX);
            check_range("config.thinkingBudget", b, -max, max)?;
        }
        Ok(())
    }};
}

impl Validate for PublicModelConfig {
    fn validate(&self) -> Result<(), ContractError> {
        validate_config!(self)
    }
}

impl Validate for PublicModelConfigInput {
    fn validate(&self) -> Result<(), ContractError> {
        validate_config!(self)
    }
}

impl PublicModelConfigInput {
    /// The stored form, marked user-defined.
    pub fn into_public(self, user_defined: bool) -> PublicModelConfig {
        PublicModelConfig {
            max_tokens: self.max_tokens,
            context_length: self.context_length,
            temperature: self.temperature,
            vision: self.vision,
            function_call: self.function_call,
            reasoning: self.reasoning,
            model_type: self.model_type,
            is_user_defined: Some(user_defined),
            thinking_budget: self.thinking_budget,
            force_interleaved_thinking_compat: self.force_interleaved_thinking_compat,
            reasoning_effort: self.reasoning_effort,
            reasoning_visibility: self.reasoning_visibility,
            verbosity: self.verbosity,
            max_completion_tokens: self.max_completion_tokens,
            api_endpoint: self.api_endpoint,
            endpoint_type: self.endpoint_type,
            enable_search: self.enable_search,
            forced_search: self.forced_search,
            search_strategy: self.search_strategy,
        }
    }
}

/// A provider id: 1..=128 characters (`EntityIdSchema.max(128)`).
///
/// # Errors
/// [`Problem::TooShort`] / [`Problem::TooLong`].
pub fn check_provider_id(field: &'static str, id: &str) -> Result<(), ContractError> {
    check_len(field, id, 1, MAX_PROVIDER_ID_CHARS)
}

/// A model id: 1..=256 characters.
///
/// # Errors
/// [`Problem::TooShort`] / [`Problem::TooLong`].
pub fn check_model_id(field: &'static str, id: &str) -> Result<(), ContractError> {
    check_len(field, id, 1, MAX_MODEL_ID_CHARS)
}

/// Params naming one model: `{"providerId":"p1","modelId":"m1"}` (strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRef {
    /// The model's id.
    pub model_id: String,
    /// Its provider's id.
    pub provider_id: String,
}

impl Validate for ModelRef {
    fn validate(&self) -> Result<(), ContractError> {
        check_model_id("modelId", &self.model_id)?;
        check_provider_id("providerId", &self.provider_id)
    }
}

/// `{"config":{…}}`: the result of `models.getPublicConfig` and `models.setPublicConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigResult {
    /// The effective configuration.
    pub config: PublicModelConfig,
}

impl Validate for ConfigResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.config.validate()
    }
}

/// Params of `models.setPublicConfig`: `{"modelId":"m1","providerId":"p1","config":{…}}` (strict).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetConfigParams {
    /// The model's id.
    pub model_id: String,
    /// Its provider's id.
    pub provider_id: String,
    /// The whole new configuration.
    pub config: PublicModelConfigInput,
}

impl Validate for SetConfigParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_model_id("modelId", &self.model_id)?;
        check_provider_id("providerId", &self.provider_id)?;
        self.config.validate()
    }
}

/// Result of `models.resetConfig`: `{"reset":true}` (false when there was no user configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetResult {
    /// Whether a user configuration was removed.
    pub reset: bool,
}

impl Validate for ResetResult {
    fn validate(&self) -> Result<(), ContractError> {
        Ok(())
    }
}

/// Params of `models.listRuntime`: `{"providerId":"p1"}` (plain object: unknown keys ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListRuntimeParams {
    /// The provider.
    pub provider_id: String,
}

impl Validate for ListRuntimeParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)
    }
}

/// `ProviderModelSummarySchema`, the subset we fill: `{"id":"m1","name":"m1","group":"default",
/// "providerId":"p1","enabled":true,"isCustom":false,"vision":false,"functionCall":false,"reasoning":false,
/// "type":"chat","contextLength":8192,"maxTokens":4096}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct ModelSummary {
    pub id: String,
    pub name: String,
    pub group: String,
    pub provider_id: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub is_custom: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub vision: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub function_call: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub reasoning: Option<bool>,
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

/// Result of `models.listRuntime`: `{"models":[…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRuntimeResult {
    /// The provider's models.
    pub models: Vec<ModelSummary>,
}

impl Validate for ListRuntimeResult {
    fn validate(&self) -> Result<(), ContractError> {
        for model in &self.models {
            check_len("models[].id", &model.id, 1, usize::MAX)?;
        }
        Ok(())
    }
}

/// Params and result of `models.setStatus`: `{"providerId":"p1","modelId":"m1","enabled":true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    /// The provider.
    pub provider_id: String,
    /// The model.
    pub model_id: String,
    /// Enabled or not.
    pub enabled: bool,
}

impl Validate for ModelStatus {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)?;
        check_model_id("modelId", &self.model_id)
    }
}

/// `models.listRuntime`.
#[derive(Debug)]
pub struct ListRuntime;
impl Method for ListRuntime {
    const NAME: &'static str = "models.listRuntime";
    type Params = ListRuntimeParams;
    type Result = ListRuntimeResult;
}

/// `models.setStatus`.
#[derive(Debug)]
pub struct SetStatus;
impl Method for SetStatus {
    const NAME: &'static str = "models.setStatus";
    type Params = ModelStatus;
    type Result = ModelStatus;
}

/// `models.getPublicConfig`.
#[derive(Debug)]
pub struct GetPublicConfig;
impl Method for GetPublicConfig {
    const NAME: &'static str = "models.getPublicConfig";
    type Params = ModelRef;
    type Result = ConfigResult;
}

/// `models.setPublicConfig`.
#[derive(Debug)]
pub struct SetPublicConfig;
impl Method for SetPublicConfig {
    const NAME: &'static str = "models.setPublicConfig";
    type Params = SetConfigParams;
    type Result = ConfigResult;
}

/// `models.resetConfig`.
#[derive(Debug)]
pub struct ResetConfig;
impl Method for ResetConfig {
    const NAME: &'static str = "models.resetConfig";
    type Params = ModelRef;
    type Result = ResetResult;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::decode_params;
    use serde_json::json;

    fn config() -> serde_json::Value {
        json!({"maxTokens":4096,"contextLength":8192,"vision":false,"functionCall":true,"reasoning":false,"type":"chat"})
    }

    #[test]
    fn set_config_accepts_the_public_fields_and_rejects_unknown_ones() {
        let ok = decode_params::<SetPublicConfig>(
            json!({"modelId":"m","providerId":"p","config":config()}),
        )
        .expect("valid");
        assert_eq!(ok.config.max_tokens, 4096);
        let mut extra = config();
        extra["apiKey"] = json!("x");
        let err = decode_params::<SetPublicConfig>(
            json!({"modelId":"m","providerId":"p","config":extra}),
        )
        .expect_err("unknown field");
        assert_eq!(err.code(), "invalid_shape");
        let mut owned = config();
        owned["isUserDefined"] = json!(true);
        assert!(
            decode_params::<SetPublicConfig>(
                json!({"modelId":"m","providerId":"p","config":owned})
            )
            .is_err()
        );
        assert!(
            decode_params::<SetPublicConfig>(
                json!({"modelId":"m","providerId":"p","config":config(),"x":1})
            )
            .is_err()
        );
    }

    #[test]
    fn token_and_temperature_bounds() {
        let check = |field: &str, value: serde_json::Value| {
            let mut c = config();
            c[field] = value;
            decode_params::<SetPublicConfig>(json!({"modelId":"m","providerId":"p","config":c}))
        };
        assert!(check("maxTokens", json!(1)).is_ok());
        assert!(check("maxTokens", json!(0)).is_err());
        assert!(check("contextLength", json!(MAX_SAFE_INTEGER)).is_ok());
        assert!(check("contextLength", json!(MAX_SAFE_INTEGER + 1)).is_err());
        assert!(check("temperature", json!(2.0)).is_ok());
        assert!(check("temperature", json!(2.01)).is_err());
        assert!(check("reasoningEffort", json!("xhigh")).is_ok());
        assert!(check("reasoningEffort", json!("extreme")).is_err());
        assert!(check("endpointType", json!("openai-response")).is_ok());
    }

    #[test]
    fn ids_are_bounded_at_the_limit_and_one_past_it() {
        let at = "p".repeat(MAX_PROVIDER_ID_CHARS);
        let past = "p".repeat(MAX_PROVIDER_ID_CHARS + 1);
        assert!(decode_params::<GetPublicConfig>(json!({"modelId":"m","providerId":at})).is_ok());
        assert!(
            decode_params::<GetPublicConfig>(json!({"modelId":"m","providerId":past})).is_err()
        );
        let at = "m".repeat(MAX_MODEL_ID_CHARS);
        let past = "m".repeat(MAX_MODEL_ID_CHARS + 1);
        assert!(decode_params::<GetPublicConfig>(json!({"modelId":at,"providerId":"p"})).is_ok());
        assert!(
            decode_params::<GetPublicConfig>(json!({"modelId":past,"providerId":"p"})).is_err()
        );
        assert!(decode_params::<GetPublicConfig>(json!({"modelId":"","providerId":"p"})).is_err());
    }
}
