//! CNI specification versions berth speaks, and what each one allows.

use std::fmt;
use std::str::FromStr;

/// A CNI spec version berth supports (0.3.0 to 1.1.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpecVersion {
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

impl SpecVersion {
    /// Every supported version, oldest first.
    pub const ALL: [SpecVersion; 5] = [
        SpecVersion::V0_3_0,
        SpecVersion::V0_3_1,
        SpecVersion::V0_4_0,
        SpecVersion::V1_0_0,
        SpecVersion::V1_1_0,
    ];

    /// The version string, e.g. "1.0.0".
    pub fn as_str(self) -> &'static str {
        match self {
            SpecVersion::V0_3_0 => "0.3.0",
            SpecVersion::V0_3_1 => "0.3.1",
            SpecVersion::V0_4_0 => "0.4.0",
            SpecVersion::V1_0_0 => "1.0.0",
            SpecVersion::V1_1_0 => "1.1.0",
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn supports_check(self) -> bool {
        self >= SpecVersion::V0_4_0
    }

    /// DEL gets the cached ADD result as `prevResult` from 0.4.0 on.
    pub fn prev_result_on_del(self) -> bool {
        self >= SpecVersion::V0_4_0
    }

    /// STATUS exists from 1.1.0 on.
    pub fn supports_status(self) -> bool {
        self >= SpecVersion::V1_1_0
    }
}

impl fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A version string berth does not support.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported CNI version {0:?} (supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)")]
pub struct UnsupportedVersion(pub String);

impl FromStr for SpecVersion {
    type Err = UnsupportedVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SpecVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnsupportedVersion(s.to_owned()))
    }
}

impl serde::Serialize for SpecVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for SpecVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_orders() {
        for v in SpecVersion::ALL {
            assert_eq!(v.as_str().parse::<SpecVersion>().unwrap(), v);
        }
        assert!("0.2.0".parse::<SpecVersion>().is_err());
        assert!("1.0".parse::<SpecVersion>().is_err());
        assert!(!SpecVersion::V0_3_1.supports_check());
        assert!(SpecVersion::V0_4_0.supports_check());
        assert!(!SpecVersion::V0_3_1.prev_result_on_del());
        assert!(!SpecVersion::V1_0_0.supports_status());
        assert!(SpecVersion::V1_1_0.supports_status());
    }
}
