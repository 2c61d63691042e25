//! The embedded defaults printed as TOML: plain for `berth config default`,
//! every key commented out under a header for the installed config file.

use super::Config;

impl Config {
    /// The embedded defaults, as the TOML that `berth config default` prints.
    pub fn default_toml() -> String {
        toml::to_string_pretty(&Config::default()).expect("the default config serializes")
    }

    /// The embedded defaults as a config file to install: every key commented
    /// out, under a header that says how the files are layered.
    pub fn commented_default_toml() -> String {
        let mut out = String::from(COMMENTED_HEADER);
        for line in Config::default_toml().lines() {
            if line.is_empty() {
                out.push('\n');
            } else {
                out.push_str("# ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// The top of the installed `/etc/berth/config.toml`.
pub(super) const COMMENTED_HEADER: &str = "\
# berth's configuration file (/etc/berth/config.toml).
#
# Every key below is commented out and shows its embedded default: uncomment
# and change only what you need. berth reads the embedded defaults, then this
# file, then the drop-ins /etc/berth/config.d/*.toml in lexical order of their
# names (later files win; tables are merged key by key, other values replaced
# whole), then command-line flags. Unknown keys and bad values stop the start
# with a message that names the file and the key.
#
#   berth config show   # the effective configuration and which file set each key
#   berth check         # are the host's prerequisites there?

";
