//! The public settings of `settings.getPublic` / `settings.updatePublic`: DeepChat's allowlisted keys, kept in
//! `<data dir>/settings.json` (0600, written atomically).
//!
//! The keys and ranges are DeepChat's (`src/shared/contracts/routes/settings.routes.ts`), so DeepChat's client
//! reads and writes them unchanged. A headless host has no fonts or window: those keys are stored and reported as
//! set, and have no other effect (documented in docs/local-control.md).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use agentwire_local_control::contract::settings::{
    OcrBackend, SettingChange, SettingKey, SettingsValues,
};

/// File name of the settings inside the data directory.
pub const SETTINGS_FILE: &str = "settings.json";
/// Largest settings file read, in bytes; a larger one is treated as corrupt (defaults are used).
const MAX_SETTINGS_BYTES: u64 = 64 * 1024;

/// The stored settings and their version (ms timestamp of the last change).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    path: PathBuf,
    version: u64,
    values: SettingsValues,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    version: u64,
    values: SettingsValues,
}

/// DeepChat's defaults for every key.
pub fn defaults() -> SettingsValues {
    SettingsValues {
        font_size_level: Some(1),
        font_family: Some(String::new()),
        code_font_family: Some(String::new()),
        artifacts_effect_enabled: Some(true),
        auto_scroll_enabled: Some(true),
        auto_compaction_enabled: Some(true),
        auto_compaction_trigger_threshold: Some(80),
        auto_compaction_retain_recent_pairs: Some(2),
        content_protection_enabled: Some(false),
        privacy_mode_enabled: Some(false),
        notifications_enabled: Some(true),
        launch_at_login_enabled: Some(false),
        trace_debug_enabled: Some(false),
        copy_with_cot_enabled: Some(true),
        logging_enabled: Some(false),
        ocr_auto_extract_for_non_vision_models: Some(true),
        ocr_backend: Some(OcrBackend::Auto),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Settings {
    /// Loads `<data_dir>/settings.json`; a missing, oversized or unreadable file gives the defaults (version 0).
    pub fn load(data_dir: &Path) -> Settings {
        let path = data_dir.join(SETTINGS_FILE);
        let stored = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.is_file() && m.len() <= MAX_SETTINGS_BYTES)
            .and_then(|_| std::fs::read(&path).ok())
            .and_then(|bytes| serde_json::from_slice::<Stored>(&bytes).ok());
        let mut values = defaults();
        let version = match stored {
            Some(stored) => {
                merge(&mut values, stored.values);
                stored.version
            }
            None => 0,
        };
        Settings {
            path,
            version,
            values,
        }
    }

    /// The snapshot version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The values of `keys` (all when `None`).
    pub fn get(&self, keys: Option<&[SettingKey]>) -> SettingsValues {
        match keys {
            None => self.values.clone(),
            Some(keys) => select(&self.values, keys),
        }
    }

    /// Applies `change`, writes the file, and returns the new version and the changed key's value.
    ///
    /// # Errors
    /// The file could not be written; nothing changed then.
    pub fn apply(&mut self, change: SettingChange) -> std::io::Result<(u64, SettingsValues)> {
        let key = change.key();
        let mut values = self.values.clone();
        set(&mut values, change);
        let version = now_ms().max(self.version + 1);
        let bytes = serde_json::to_vec_pretty(&Stored {
            version,
            values: values.clone(),
        })
        .map_err(std::io::Error::other)?;
        write_atomically(&self.path, &bytes)?;
        self.values = values;
        self.version = version;
        Ok((version, select(&self.values, &[key])))
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".settings-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    // tempfile creates 0600 files.
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Copies every value present in `from` into `into`.
fn merge(into: &mut SettingsValues, from: SettingsValues) {
    macro_rules! take {
        ($($field:ident),*) => { $( if from.$field.is_some() { into.$field = from.$field; } )* };
    }
    take!(
        font_size_level,
        font_family,
        code_font_family,
        artifacts_effect_enabled,
        auto_scroll_enabled,
        auto_compaction_enabled,
        auto_compaction_trigger_threshold,
        auto_compaction_retain_recent_pairs,
        content_protection_enabled,
        privacy_mode_enabled,
        notifications_enabled,
        launch_at_login_enabled,
        trace_debug_enabled,
        copy_with_cot_enabled,
        logging_enabled,
        ocr_auto_extract_for_non_vision_models,
        ocr_backend
    );
}

fn set(values: &mut SettingsValues, change: SettingChange) {
    match change {
        SettingChange::FontSizeLevel(v) => values.font_size_level = Some(v),
        SettingChange::FontFamily(v) => values.font_family = Some(v),
        SettingChange::CodeFontFamily(v) => values.code_font_family = Some(v),
        SettingChange::ArtifactsEffectEnabled(v) => values.artifacts_effect_enabled = Some(v),
        SettingChange::AutoScrollEnabled(v) => values.auto_scroll_enabled = Some(v),
        SettingChange::AutoCompactionEnabled(v) => values.auto_compaction_enabled = Some(v),
        SettingChange::AutoCompactionTriggerThreshold(v) => {
            values.auto_compaction_trigger_threshold = Some(v);
        }
        SettingChange::AutoCompactionRetainRecentPairs(v) => {
            values.auto_compaction_retain_recent_pairs = Some(v);
        }
        SettingChange::ContentProtectionEnabled(v) => values.content_protection_enabled = Some(v),
        SettingChange::PrivacyModeEnabled(v) => values.privacy_mode_enabled = Some(v),
        SettingChange::NotificationsEnabled(v) => values.notifications_enabled = Some(v),
        SettingChange::LaunchAtLoginEnabled(v) => values.launch_at_login_enabled = Some(v),
        SettingChange::TraceDebugEnabled(v) => values.trace_debug_enabled = Some(v),
        SettingChange::CopyWithCotEnabled(v) => values.copy_with_cot_enabled = Some(v),
        SettingChange::LoggingEnabled(v) => values.logging_enabled = Some(v),
        SettingChange::OcrAutoExtractForNonVisionModels(v) => {
            values.ocr_auto_extract_for_non_vision_models = Some(v);
        }
        SettingChange::OcrBackend(v) => values.ocr_backend = Some(v),
    }
}

/// Only the listed keys of `values`.
fn select(values: &SettingsValues, keys: &[SettingKey]) -> SettingsValues {
    let mut out = SettingsValues::default();
    for key in keys {
        match key {
            SettingKey::FontSizeLevel => out.font_size_level = values.font_size_level,
            SettingKey::FontFamily => out.font_family.clone_from(&values.font_family),
            SettingKey::CodeFontFamily => out.code_font_family.clone_from(&values.code_font_family),
            SettingKey::ArtifactsEffectEnabled => {
                out.artifacts_effect_enabled = values.artifacts_effect_enabled;
            }
            SettingKey::AutoScrollEnabled => out.auto_scroll_enabled = values.auto_scroll_enabled,
            SettingKey::AutoCompactionEnabled => {
                out.auto_compaction_enabled = values.auto_compaction_enabled;
            }
            SettingKey::AutoCompactionTriggerThreshold => {
                out.auto_compaction_trigger_threshold = values.auto_compaction_trigger_threshold;
            }
            SettingKey::AutoCompactionRetainRecentPairs => {
                out.auto_compaction_retain_recent_pairs =
                    values.auto_compaction_retain_recent_pairs;
            }
            SettingKey::ContentProtectionEnabled => {
                out.content_protection_enabled = values.content_protection_enabled;
            }
            SettingKey::PrivacyModeEnabled => {
                out.privacy_mode_enabled = values.privacy_mode_enabled
            }
            SettingKey::NotificationsEnabled => {
                out.notifications_enabled = values.notifications_enabled;
            }
            SettingKey::LaunchAtLoginEnabled => {
                out.launch_at_login_enabled = values.launch_at_login_enabled;
            }
            SettingKey::TraceDebugEnabled => out.trace_debug_enabled = values.trace_debug_enabled,
            SettingKey::CopyWithCotEnabled => {
                out.copy_with_cot_enabled = values.copy_with_cot_enabled
            }
            SettingKey::LoggingEnabled => out.logging_enabled = values.logging_enabled,
            SettingKey::OcrAutoExtractForNonVisionModels => {
                out.ocr_auto_extract_for_non_vision_models =
                    values.ocr_auto_extract_for_non_vision_models;
            }
            SettingKey::OcrBackend => out.ocr_backend = values.ocr_backend,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_durable_and_reported_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::load(dir.path());
        assert_eq!(settings.version(), 0);
        assert_eq!(settings.get(None).font_size_level, Some(1));
        let (version, changed) = settings.apply(SettingChange::FontSizeLevel(3)).unwrap();
        assert!(version > 0);
        assert_eq!(changed.font_size_level, Some(3));
        assert_eq!(
            changed.font_family, None,
            "only the changed key is reported"
        );
        let again = Settings::load(dir.path());
        assert_eq!(again.version(), version);
        assert_eq!(
            again
                .get(Some(&[SettingKey::FontSizeLevel]))
                .font_size_level,
            Some(3)
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(SETTINGS_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "settings.json is private");
        }
    }

    #[test]
    fn a_corrupt_file_gives_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SETTINGS_FILE), b"{not json").unwrap();
        let settings = Settings::load(dir.path());
        assert_eq!(settings.get(None), defaults());
    }
}
