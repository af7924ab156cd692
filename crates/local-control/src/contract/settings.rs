//! `settings.getPublic`, `settings.updatePublic`: the allowlisted public settings.
//!
//! Source: DeepChat `src/shared/contracts/routes/settings.routes.ts` (`SETTINGS_KEYS`,
//! `SettingsSnapshotValuesSchema`, `SettingsChangeSchema`, `settingsGetPublicRoute`,
//! `settingsUpdatePublicRoute`). `getPublic` input is a plain object (unknown keys stripped); `updatePublic`
//! input is strict and carries exactly one change; outputs are plain objects.

use serde::{Deserialize, Serialize};

use super::serde_util::present;
use super::{ContractError, Method, Problem, Validate, check_range};

/// One allowlisted setting key (`SETTINGS_KEYS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SettingKey {
    /// Integer 0..=4.
    FontSizeLevel,
    /// Free text.
    FontFamily,
    /// Free text.
    CodeFontFamily,
    /// Boolean.
    ArtifactsEffectEnabled,
    /// Boolean.
    AutoScrollEnabled,
    /// Boolean.
    AutoCompactionEnabled,
    /// Integer 5..=95 (percent).
    AutoCompactionTriggerThreshold,
    /// Integer 1..=10.
    AutoCompactionRetainRecentPairs,
    /// Boolean.
    ContentProtectionEnabled,
    /// Boolean.
    PrivacyModeEnabled,
    /// Boolean.
    NotificationsEnabled,
    /// Boolean.
    LaunchAtLoginEnabled,
    /// Boolean.
    TraceDebugEnabled,
    /// Boolean.
    CopyWithCotEnabled,
    /// Boolean.
    LoggingEnabled,
    /// Boolean.
    OcrAutoExtractForNonVisionModels,
    /// `auto` or `cpu`.
    OcrBackend,
}

impl SettingKey {
    /// Every key, in DeepChat's order.
    pub const ALL: [SettingKey; 17] = [
        SettingKey::FontSizeLevel,
        SettingKey::FontFamily,
        SettingKey::CodeFontFamily,
        SettingKey::ArtifactsEffectEnabled,
        SettingKey::AutoScrollEnabled,
        SettingKey::AutoCompactionEnabled,
        SettingKey::AutoCompactionTriggerThreshold,
        SettingKey::AutoCompactionRetainRecentPairs,
        SettingKey::ContentProtectionEnabled,
        SettingKey::PrivacyModeEnabled,
        SettingKey::NotificationsEnabled,
        SettingKey::LaunchAtLoginEnabled,
        SettingKey::TraceDebugEnabled,
        SettingKey::CopyWithCotEnabled,
        SettingKey::LoggingEnabled,
        SettingKey::OcrAutoExtractForNonVisionModels,
        SettingKey::OcrBackend,
    ];
}

/// OCR backend choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OcrBackend {
    /// Pick automatically.
    Auto,
    /// Force CPU.
    Cpu,
}

/// Params of `settings.getPublic`: `{}` (every key) or `{"keys":["fontFamily"]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetParams {
    /// Keys to read; absent = all.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub keys: Option<Vec<SettingKey>>,
}

impl Validate for GetParams {
    fn validate(&self) -> Result<(), ContractError> {
        Ok(())
    }
}

/// `SettingsSnapshotValuesSchema.partial()`: each key present only when read or changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct SettingsValues {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub font_size_level: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub font_family: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub code_font_family: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub artifacts_effect_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub auto_scroll_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub auto_compaction_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub auto_compaction_trigger_threshold: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub auto_compaction_retain_recent_pairs: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub content_protection_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub privacy_mode_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub notifications_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub launch_at_login_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub trace_debug_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub copy_with_cot_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub logging_enabled: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub ocr_auto_extract_for_non_vision_models: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub ocr_backend: Option<OcrBackend>,
}

/// Result of both settings methods' read side: `{"version":1767225600000,"values":{"fontFamily":"Inter"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GetResult {
    /// Snapshot version (ms timestamp, non-negative).
    pub version: u64,
    /// The values read.
    pub values: SettingsValues,
}

