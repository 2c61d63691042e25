//! The checks of values that parse but cannot work.

use super::{systemd_is_running, CgroupDriver, Config, ConfigError};

impl Config {
    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let value = |key: &str, message: String| ConfigError::Value {
            key: key.to_string(),
            message,
        };
        for (key, path) in [
            ("socket", &self.socket),
            ("root", &self.root),
            ("state", &self.state),
            ("cni.conf_dir", &self.cni.conf_dir),
        ] {
            if !path.is_absolute() {
                return Err(value(
                    key,
                    format!("must be an absolute path, got {}", path.display()),
                ));
            }
        }
        if self.cni.default_subnet.parse::<ipnet::IpNet>().is_err() {
            return Err(value(
                "cni.default_subnet",
                format!("{:?} is not an IP network", self.cni.default_subnet),
            ));
        }
        if !self.metrics.address.is_empty()
            && self
                .metrics
                .address
                .parse::<std::net::SocketAddr>()
                .is_err()
        {
            return Err(value(
                "metrics.address",
                format!("{:?} is not host:port", self.metrics.address),
            ));
        }
        if let Err((key, message)) = self.streaming.server_config() {
            return Err(value(key, message));
        }
        if let Err((key, message)) = self.nri.nri_config() {
            return Err(value(key, message));
        }
        if let Err(e) = self.registry.validate() {
            return Err(value("registry", e.to_string()));
        }
        if self.cni.timeout_secs == 0 {
            return Err(value("cni.timeout_secs", "must be above 0".into()));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log_level) {
            return Err(value("log_level", format!("{:?}: {e}", self.log_level)));
        }
        if !self
            .runtime
            .handlers
            .contains_key(&self.runtime.default_handler)
        {
            return Err(value(
                "runtime.default_handler",
                format!(
                    "{:?} is not one of runtime.handlers ({})",
                    self.runtime.default_handler,
                    self.runtime
                        .handlers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        for (name, handler) in &self.runtime.handlers {
            if handler.binary.is_empty() {
                return Err(value(
                    &format!("runtime.handlers.{name}.binary"),
                    "must not be empty".into(),
                ));
            }
        }
        if self.runtime.cgroup_driver == CgroupDriver::Systemd && !systemd_is_running() {
            return Err(value(
                "runtime.cgroup_driver",
                "\"systemd\" needs systemd as init, and it is not running here (no /run/systemd/system)"
                    .into(),
            ));
        }
        Ok(())
    }
}
