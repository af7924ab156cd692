//! Where the host keeps its data and looks for its configuration (XDG base directories), and private directory creation.

use std::path::{Path, PathBuf};

/// Application directory name under the XDG base directories.
pub const APP_DIR: &str = "awp-host";

/// Environment variable overriding the data directory.
pub const DATA_DIR_VAR: &str = "AWP_HOST_DATA_DIR";
/// Environment variable overriding the configuration directory.
pub const CONFIG_DIR_VAR: &str = "AWP_HOST_CONFIG_DIR";

/// Why a directory could not be determined or prepared.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// Neither the flag, the override variable, the XDG variable nor `HOME` is set.
    #[error("cannot determine the {what} directory: set {var} or HOME")]
    Undetermined {
        /// `data` or `config`.
        what: &'static str,
        /// The override variable to set.
        var: &'static str,
    },
    /// Creating or securing the directory failed.
    #[error("cannot prepare directory {path}")]
    Prepare {
        /// The directory.
        path: PathBuf,
        /// The IO failure.
        #[source]
        source: std::io::Error,
    },
}

impl PathError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            PathError::Undetermined { .. } => "directory_undetermined",
            PathError::Prepare { .. } => "directory_unavailable",
        }
    }
}

fn non_empty(v: Option<String>) -> Option<PathBuf> {
    v.filter(|s| !s.is_empty()).map(PathBuf::from)
}

fn resolve(
    flag: Option<&Path>,
    lookup: &dyn Fn(&str) -> Option<String>,
    override_var: &'static str,
    xdg_var: &str,
    home_suffix: &[&str],
    what: &'static str,
) -> Result<PathBuf, PathError> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = non_empty(lookup(override_var)) {
        return Ok(p);
    }
    // XDG: relative values are invalid and must be ignored.
    if let Some(p) = non_empty(lookup(xdg_var)).filter(|p| p.is_absolute()) {
        return Ok(p.join(APP_DIR));
    }
    if let Some(home) = non_empty(lookup("HOME")) {
        let mut p = home;
        for part in home_suffix {
            p.push(part);
        }
        return Ok(p.join(APP_DIR));
    }
    Err(PathError::Undetermined {
        what,
        var: override_var,
    })
}

/// The data directory: `flag` (`--data-dir`), else `$AWP_HOST_DATA_DIR`, else `$XDG_DATA_HOME/awp-host`,
/// else `~/.local/share/awp-host`.
///
/// # Errors
/// [`PathError::Undetermined`] when none of these is available.
pub fn data_dir(
    flag: Option<&Path>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, PathError> {
    resolve(
        flag,
        lookup,
        DATA_DIR_VAR,
        "XDG_DATA_HOME",
        &[".local", "share"],
        "data",
    )
}

/// The configuration directory: `flag` (`--config-dir`), else `$AWP_HOST_CONFIG_DIR`, else
/// `$XDG_CONFIG_HOME/awp-host`, else `~/.config/awp-host`.
///
/// # Errors
/// [`PathError::Undetermined`] when none of these is available.
pub fn config_dir(
    flag: Option<&Path>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, PathError> {
    resolve(
        flag,
        lookup,
        CONFIG_DIR_VAR,
        "XDG_CONFIG_HOME",
        &[".config"],
        "config",
    )
}

/// Creates `dir` (and missing parents) if needed; a directory this call creates gets mode 0700 on Unix.
///
/// # Errors
/// [`PathError::Prepare`] when creation fails or the path exists and is not a directory.
pub fn create_private_dir(dir: &Path) -> Result<(), PathError> {
    let prepare = |source| PathError::Prepare {
        path: dir.to_path_buf(),
        source,
    };
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(prepare)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(flag: Option<&str>, vars: &[(&str, &str)], expect: Option<&str>) {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let lookup = move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let got = data_dir(flag.map(Path::new), &lookup).ok();
        assert_eq!(got, expect.map(PathBuf::from));
    }

    #[test]
    fn data_dir_precedence() {
        check(
            Some("/flag"),
            &[("AWP_HOST_DATA_DIR", "/env"), ("HOME", "/h")],
            Some("/flag"),
        );
        check(
            None,
            &[("AWP_HOST_DATA_DIR", "/env"), ("XDG_DATA_HOME", "/x")],
            Some("/env"),
        );
        check(
            None,
            &[("XDG_DATA_HOME", "/x"), ("HOME", "/h")],
            Some("/x/awp-host"),
        );
        check(
            None,
            &[("XDG_DATA_HOME", "relative"), ("HOME", "/h")],
            Some("/h/.local/share/awp-host"),
        );
        check(
            None,
            &[("AWP_HOST_DATA_DIR", ""), ("HOME", "/h")],
            Some("/h/.local/share/awp-host"),
        );
        check(None, &[], None);
    }

    #[test]
    fn config_dir_falls_back_to_dot_config() {
        let lookup = |k: &str| (k == "HOME").then(|| "/h".to_owned());
        assert_eq!(
            config_dir(None, &lookup).unwrap(),
            PathBuf::from("/h/.config/awp-host")
        );
        assert_eq!(
            config_dir(None, &|_| None).unwrap_err().code(),
            "directory_undetermined"
        );
    }

    #[cfg(unix)]
    #[test]
    fn created_dir_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        create_private_dir(&dir).unwrap();
    }
}