impl Validate for GetResult {
    fn validate(&self) -> Result<(), ContractError> {
        Ok(())
    }
}

/// One change (`SettingsChangeSchema`, discriminated on `key`): `{"key":"fontSizeLevel","value":2}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "key", content = "value", rename_all = "camelCase")]
#[allow(missing_docs)]
pub enum SettingChange {
    /// 0..=4.
    FontSizeLevel(i64),
    FontFamily(String),
    CodeFontFamily(String),
    ArtifactsEffectEnabled(bool),
    AutoScrollEnabled(bool),
    AutoCompactionEnabled(bool),
    /// 5..=95.
    AutoCompactionTriggerThreshold(i64),
    /// 1..=10.
    AutoCompactionRetainRecentPairs(i64),
    ContentProtectionEnabled(bool),
    PrivacyModeEnabled(bool),
    NotificationsEnabled(bool),
    LaunchAtLoginEnabled(bool),
    TraceDebugEnabled(bool),
    CopyWithCotEnabled(bool),
    LoggingEnabled(bool),
    OcrAutoExtractForNonVisionModels(bool),
    OcrBackend(OcrBackend),
}

impl SettingChange {
    /// The key this change writes.
    pub fn key(&self) -> SettingKey {
        match self {
            SettingChange::FontSizeLevel(_) => SettingKey::FontSizeLevel,
            SettingChange::FontFamily(_) => SettingKey::FontFamily,
            SettingChange::CodeFontFamily(_) => SettingKey::CodeFontFamily,
            SettingChange::ArtifactsEffectEnabled(_) => SettingKey::ArtifactsEffectEnabled,
            SettingChange::AutoScrollEnabled(_) => SettingKey::AutoScrollEnabled,
            SettingChange::AutoCompactionEnabled(_) => SettingKey::AutoCompactionEnabled,
            SettingChange::AutoCompactionTriggerThreshold(_) => {
                SettingKey::AutoCompactionTriggerThreshold
            }
            SettingChange::AutoCompactionRetainRecentPairs(_) => {
                SettingKey::AutoCompactionRetainRecentPairs
            }
            SettingChange::ContentProtectionEnabled(_) => SettingKey::ContentProtectionEnabled,
            SettingChange::PrivacyModeEnabled(_) => SettingKey::PrivacyModeEnabled,
            SettingChange::NotificationsEnabled(_) => SettingKey::NotificationsEnabled,
            SettingChange::LaunchAtLoginEnabled(_) => SettingKey::LaunchAtLoginEnabled,
            SettingChange::TraceDebugEnabled(_) => SettingKey::TraceDebugEnabled,
            SettingChange::CopyWithCotEnabled(_) => SettingKey::CopyWithCotEnabled,
            SettingChange::LoggingEnabled(_) => SettingKey::LoggingEnabled,
            SettingChange::OcrAutoExtractForNonVisionModels(_) => {
                SettingKey::OcrAutoExtractForNonVisionModels
            }
            SettingChange::OcrBackend(_) => SettingKey::OcrBackend,
        }
    }
}

impl Validate for SettingChange {
    fn validate(&self) -> Result<(), ContractError> {
        match *self {
            SettingChange::FontSizeLevel(v) => check_range("changes[0].value", v, 0, 4),
            SettingChange::AutoCompactionTriggerThreshold(v) => {
                check_range("changes[0].value", v, 5, 95)
            }
            SettingChange::AutoCompactionRetainRecentPairs(v) => {
                check_range("changes[0].value", v, 1, 10)
            }
            _ => Ok(()),
        }
    }
}

/// Params of `settings.updatePublic` (strict): `{"changes":[{"key":"fontSizeLevel","value":2}]}`,
/// exactly one change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateParams {
    /// Exactly one change.
    pub changes: Vec<SettingChange>,
}

impl Validate for UpdateParams {
    fn validate(&self) -> Result<(), ContractError> {
        match self.changes.as_slice() {
            [] => Err(ContractError::field("changes", Problem::TooShort)),
            [one] => one.validate(),
            _ => Err(ContractError::field("changes", Problem::TooLong)),
        }
    }
}

