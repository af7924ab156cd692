//! Quotas and TTLs of the spool, with the reference values of DeepChat's ArtifactSpool.

use std::time::Duration;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// Byte and count quotas plus expiry bounds. Every artifact, pending or published, counts against its request,
/// its connection, its owner and the whole spool until it is aborted, deleted or expired.
///
/// Defaults are the reference values in `protocols/local-control.md` ("Approvals, spool, tokens").
/// A write that would cross a byte quota fails with [`crate::SpoolError::QuotaExceeded`] before its bytes reach
/// the disk, and the partial artifact is removed; a create that would cross a count quota fails the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest single artifact, bytes. Default 512 MiB.
    pub max_artifact_bytes: u64,
    /// Bytes of all live artifacts of one request (owner + connection + request id). Default 768 MiB.
    pub max_request_bytes: u64,
    /// Bytes of all live artifacts created over one connection. Default 1 GiB.
    pub max_connection_bytes: u64,
    /// Bytes of all live artifacts of one owner. Default 1 GiB.
    pub max_owner_bytes: u64,
    /// Bytes of the whole spool. Default 2 GiB.
    pub max_total_bytes: u64,
    /// Live artifacts of one request. Default 16.
    pub max_request_artifacts: u32,
    /// Live artifacts created over one connection. Default 64.
    pub max_connection_artifacts: u32,
    /// Live artifacts of one owner. Default 128.
    pub max_owner_artifacts: u32,
    /// Live artifacts in the whole spool. Default 256.
    pub max_total_artifacts: u32,
    /// Lifetime of a published artifact when the creator asks for none. Default 1 h.
    pub default_ttl: Duration,
    /// Longest lifetime a creator may ask for; longer requests are refused with `invalid_request`. Default 7 days.
    pub max_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_artifact_bytes: 512 * MIB,
            max_request_bytes: 768 * MIB,
            max_connection_bytes: GIB,
            max_owner_bytes: GIB,
            max_total_bytes: 2 * GIB,
            max_request_artifacts: 16,
            max_connection_artifacts: 64,
            max_owner_artifacts: 128,
            max_total_artifacts: 256,
            default_ttl: Duration::from_secs(60 * 60),
            max_ttl: Duration::from_secs(7 * 24 * 60 * 60),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_reference_values() {
        let limits = Limits::default();
        assert_eq!(limits.max_artifact_bytes, 536_870_912);
        assert_eq!(limits.max_request_bytes, 805_306_368);
        assert_eq!(limits.max_connection_bytes, 1_073_741_824);
        assert_eq!(limits.max_owner_bytes, 1_073_741_824);
        assert_eq!(limits.max_total_bytes, 2_147_483_648);
        assert_eq!(
            (
                limits.max_request_artifacts,
                limits.max_connection_artifacts,
                limits.max_owner_artifacts,
                limits.max_total_artifacts
            ),
            (16, 64, 128, 256)
        );
        assert_eq!(limits.default_ttl, Duration::from_secs(3600));
        assert_eq!(limits.max_ttl, Duration::from_secs(604_800));
    }
}