/// Result of `settings.updatePublic`: `{"version":2,"changedKeys":["fontSizeLevel"],"values":{"fontSizeLevel":2}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateResult {
    /// New snapshot version.
    pub version: u64,
    /// At least one key.
    pub changed_keys: Vec<SettingKey>,
    /// Values after the change.
    pub values: SettingsValues,
}

impl Validate for UpdateResult {
    fn validate(&self) -> Result<(), ContractError> {
        if self.changed_keys.is_empty() {
            return Err(ContractError::field("changedKeys", Problem::TooShort));
        }
        Ok(())
    }
}

/// `settings.getPublic`: [`GetParams`] → [`GetResult`].
#[derive(Debug, Clone, Copy)]
pub struct GetPublic;
impl Method for GetPublic {
    const NAME: &'static str = "settings.getPublic";
    type Params = GetParams;
    type Result = GetResult;
}

/// `settings.updatePublic`: [`UpdateParams`] → [`UpdateResult`].
#[derive(Debug, Clone, Copy)]
pub struct UpdatePublic;
impl Method for UpdatePublic {
    const NAME: &'static str = "settings.updatePublic";
    type Params = UpdateParams;
    type Result = UpdateResult;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(change: serde_json::Value) -> Result<UpdateParams, ContractError> {
        super::super::decode_params::<UpdatePublic>(json!({ "changes": [change] }))
    }

    #[test]
    fn ranges_at_and_past_the_boundary() {
        assert!(update(json!({"key":"fontSizeLevel","value":4})).is_ok());
        assert!(update(json!({"key":"fontSizeLevel","value":5})).is_err());
        assert!(update(json!({"key":"fontSizeLevel","value":-1})).is_err());
        assert!(update(json!({"key":"autoCompactionTriggerThreshold","value":5})).is_ok());
        assert!(update(json!({"key":"autoCompactionTriggerThreshold","value":4})).is_err());
        assert!(update(json!({"key":"autoCompactionTriggerThreshold","value":96})).is_err());
        assert!(update(json!({"key":"autoCompactionRetainRecentPairs","value":10})).is_ok());
        assert!(update(json!({"key":"autoCompactionRetainRecentPairs","value":11})).is_err());
        assert!(update(json!({"key":"fontSizeLevel","value":1.5})).is_err());
        assert!(update(json!({"key":"ocrBackend","value":"gpu"})).is_err());
        assert!(update(json!({"key":"privacyModeEnabled","value":"true"})).is_err());
        assert!(update(json!({"key":"nope","value":true})).is_err());
    }

    #[test]
    fn exactly_one_change() {
        let none = super::super::decode_params::<UpdatePublic>(json!({"changes": []}));
        assert_eq!(none.unwrap_err().code(), "too_short");
        let two = super::super::decode_params::<UpdatePublic>(json!({"changes": [
            {"key":"fontFamily","value":"a"},{"key":"fontFamily","value":"b"}]}));
        assert_eq!(two.unwrap_err().code(), "too_long");
        let extra = super::super::decode_params::<UpdatePublic>(
            json!({"changes": [{"key":"fontFamily","value":"a"}], "confirm": true}),
        );
        assert_eq!(extra.unwrap_err().code(), "invalid_shape");
    }

    #[test]
    fn every_key_has_a_change_variant() {
        for key in SettingKey::ALL {
            let name = serde_json::to_value(key).unwrap();
            let value = match key {
                SettingKey::FontSizeLevel => json!(1),
                SettingKey::AutoCompactionTriggerThreshold => json!(50),
                SettingKey::AutoCompactionRetainRecentPairs => json!(2),
                SettingKey::FontFamily | SettingKey::CodeFontFamily => json!("x"),
                SettingKey::OcrBackend => json!("cpu"),
                _ => json!(true),
            };
            let parsed = update(json!({"key": name, "value": value})).unwrap();
            assert_eq!(parsed.changes[0].key(), key);
        }
    }
}
